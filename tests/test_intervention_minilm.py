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
    site = model_layout(zeroed).site(3)
    with torch.no_grad():
        site.value.weight[5 * 32:6 * 32] = 0
        site.value.bias[5 * 32:6 * 32] = 0
    with mask_heads(model, "3-5"):
        masked = hidden(model, batch)
    torch.testing.assert_close(masked[real], hidden(zeroed, batch)[real], atol=1e-5, rtol=1e-5)
    assert (masked[real] - plain[real]).abs().max() > 1e-3

    rng = np.random.default_rng(0)
    heads = [(int(i) // 12, int(i) % 12) for i in rng.choice(72, size=36, replace=False)]
    with mask_heads(model, heads):
        masked = hidden(model, batch)
    pruned = copy.deepcopy(model)
    prune_heads(pruned, heads)
    torch.testing.assert_close(hidden(pruned, batch)[real], masked[real], atol=1e-5, rtol=1e-5)
    # 36 heads x (q, k, v rows + biases, output columns) of size 32 in a 384-wide model
    assert count_parameters(model) - count_parameters(pruned) == 36 * (3 * (384 * 32 + 32) + 384 * 32)

    with drop_layers(model, [5]):
        dropped = model(**batch, output_hidden_states=True)
    with torch.no_grad():
        states = model(**batch, output_hidden_states=True).hidden_states
    torch.testing.assert_close(dropped.last_hidden_state, states[5])
    assert torch.equal(hidden(model, batch), plain)
