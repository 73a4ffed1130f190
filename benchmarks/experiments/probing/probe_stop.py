"""How the linear probe's stopping rule moves its numbers: early stopping on dev (the default) vs training to
convergence (``LayerwiseProbe(stop="converged")``), on MiniLM's SentEval tasks from EWT (the default pooled split).

Per task and rule: test accuracy per layer (L2 chosen per layer on dev), the fit's seconds, the largest change
of any layer's test accuracy when every feature moves by 1e-5 (Gaussian; what a different batch composition in
extraction or a different linear-algebra routine does), and the largest distance to scikit-learn's
``LogisticRegression`` on the same standardised features (C = 1 / (l2 * n_train), L2 chosen on dev, as
``probe_defaults.py``; for a binary task scikit-learn's single weight vector makes that C twice as strong
as our two penalised class vectors, so part of the distance on binary tasks is this mapping, not the fit).
One seed, the trained model only. Stored as ``benchmarks/results/<--name>.json``:

    BERTOLOGY_DATA=../shared/data PYTHONPATH=src .venv/bin/python -m benchmarks.experiments.probing.probe_stop \\
        [--tasks bigram_shift,top_constituents] [--cache DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchmarks.experiments.probing.probe_defaults import sklearn_per_layer
from benchmarks.stored import save_run, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="bigram_shift,top_constituents")
    parser.add_argument("--cache", default=None, help="cache folder (default: a temporary one)")
    parser.add_argument("--noise", type=float, default=1e-5)
    parser.add_argument("--name", default="probe_stop_minilm_cpu")
    args = parser.parse_args()
    from bertology.data import shared_data_dir
    from bertology.models import load_encoder
    from bertology.probing.datasets import SPLITS
    from bertology.probing.inputs import _extract_pools, _features_for, load_datasets, merge_pools
    from bertology.probing.probes import DEFAULT_L2, LayerwiseProbe
    from bertology.probing.trainer import STOP_RULES
    from bertology.tasks import TABLE2_COLUMNS

    cache = Path(args.cache or tempfile.mkdtemp(prefix="bench-probe-stop-"))
    tasks = args.tasks.split(",")
    datasets = load_datasets(tasks, shared_data_dir() / "ud_english_ewt", cache_dir=cache)
    encoder = load_encoder("minilm", device="cpu")
    stores = _extract_pools(encoder, merge_pools(datasets), None, cache, False, "cpu")
    layers = list(next(iter(stores.values())).layers)
    features = _features_for(datasets, stores, layers)
    rows, raw = [], {"noise": args.noise, "layers": layers}
    for dataset in datasets:
        task = dataset.name
        X = {s: np.asarray(features[task, s]) for s in SPLITS}
        y = {s: dataset.splits[s].labels.astype(str) for s in SPLITS}
        shifted = {s: X[s] + args.noise * np.random.default_rng(1).standard_normal(X[s].shape).astype(np.float32)
                   for s in SPLITS}
        reference, _ = sklearn_per_layer(X, y, DEFAULT_L2)
        raw[task] = {"sklearn": reference.tolist()}
        for stop in STOP_RULES:
            results = []
            for inputs in (X, shifted):
                started = time.perf_counter()
                probe = LayerwiseProbe(stop=stop, device="cpu", seed=0).fit(inputs["train"], y["train"],
                                                                            inputs["dev"], y["dev"])
                results.append((probe.score_layers(inputs["test"], y["test"]), time.perf_counter() - started))
            (accuracy, seconds), (moved, _) = results
            gap, distance = float(np.abs(accuracy - moved).max()), float(np.abs(accuracy - reference).max())
            raw[task][stop] = {"test": accuracy.tolist(), "shifted_test": moved.tolist(), "seconds": seconds}
            rows.append([TABLE2_COLUMNS.get(task, task), stop, " ".join(f"{100 * a:.1f}" for a in accuracy),
                         f"{seconds:.0f}", f"{100 * gap:.2f}", f"{100 * distance:.2f}"])
            print(rows[-1], flush=True)
        rows.append([TABLE2_COLUMNS.get(task, task), "scikit-learn", " ".join(f"{100 * a:.1f}" for a in reference),
                     "", "", ""])
    save_run(args.name, argv=sys.argv, raw=raw, tables={"stop": table(
        ["task", "stop", "test accuracy per layer 0-6 (%)", "fit s", f"largest change, features +{args.noise:g} noise (points)",
         "largest distance to scikit-learn (points)"], rows)})


if __name__ == "__main__":
    main()
