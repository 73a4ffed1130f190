"""Head masking and layer dropping on tiny random encoders of every supported architecture.

Layers are numbered as hidden_states (1..L; 0 = embeddings has no heads), heads from 0, labels L2H3."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import transformers

from bertology.errors import ModelError, UsageError
from bertology.intervention import drop_layers, hook_points, mask_heads, model_layout, scale_heads

warnings.filterwarnings("ignore", message="Initializing zero-element tensors")

LAYERS, HEADS, HIDDEN = 3, 4, 32



EAGER_ONLY = ("deberta-v2", "mpnet")  # their own attention code: no sdpa switch


def tiny_config(model_type: str):
    if model_type == "distilbert":
        return transformers.DistilBertConfig(dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=64, vocab_size=100)
    extra = {}
    if model_type in ("electra", "albert"):
        extra["embedding_size"] = 16
    if model_type == "deberta-v2":
        extra.update(relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=8, max_relative_positions=16)
    if model_type == "modernbert":  # layers 1 and 3 global, 2 local with a window of 4 (shorter than the inputs)
        extra.update(local_attention=4, global_attn_every_n_layers=2, attention_bias=True, pad_token_id=0,
                     bos_token_id=None, eos_token_id=None, cls_token_id=None, sep_token_id=None)
    return transformers.AutoConfig.for_model(model_type, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                             num_attention_heads=HEADS, intermediate_size=64, vocab_size=100,
                                             max_position_embeddings=64, **extra)


def tiny_model(model_type: str, attn: str = "sdpa", seed: int = 0):
    config = tiny_config(model_type)
    if model_type not in EAGER_ONLY:
        config._attn_implementation = attn
    torch.manual_seed(seed)
    return transformers.AutoModel.from_config(config).eval()


def inputs(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 100, (2, 9), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def run(model, **kwargs):
    with torch.no_grad():
        return model(**inputs(), **kwargs)


ALL_TYPES = ["bert", "roberta", "electra", "distilbert", "albert", "deberta-v2", "mpnet", "modernbert"]


def test_trap_head_mask_argument_is_silently_ignored_but_ours_works():
    """transformers 5 accepts head_mask= and does nothing with it; mask_heads must have an effect."""
    model = tiny_model("bert")
    plain = run(model).last_hidden_state
    all_heads_off = torch.zeros(LAYERS, HEADS)
    ignored = run(model, head_mask=all_heads_off).last_hidden_state
    assert torch.equal(plain, ignored), "transformers honours head_mask again: revisit docs/intervention.md"
    with mask_heads(model, "L1,L2,L3"):
        ours = run(model).last_hidden_state
    assert (ours - plain).abs().max() > 1e-2


def zero_value_head(model, layer: int, head: int):
    """The reference ablation: a copy whose head has zero value weights and bias (context = 0).
    ``layer`` is 1..L; ``site(layer)`` is the module of that layer."""
    clone = copy.deepcopy(model)
    site = model_layout(clone).site(layer)
    size = site.head_size
    if site.fused_qkv:  # modernbert's Wqkv: [q heads | k heads | v heads]
        linear, start = next(iter(site.projections.values())), 2 * HEADS * size + head * size
    else:
        linear, start = site.value, head * size
    with torch.no_grad():
        linear.weight[start:start + size] = 0
        linear.bias[start:start + size] = 0
    return clone


@pytest.mark.parametrize("model_type", [t for t in ALL_TYPES if t != "albert"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_mask_equals_zeroing_value_weights(model_type, attn):
    model = tiny_model(model_type, attn)
    reference = run(zero_value_head(model, 2, 2)).last_hidden_state
    with mask_heads(model, [(2, 2)]):
        masked = run(model).last_hidden_state
    torch.testing.assert_close(masked, reference, atol=1e-6, rtol=1e-5)
    assert (masked - run(model).last_hidden_state).abs().max() > 1e-4


@pytest.mark.parametrize("model_type", ["bert", "roberta", "distilbert", "albert", "deberta-v2", "modernbert"])
@pytest.mark.parametrize("layer", [1, 2, 3])
def test_masking_a_head_of_layer_l_changes_hidden_states_from_l_on(model_type, layer):
    """The one numbering: a head "in layer l" first changes hidden_states[l], never anything below."""
    model = tiny_model(model_type)
    plain = run(model, output_hidden_states=True).hidden_states
    with mask_heads(model, f"L{layer}H3"):
        masked = run(model, output_hidden_states=True).hidden_states
    assert len(plain) == LAYERS + 1
    for index in range(layer):  # hidden_states[0] = embeddings, ... [layer - 1] = input of layer `layer`
        assert torch.equal(plain[index], masked[index])
    for index in range(layer, LAYERS + 1):
        assert (plain[index] - masked[index]).abs().max() > 1e-4


def test_albert_masks_one_logical_layer_of_the_shared_module():
    """ALBERT's three layers are one module: masking layer 3 must not touch the calls for layers 1-2."""
    model = tiny_model("albert")
    assert model_layout(model).shared
    plain = run(model, output_hidden_states=True).hidden_states
    with mask_heads(model, [(3, 0)]):
        masked = run(model, output_hidden_states=True).hidden_states
    for index in (0, 1, 2):
        assert torch.equal(plain[index], masked[index])
    assert (plain[3] - masked[3]).abs().max() > 1e-4


