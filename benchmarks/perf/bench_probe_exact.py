"""The exact linear probe (the default) against the early-stopped one it replaced and scikit-learn, per task.

For each task, on MiniLM's features of UD English EWT (as ``bertology probe`` builds them), every layer:

* **path**: the largest change of any layer's test accuracy (points) when every feature of every split moves by
  ``--noise`` (1e-6, Gaussian: what another batch composition in extraction or another linear-algebra routine
  does), and when the probe starts elsewhere (each L2 value from zero instead of from its stronger neighbour);
  for the exact probe and for the early-stopped one (``stop="early"``, the former default);
* **scikit-learn**: the largest distance of a layer's test accuracy from ``LogisticRegression`` (lbfgs, at our
  gradient tolerance) on the same standardised features and training examples, with the L2 chosen per layer on
  dev from the same grid by the same rule (walked from the strongest value, warm-started, while the dev
  cross-entropy falls; the chosen value refitted to our float64 polish tolerance). The penalties match exactly: C = 1 / (l2 n) for K > 2 classes; for two classes
  scikit-learn fits one weight vector w = w_1 - w_0, whose penalty is twice ours, so C = 2 / (l2 n);
* **grid**: the exact probe on the default grid (1e-5 .. 1e3, walked from 1e-2) against the same probe on the
  former grid (1e-5 .. 1e-2): how many layers chose the former grid's strong end, what they choose now, and the
  change of every layer's test accuracy;
* **speed**: seconds to fit all layers and L2 values, ours (exact and early; the faster of two runs each) and
  scikit-learn fitting the same layers one by one, in the same process, one thread.

Features come from the cache folder (extracted on first use). Stored as ``benchmarks/results/<--name>.json``:

    BERTOLOGY_DATA=../shared/data .venv/bin/python -m benchmarks.perf.bench_probe_exact \\
        --tasks upos,bigram_shift,top_constituents --max-train 4000 --cache DIR
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from benchmarks.stored import save_run, table

from bertology.probing.probes import standard_scale

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = ("the early-stopped probe the exact one replaced, and scikit-learn LogisticRegression per layer, on "
            "the same features")


def load_features(tasks: list[str], cache: Path, max_train: int | None):
    from bertology.data import shared_data_dir
    from bertology.models import load_encoder
    from bertology.probing.datasets import SPLITS
    from bertology.probing.inputs import _extract_pools, _features_for, load_datasets, merge_pools

    datasets = load_datasets(tasks, shared_data_dir() / "ud_english_ewt", cache_dir=cache)
    encoder = load_encoder("minilm", device="cpu")
    stores = _extract_pools(encoder, merge_pools(datasets), None, cache, False, "cpu")
    layers = list(next(iter(stores.values())).layers)
    features = _features_for(datasets, stores, layers)
    for dataset in datasets:
        X = {s: np.asarray(features[dataset.name, s]) for s in SPLITS}
        y = {s: np.asarray(dataset.splits[s].labels).astype(str) for s in SPLITS}
        if max_train is not None and X["train"].shape[1] > max_train:
            X["train"], y["train"] = X["train"][:, :max_train], y["train"][:max_train]
        yield dataset.name, X, y, layers


def sklearn_layers(X: dict, y: dict, grid, refit: str = "warm") -> tuple[np.ndarray, float]:
    """scikit-learn's logistic regression per layer, by the same rule as ours: the grid walked from the value
    nearest ``PATH_START`` (stronger first, then weaker when the first stronger value is no better), warm-started,
    while the dev cross-entropy falls, at the same gradient tolerance (``tol`` is lbfgs's
    largest gradient entry of the mean loss, as our ``gtol``); the chosen value refitted to our polish tolerance,
    from the path's solution (``refit="warm"``) or from zero (``"cold"``: scipy's L-BFGS-B also stops when the
    loss changes by less than 64 machine epsilons, which a warm start at a weak L2 meets after a few
    iterations, short of the gradient tolerance). Test accuracy per layer, and seconds."""
    import copy

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss

    from bertology.probing.solver import GTOL, POLISH_GTOL, path_start

    n_layers, n = X["train"].shape[:2]
    binary = len(np.unique(y["train"])) == 2
    known = np.isin(y["dev"], np.unique(y["train"]))  # as ours: unseen dev labels have no term in the loss
    test, start = [], time.perf_counter()
    for layer in range(n_layers):
        mean, scale = X["train"][layer].mean(0), X["train"][layer].std(0)
        scale = standard_scale(scale[None])[0]
        Z = {s: (X[s][layer] - mean) / scale for s in X}
        values = sorted(grid, reverse=True)  # strongest first, as ours
        first = path_start(values)

        def solve(model, l2):
            model.set_params(C=(2.0 if binary else 1.0) / (l2 * n)).fit(Z["train"], y["train"])
            return log_loss(y["dev"][known], model.predict_proba(Z["dev"][known]), labels=model.classes_), model

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            # Ours: from the value nearest PATH_START towards stronger values while the dev cross-entropy falls;
            # if the first stronger value does not lower it, towards weaker ones from the first value's solution.
            best = solve(LogisticRegression(tol=GTOL, max_iter=1000, warm_start=True), values[first])
            best = (best[0], copy.deepcopy(best[1]))
            start_model = copy.deepcopy(best[1])
            for direction in (-1, 1):
                model, improved = copy.deepcopy(start_model), False
                g = first + direction
                while 0 <= g < len(values):
                    dev, model = solve(model, values[g])
                    if dev >= best[0]:
                        if dev == best[0] and direction < 0:  # ties go to the stronger value, as ours
                            best = (dev, copy.deepcopy(model))
                        break
                    best, improved = (dev, copy.deepcopy(model)), True
                    g += direction
                if improved:
                    break
            chosen = (best[1].set_params(tol=POLISH_GTOL) if refit == "warm" else
                      LogisticRegression(C=best[1].C, tol=POLISH_GTOL, max_iter=1000)).fit(Z["train"], y["train"])
        test.append(chosen.score(Z["test"], y["test"]))
    return np.asarray(test), time.perf_counter() - start


def ours(X: dict, y: dict, stop: str, warm_start: bool = True, l2=None, chosen: list | None = None
         ) -> tuple[np.ndarray, float, int]:
    """Test accuracy per layer, seconds and iterations of our probe (``l2``: its grid, ``None`` the default);
    the L2 each layer chose is appended to ``chosen`` when given."""
    from bertology.probing.probes import LayerwiseProbe

    start = time.perf_counter()
    probe = LayerwiseProbe(stop=stop, device="cpu", warm_start=warm_start, l2=l2).fit(X["train"], y["train"],
                                                                                      X["dev"], y["dev"])
    seconds = time.perf_counter() - start
    if chosen is not None:
        chosen.append(probe.best_l2_.tolist())
    return probe.score_layers(X["test"], y["test"]), seconds, probe.n_iter_


def _span(values) -> str:
    """The L2 values layers chose, as a range: ``1e-2`` or ``1e-3 .. 1e-1``."""
    low, high = min(values), max(values)
    return f"{low:.0e}" if low == high else f"{low:.0e} .. {high:.0e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="upos,bigram_shift,top_constituents")
    parser.add_argument("--max-train", type=int, default=None, help="cap on training examples per task")
    parser.add_argument("--noise", type=float, default=1e-6)
    parser.add_argument("--cache", default=None, help="cache folder (default: a temporary one)")
    parser.add_argument("--sklearn-refit", choices=("warm", "cold"), default="warm",
                        help="scikit-learn's chosen value refitted from its path's solution or from zero")
    parser.add_argument("--name", default="probe_exact_minilm_cpu")
    args = parser.parse_args()
    import torch

    from bertology.probing.probes import DEFAULT_L2, TRAINED_L2
    from bertology.tasks import TABLE2_COLUMNS

    torch.set_num_threads(1)
    cache = Path(args.cache or tempfile.mkdtemp(prefix="bench-probe-exact-"))
    rows_path, rows_sklearn, rows_speed, rows_grid, raw = [], [], [], [], {"noise": args.noise, "sklearn_refit": args.sklearn_refit,
                                                            "load_average_before": os.getloadavg()}
    for task, X, y, layers in load_features(args.tasks.split(","), cache, args.max_train):
        rng = np.random.default_rng(1)
        shifted = {s: X[s] + args.noise * rng.standard_normal(X[s].shape).astype(np.float32) for s in X}
        # Each probe is timed twice (the features and the shifted features: the same work) and the faster run
        # kept, so that a burst of load on a shared machine does not decide the comparison.
        early, early_s, _ = ours(X, y, "early")
        chosen: list = []
        exact, exact_s, exact_iter = ours(X, y, "converged", chosen=chosen)
        # The exact probe on the former grid (1e-5 .. 1e-2, TRAINED_L2), as the default was before the grid grew.
        former, former_s, _ = ours(X, y, "converged", l2=TRAINED_L2, chosen=chosen)
        early_shift, early_s2, _ = ours(shifted, y, "early")
        exact_shift, exact_s2, _ = ours(shifted, y, "converged")
        early_s, exact_s = min(early_s, early_s2), min(exact_s, exact_s2)
        exact_cold, _, _ = ours(X, y, "converged", warm_start=False)
        reference, sklearn_s = sklearn_layers(X, y, DEFAULT_L2, refit=args.sklearn_refit)
        n_test = X["test"].shape[1]
        record = {
            "layers": layers, "n_train": int(X["train"].shape[1]), "n_test": n_test,
            "exact": exact.tolist(), "exact_shifted": exact_shift.tolist(), "exact_other_start": exact_cold.tolist(),
            "early": early.tolist(), "early_shifted": early_shift.tolist(), "sklearn": reference.tolist(),
            "seconds": {"exact": exact_s, "early": early_s, "sklearn": sklearn_s, "exact_former_grid": former_s},
            "exact_iterations": exact_iter, "exact_former_grid": former.tolist(), "l2": chosen[0],
            "l2_former_grid": chosen[1],
        }
        raw[task] = record
        gap = lambda a, b: 100 * float(np.abs(np.asarray(a) - np.asarray(b)).max())  # noqa: E731
        one = 100 / n_test
        name = TABLE2_COLUMNS.get(task, task)
        rows_path.append([name, f"{n_test:,}", f"{one:.2f}", f"{gap(early, early_shift):.2f}",
                          f"{gap(exact, exact_shift):.2f}", f"{gap(exact, exact_cold):.2f}"])
        rows_sklearn.append([name, f"{record['n_train']:,}", f"{gap(early, reference):.2f}", f"{gap(exact, reference):.2f}"])
        rows_speed.append([name, f"{len(layers)} x {len(DEFAULT_L2)} / {len(TRAINED_L2)}", f"{early_s:.1f}", f"{exact_s:.1f}",
                           f"{exact_s / early_s:.2f}", f"{sklearn_s:.1f}", f"{sklearn_s / exact_s:.1f}x"])
        ends = sum(v == max(TRAINED_L2) for v in chosen[1])
        rows_grid.append([name, f"{ends} of {len(layers)}", _span(chosen[0]),
                          f"{100 * float(np.mean(exact - former)):+.2f}", f"{100 * float(np.max(exact - former)):+.2f}",
                          f"{100 * float(np.min(exact - former)):+.2f}", f"{former_s:.1f}", f"{exact_s:.1f}"])
        print(task, rows_path[-1], rows_sklearn[-1], rows_speed[-1], rows_grid[-1], flush=True)
    raw["load_average_after"] = os.getloadavg()
    save_run(args.name, argv=sys.argv, raw=raw, cpu_capability=torch.backends.cpu.get_cpu_capability(), tables={
        "path": table(["task", "test examples", "one example (points)", "early: features +1e-6",
                       "exact: features +1e-6", "exact: another start"], rows_path),
        "sklearn": table(["task", "train examples", "early vs scikit-learn", "exact vs scikit-learn"], rows_sklearn),
        "grid": table(["task", "layers at the former grid's strong end (1e-2)", "L2 chosen now",
                       "test accuracy, now - former (mean of layers, points)", "largest rise", "largest fall",
                       "former grid (s)", "now (s)"], rows_grid),
        "speed": table(["task", "layers x L2 (exact / early)", "early (s)", "exact (s)", "exact / early",
                        "scikit-learn, layer by layer (s)", "exact vs scikit-learn"], rows_speed),
    })


if __name__ == "__main__":
    main()
