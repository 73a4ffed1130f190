"""Array-level tests of the batched layer-wise probes, on planted signals."""

import numpy as np
import pytest

from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from bertology.errors import DataError, SettingError
from bertology.probing.controls import ControlTask
from bertology.probing.probes import LayerwiseProbe, ScalarMixProbe

N_LAYERS, DIM, N_CLASSES = 4, 16, 3


def planted(n, k, rng, centers, strength=2.0):
    """Features [N_LAYERS, n, DIM] of pure noise, except layer k, which adds the label's centre."""
    y = rng.integers(0, N_CLASSES, n)
    X = rng.normal(size=(N_LAYERS, n, DIM)).astype(np.float32)
    X[k] += strength * centers[y]
    return X, y


@pytest.fixture(scope="module")
def planted_splits():
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(N_CLASSES, DIM))
    return {split: planted(n, 2, rng, centers) for split, n in (("train", 600), ("dev", 300), ("test", 300))}


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_probe_finds_the_planted_layer_and_is_at_chance_elsewhere(planted_splits, kind):
    (Xtr, ytr), (Xdv, ydv), (Xte, yte) = planted_splits["train"], planted_splits["dev"], planted_splits["test"]
    probe = LayerwiseProbe(kind=kind, seed=0, device="cpu").fit(Xtr, ytr, Xdv, ydv)
    scores = probe.score_layers(Xte, yte)
    assert scores.shape == (N_LAYERS,)
    # score: one float, the accuracy of the layer chosen on dev (the planted one)
    assert probe.best_layer_index_ == 2
    assert isinstance(probe.score(Xte, yte), float) and probe.score(Xte, yte) == pytest.approx(scores[2])
    assert int(np.argmax(scores)) == 2
    assert scores[2] > 0.9
    chance = 1 / N_CLASSES
    for layer in (0, 1, 3):
        assert abs(scores[layer] - chance) < 0.1, (layer, scores)
    # The selected L2 is the per-layer best dev score (the exact linear probe's: the lowest dev cross-entropy;
    # the MLP's: the best dev accuracy): selection never sees test.
    assert probe.dev_scores_.shape == (N_LAYERS, len(probe.l2_grid_))
    chosen = probe.dev_losses_.argmin(1) if kind == "linear" else probe.dev_scores_.argmax(1)
    np.testing.assert_array_equal(probe.best_l2_, np.asarray(probe.l2_grid_)[chosen])
    predictions = probe.predict(Xte)
    assert predictions.shape == (N_LAYERS, len(yte))
    np.testing.assert_allclose((predictions == yte).mean(1), scores)


def test_scalar_mix_puts_its_weight_on_the_planted_layer(planted_splits):
    (Xtr, ytr), (Xdv, ydv), (Xte, yte) = planted_splits["train"], planted_splits["dev"], planted_splits["test"]
    mix = ScalarMixProbe(seed=0).fit(Xtr, ytr, Xdv, ydv)
    assert mix.layer_weights_.shape == (N_LAYERS,)
    assert np.isclose(mix.layer_weights_.sum(), 1.0, atol=1e-5)
    assert int(np.argmax(mix.layer_weights_)) == 2
    assert mix.layer_weights_[2] > 0.6
    assert mix.score(Xte, yte) > 0.9


def test_selectivity_separates_a_label_layer_from_a_memorising_layer():
    """Layer 1 encodes word identity (so it solves task and control alike: low selectivity); layer 2
    encodes only the task label (control at chance: high selectivity); layers 0 and 3 are noise."""
    rng = np.random.default_rng(1)
    n_types, dim = 40, 64
    type_label = rng.integers(0, N_CLASSES, n_types)
    type_vectors = rng.normal(size=(n_types, dim)) * 3
    centers = rng.normal(size=(N_CLASSES, dim)) * 3
    control = ControlTask(type_label[rng.integers(0, n_types, 1000)], seed=5)

    def split(n):
        types = rng.integers(0, n_types, n)
        y = type_label[types]
        X = rng.normal(size=(4, n, dim)).astype(np.float32)
        X[1] += type_vectors[types]
        X[2] += centers[y]
        return X, y, control.labels([f"w{t}" for t in types])

    (Xtr, ytr, ctr), (Xdv, ydv, cdv), (Xte, yte, cte) = split(800), split(300), split(300)
    task = LayerwiseProbe(seed=0).fit(Xtr, ytr, Xdv, ydv).score_layers(Xte, yte)
    ctrl = LayerwiseProbe(seed=0).fit(Xtr, ctr, Xdv, cdv).score_layers(Xte, cte)
    selectivity = task - ctrl
    assert task[1] > 0.9 and task[2] > 0.9
    assert ctrl[1] > 0.9  # memorising word identity solves the control task too
    assert ctrl[2] < ctrl[1] - 0.3  # the label-only layer cannot
    assert selectivity[2] > selectivity[1] + 0.3
    assert abs(selectivity[0]) < 0.15 and abs(selectivity[3]) < 0.15


