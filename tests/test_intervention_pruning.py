"""Real pruning: same outputs as masking, fewer parameters, saved and loaded back."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import transformers

from bertology.errors import OutputError, ModelError
from bertology.intervention import (
    count_parameters,
    load_pruned,
    mask_heads,
    model_layout,
    prune_heads,
    save_pruned,
)
from test_intervention_hooks import HEADS, HIDDEN, inputs, run, tiny_config, tiny_model

warnings.filterwarnings("ignore", message="Initializing zero-element tensors")

HEAD_SIZE = HIDDEN // HEADS
#: q, k, v rows (weights + biases) and output-projection columns of one head
PARAMS_PER_HEAD = 3 * (HIDDEN * HEAD_SIZE + HEAD_SIZE) + HIDDEN * HEAD_SIZE


def masked_then_pruned(model, heads):
    with mask_heads(model, heads):
        masked = run(model).last_hidden_state
    pruned = copy.deepcopy(model)
    prune_heads(pruned, heads)
    return masked, pruned


@pytest.mark.parametrize("model_type", ["bert", "roberta", "electra", "distilbert", "deberta-v2", "modernbert"])
def test_pruning_gives_the_masked_outputs_with_fewer_parameters(model_type):
    model = tiny_model(model_type)
    heads = [(1, 1), (2, 0), (2, 3), (3, 2)]
    masked, pruned = masked_then_pruned(model, heads)
    torch.testing.assert_close(run(pruned).last_hidden_state, masked, atol=1e-5, rtol=1e-5)
    extra = 0
    if model_type == "deberta-v2":  # pos_key_proj and pos_query_proj rows too
        extra = 2 * (HIDDEN * HEAD_SIZE + HEAD_SIZE)
    assert count_parameters(model) - count_parameters(pruned) == len(heads) * (PARAMS_PER_HEAD + extra)
    layout = model_layout(pruned)
    assert layout.present_heads[2] == [1, 2] and layout.site(2).num_heads == 2
    assert pruned.config.bertology_pruned_heads == ["L1H1", "L2H0", "L2H3", "L3H2"]


@pytest.mark.parametrize("model_type", ["bert", "distilbert", "albert", "modernbert"])
def test_layer_with_all_heads_pruned_skips_attention_and_keeps_the_residual(model_type):
    model = tiny_model(model_type)
    heads = "L1,L2,L3" if model_type == "albert" else "L2"
    masked, pruned = masked_then_pruned(model, heads)
    site = model_layout(pruned).site(2)
    assert all(linear.out_features == 0 for linear in site.projections.values()) and site.output.in_features == 0
    torch.testing.assert_close(run(pruned).last_hidden_state, masked, atol=1e-5, rtol=1e-5)


def test_albert_shared_layers_prune_only_consistently():
    model = tiny_model("albert")
    with pytest.raises(ModelError, match=r"share one attention module.*must prune the same heads"):
        prune_heads(copy.deepcopy(model), [(1, 1)])
    masked, pruned = masked_then_pruned(model, [(1, 1), (2, 1), (3, 1)])
    torch.testing.assert_close(run(pruned).last_hidden_state, masked, atol=1e-5, rtol=1e-5)


def test_pruning_keeps_the_original_head_numbering():
    model = tiny_model("bert")
    with mask_heads(model, [(2, 0), (2, 2)]):
        both = run(model).last_hidden_state
    pruned = copy.deepcopy(model)
    prune_heads(pruned, [(2, 0)])
    prune_heads(pruned, [(2, 2), (2, 0)])  # (2, 0) is already gone: ignored
    torch.testing.assert_close(run(pruned).last_hidden_state, both, atol=1e-5, rtol=1e-5)
    # masking a pruned model speaks the original numbering too
    once = copy.deepcopy(model)
    prune_heads(once, [(2, 0)])
    with mask_heads(once, [(2, 2)]):
        torch.testing.assert_close(run(once).last_hidden_state, both, atol=1e-5, rtol=1e-5)


def test_mpnet_pruning_is_refused_clearly():
    with pytest.raises(ModelError, match="pruning mpnet: not supported.*use mask_heads"):
        prune_heads(tiny_model("mpnet"), [(1, 0)])


def test_save_and_load_a_pruned_classifier(tmp_path):
    config = tiny_config("bert")
    config.num_labels = 3
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).eval()
    prune_heads(model, "L1H1,L2,L3H0,L3H3")
    expected = run(model).logits
    save_pruned(model, tmp_path / "pruned")
    loaded = load_pruned(tmp_path / "pruned")
    assert type(loaded) is transformers.BertForSequenceClassification
    torch.testing.assert_close(run(loaded).logits, expected, atol=1e-6, rtol=1e-6)
    assert count_parameters(loaded) == count_parameters(model)
    with pytest.raises(OutputError, match="not empty"):
        save_pruned(model, tmp_path / "pruned")


def test_fused_qkv_pruning_keeps_each_kept_heads_query_key_and_value(tmp_path):
    """ModernBERT's Wqkv holds [q heads | k heads | v heads]: pruning takes the same head from each block, so the
    kept heads' attention maps are unchanged; the pruned model saves and loads back."""
    model = tiny_model("modernbert", "eager")
    pruned = copy.deepcopy(model)
    prune_heads(pruned, "L2H1,L2H2")
    (wqkv,) = model_layout(pruned).site(2).projections.values()
    assert wqkv.out_features == 3 * 2 * HEAD_SIZE
    before, after = run(model, output_attentions=True).attentions, run(pruned, output_attentions=True).attentions
    torch.testing.assert_close(after[1], before[1][:, [0, 3]], atol=1e-6, rtol=1e-5)
    save_pruned(pruned, tmp_path / "pruned")
    loaded = load_pruned(tmp_path / "pruned")  # sdpa: padded positions differ from eager's, real ones agree
    real = inputs()["attention_mask"].bool()
    torch.testing.assert_close(run(loaded).last_hidden_state[real], run(pruned).last_hidden_state[real],
                               atol=1e-5, rtol=1e-5)


def test_checkpoint_pruned_before_the_one_numbering_still_loads(tmp_path):
    """Older checkpoints recorded pruned heads as {module index: heads} (0-based layers): they load, and
    read as layers index + 1."""
    import json

    config = tiny_config("bert")
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    prune_heads(model, "L1H1,L3")
    expected = run(model).last_hidden_state
    save_pruned(model, tmp_path / "new")
    assert json.loads((tmp_path / "new" / "config.json").read_text())["bertology_pruned_heads"] == \
        ["L1H1", "L3H0", "L3H1", "L3H2", "L3H3"]
    save_pruned(model, tmp_path / "old")
    config_path = tmp_path / "old" / "config.json"
    saved = json.loads(config_path.read_text())
    saved["bertology_pruned_heads"] = {"0": [1], "2": [0, 1, 2, 3]}  # how bertology wrote it before
    config_path.write_text(json.dumps(saved))
    for folder in ("new", "old"):
        loaded = load_pruned(tmp_path / folder)
        torch.testing.assert_close(run(loaded).last_hidden_state, expected, atol=1e-6, rtol=1e-6)
        assert model_layout(loaded).present_heads == {1: [0, 2, 3], 2: [0, 1, 2, 3], 3: []}
