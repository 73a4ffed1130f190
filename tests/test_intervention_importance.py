"""Michel et al.'s analyses on a tiny classifier fine-tuned for a few steps on a toy task."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from bertology.errors import DataError, UsageError
from bertology.intervention import (
    flagged_heads,
    grid_index,
    hook_points,
    flagged_vs_random,
    head_importance,
    importance_frame,
    mask_heads,
    per_example_loss,
    plot_pruning_curve,
    pruning_curve,
    scale_heads,
    single_head_ablation,
    summarize_flagged,
    summarize_single_head,
)
from bertology.intervention.toy import accuracy, batches, toy_classifier, toy_data


LAYERS, HEADS = 2, 4


@pytest.fixture(scope="module")
def models():
    return [toy_classifier(seed, steps=40) for seed in (0, 1)]


@pytest.fixture(scope="module")
def eval_data():
    return toy_data(200, seed=999)


def test_toy_model_learned_the_task(models, eval_data):
    assert all(accuracy(model, eval_data) > 0.95 for model in models)


def test_importance_is_the_mean_absolute_per_example_gradient(models):
    """Checked against central finite differences of each example's loss in each head's gate."""
    model = models[0].double()
    try:
        data = toy_data(6, seed=5)
        data["labels"][:3] = 1 - data["labels"][:3]  # wrong labels: large losses, large gradients
        scores = head_importance(model, batches(data, 3), normalize="none")
        eps = 1e-5
        expected = np.zeros((LAYERS, HEADS))
        for layer in range(LAYERS):
            for head in range(HEADS):
                losses = []
                for sign in (1, -1):
                    xi = torch.ones(LAYERS, HEADS, dtype=torch.float64)
                    xi[layer, head] += sign * eps
                    with scale_heads(model, xi), torch.no_grad():
                        losses.append(per_example_loss(model, data).double())
                expected[layer, head] = ((losses[0] - losses[1]) / (2 * eps)).abs().mean()
        np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-9)
    finally:
        model.float()


def test_per_batch_variant_and_layer_normalisation(models):
    model = models[0]
    data = toy_data(64, seed=6)
    raw = head_importance(model, batches(data, 16), normalize="none", per_example=False)
    xi_sum = np.zeros((LAYERS, HEADS))
    for batch in batches(data, 16):
        xi = torch.ones(LAYERS, HEADS, requires_grad=True)
        with scale_heads(model, xi):
            (grad,) = torch.autograd.grad(per_example_loss(model, batch).mean(), xi)
        xi_sum += grad.abs().numpy()
    np.testing.assert_allclose(raw, xi_sum / 4, rtol=1e-4)
    normalised = head_importance(model, batches(data, 16), per_example=False)
    np.testing.assert_allclose(np.linalg.norm(normalised, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(normalised, raw / np.linalg.norm(raw, axis=1, keepdims=True), rtol=1e-5)
    frame = importance_frame(normalised)
    assert list(frame.columns) == ["layer", "head", "head_label", "importance", "rank"]
    assert sorted(set(frame["layer"])) == [1, 2]  # hidden_states numbering: row 0 of the grid is layer 1
    top = frame.loc[frame["rank"] == 0].iloc[0]
    assert top["importance"] == np.max(normalised)
    assert normalised[grid_index(top["layer"], top["head"])] == top["importance"]
    assert top["head_label"] == f"L{top['layer']}H{top['head']}"


def test_single_head_table_with_seed_spread(models, eval_data):
    evaluate = lambda model: accuracy(model, eval_data)  # noqa: E731
    result = single_head_ablation(models, evaluate, seeds=[10, 11])
    raw = result["ablation"]
    assert len(raw) == 2 * LAYERS * HEADS and set(raw["seed"]) == {10, 11}
    assert sorted(set(raw["layer"])) == [1, 2] and str(raw["layer"].dtype) == "Int64"
    row = raw[(raw["seed"] == 11) & (raw["layer"] == 2) & (raw["head"] == 2)].iloc[0]
    assert row["head_label"] == "L2H2"
    with mask_heads(models[1], row["head_label"]):
        assert row["metric"] == evaluate(models[1])
    assert row["delta"] == pytest.approx(row["metric"] - evaluate(models[1]))
    summary = summarize_single_head(raw)
    pd.testing.assert_frame_equal(summary, result["summary"], check_dtype=False)
    assert len(summary) == LAYERS * HEADS
    baselines = raw.groupby("seed")["baseline"].first()
    assert summary["seed_spread"].iloc[0] == pytest.approx(baselines.std(ddof=1), nan_ok=True)
    one = summary[(summary["layer"] == 2) & (summary["head"] == 2)].iloc[0]
    deltas = raw[(raw["layer"] == 2) & (raw["head"] == 2)]["delta"]
    assert one["delta_mean"] == pytest.approx(deltas.mean())
    # a change no larger than re-running fine-tuning is never "real"
    small = summary[summary["delta_mean"].abs() <= summary["seed_spread"]]
    assert not small["real"].astype(bool).any()
    single = summarize_single_head(raw[raw["seed"] == 10])
    assert single["real"].isna().all() and single["seed_spread"].isna().all()


def test_identical_changes_over_two_seeds_are_not_called_real():
    # Two seeds whose change is the same 2 examples out of 872: a zero-variance t-test would give p = 0.
    raw = pd.DataFrame({"seed": [0, 1], "layer": [1, 1], "head": [5, 5], "baseline": [0.7936, 0.7924],
                        "metric": [0.7959, 0.7947], "delta": [0.0023, 0.0023]})
    summary = summarize_single_head(raw)
    assert np.isnan(summary["p_value"].iloc[0])
    assert not bool(summary["real"].iloc[0])
    three = pd.concat([raw, raw.assign(seed=2, baseline=0.7930, metric=0.7953)])
    summary = summarize_single_head(three)
    assert summary["p_value"].iloc[0] == 0.0 and bool(summary["real"].iloc[0])


def test_pruning_curve_importance_vs_random(models, eval_data, tmp_path):
    model = models[0]
    evaluate = lambda m: accuracy(m, eval_data)  # noqa: E731
    train = batches(toy_data(64, seed=7), 32)
    scores = head_importance(model, train)
    fractions = [0.0, 0.25, 0.5, 1.0]
    result = pruning_curve(model, evaluate, importance=scores, fractions=fractions, random_seeds=(0, 1),
                           recompute=False)
    curve, pruned = result["curve"], result["pruned"]
    assert set(curve["order"]) == {"importance", "random"}
    assert len(curve) == len(fractions) * 3
    assert curve.loc[curve["order"] == "importance", "seed"].isna().all()  # no sentinel -1
    imp = curve[curve["order"] == "importance"].set_index("fraction")
    assert imp.loc[0.0, "metric"] == evaluate(model)
    with mask_heads(model, "L1,L2"):
        assert imp.loc[1.0, "metric"] == evaluate(model)
    order = sorted(((l, h) for l in (1, 2) for h in range(HEADS)), key=lambda lh: (scores[grid_index(*lh)], lh))
    half = pruned[(pruned["order"] == "importance") & (pruned["fraction"] == 0.5)]
    assert sorted(zip(half["layer"], half["head"])) == sorted(order[:4])
    with mask_heads(model, ",".join(half["head_label"])):
        assert imp.loc[0.5, "metric"] == evaluate(model)
    rnd = pruned[pruned["order"] == "random"]
    assert rnd[rnd["seed"] == 0]["head_label"].tolist() != rnd[rnd["seed"] == 1]["head_label"].tolist()
    assert len(result["importance"]) == LAYERS * HEADS
    again = pruning_curve(model, evaluate, importance=scores, fractions=fractions, random_seeds=(0, 1),
                          recompute=False)
    for name in ("curve", "pruned"):
        pd.testing.assert_frame_equal(result[name], again[name])
    iterative = pruning_curve(model, evaluate, batches=train, fractions=[0.0, 0.5], random_seeds=())
    assert iterative["curve"]["n_pruned"].tolist() == [0, 4]
    figure = plot_pruning_curve(result, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 1000 and figure.axes[0].get_xlabel() == "heads pruned (%)"
    with pytest.raises(DataError, match="between 0 and 1"):
        pruning_curve(model, evaluate, importance=scores, fractions=[1.5])


def test_flagged_heads_are_read_in_the_one_numbering():
    """Regression: flagged_heads(one_based=True) subtracted 1 from the heads too, so the heads masked were
    not the heads the attention table listed. Tables hold layer 1..L and head from 0: taken as they are."""
    table = pd.DataFrame({"relation": ["all", "det", "nsubj", "amod"], "layer": [2, 2, 1, 2], "head": [1, 3, 0, 3]})
    assert flagged_heads(table) == [(1, 0), (2, 3)]  # "all" skipped, duplicates merged, no shift
    labelled = table.assign(head_label=["L2H1", "L2H3", "L1H0", "L2H3"])
    assert flagged_heads(labelled) == [(1, 0), (2, 3)]
    assert flagged_heads(labelled[["relation", "head_label"]]) == [(1, 0), (2, 3)]
    with pytest.raises(DataError, match="head_label lists"):
        flagged_heads(labelled.assign(head=[1, 3, 1, 3]))
    with pytest.raises(UsageError, match="layer 0 has no heads"):  # a table in the old 0-based layers
        flagged_heads(table.assign(layer=[1, 1, 0, 1]))
    with pytest.raises(DataError, match="neither integer 'layer' and 'head' columns nor a 'head_label'"):
        flagged_heads(table[["relation"]])


def zeroed_heads_spy(model, evaluate):
    """``evaluate`` that also records which heads' context slices are all zero while it runs: the heads
    actually masked (the spy's hooks run after any mask's hooks, registered before the call)."""
    calls = []

    def spy(m):
        points = {name.split(".")[1]: module for name, module in hook_points(m).items()
                  if name.endswith("head_context")}
        zeroed = set()

        def hook(layer):
            def record(module, args):
                context = args[0].unflatten(-1, (HEADS, -1))
                zeroed.update((layer, h) for h in range(HEADS) if torch.count_nonzero(context[..., h, :]) == 0)
            return record

        handles = [module.register_forward_pre_hook(hook(int(layer))) for layer, module in points.items()]
        try:
            value = evaluate(m)
        finally:
            for handle in handles:
                handle.remove()
        calls.append(sorted(zeroed))
        return value

    return spy, calls


def test_flagged_vs_random_heads(models, eval_data):
    model = models[0]
    evaluate = lambda m: accuracy(m, eval_data)  # noqa: E731
    table = pd.DataFrame({"relation": ["det", "nsubj"], "layer": [1, 2], "head": [1, 2]})
    flagged = flagged_heads(table)
    spy, calls = zeroed_heads_spy(model, evaluate)
    result = flagged_vs_random(model, flagged, spy, n_draws=5, seed=3)
    runs, masked = result["runs"], result["masked"]
    # the heads in the table are exactly the heads masked, and exactly the heads whose output is zero
    flagged_rows = masked[masked["condition"] == "flagged"]
    assert list(zip(flagged_rows["layer"], flagged_rows["head"])) == [(1, 1), (2, 2)]
    assert flagged_rows["head_label"].tolist() == ["L1H1", "L2H2"]
    assert calls[0] == [] and calls[1] == [(1, 1), (2, 2)]
    for draw, call in zip(range(5), calls[2:]):
        rows = masked[(masked["condition"] == "random") & (masked["draw"] == draw)]
        assert call == sorted(zip(rows["layer"], rows["head"]))
    assert runs["condition"].tolist() == ["none", "flagged"] + ["random"] * 5
    assert runs["draw"].isna().tolist() == [True, True] + [False] * 5
    randoms = runs[runs["condition"] == "random"]
    assert (randoms["n_masked"] == 2).all()
    assert not set(masked.loc[masked["condition"] == "random", "head_label"]) & {"L1H1", "L2H2"}
    again = flagged_vs_random(model, flagged, evaluate, n_draws=5, seed=3)
    for name in ("runs", "masked"):
        pd.testing.assert_frame_equal(result[name], again[name])
    summary = summarize_flagged(result)
    baseline = evaluate(model)
    with mask_heads(model, flagged):
        assert runs.loc[1, "metric"] == evaluate(model)
    assert summary["baseline"] == baseline
    assert summary["flagged_delta"] == pytest.approx(runs.loc[1, "metric"] - baseline)
    random_deltas = randoms["delta"].to_numpy()
    assert summary["p_random_as_harmful"] == pytest.approx(
        (np.sum(random_deltas <= summary["flagged_delta"]) + 1) / 6)
    assert 0 < summary["p_random_as_harmful"] <= 1 and summary["n_draws"] == 5
    assert result["summary"].iloc[0]["flagged_delta"] == summary["flagged_delta"]
    with pytest.raises(DataError, match="no flagged heads"):
        flagged_vs_random(model, [], evaluate)
