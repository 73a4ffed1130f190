"""One-shot interventions with a metric (ablate_heads, ablate_layers, prune_by_importance): Results in the
one numbering, on tiny models whose behaviour we can check."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from bertology.errors import DataError, UsageError
from bertology.intervention import (ablate_heads, ablate_layers, count_parameters, model_layout,
                                    prune_by_importance)
from bertology.intervention.toy import accuracy, batches, toy_classifier, toy_data
from bertology.numbering import parse_layers

warnings.filterwarnings("ignore", message="Initializing zero-element tensors")


def test_ablate_layers_names_the_layer_probe_reads(tiny_bert):
    """`ablate layers --layers 2` and `probe --layers 2` name the same layer: hidden_states[2]."""
    batch = tiny_bert.tokenizer(["the quick brown fox jumps", "dogs chase cats"], padding=True, return_tensors="pt")
    seen = []

    def evaluate(model):
        out = tiny_bert.forward(batch)  # the one forward path probes read layers from
        seen.append([out.layer(layer) for layer in range(tiny_bert.num_layers + 1)])
        return float(out.layer(tiny_bert.num_layers).mean())

    spec = "2"
    assert parse_layers(spec, tiny_bert.num_layers) == [2]  # what --layers 2 means to every command
    result = ablate_layers(tiny_bert.model, spec, evaluate)
    before, after = seen
    assert torch.equal(after[2], after[1]) and not torch.equal(before[2], before[1])
    assert torch.equal(after[1], before[1])
    assert result["layers"]["layer"].tolist() == [2]
    scores = result["scores"].iloc[0]
    assert scores["n_dropped"] == 1 and scores["delta"] == pytest.approx(scores["metric"] - scores["baseline"])
    with pytest.raises(UsageError, match="layer 0 is the embeddings"):
        ablate_layers(tiny_bert.model, "0", evaluate)
    with pytest.raises(DataError, match="no layers given"):
        ablate_layers(tiny_bert.model, [], evaluate)


def test_ablate_heads_result(tiny_bert):
    batch = tiny_bert.tokenizer(["the quick brown fox jumps"], return_tensors="pt")

    def evaluate(model):
        return float(tiny_bert.forward(batch).layer(2).abs().mean())

    result = ablate_heads(tiny_bert.model, "L2H1,L1", evaluate, metric_name="mean activation")
    assert result["heads"]["head_label"].tolist() == ["L1H0", "L1H1", "L1H2", "L1H3", "L2H1"]
    scores = result["scores"].iloc[0]
    assert scores["metric_name"] == "mean activation" and scores["n_masked"] == 5
    assert scores["metric"] != scores["baseline"]  # masking a whole layer changes its output
    with pytest.raises(UsageError, match="no heads given"):
        ablate_heads(tiny_bert.model, "", evaluate)
    with pytest.raises(DataError, match="no heads given"):
        ablate_heads(tiny_bert.model, [], evaluate)


def test_prune_by_importance_prunes_the_least_important_heads():
    model = toy_classifier(0, steps=40)
    data = toy_data(120, seed=11)
    train = batches(toy_data(64, seed=12), 32)
    full = copy.deepcopy(model)
    result = prune_by_importance(model, lambda m: accuracy(m, data), train, 0.5, latency_repeats=2)
    pruned = result["pruned"]
    assert len(pruned) == 4 and pruned["importance"].is_monotonic_increasing
    gone = set(zip(pruned["layer"], pruned["head"]))
    assert set(model_layout(full).all_heads()) - set(model_layout(model).all_heads()) == gone
    stages = result["before_after"].set_index("stage")
    assert stages.loc["before", "parameters"] == count_parameters(full)
    assert stages.loc["after", "parameters"] == count_parameters(model) < count_parameters(full)
    assert 0.0 <= stages.loc["after", "metric"] <= 1.0 and stages.loc["before", "metric"] == accuracy(full, data)
    with pytest.raises(DataError, match="between 0 and 1"):
        prune_by_importance(full, lambda m: 0.0, train, 1.5)