def test_same_seed_reproduces_and_other_seeds_differ(planted_splits):
    (Xtr, ytr), (Xdv, ydv), (Xte, _) = planted_splits["train"], planted_splits["dev"], planted_splits["test"]
    a = LayerwiseProbe(kind="mlp", seed=3).fit(Xtr, ytr, Xdv, ydv)
    b = LayerwiseProbe(kind="mlp", seed=3).fit(Xtr, ytr, Xdv, ydv)
    c = LayerwiseProbe(kind="mlp", seed=4).fit(Xtr, ytr, Xdv, ydv)
    np.testing.assert_array_equal(a.predict_proba(Xte), b.predict_proba(Xte))
    assert not np.allclose(a.predict_proba(Xte), c.predict_proba(Xte))


def test_string_labels_and_labels_unseen_in_training_count_as_wrong(planted_splits):
    (Xtr, ytr), (Xdv, ydv), (Xte, yte) = planted_splits["train"], planted_splits["dev"], planted_splits["test"]
    names = np.array(["ADJ", "NOUN", "VERB"], dtype=object)
    probe = LayerwiseProbe(seed=0).fit(Xtr, names[ytr], Xdv, names[ydv])
    assert set(probe.classes_) == {"ADJ", "NOUN", "VERB"}
    full = probe.score_layers(Xte, names[yte])[2]
    relabelled = names[yte].copy()
    relabelled[:100] = "X"  # a tag the probe never saw
    predicted = probe.predict(Xte)[2]
    assert not (predicted == "X").any()
    assert probe.score_layers(Xte, relabelled)[2] == pytest.approx((predicted == relabelled).mean())
    assert probe.score_layers(Xte, relabelled)[2] < full - 0.2


def test_single_layer_input_and_list_of_layers():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 8)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    probe = LayerwiseProbe().fit(X, y)  # no dev given: 10% of train is held out
    assert probe.score_layers(X, y).shape == (1,)
    assert probe.score(X, y) > 0.9
    # One [n, dim] layer is a plain scikit-learn classifier: predictions [n], probabilities [n, C].
    assert probe.predict(X).shape == (200,) and probe.predict_proba(X).shape == (200, 2)
    listed = LayerwiseProbe().fit([X, X], y)
    assert listed.n_layers_ == 2 and listed.predict([X, X]).shape == (2, 200)
    with pytest.raises(DataError, match="fitted on 2 layers"):
        listed.predict(X)


def test_bad_input_raises_data_error():
    X = np.zeros((2, 10, 4), dtype=np.float32)
    with pytest.raises(DataError, match="one label per example"):
        LayerwiseProbe().fit(X, np.zeros(9))
    with pytest.raises(DataError, match="one class"):
        LayerwiseProbe().fit(X, np.zeros(10), X, np.zeros(10))
    with pytest.raises(SettingError, match="kind"):
        LayerwiseProbe(kind="svm").fit(X, np.arange(10) % 2, X, np.arange(10) % 2)
    with pytest.raises(SettingError, match="l2"):
        LayerwiseProbe(l2=(-1.0,)).fit(X, np.arange(10) % 2, X, np.arange(10) % 2)
    with pytest.raises(DataError, match="NaN"):
        LayerwiseProbe().fit(np.full((2, 10, 4), np.nan), np.arange(10) % 2)
    with pytest.raises(NotFittedError):
        LayerwiseProbe().score(X, np.zeros(10))
    with pytest.raises(NotFittedError):
        ScalarMixProbe().predict(X)
    fitted = LayerwiseProbe().fit(X + np.random.default_rng(0).normal(size=X.shape), np.arange(10) % 2)
    with pytest.raises(DataError, match="fitted on 2 layers"):
        fitted.score(np.zeros((3, 10, 4)), np.zeros(10))


