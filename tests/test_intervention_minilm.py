"""Masking and pruning on the real embedded MiniLM (sdpa attention), on EWT dev sentences."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

from bertology.intervention import count_parameters, drop_layers, mask_heads, model_layout, prune_heads

warnings.filterwarnings("ignore", message="Initializing zero-element tensors")
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def minilm():
    from bertology.data import default_corpus, read_conllu
    from bertology.errors import ModelError
    from bertology.models import load_encoder

    try:
        encoder = load_encoder("minilm")
    except ModelError as error:
        pytest.skip(str(error))
    sentences = [s.text or " ".join(s.words) for s in read_conllu(default_corpus("ewt-dev"))[:8]]
    batch = encoder.tokenizer(sentences, padding=True, return_tensors="pt")
    return encoder.model, dict(batch)


def hidden(model, batch):
    with torch.no_grad():
        return model(**batch).last_hidden_state


def test_minilm_mask_prune_and_drop(minilm):
    model, batch = minilm
    assert model.config._attn_implementation == "sdpa"
    real = batch["attention_mask"].bool()
    plain = hidden(model, batch)

    zeroed = copy.deepcopy(model)
    site = model_layout(zeroed).site(4)
    with torch.no_grad():
        site.value.weight[5 * 32:6 * 32] = 0
        site.value.bias[5 * 32:6 * 32] = 0
    with mask_heads(model, "L4H5"):
        masked = hidden(model, batch)
    torch.testing.assert_close(masked[real], hidden(zeroed, batch)[real], atol=1e-5, rtol=1e-5)
    assert (masked[real] - plain[real]).abs().max() > 1e-3

    rng = np.random.default_rng(0)
    heads = [(int(i) // 12 + 1, int(i) % 12) for i in rng.choice(72, size=36, replace=False)]
    with mask_heads(model, heads):
        masked = hidden(model, batch)
    pruned = copy.deepcopy(model)
    prune_heads(pruned, heads)
    torch.testing.assert_close(hidden(pruned, batch)[real], masked[real], atol=1e-5, rtol=1e-5)
    # 36 heads x (q, k, v rows + biases, output columns) of size 32 in a 384-wide model
    assert count_parameters(model) - count_parameters(pruned) == 36 * (3 * (384 * 32 + 32) + 384 * 32)

    with drop_layers(model, [6]):
        dropped = model(**batch, output_hidden_states=True)
    with torch.no_grad():
        states = model(**batch, output_hidden_states=True).hidden_states
    torch.testing.assert_close(dropped.last_hidden_state, states[5])  # layer 6 gone: its input is the output
    assert torch.equal(hidden(model, batch), plain)


def test_best_det_head_from_the_attention_analysis_is_the_head_ablate_zeroes(minilm, shared_data):
    """The round trip of the one numbering on MiniLM: the label of the best head for `det` (attention
    analysis table) masks exactly that head, whose context is its attention map times its values."""
    from bertology.intervention import attention_best_heads, flagged_heads, hook_points
    from bertology.models import Encoder
    from bertology.models import load_encoder

    if not (shared_data / "ud_english_ewt").is_dir():
        pytest.skip("UD EWT not in the shared data")
    encoder = load_encoder("minilm")
    table = attention_best_heads(encoder, max_sentences=12, min_count=1, progress=False)
    assert encoder.attention_implementation == "sdpa"  # restored after the analysis
    ((layer, head),) = flagged_heads(table[table["relation"] == "det"])
    label = f"L{layer}H{head}"
    model, batch = minilm
    points = hook_points(model)
    seen = {}
    value = points[f"layer.{layer}.attn.v"].register_forward_hook(lambda m, a, out: seen.__setitem__("v", out))
    context = points[f"layer.{layer}.attn.head_context"].register_forward_pre_hook(
        lambda m, a: seen.__setitem__("context", a[0]))
    try:
        with Encoder.from_model(model, encoder.tokenizer).eager_attention():
            attentions = model(**batch, output_attentions=True).attentions
        size = 32
        block = slice(head * size, (head + 1) * size)
        torch.testing.assert_close(seen["context"][..., block], attentions[layer - 1][:, head] @ seen["v"][..., block],
                                   atol=1e-4, rtol=1e-4)
        with mask_heads(model, label):
            spy = points[f"layer.{layer}.attn.head_context"].register_forward_pre_hook(
                lambda m, a: seen.__setitem__("masked", a[0]))
            try:
                hidden(model, batch)
            finally:
                spy.remove()
    finally:
        value.remove()
        context.remove()
    per_head = seen["masked"].unflatten(-1, (12, size))
    zero = [h for h in range(12) if torch.count_nonzero(per_head[..., h, :]) == 0]
    assert zero == [head]
    assert model.config._attn_implementation == "sdpa"