@pytest.mark.parametrize("model_type", ["bert", "distilbert"])
def test_empty_mask_equals_unmasked_model(model_type):
    model = tiny_model(model_type)
    plain = run(model).last_hidden_state
    with mask_heads(model, []) as heads:
        same = run(model).last_hidden_state
    assert heads == []
    assert torch.equal(plain, same)
    with scale_heads(model, torch.ones(LAYERS, HEADS)):
        ones = run(model).last_hidden_state
    assert torch.equal(plain, ones)


def test_hooks_are_removed_on_exit_even_after_an_error():
    model = tiny_model("bert")
    plain = run(model).last_hidden_state
    with pytest.raises(RuntimeError, match="boom"):
        with mask_heads(model, "L2"), drop_layers(model, [1]):
            raise RuntimeError("boom")
    assert torch.equal(run(model).last_hidden_state, plain)
    assert all(not module._forward_pre_hooks and not module._forward_hooks for module in model.modules())


def test_padding_does_not_change_masked_outputs():
    """The mask acts per head, never across positions: a padded batch gives the unpadded outputs."""
    model = tiny_model("bert")
    ids = torch.randint(5, 100, (1, 6), generator=torch.Generator().manual_seed(3))
    longer = torch.randint(5, 100, (1, 11), generator=torch.Generator().manual_seed(4))
    batch_ids = torch.zeros(2, 11, dtype=torch.long)
    batch_ids[0, :6], batch_ids[1] = ids[0], longer[0]
    batch_mask = torch.zeros(2, 11, dtype=torch.long)
    batch_mask[0, :6], batch_mask[1] = 1, 1
    with mask_heads(model, [(1, 1), (3, 3)]), torch.no_grad():
        alone = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0]
        padded = model(input_ids=batch_ids, attention_mask=batch_mask).last_hidden_state[0, :6]
    torch.testing.assert_close(padded, alone, atol=1e-5, rtol=1e-5)


def test_sdpa_and_eager_agree_under_masking():
    eager, sdpa = tiny_model("bert", "eager"), tiny_model("bert", "sdpa")
    with mask_heads(eager, "L2H0,L3H2"):
        a = run(eager).last_hidden_state
    with mask_heads(sdpa, "L2H0,L3H2"):
        b = run(sdpa).last_hidden_state
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def without_layer(model, layer: int):
    """The reference: a copy without layer ``layer`` (1..L), i.e. without module ``layer - 1``."""
    clone = copy.deepcopy(model)
    if hasattr(clone, "layers"):  # modernbert: each layer keeps its own attention type
        del clone.layers[layer - 1]
        clone.config.layer_types = [t for i, t in enumerate(clone.config.layer_types) if i != layer - 1]
    else:
        layers = clone.transformer.layer if hasattr(clone, "transformer") else clone.encoder.layer
        del layers[layer - 1]
    clone.config.num_hidden_layers = LAYERS - 1
    return clone


@pytest.mark.parametrize("model_type", ["bert", "roberta", "distilbert", "mpnet", "modernbert"])
def test_drop_layer_equals_model_without_that_layer(model_type):
    model = tiny_model(model_type)
    reference = run(without_layer(model, 2)).last_hidden_state
    with drop_layers(model, [2]) as dropped:
        skipped = run(model, output_hidden_states=True)
    assert dropped == [2]
    torch.testing.assert_close(skipped.last_hidden_state, reference, atol=1e-6, rtol=1e-5)
    # the recorded hidden states see the skip: layer 2's output is its input
    assert torch.equal(skipped.hidden_states[2], skipped.hidden_states[1])
    assert (run(model).last_hidden_state - reference).abs().max() > 1e-4


def test_drop_albert_logical_layer_equals_shallower_albert():
    """ALBERT shares one layer: skipping one of 3 calls is exactly the same weights run twice."""
    model = tiny_model("albert")
    shallower = copy.deepcopy(model)
    shallower.config.num_hidden_layers = LAYERS - 1
    with drop_layers(model, [3]):
        skipped = run(model).last_hidden_state
    torch.testing.assert_close(skipped, run(shallower).last_hidden_state, atol=1e-6, rtol=1e-5)


def test_hook_points_are_named_and_see_per_head_context():
    model = tiny_model("bert")
    points = hook_points(model)
    assert "layer.3.attn.head_context" in points and "layer.1" in points
    assert "layer.0" not in points and "layer.4" not in points  # layer 0 = embeddings: no block, no heads
    assert points["layer.2.attn.head_context"] is model.encoder.layer[1].attention.output.dense
    assert points["layer.2.attn.v"] is model.encoder.layer[1].attention.self.value
    seen = {}
    handle = points["layer.2.attn.head_context"].register_forward_pre_hook(lambda m, a: seen.setdefault("x", a[0]))
    try:
        run(model)
    finally:
        handle.remove()
    assert seen["x"].shape == (2, 9, HIDDEN)  # [batch, tokens, heads * head_size]
    albert = hook_points(tiny_model("albert"))
    assert albert["layer.1.attn.head_context"] is albert["layer.3.attn.head_context"]


