"""The two parts of a probing interval, shown separately for one task: test-set sampling and training variation.

For one task on MiniLM's features of UD English EWT (as ``bertology probe`` builds them), every layer, the default
probe (the exact linear probe) with ``--seeds`` bootstrap resamples of the training set (the default
``train_sampling``):

* **the number**: the point fit's test accuracy (the probe fitted on every training example, what the tool
  reports) beside the seeds' mean (each seed fits a bootstrap resample, which holds about 63% of the distinct
  examples: the difference is the bootstrap's bias, why the point fit gives the number);
* **test sampling**: the half-width of the 95% percentile-bootstrap interval over test examples of the point fit
  alone (the interval without training variation);
* **training variation**: the standard deviation of the test accuracy over seeds (each seed trains on another
  bootstrap resample of the training set; the test set is the same);
* **as reported**: the half-width of the interval the tool reports (:func:`bertology.probing.summary.bootstrap_intervals`:
  the point fit's test bootstrap plus each seed's deviation from the seeds' mean), which holds both.

Stored as ``benchmarks/results/<--name>.json``; docs/probing.md shows it:

    BERTOLOGY_DATA=../shared/data .venv/bin/python -m benchmarks.experiments.probing.interval_parts --task bigram_shift --seeds 5
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from benchmarks.perf.bench_probe_exact import load_features
from benchmarks.stored import save_run, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="bigram_shift")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cache", default=None, help="cache folder (default: a temporary one)")
    parser.add_argument("--name", default="interval_parts_minilm_cpu")
    args = parser.parse_args()
    import torch

    from bertology.probing.experiment import _train_index
    from bertology.probing.probes import LayerwiseProbe
    from bertology.probing.summary import POINT, bootstrap_intervals, half_width
    from bertology.tasks import TABLE2_COLUMNS

    torch.set_num_threads(1)
    cache = Path(args.cache or tempfile.mkdtemp(prefix="interval-parts-"))
    [(task, X, y, layers)] = list(load_features([args.task], cache, None))
    n_train = X["train"].shape[1]
    correct, accuracy = {}, []
    for seed in range(args.seeds):
        index = _train_index(seed, task, n_train, 1.0, "bootstrap", y["train"])
        probe = LayerwiseProbe(seed=seed, device="cpu").fit(X["train"][:, index], y["train"][index], X["dev"], y["dev"])
        correct[seed] = probe.predict(X["test"]) == y["test"][None, :]
        accuracy.append(correct[seed].mean(1))
        print(f"seed {seed}: {np.round(100 * accuracy[-1], 2)}", flush=True)
    accuracy = np.stack(accuracy)
    probe = LayerwiseProbe(seed=0, device="cpu").fit(X["train"], y["train"], X["dev"], y["dev"])
    correct[POINT] = probe.predict(X["test"]) == y["test"][None, :]
    point = correct[POINT].mean(1)
    print(f"point fit: {np.round(100 * point, 2)}", flush=True)
    one_low, one_high = bootstrap_intervals({POINT: correct[POINT]})
    low, high = bootstrap_intervals(correct)
    test_part, pooled = 100 * half_width(one_low, one_high), 100 * half_width(low, high)
    spread = 100 * accuracy.std(0, ddof=1)
    rows = [[str(layer), f"{100 * point[i]:.1f}", f"{100 * accuracy[:, i].mean():.1f}", f"±{test_part[i]:.2f}",
             f"{spread[i]:.2f}", f"±{pooled[i]:.2f}"] for i, layer in enumerate(layers)]
    save_run(args.name, argv=sys.argv, cpu_capability=torch.backends.cpu.get_cpu_capability(), raw={
        "task": task, "n_train": int(n_train), "n_test": int(X["test"].shape[1]), "seeds": args.seeds,
        "accuracy": accuracy.tolist(), "point": point.tolist(), "test_half_width": test_part.tolist(), "seed_std": spread.tolist(),
        "pooled_half_width": pooled.tolist(), "load_average": os.getloadavg(),
    }, tables={"parts": table(
        ["layer", f"{TABLE2_COLUMNS.get(task, task)} test accuracy, point fit (%)",
         "mean of the bootstrap seeds (%)", "test sampling: the point fit's 95% CI half-width (points)",
         "training variation: std over seeds (points)", "95% CI half-width, as reported (points)"], rows)})


if __name__ == "__main__":
    main()
