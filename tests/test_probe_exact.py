"""The exact linear probe, seeds that vary the training sample, and MDL (online codelength)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bertology.errors import SettingError
from bertology.probing.mdl import DEFAULT_TIMESTAMPS, block_ends, online_codelength
from bertology.probing.probes import DEFAULT_L2, TRAINED_L2, LayerwiseProbe, _check_grid
from bertology.probing.solver import fit_multinomial, path_start
from bertology.probing.spec import ProbingSpec


def _problem(n=300, d=12, classes=3, layers=2, seed=0, noise=1.5):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, d))
    y = rng.integers(0, classes, size=n)
    X = np.stack([centres[y] * (1 + l) + noise * rng.normal(size=(n, d)) for l in range(layers)]).astype(np.float32)
    return X, y


def _splits(sizes, seed=0, **options):
    """Train, dev (and test) splits of one task: one draw of :func:`_problem`, cut in order. (A problem of
    another seed has other class centres: another task, on which the dev score picks the strongest L2.)"""
    X, y = _problem(n=sum(sizes), seed=seed, **options)
    cuts = np.cumsum((0, *sizes))
    return [part for a, b in zip(cuts[:-1], cuts[1:]) for part in (X[:, a:b], y[a:b])]


def _standardise(X):
    mean, sd = X.mean(1, keepdims=True), X.std(1, keepdims=True)
    return (X - mean) / sd


def test_fit_multinomial_is_scikit_learns_logistic_regression():
    from sklearn.linear_model import LogisticRegression

    X, y = _problem()
    Z = _standardise(X).astype(np.float64)
    for l2 in (1e-1, 1e-3):
        # In float64 and at a tight tolerance the solver reaches scikit-learn's optimum to its precision; at the
        # default (float32 features, GTOL) to well under a thousandth in probability.
        tight = fit_multinomial(torch.from_numpy(Z), torch.from_numpy(y), 3, [l2], gtol=1e-10, max_iter=1000)
        default = fit_multinomial(torch.from_numpy(Z).float(), torch.from_numpy(y), 3, [l2])
        for layer in range(Z.shape[0]):
            reference = LogisticRegression(C=1 / (l2 * len(y)), tol=1e-12, max_iter=100_000).fit(Z[layer], y)
            expected = reference.predict_proba(Z[layer])
            W, b = tight[0][layer, 0], tight[1][layer, 0]
            assert np.abs(torch.softmax(torch.from_numpy(Z[layer]) @ W + b, -1).numpy() - expected).max() < 1e-6
            W, b = default[0][layer, 0].double(), default[1][layer, 0].double()
            assert np.abs(torch.softmax(torch.from_numpy(Z[layer]) @ W + b, -1).numpy() - expected).max() < 1e-3


def test_the_optimum_does_not_depend_on_the_start_or_the_path():
    X, y = _problem(seed=1)
    # float64 and a tight tolerance: a gradient tolerance g bounds the distance to the optimum by about g / l2
    # per weight (strong convexity), so at l2 = 1e-4 the default 1e-6 leaves room for 1e-2 between two paths.
    Z = torch.from_numpy(_standardise(X)).double()
    grid = (1e-2, 1e-3, 1e-4)
    warm, _, _, _ = fit_multinomial(Z, torch.from_numpy(y), 3, grid, continuation=True, gtol=1e-10, max_iter=1000)
    cold, _, _, _ = fit_multinomial(Z, torch.from_numpy(y), 3, grid, continuation=False, gtol=1e-10, max_iter=1000)
    # Two different paths (each L2 from its neighbour's optimum, or each from zero) end at one optimum.
    assert (warm - cold).abs().max() < 1e-5 * warm.abs().max()


def test_the_path_starts_at_the_grid_value_nearest_its_start():
    assert _check_grid(DEFAULT_L2)[path_start(_check_grid(DEFAULT_L2))] == 1e-2
    assert path_start(_check_grid(TRAINED_L2)) == 0  # the former grid: walked from its strongest value, as before
    assert path_start((1e-3, 1e-4)) == 0 and path_start((10.0, 1.0)) == 1 and path_start((0.0,)) == 0


def test_the_path_walks_both_ways_to_each_layers_dev_optimum():
    """From 1e-2 a layer of noise walks stronger and a layer with signal weaker, each to the value of the lowest
    dev cross-entropy over the whole grid (solved value by value), reaching only the values in between."""
    rng = np.random.default_rng(21)
    n, d, C = 900, 10, 3
    y = rng.integers(0, C, size=n)
    centres = rng.normal(size=(C, d))
    X = np.stack([1.1 * centres[y] + rng.normal(size=(n, d)), rng.normal(size=(n, d))]).astype(np.float32)
    X = torch.from_numpy(_standardise(X))
    Y = torch.from_numpy(y)
    train, dev = slice(0, 600), slice(600, n)
    grid = _check_grid(DEFAULT_L2)

    def dev_ce(W, b, rows):
        logits = torch.baddbmm(b.unsqueeze(1), X[rows][:, dev], W)
        return torch.nn.functional.cross_entropy(logits.transpose(1, 2).double(),
                                                 Y[dev].expand(len(rows), -1), reduction="none").mean(-1)

    W_all, b_all, _, _ = fit_multinomial(X[:, train], Y[train], C, grid, max_iter=400)
    every = torch.stack([dev_ce(W_all[:, g], b_all[:, g], torch.arange(2)) for g in range(len(grid))], 1)
    W, b, _, scores = fit_multinomial(X[:, train], Y[train], C, grid, max_iter=400,
                                      score=lambda W, b, rows: -dev_ce(W, b, rows))
    chosen, start = scores.argmax(1), path_start(grid)
    assert chosen.tolist() == every.argmin(1).tolist()
    assert chosen[0] > start and chosen[1] < start  # the signal weaker than 1e-2, the noise stronger
    for layer in range(2):
        reached = torch.isfinite(scores[layer]).nonzero().squeeze(1).tolist()
        assert reached == list(range(min(reached), max(reached) + 1)) and start in reached
        assert len(reached) < len(grid)
        # One past the optimum (or the grid's end), on the side it walked to, and no further.
        # The stronger side is tried first (its solves are the cheap ones): a layer that wants a weaker value
        # solved one stronger value to learn so; one that wants a stronger value never solved a weaker one.
        if chosen[layer] > start:
            assert max(reached) == min(int(chosen[layer]) + 1, len(grid) - 1) and min(reached) == start - 1
        else:
            assert min(reached) == max(int(chosen[layer]) - 1, 0) and max(reached) == start
        # The same optimum from another path, to the float32 solve's tolerance (gtol 1e-6 over the strong
        # convexity l2 = 1e-3 leaves a few 1e-3 per weight).
        np.testing.assert_allclose(W[layer, chosen[layer]], W_all[layer, chosen[layer]], atol=5e-3)


def test_the_exact_probe_moves_no_prediction_under_a_tiny_change_of_features():
    X, y, Xdev, ydev, Xtest, ytest = _splits((600, 200, 400), seed=2)
    shift = 1e-6 * np.random.default_rng(5).standard_normal(X.shape).astype(np.float32)
    a = LayerwiseProbe(device="cpu", stop="converged").fit(X, y, Xdev, ydev)
    b = LayerwiseProbe(device="cpu", stop="converged").fit(X + shift, y, Xdev, ydev)
    assert (a.predict(Xtest) == b.predict(Xtest)).all()
    np.testing.assert_array_equal(a.best_l2_, b.best_l2_)
    # The early-stopped path is still there, on request, and is not the same estimator.
    early = LayerwiseProbe(device="cpu", stop="early").fit(X, y, Xdev, ydev)
    assert early.n_iter_ != a.n_iter_


def test_the_chosen_value_is_polished_to_scikit_learns_optimum():
    """The L2 each layer chooses is solved again in float64: its probabilities agree with scikit-learn's tight
    optimum to float32's precision (unpolished, at float32's gradient floor, they were 1e-3 apart)."""
    from sklearn.linear_model import LogisticRegression

    X, y, Xdev, ydev = _splits((400, 150), seed=6)
    probe = LayerwiseProbe(device="cpu").fit(X, y, Xdev, ydev)
    probabilities = probe.predict_proba(X)
    for layer in range(X.shape[0]):
        Z = (X[layer].astype(np.float64) - probe._mean[layer]) / probe._scale[layer]
        reference = LogisticRegression(C=1 / (probe.best_l2_[layer] * len(y)), tol=1e-12, max_iter=100_000).fit(Z, y)
        assert np.abs(probabilities[layer] - reference.predict_proba(Z)).max() < 2e-5


def test_a_feature_constant_up_to_rounding_stays_unscaled_and_moves_nothing():
    """A dimension that is exactly zero on every input (MiniLM's last layer has some) and then moved by a few
    1e-6 has a spread of a few 1e-6: scaled to unit variance it would become a noise feature the probe uses."""
    from bertology.probing.probes import _fit_scaler

    X, y, Xdev, ydev, Xtest, ytest = _splits((600, 200, 400), seed=2)
    for F in (X, Xdev, Xtest):
        F[:, :, 0] = 0.0
    rng = np.random.default_rng(5)
    moved = [F + 3e-6 * rng.standard_normal(F.shape).astype(np.float32) for F in (X, Xdev, Xtest)]
    assert (_fit_scaler(moved[0])[1][:, 0, 0] == 1.0).all()
    a = LayerwiseProbe(device="cpu").fit(X, y, Xdev, ydev)
    b = LayerwiseProbe(device="cpu").fit(moved[0], y, moved[1], ydev)
    assert (a.predict(Xtest) == b.predict(moved[2])).all()


def test_mlp_probe_stops_on_training_loss_not_on_dev():
    X, y, Xdev, ydev = _splits((300, 100), seed=6)
    probe = LayerwiseProbe(kind="mlp", hidden=16, device="cpu", max_iter=200, stop="converged").fit(X, y, Xdev, ydev)
    again = LayerwiseProbe(kind="mlp", hidden=16, device="cpu", max_iter=200, stop="converged").fit(X, y, Xdev, ydev)
    assert probe.n_iter_ < 200  # the training loss converged before the budget
    np.testing.assert_array_equal(probe.predict(X), again.predict(X))  # deterministic for a seed
    # Dev plays no part in when it stops: other dev labels, the same stopping epoch.
    shuffled = LayerwiseProbe(kind="mlp", hidden=16, device="cpu", max_iter=200, l2=1e-3, stop="converged").fit(
        X, y, Xdev, np.random.default_rng(0).permutation(ydev))
    same = LayerwiseProbe(kind="mlp", hidden=16, device="cpu", max_iter=200, l2=1e-3, stop="converged").fit(
        X, y, Xdev, ydev)
    assert shuffled.n_iter_ == same.n_iter_


def test_bootstrap_seeds_give_the_trained_probe_a_spread_and_wider_intervals():
    from bertology.probing.labels import probe_labels

    X, y = _problem(n=900, d=8, seed=8, noise=3.0)
    spreads, widths = {}, {}
    for sampling in ("bootstrap", "all"):
        result = probe_labels(X, y, seeds=(0, 1, 2), control=False, train_sampling=sampling, device="cpu", n_boot=200,
                              probe_options={"stop": "converged"})
        summary = result["summary"]
        rows = summary[(summary.baseline == "none") & (summary.split == "test") & (summary.metric == "accuracy")]
        spreads[sampling] = rows["std"].max()
        widths[sampling] = (rows["ci_high"] - rows["ci_low"]).mean()
        assert result.meta["train_sampling"] == sampling
    assert spreads["all"] == 0  # the exact probe on the same examples: one answer
    assert spreads["bootstrap"] > 0  # resampled training sets: the training variation shows
    assert widths["bootstrap"] > widths["all"]


def test_the_point_fit_gives_the_number_and_the_bootstrap_seeds_the_spread():
    """A resample of n draws holds about 63% of the distinct examples, so on a data-hungry task (many classes,
    few examples each) bootstrap fits score below the fit on every example. The summary's number is that point
    fit (equal to a run on all examples), the seeds give its spread, and the interval is centred on it."""
    from bertology.probing.labels import probe_labels

    X, y = _problem(n=1000, d=24, classes=40, layers=1, seed=5, noise=1.2)
    splits = ["train"] * 400 + ["dev"] * 300 + ["test"] * 300
    kwargs = {"control": False, "device": "cpu", "n_boot": 300, "splits": splits, "l2": (1e-3, 1e-2)}
    boot = probe_labels(X, y, seeds=(0, 1, 2), **kwargs)
    full = probe_labels(X, y, seeds=(0,), train_sampling="all", **kwargs)

    def cell(result):
        s = result["summary"]
        return s[(s.baseline == "none") & (s.split == "test") & (s.metric == "accuracy")].iloc[0]

    ours, reference = cell(boot), cell(full)
    assert ours["mean"] == reference["mean"], "the point fit is the fit on every training example"
    assert ours["seeds_mean"] < ours["mean"] - 0.04, "bootstrap fits are biased low on a data-hungry task"
    assert ours["n_seeds"] == 3 and ours["std"] > 0
    assert ours["ci_low"] < ours["mean"] < ours["ci_high"]
    centre = (ours["ci_low"] + ours["ci_high"]) / 2
    assert abs(centre - ours["mean"]) < abs(centre - ours["seeds_mean"]), "centred on the point, not the seeds"
    assert ours["ci_high"] - ours["ci_low"] > reference["ci_high"] - reference["ci_low"], "training variation added"


def test_intervals_around_the_point_fit_are_the_hand_computation():
    from bertology.probing.summary import POINT, bootstrap_accuracies, bootstrap_intervals, centred_on_point

    rng = np.random.default_rng(0)
    hits = {POINT: rng.random((2, 50)) < 0.7, **{s: rng.random((2, 50)) < 0.6 for s in (3, 1, 2)}}
    boot = bootstrap_accuracies(np.stack([hits[POINT], hits[1], hits[2], hits[3]]), 100, seed=4)
    accuracy = boot[1:].mean(axis=-1, keepdims=True)  # each seed's accuracy: a fixed shift of the point's cloud
    by_hand = boot[0][None] + np.sqrt(3 / 2) * (accuracy - accuracy.mean(axis=0))
    np.testing.assert_allclose(centred_on_point(boot), by_hand)
    low, high = bootstrap_intervals(hits, n_boot=100, seed=4)
    pooled = np.moveaxis(by_hand, 0, -2).reshape(2, -1)
    np.testing.assert_allclose(low, np.quantile(pooled, 0.025, axis=-1))
    np.testing.assert_allclose(high, np.quantile(pooled, 0.975, axis=-1))
    np.testing.assert_allclose(centred_on_point(boot[:2]), boot[:1]), "one seed: the point fit's own cloud"


def test_bootstrap_resample_has_two_classes_and_repeats():
    from bertology.probing.experiment import _train_index

    labels = np.array([0] * 50 + [1])
    index = _train_index(0, "t", len(labels), 1.0, "bootstrap", labels)
    assert len(index) == len(labels) and len(set(index)) < len(labels)
    assert set(labels[index]) == {0, 1}
    np.testing.assert_array_equal(_train_index(0, "t", 10, 1.0, "all"), np.arange(10))
    with pytest.raises(SettingError, match="train_sampling"):
        _train_index(0, "t", 10, 1.0, "jackknife")


# ----------------------------------------------------------------------------------------------
# MDL


def _reference_codelength(X, y, dev_X, dev_y, ends, l2, order, K):
    """The online code by hand: each block's probe fitted by scipy's L-BFGS-B in float64 on the same objective
    (mean cross-entropy + l2/2 of every squared weight and bias), standardised on its prefix."""
    from scipy.optimize import minimize

    X, y = X[order], y[order]
    bits = ends[0] * math.log2(K)
    for start, end in zip(ends, ends[1:]):
        prefix = X[:start].astype(np.float64)
        mean, sd = prefix.mean(0), prefix.std(0)
        sd = np.where(sd > 1e-6, sd, 1.0)
        Z, d = (prefix - mean) / sd, X.shape[1]

        def objective(theta):
            W, b = theta[: d * K].reshape(d, K), theta[d * K:]
            logits = Z @ W + b
            logits -= logits.max(1, keepdims=True)
            logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
            p = np.exp(logp)
            onehot = np.eye(K)[y[:start]]
            loss = -(logp * onehot).sum() / start + 0.5 * l2 * (W ** 2).sum() + 0.5 * l2 * (b ** 2).sum()
            r = (p - onehot) / start
            return loss, np.concatenate([(Z.T @ r + l2 * W).ravel(), r.sum(0) + l2 * b])

        theta = minimize(objective, np.zeros(d * K + K), jac=True, method="L-BFGS-B",
                         options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 10_000}).x
        W, b = theta[: d * K].reshape(d, K), theta[d * K:]
        logits = ((X[start:end] - mean) / sd) @ W + b
        logp = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) - logits.max(1, keepdims=True)
        bits += -logp[np.arange(end - start), y[start:end]].sum() / math.log(2)
    return bits


def test_online_codelength_matches_a_hand_computation():
    from bertology.runtime import derive_seed

    X, y = _problem(n=80, d=4, classes=3, layers=1, seed=9, noise=1.0)
    Xdev, ydev = _problem(n=30, d=4, classes=3, layers=1, seed=10, noise=1.0)
    timestamps = (0.1, 0.25, 0.5, 1.0)
    code = online_codelength(X, y, Xdev, ydev, timestamps=timestamps, l2=1e-2, seed=3, device="cpu")
    ends = block_ends(timestamps, 80)
    assert code.blocks == ends == [8, 20, 40, 80]
    order = np.random.default_rng(derive_seed(3, "mdl-order")).permutation(80)
    expected = _reference_codelength(X[0], y, Xdev[0], ydev, ends, 1e-2, order, 3)
    assert code.online[0] == pytest.approx(expected, rel=1e-4)
    assert code.uniform[0] == pytest.approx(80 * math.log2(3))
    assert code.compression[0] == pytest.approx(code.uniform[0] / code.online[0])
    assert code.block_bits[0, 0] == pytest.approx(8 * math.log2(3))


def test_codelength_is_uniform_when_nothing_can_be_learned_and_shorter_when_something_can():
    # One task, its dev split drawn with it (a problem of another seed has other class centres: another task, on
    # which the dev bits would choose the strongest L2 of the grid).
    X, y = _problem(n=1100, d=6, classes=4, layers=1, seed=11, noise=0.3)
    X, y, Xdev, ydev = X[:, :1000], y[:1000], X[:, 1000:], y[1000:]
    # An enormous L2 keeps every probe at zero weights: every label costs log2 K, the online code is uniform.
    flat = online_codelength(X, y, Xdev, ydev, l2=1e6, device="cpu", timestamps=(0.1, 0.5, 1.0))
    assert flat.online[0] == pytest.approx(flat.uniform[0], rel=1e-3)
    learned = online_codelength(X, y, Xdev, ydev, device="cpu")
    shuffled = online_codelength(X, np.random.default_rng(0).permutation(y), Xdev, ydev, device="cpu")
    assert learned.compression[0] > 2 > shuffled.compression[0]
    assert len(learned.blocks) == len(DEFAULT_TIMESTAMPS)


@pytest.mark.parametrize("timestamps, message", [
    ((), "at least one"),
    ((0.5, 0.2, 1.0), "strictly increasing"),
    ((0.0, 1.0), r"in \(0, 1\]"),
    ((0.5, 1.5), r"in \(0, 1\]"),
])
def test_bad_timestamps_are_refused_in_the_spec(timestamps, message):
    with pytest.raises(SettingError, match=message):
        ProbingSpec(mdl=True, mdl_timestamps=timestamps)


def test_a_training_set_smaller_than_the_first_block_is_refused():
    X, y = _problem(n=50, d=3, layers=1)
    with pytest.raises(SettingError, match="smaller than the first block"):
        online_codelength(X, y, X, y, timestamps=(0.001, 1.0), device="cpu")


def test_the_polish_option_polishes_all_layers_none_or_the_unconverged_ones():
    """``polish=True`` (what every probing fit uses) solves each chosen value again in float64; ``False`` keeps the
    float32 optimum; ``"unconverged"`` polishes only the layers whose float32 solve stopped on the iteration cap."""
    from bertology.probing.experiment import training_fits
    from bertology.probing.probes import LayerwiseProbe
    from bertology.probing.summary import POINT

    labels = np.array([0, 1] * 20)
    assert [f.seed for f in training_fits(0, (0, 1), "t", labels, 1.0, "bootstrap")] == [0, POINT]
    X, y = _problem(n=600, d=16, classes=4, seed=3)
    data = (X[:, :400], y[:400], X[:, 400:500], y[400:500])

    def fitted(**kwargs):
        probe = LayerwiseProbe(device="cpu", **kwargs).fit(*data)
        return probe.predict_proba(X[:, 500:]), probe.n_iter_

    full, full_steps = fitted()
    bare, bare_steps = fitted(polish=False)
    assert bare_steps < full_steps, "the polish's iterations are not spent without it"
    for cap in (None, 2):  # the default cap, and a cap of 2 iterations that leaves layers unconverged
        options = {} if cap is None else {"max_iter": cap}
        polished, raw = fitted(**options)[0], fitted(polish=False, **options)[0]
        partly = fitted(polish="unconverged", **options)[0]
        # Each layer is either polished as with polish=True or left as the float32 solve gave it.
        kinds = ["polished" if np.allclose(p, q, atol=1e-7) else "raw" if np.array_equal(p, r) else "neither"
                 for p, q, r in zip(partly, polished, raw)]
        assert "neither" not in kinds, kinds
        if cap == 2:
            assert "polished" in kinds, "layers the cap left unconverged are polished"
        else:
            assert "raw" in kinds, f"layers whose float32 solve converged are not polished again: {kinds}"


def test_the_preconditioner_in_its_eigenbases_inverts_the_kronecker_curvature():
    """L-BFGS works in the preconditioner's eigenbases (``rotate``, ``scale``, ``unrotate``); turned back, a
    scaled gradient R must solve the Kronecker-factored system S R A + l2 R = G of every problem, and the
    rotation must keep dot products (all L-BFGS takes of its vectors)."""
    from bertology.probing.kronecker import _KroneckerPreconditioner

    gen = torch.Generator().manual_seed(0)
    X = torch.randn(3, 40, 6, generator=gen, dtype=torch.float64)
    p = torch.softmax(torch.randn(3, 40, 4, generator=gen, dtype=torch.float64), -1)
    l2 = torch.tensor([0.1, 0.01, 1.0], dtype=torch.float64)
    factors = _KroneckerPreconditioner(X, l2, torch.zeros_like(l2))
    factors.refresh(X, p)
    gW, gb = torch.randn(3, 6, 4, generator=gen, dtype=torch.float64), torch.randn(3, 4, generator=gen,
                                                                                 dtype=torch.float64)
    rW, _ = factors.unrotate(*factors.scale(*factors.rotate(gW, gb)))
    S = factors.U @ torch.diag_embed(factors.lam) @ factors.U.transpose(1, 2)
    A = factors.V @ torch.diag_embed(factors.alpha) @ factors.V.transpose(1, 2)
    torch.testing.assert_close(S @ rW @ A + l2[:, None, None] * rW, gW)
    qW, qb = factors.rotate(gW, gb)
    torch.testing.assert_close((qW * qW).sum((1, 2)) + (qb * qb).sum(1), (gW * gW).sum((1, 2)) + (gb * gb).sum(1))
    back_W, back_b = factors.unrotate(qW, qb)
    torch.testing.assert_close(back_W, gW)
    torch.testing.assert_close(back_b, gb)


def _both_forms(monkeypatch, X, l2, groups=1):
    """The preconditioner of ``X`` in its thin form (fewer examples than half the features) and, with the thin
    form turned off, in its full one."""
    from bertology.probing import kronecker
    from bertology.probing.kronecker import _KroneckerPreconditioner

    thin = _KroneckerPreconditioner(X, l2, torch.zeros_like(l2), groups)
    monkeypatch.setattr(kronecker, "THIN", 10**9)
    full = _KroneckerPreconditioner(X, l2, torch.zeros_like(l2), groups)
    monkeypatch.undo()
    assert thin.thin == X.shape[1] and full.thin is None
    return thin, full


def test_the_thin_preconditioner_is_the_full_one_at_n_columns(monkeypatch):
    """With fewer examples than half the features the feature factor is decomposed from the Gram matrix and
    only its (at most n) eigenvectors are kept: turned back, a scaled vector must be what the full
    decomposition gives, before and after the Hessian-diagonal correction, for every problem of a group and
    for a subset of them; and the thin rotation must keep dot products and be undone by ``unrotate``."""
    from bertology.probing.problems import _Problems

    gen = torch.Generator().manual_seed(4)
    sets, n, dim, classes, groups = 3, 12, 40, 4, 2
    X = torch.randn(sets, n, dim, generator=gen, dtype=torch.float64)
    X[1, :, 5:] = X[1, :, :1] * torch.randn(1, dim - 5, generator=gen, dtype=torch.float64)  # rank 5 < n
    y = torch.randint(0, classes, (groups, n), generator=gen)
    weights = torch.rand(groups, n, generator=gen, dtype=torch.float64)
    data = _Problems(X, y, classes, weights=weights / weights.sum(1, keepdim=True), mask_absent=True)
    P = data.size
    l2 = torch.tensor([0.1, 0.01, 1.0, 0.05, 0.2, 0.02], dtype=torch.float64)
    W = 0.3 * torch.randn(P, dim, classes, generator=gen, dtype=torch.float64)
    b = 0.3 * torch.randn(P, classes, generator=gen, dtype=torch.float64)
    zero = torch.zeros(P, dtype=torch.float64)
    _, (logp, layout) = data.loss(W, b, torch.arange(P), zero, zero, grad=False)
    prob = layout.take(logp.exp().transpose(1, 2))
    thin, full = _both_forms(monkeypatch, X, l2, groups)
    gW = torch.randn(P, dim, classes, generator=gen, dtype=torch.float64)
    gb = torch.randn(P, classes, generator=gen, dtype=torch.float64)
    subset = torch.tensor([1, 2, 3])  # the second fit of set 0, both of set 1: not every set whole
    for step in ("refresh", "correct"):
        for factors in (thin, full):
            if step == "refresh":
                factors.refresh(X, prob, weights=data.weights)
            else:
                factors.correct(X, prob, torch.arange(P), data.weights)
        for rows in (torch.arange(P), subset):  # as the Newton polish preconditions a subset of the problems
            got, want = [], []
            for factors, out in ((thin, got), (full, want)):
                qW, qb = factors.rotated_zeros(gW), torch.zeros_like(gb)
                qW[rows], qb[rows] = factors.rotate(gW[rows], gb[rows], rows)
                sW, sb = factors.scale(qW, qb)
                out += factors.unrotate(sW[rows], sb[rows], rows)
            torch.testing.assert_close(got[0], want[0])
            torch.testing.assert_close(got[1], want[1])
    qW, qb = thin.rotate(gW, gb)
    assert qW.shape == (P, n + dim, classes) and thin.rotated_zeros(gW).shape == qW.shape
    torch.testing.assert_close((qW * qW).sum((1, 2)) + (qb * qb).sum(1), (gW * gW).sum((1, 2)) + (gb * gb).sum(1))
    back_W, back_b = thin.unrotate(qW, qb)
    torch.testing.assert_close(back_W, gW)
    torch.testing.assert_close(back_b, gb)


def test_a_fit_with_fewer_examples_than_features_is_scikit_learns(monkeypatch):
    """The thin preconditioner changes how fast the solver gets to the optimum, not the optimum: on a problem
    with far fewer examples than features (where the thin form is used) the float64 solve is scikit-learn's
    LogisticRegression, and the default path (float32, L2 chosen on dev, polished) chooses the L2 values the full
    form chooses, with the same probabilities to well under a thousandth."""
    from sklearn.linear_model import LogisticRegression

    from bertology.probing import kronecker

    X, y = _problem(n=50, d=120, classes=3, layers=2, seed=5, noise=3.0)
    Z = _standardise(X).astype(np.float64)
    for l2 in (1e-1, 1e-2):
        tight = fit_multinomial(torch.from_numpy(Z), torch.from_numpy(y), 3, [l2], gtol=1e-10, max_iter=1000)
        for layer in range(Z.shape[0]):
            reference = LogisticRegression(C=1 / (l2 * len(y)), tol=1e-12, max_iter=100_000).fit(Z[layer], y)
            W, b = tight[0][layer, 0], tight[1][layer, 0]
            got = torch.softmax(torch.from_numpy(Z[layer]) @ W + b, -1).numpy()
            assert np.abs(got - reference.predict_proba(Z[layer])).max() < 1e-6
    X_dev, y_dev = _problem(n=40, d=120, classes=3, layers=2, seed=5, noise=3.0)
    Z_dev = torch.from_numpy(_standardise(X_dev)).float()

    def dev_fit(W, b, rows):
        logp = torch.log_softmax(torch.bmm(Z_dev[rows], W) + b[:, None], -1).double()
        return logp.gather(-1, torch.from_numpy(y_dev).expand(len(rows), -1).unsqueeze(-1)).squeeze(-1).mean(-1)

    grid = (1e2, 1e1, 1.0, 1e-1, 1e-2, 1e-3)
    runs = {}
    for form, thin in (("thin", 2), ("full", 10**9)):
        monkeypatch.setattr(kronecker, "THIN", thin)
        runs[form] = fit_multinomial(torch.from_numpy(Z).float(), torch.from_numpy(y), 3, grid, score=dev_fit,
                                     polish=True)
    best = runs["thin"][3].argmax(1)
    assert torch.equal(best, runs["full"][3].argmax(1))
    for layer, g in enumerate(best.tolist()):
        probabilities = [torch.softmax(torch.from_numpy(Z[layer]).float() @ run[0][layer, g] + run[1][layer, g], -1)
                         for run in (runs["thin"], runs["full"])]
        assert (probabilities[0] - probabilities[1]).abs().max() < 1e-3


def test_a_group_of_fits_on_the_same_features_gives_each_fit_its_own_optimum():
    """fit_group solves a probe's point fit, its bootstrap resamples (one lacking a class) and a control task
    (other labels, other classes, its own dev labels) side by side; each must be the probe that fitting it
    alone gives: the same classes, L2 choices and, to the solver's tolerance, the same probabilities.

    The L2 value is chosen on the dev cross-entropy of float32 solves; where two values' dev cross-entropies lie
    within 1e-3 of each other (relative) in both fits, rounding decides the choice (the group's preconditioner and
    products round differently from a fit alone's: BENCHMARKS.md, "A task's fits solved together"), so such a
    layer may choose differently, at most one layer per fit; every other layer must agree."""
    from bertology.probing.experiment import _train_index
    from bertology.probing.fits import fit_group

    X, y = _problem(n=600, d=10, classes=4, layers=3, seed=3)
    X = X + np.arange(10, dtype=np.float32) * 2.0  # off-centre features: each resample standardises its own way
    X, y, X_dev, y_dev = X[:, :400], y[:400], X[:, 400:], y[400:]
    rng = np.random.default_rng(0)
    control, control_dev = rng.choice(["a", "b", "c"], size=400), rng.choice(["a", "b", "c", "d"], size=200)
    without_class_3 = np.sort(rng.choice(np.flatnonzero(y != 3), size=400))
    problems = [(y, np.arange(400), None), (y, _train_index(1, "t", 400, 1.0), None), (y, without_class_3, None),
                (control, _train_index(1, "t", 400, 1.0), control_dev)]
    probes = [LayerwiseProbe(device="cpu", seed=k, l2=(1e-2, 1e-3, 1e-4)) for k in range(len(problems))]
    grouped = fit_group(probes, X, problems, X_dev, y_dev)
    for probe, together, (labels, index, own_dev) in zip(probes, grouped, problems):
        alone = LayerwiseProbe(**probe.get_params()).fit(X[:, index], labels[index], X_dev,
                                                         y_dev if own_dev is None else own_dev)
        assert together.classes_.tolist() == alone.classes_.tolist()
        same = together.best_l2_ == alone.best_l2_
        assert same.sum() >= len(same) - 1, (together.best_l2_, alone.best_l2_)
        for layer in np.flatnonzero(~same):
            chosen = [together.best_index_[layer], alone.best_index_[layer]]
            for fit in (together, alone):
                a, b = fit.dev_losses_[layer, chosen]
                assert abs(a - b) <= 1e-3 * min(a, b), (layer, fit.dev_losses_[layer])
        np.testing.assert_allclose(together.predict_proba(X_dev)[same], alone.predict_proba(X_dev)[same], atol=1e-5)
        np.testing.assert_array_equal(together.predict(X_dev)[same], alone.predict(X_dev)[same])
        # The same walk of the grid (each value's dev loss is the float32 solve's: only the chosen one is polished).
        np.testing.assert_array_equal(np.isfinite(together.dev_losses_), np.isfinite(alone.dev_losses_))
    assert 3 not in grouped[2].classes_.tolist()


def test_a_group_of_small_fits_gets_the_same_probes_from_the_thin_preconditioner(monkeypatch):
    """A group of fits with fewer examples than half the features (the point fit, a bootstrap resample, whose
    own standardisation makes per-feature penalties, and a control task) solved with the thin preconditioner
    must give the probes the full one gives: the same L2 choices and, to the solver's tolerance, the same dev
    probabilities."""
    from bertology.probing import kronecker
    from bertology.probing.experiment import _train_index
    from bertology.probing.fits import fit_group

    X, y = _problem(n=100, d=150, classes=3, layers=2, seed=6, noise=3.0)
    X = X + np.arange(150, dtype=np.float32) * 0.5  # off-centre: the resample standardises its own way
    X, y, X_dev, y_dev = X[:, :60], y[:60], X[:, 60:], y[60:]
    control, control_dev = np.random.default_rng(1).choice(["a", "b"], size=60), np.array(["a", "b"] * 20)
    problems = [(y, np.arange(60), None), (y, _train_index(1, "t", 60, 1.0), None),
                (control, np.arange(60), control_dev)]
    probes = [LayerwiseProbe(device="cpu", seed=k, l2=(1.0, 1e-1, 1e-2, 1e-3)) for k in range(len(problems))]
    fitted = {}
    for form, thin in (("thin", 2), ("full", 10**9)):
        monkeypatch.setattr(kronecker, "THIN", thin)
        fitted[form] = fit_group(probes, X, problems, X_dev, y_dev)
    for thin_probe, full_probe in zip(fitted["thin"], fitted["full"]):
        np.testing.assert_array_equal(thin_probe.best_l2_, full_probe.best_l2_)
        np.testing.assert_allclose(thin_probe.predict_proba(X_dev), full_probe.predict_proba(X_dev), atol=1e-4)


def test_a_group_needs_one_probe_per_fit_alike_but_for_the_seed():
    from bertology.probing.fits import fit_group

    X, y = _problem(n=50, layers=1)
    with pytest.raises(SettingError, match="one probe per problem"):
        fit_group([LayerwiseProbe()], X, [(y, np.arange(50), None)] * 2, X, y)
    with pytest.raises(SettingError, match="alike but for their seed"):
        fit_group([LayerwiseProbe(), LayerwiseProbe(l2=0.1)], X, [(y, np.arange(50), None)] * 2, X, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_products_turned_round_or_as_the_features_lie_give_the_loss_and_its_gradient(dtype, monkeypatch):
    """The solver computes each evaluation's two products turned round on the transposed features up to
    ``problems.NARROW`` columns and as the features lie beyond; both ways, for every layer or only some (a
    product per running layer), must give the loss and the closed-form gradient that autograd gives."""
    from bertology.probing import problems as module

    gen = torch.Generator().manual_seed(0)
    sets, n, dim, classes, groups = 3, 50, 7, 5, 2
    X = torch.randn(sets, n, dim, generator=gen, dtype=dtype)
    y = torch.randint(0, classes, (groups, n), generator=gen)
    weights = torch.rand(groups, n, generator=gen, dtype=dtype)
    weights = weights / weights.sum(1, keepdim=True)
    data = module._Problems(X, y, classes, weights=weights)
    for rows in (torch.arange(sets * groups), torch.tensor([0, 1, 4])):  # every layer; layers 0 and 2 only
        W = torch.randn(len(rows), dim, classes, generator=gen, dtype=dtype, requires_grad=True)
        b = torch.randn(len(rows), classes, generator=gen, dtype=dtype, requires_grad=True)
        l2 = torch.full((len(rows),), 0.1, dtype=dtype)
        bias_l2 = torch.zeros(len(rows), dtype=dtype)
        # the loss by hand: each problem's weighted cross-entropy on its layer's features, plus the L2 term
        expected = []
        for k, p in enumerate(rows.tolist()):
            logp = torch.log_softmax(X[p // groups] @ W[k] + b[k], -1)
            picked = logp.gather(-1, y[p % groups].unsqueeze(-1)).squeeze(-1)
            expected.append(-(picked * weights[p % groups]).sum() + 0.05 * W[k].pow(2).sum())
        expected = torch.stack(expected)
        want_W, want_b = torch.autograd.grad(expected.sum(), (W, b))
        for narrow in (10**6, 0):  # every product turned round; none
            monkeypatch.setattr(module, "NARROW", {torch.float32: narrow, torch.float64: narrow})
            data.layouts = module._Layouts(groups)
            loss, grad_W, grad_b, _ = data.loss(W.detach(), b.detach(), rows, l2, bias_l2)
            tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
            torch.testing.assert_close(loss, expected.detach().double(), **tolerance)
            torch.testing.assert_close(grad_W, want_W, **tolerance)
            torch.testing.assert_close(grad_b, want_b, **tolerance)


def test_the_polish_runs_past_the_solves_iteration_cap_to_its_tolerance():
    """The chosen value's polish may take more iterations than the solve's cap (``POLISH_ITER_FACTOR``): a weakly
    regularised problem stopped by the cap far from its optimum still ends at ``POLISH_GTOL``."""
    from bertology.probing.problems import _Problems
    from bertology.probing.solver import POLISH_GTOL

    X, y = _problem(n=300, seed=8, noise=3.0)
    Z = torch.from_numpy(_standardise(X)).double()  # float64: the output keeps the polish's precision
    labels = torch.from_numpy(y)
    score = lambda W, b, rows: torch.zeros(len(rows), dtype=torch.float64)  # noqa: E731 (one value: it is chosen)
    W, b, _, _ = fit_multinomial(Z, labels, 3, [1e-2], max_iter=5, score=score, polish=True)
    data = _Problems(Z, labels, 3)
    l2 = torch.full((Z.shape[0],), 1e-2, dtype=torch.float64)
    _, gW, gb, _ = data.loss(W[:, 0], b[:, 0], torch.arange(Z.shape[0]), l2, torch.zeros_like(l2))
    assert float(torch.maximum(gW.abs().amax(), gb.abs().amax())) <= POLISH_GTOL
    # The solve alone, stopped by its cap of five iterations, is far from there.
    W5, b5, _, _ = fit_multinomial(Z, labels, 3, [1e-2], max_iter=5)
    _, gW5, gb5, _ = data.loss(W5[:, 0], b5[:, 0], torch.arange(Z.shape[0]), l2, torch.zeros_like(l2))
    assert float(torch.maximum(gW5.abs().amax(), gb5.abs().amax())) > 1e3 * POLISH_GTOL


def test_a_cold_path_gets_the_iterations_to_reach_the_warm_paths_optimum(monkeypatch):
    """From zero (continuation=False) a weak L2 value needs more steps than from its neighbour's optimum: under the
    cap that suffices for the warm path, the cold one stops short unless it gets COLD_ITER_FACTOR times the steps."""
    from bertology.probing import solver

    X, y = _problem(seed=1, n=200, d=40, classes=6, noise=1.0)
    Z, labels = torch.from_numpy(_standardise(X)).double(), torch.from_numpy(y)
    grid = (1e-2, 1e-3, 1e-4, 1e-5)
    optimum, _, _, _ = fit_multinomial(Z, labels, 6, grid, gtol=1e-10, max_iter=5000)
    scale = optimum.abs().max()
    warm, _, _, _ = fit_multinomial(Z, labels, 6, grid, gtol=1e-10, max_iter=80)
    cold, _, _, _ = fit_multinomial(Z, labels, 6, grid, continuation=False, gtol=1e-10, max_iter=80)
    assert (warm - optimum).abs().max() < 1e-4 * scale and (cold - optimum).abs().max() < 1e-4 * scale
    monkeypatch.setattr(solver, "COLD_ITER_FACTOR", 1)
    capped, _, _, _ = fit_multinomial(Z, labels, 6, grid, continuation=False, gtol=1e-10, max_iter=80)
    assert (capped - optimum).abs().max() > 1e-2 * scale


def _grouped_problems(seed=0, sets=2, n=40, dim=5, classes=4, groups=2):
    """A small group in float64: resample weights, per-feature penalty weights and a class absent from one fit."""
    from bertology.probing.problems import _Problems

    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(sets, n, dim, generator=gen, dtype=torch.float64)
    y = torch.randint(0, classes, (groups, n), generator=gen)
    y[1] = torch.where(y[1] == classes - 1, 0, y[1])  # the second fit never sees the last class
    weights = torch.rand(groups, n, generator=gen, dtype=torch.float64)
    weights = weights / weights.sum(1, keepdim=True)
    penalty = 0.5 + torch.rand(sets * groups, dim, generator=gen, dtype=torch.float64)
    return _Problems(X, y, classes, weights=weights, penalty=penalty, mask_absent=True), gen


def test_the_curvature_product_is_the_hessian_of_the_loss_times_a_direction():
    """The Newton polish's conjugate gradients take Hessian products (``_Problems.curvature``) at the packed
    probabilities of an evaluation; with resample weights, penalty weights, an absent class and a subset of the
    problems they must equal autograd's Hessian-vector product of the loss."""
    data, gen = _grouped_problems()
    rows = torch.tensor([0, 1, 3])  # both fits of layer 0, the second of layer 1
    W = 0.3 * torch.randn(len(rows), data.dim, data.n_classes, generator=gen, dtype=torch.float64)
    b = 0.3 * torch.randn(len(rows), data.n_classes, generator=gen, dtype=torch.float64)
    V, vb = torch.randn_like(W), torch.randn_like(b)
    l2, bias_l2 = torch.tensor([0.1, 0.01, 0.05], dtype=torch.float64), torch.tensor([0.0, 0.02, 0.0],
                                                                                      dtype=torch.float64)
    _, (logp, _) = data.loss(W, b, rows, l2, bias_l2, grad=False)
    HV, Hb = data.curvature(V, vb, rows, l2, bias_l2, logp.exp())

    def total(W, b):
        return data.loss(W, b, rows, l2, bias_l2, grad=False)[0].sum()

    _, (want_V, want_b) = torch.autograd.functional.hvp(total, (W, b), (V, vb))
    # an absent class: its bias has no curvature from data (only the bias L2), its probability is exactly zero
    torch.testing.assert_close(HV, want_V)
    torch.testing.assert_close(Hb, want_b)


def test_the_corrected_preconditioner_is_the_hessians_diagonal_in_the_eigenbases():
    """``correct`` replaces the Kronecker eigenvalues by the exact diagonal of the Hessian in the factors'
    eigenbases (eigenvalue-corrected K-FAC): turned into those bases, autograd's Hessian of each problem must
    have ``D + l2`` (weights) and ``D_bias`` (biases) on its diagonal."""
    from bertology.probing.kronecker import _KroneckerPreconditioner

    data, gen = _grouped_problems(seed=1)
    rows = torch.arange(data.size)
    W = 0.3 * torch.randn(data.size, data.dim, data.n_classes, generator=gen, dtype=torch.float64)
    b = 0.3 * torch.randn(data.size, data.n_classes, generator=gen, dtype=torch.float64)
    l2 = torch.full((data.size,), 0.1, dtype=torch.float64)
    zero = torch.zeros_like(l2)
    _, (logp, layout) = data.loss(W, b, rows, zero, zero, grad=False)
    prob = layout.take(logp.exp().transpose(1, 2))
    factors = _KroneckerPreconditioner(data.X, l2, zero, data.groups)
    factors.refresh(data.X, prob, rows, data.weights)
    factors.correct(data.X, prob, rows, data.weights)
    d, C = data.dim, data.n_classes
    for p in range(data.size):
        one = torch.tensor([p])

        def loss(flat):  # the data term of problem p alone
            return data.loss(flat[:d * C].view(1, d, C), flat[d * C:].view(1, C), one, zero[:1], zero[:1],
                             grad=False)[0].sum()

        H = torch.autograd.functional.hessian(loss, torch.cat([W[p].reshape(-1), b[p]]))
        U, V = factors.U[p // data.groups], factors.V[p]
        basis = torch.kron(U, V)  # vec(U^T W V) in row-major vec(W): U (x) V
        weights_diagonal = torch.diagonal(basis.T @ H[:d * C, :d * C] @ basis).view(d, C)
        torch.testing.assert_close(weights_diagonal, factors.D[p])
        torch.testing.assert_close(torch.diagonal(V.T @ H[d * C:, d * C:] @ V), factors.D_bias[p])
    # scale divides by that diagonal plus the L2 term
    qW, qb = torch.ones_like(W), torch.zeros_like(b)
    torch.testing.assert_close(factors.scale(qW, qb)[0], 1 / (factors.D + 0.1))


def test_the_newton_polish_reaches_the_optimum_of_every_fit_of_a_group():
    """From a rough start the Newton polish must end each problem of a group (weights, penalties, an absent
    class, a penalised bias) at the optimum: a largest gradient entry of at most ``POLISH_GTOL``, the optimum a
    long L-BFGS solve in float64 reaches; a problem not asked for stays where it was."""
    from bertology.probing.solver import POLISH_GTOL, _lbfgs, polish_multinomial

    data, gen = _grouped_problems(seed=2, n=60)
    P = data.size
    l2 = torch.tensor([0.05, 0.01, 0.02, 0.001], dtype=torch.float64)
    W0 = 0.1 * torch.randn(P, data.dim, data.n_classes, generator=gen, dtype=torch.float64)
    b0 = torch.zeros(P, data.n_classes, dtype=torch.float64)
    active = torch.tensor([True, True, True, False])
    W, b, products = polish_multinomial(data, l2, W0, b0, bias_l2=True, active=active)
    assert products > 0
    rows = torch.arange(3)
    _, gW, gb, _ = data.loss(W[:3], b[:3], rows, l2[:3], l2[:3])
    assert float(torch.maximum(gW.abs().amax(), gb.abs().amax())) <= POLISH_GTOL
    want_W, want_b, _, _, _ = _lbfgs(data, l2, W0, b0, bias_l2=l2, gtol=1e-11, max_iter=5000, active=active)
    torch.testing.assert_close(W[:3], want_W[:3], atol=1e-7, rtol=0)
    torch.testing.assert_close(b[:3], want_b[:3], atol=1e-7, rtol=0)
    assert torch.equal(W[3], W0[3]) and torch.equal(b[3], b0[3])