def test_layouts_of_every_architecture():
    expected_output = {"bert": "attention.output.dense", "distilbert": "attention.out_lin",
                       "albert": "attention.dense", "deberta-v2": "attention.output.dense", "mpnet": "attn.o",
                       "modernbert": "layers.0.attn.Wo"}
    for model_type in ALL_TYPES:
        layout = model_layout(tiny_model(model_type))
        assert layout.num_layers == LAYERS and layout.num_heads == HEADS
        assert sorted(l for site in layout.sites for l in site.layers) == list(range(1, LAYERS + 1))
        assert layout.layers == [1, 2, 3] and len(layout.all_heads()) == LAYERS * HEADS
        if model_type in expected_output:
            assert layout.sites[0].output_name.endswith(expected_output[model_type])


def test_sequence_classification_wrapper_is_found():
    config = tiny_config("bert")
    model = transformers.AutoModelForSequenceClassification.from_config(config).eval()
    layout = model_layout(model)
    assert layout.sites[0].output_name == "bert.encoder.layer.0.attention.output.dense"


def test_bad_layer_and_head_raise_clear_errors():
    model = tiny_model("bert")
    with pytest.raises(UsageError, match=r"head L1H4 is out of range.*heads 0-3"):
        with mask_heads(model, [(1, 4)]):
            pass
    with pytest.raises(UsageError, match=r"layer 7 has no heads; heads live in layers 1-3 \(0 is the embeddings\)"):
        with mask_heads(model, "L7H0"):
            pass
    with pytest.raises(UsageError, match=r"layer 0 has no heads"):
        with mask_heads(model, [(0, 1)]):
            pass
    with pytest.raises(UsageError, match=r"'3-5' is not a head; expected L<layer>H<head>"):  # the old form
        with mask_heads(model, "3-5"):
            pass
    with pytest.raises(UsageError, match=r"layer 4 is out of range"):
        with drop_layers(model, [4]):
            pass
    with pytest.raises(UsageError, match=r"layer 0 is the embeddings"):
        with drop_layers(model, "0"):
            pass
    with pytest.raises(ModelError, match=r"expected \[3, 4\]"):
        with scale_heads(model, torch.ones(2, 4)):
            pass


def test_empty_head_string_is_an_error_not_a_silent_no_op():
    """`--heads ''` used to ablate nothing and report +0.0."""
    model = tiny_model("bert")
    for spec in ("", " , "):
        with pytest.raises(UsageError, match="no heads given"):
            with mask_heads(model, spec):
                pass


def test_head_label_names_the_attention_map_it_masks():
    """L{l}H{h} is the head whose attention map is attentions[l - 1][:, h]: its context slice is that map
    times its values, and masking the label zeroes exactly that slice (and no other)."""
    model = tiny_model("bert", "eager")
    points = hook_points(model)
    size = HIDDEN // HEADS
    captured = {}
    handles = []
    for layer in (1, 2, 3):
        handles.append(points[f"layer.{layer}.attn.head_context"].register_forward_pre_hook(
            lambda m, a, layer=layer: captured.__setitem__(("context", layer), a[0].detach().clone())))
        handles.append(points[f"layer.{layer}.attn.v"].register_forward_hook(
            lambda m, a, out, layer=layer: captured.__setitem__(("value", layer), out.detach().clone())))
    try:
        attentions = run(model, output_attentions=True).attentions
        plain = dict(captured)
        for layer in (1, 2, 3):
            for head in range(HEADS):
                block = slice(head * size, (head + 1) * size)
                expected = attentions[layer - 1][:, head] @ plain[("value", layer)][..., block]
                torch.testing.assert_close(plain[("context", layer)][..., block], expected, atol=1e-5, rtol=1e-5)
        for layer, head in ((1, 0), (2, 3), (3, 1)):
            seen = {}
            with mask_heads(model, f"L{layer}H{head}"):
                # registered after the mask's hook, so it sees what the output projection receives
                spy = points[f"layer.{layer}.attn.head_context"].register_forward_pre_hook(
                    lambda m, a: seen.__setitem__("context", a[0].detach().clone()))
                try:
                    run(model)
                finally:
                    spy.remove()
            context = seen["context"].unflatten(-1, (HEADS, size))
            before = plain[("context", layer)].unflatten(-1, (HEADS, size))
            assert torch.count_nonzero(context[..., head, :]) == 0
            others = [h for h in range(HEADS) if h != head]
            torch.testing.assert_close(context[..., others, :], before[..., others, :])
    finally:
        for handle in handles:
            handle.remove()


def test_unsupported_architecture_raises_model_error():
    gpt2 = transformers.GPT2Model(transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100))
    with pytest.raises(ModelError, match=r"'gpt2'.*no layer has an attention output projection.*register a Family"):
        model_layout(gpt2)
    with pytest.raises(ModelError, match="has no .config"):
        model_layout(torch.nn.Linear(3, 3))