def test_closed_form_gradient_matches_autograd():
    import torch

    from bertology.probing.trainer import _linear_loss_and_grad, _nll_per_problem, _weight_penalty

    generator = torch.Generator().manual_seed(0)
    L, G, n, d, C = 3, 2, 50, 8, 5
    X = torch.randn(L, n, d, generator=generator)
    y = torch.randint(0, C, (n,), generator=generator)
    W = torch.randn(L, G, d, C, generator=generator, requires_grad=True)
    b = torch.randn(L, G, C, generator=generator, requires_grad=True)
    l2 = torch.tensor([1e-2, 1e-1]).expand(L, G)
    logits = torch.einsum("lnd,lgdc->lgnc", X, W) + b.unsqueeze(-2)
    loss = (_nll_per_problem(logits, y) + _weight_penalty(l2)({"W": W, "b": b})).sum()
    loss.backward()
    with torch.no_grad():
        closed, grads = _linear_loss_and_grad(l2)({"W": W, "b": b}, X, y)
    assert float(closed) == pytest.approx(float(loss.detach()), rel=1e-6)
    torch.testing.assert_close(grads["W"], W.grad, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grads["b"], b.grad, atol=1e-6, rtol=1e-5)


@parametrize_with_checks([LayerwiseProbe(device="cpu"), LayerwiseProbe(kind="mlp", device="cpu"),
                          ScalarMixProbe(device="cpu")])
def test_scikit_learn_estimator_checks(estimator, check):
    """scikit-learn's own conformance checks, on the single-layer view (``X`` of shape ``[n, dim]``), where the
    probes are ordinary classifiers. Every check runs; only ``check_array_api_input`` skips itself (the
    probes compute in torch, not through the array API)."""
    check(estimator)


def test_get_params_clone_and_set_params_on_the_layered_probe(planted_splits):
    (Xtr, ytr), (Xdv, ydv), (Xte, yte) = planted_splits["train"], planted_splits["dev"], planted_splits["test"]
    probe = LayerwiseProbe(kind="linear", l2=(1e-3,), seed=4, device="cpu")
    assert probe.get_params()["l2"] == (1e-3,) and probe.get_params()["seed"] == 4
    fitted = probe.fit(Xtr, ytr, Xdv, ydv)
    assert fitted is probe
    copy = clone(fitted)
    assert copy.get_params() == fitted.get_params() and not hasattr(copy, "classes_")
    copy.set_params(seed=5, l2=(1e-2,))
    assert copy.seed == 5 and copy.l2 == (1e-2,)
    np.testing.assert_allclose(copy.fit(Xtr, ytr, Xdv, ydv).score_layers(Xte, yte)[2],
                               fitted.score_layers(Xte, yte)[2], atol=0.05)


def test_probe_fits_after_torch_set_num_threads():
    """The torch 2.13 CPU wheel's LU solve fails after ``torch.set_num_threads(n > 1)`` (MKL 2024.2); the ridge
    start of the L-BFGS probe must not depend on it (a benchmark or user setting threads crashed the probe)."""
    import torch

    rng = np.random.default_rng(0)
    X = rng.standard_normal((3, 400, 384)).astype(np.float32)
    y = (X[1, :, 0] > 0).astype(int)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        probe = LayerwiseProbe(kind="linear", seed=0).fit(X, y, X[:, :100], y[:100])
    finally:
        torch.set_num_threads(before)
    assert probe.score_layers(X[:, :100], y[:100])[1] > 0.9


def test_converged_probe_is_scikit_learns_logistic_regression():
    """``stop="converged"`` keeps the optimum of the penalised loss, which scikit-learn's lbfgs logistic
    regression also finds (C = 1 / (l2 * n); three classes, so both are multinomial with every class's
    weights penalised); the early-stopped default keeps a best-on-dev checkpoint."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    X = rng.standard_normal((1, 600, 20)).astype(np.float32)
    y = (X[0] @ rng.standard_normal((20, 3)) + rng.standard_normal((600, 3))).argmax(1)
    train, dev = slice(0, 400), slice(400, 600)
    l2 = 0.01
    probe = LayerwiseProbe(kind="linear", l2=[l2], stop="converged", device="cpu").fit(
        X[:, train], y[train], X[:, dev], y[dev])
    mean, scale = X[0, train].mean(0), X[0, train].std(0)
    reference = LogisticRegression(C=1.0 / (l2 * 400), tol=1e-8, max_iter=5000).fit((X[0, train] - mean) / scale, y[train])
    ours = probe.predict_proba(X[:, dev])[0]
    theirs = reference.predict_proba((X[0, dev] - mean) / scale)
    assert np.abs(ours - theirs).max() < 2e-4
    with pytest.raises(SettingError, match="stop"):
        LayerwiseProbe(stop="late", device="cpu").fit(X[:, train], y[train], X[:, dev], y[dev])
