"""The probe benchmarks' own machinery on a tiny problem: scripts run only by hand broke unnoticed before
(``bench_probe_parts.py`` recorded the solver's calls by a signature the solver had left)."""

from __future__ import annotations

import numpy as np


def _task(seed=0, sizes=(400, 150, 300), d=10, classes=3, layers=2):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, d))
    y = rng.integers(0, classes, size=sum(sizes))
    X = np.stack([centres[y] * (1 + l) + 2.0 * rng.normal(size=(len(y), d)) for l in range(layers)]).astype(np.float32)
    cuts = np.cumsum((0, *sizes))
    names = ("train", "dev", "test")
    return ({s: X[:, a:b] for s, a, b in zip(names, cuts[:-1], cuts[1:])},
            {s: y[a:b].astype(str) for s, a, b in zip(names, cuts[:-1], cuts[1:])})


def test_the_parts_benchmark_records_every_solve_and_the_polish():
    from benchmarks.perf.bench_probe_parts import recorded_fit

    X, y = _task()
    seconds, calls = recorded_fit(X, y)
    solves = [c for c in calls if c["precision"] == "float32"]
    polish = [c for c in calls if c["precision"] == "float64 polish"]
    assert len(solves) >= 2 and len(polish) == 1  # the path's start and a neighbour; one polish of the chosen values
    assert all(c["iterations"] > 0 and c["layers"] >= 1 and c["l2"] for c in calls)
    assert solves[0]["l2"] == [0.01]  # the walk starts at PATH_START
    assert sum(c["seconds"] for c in calls) <= seconds


def test_the_defaults_scikit_learn_column_follows_our_rule():
    """probe_defaults' scikit-learn column (the walk by dev cross-entropy, C = 2 / (l2 n) for two classes) gives
    ours to a test example or two on every layer, for two and for three classes."""
    from benchmarks.experiments.probing.probe_defaults import sklearn_per_layer

    from bertology.probing.probes import DEFAULT_L2, LayerwiseProbe

    for classes in (2, 3):
        X, y = _task(seed=classes, classes=classes)
        ours = LayerwiseProbe(device="cpu").fit(X["train"], y["train"], X["dev"], y["dev"]).score_layers(
            X["test"], y["test"])
        theirs = sklearn_per_layer(X, y, DEFAULT_L2)
        assert np.abs(np.asarray(ours) - theirs).max() <= 2 / len(y["test"])


def test_the_tolerance_benchmark_compares_each_tolerance_with_the_first():
    """bench_probe_gtol's table: the first tolerance is the reference (nothing moved from itself), and a fit at
    another tolerance records what it chose and scored, so a change of L2 or accuracy shows in its row."""
    from benchmarks.perf.bench_probe_gtol import fit, published

    X, y = _task(seed=3)
    shifted = {s: X[s] + np.float32(1e-6) for s in X}
    record = {"early": [fit(X, y, stop="early"), fit(shifted, y, stop="early")], "exact": {}}
    for gtol in (1e-6, 1e-3):
        record["exact"][repr(gtol)] = [fit(X, y, gtol=gtol), fit(shifted, y, gtol=gtol)]
    base = record["exact"][repr(1e-6)][0]
    assert len(base["l2"]) == len(base["test"]) == 2 and base["iterations"] > 0
    # A planted change of one layer's choice and accuracy must appear in the table.
    planted = record["exact"][repr(1e-3)][0]
    planted["l2"] = [base["l2"][0] * 10, base["l2"][1]]
    planted["test"] = [base["test"][0] + 0.01, base["test"][1]]
    rows = published({"upos": record}, [1e-6, 1e-3])["gtol"]["rows"]
    assert rows[0][4] == "0 of 2" and rows[0][5] == "0.00"
    assert rows[1][4] == "1 of 2" and rows[1][5] == "1.00"
