"""The exact probe's float32 tolerance (``solver.GTOL``): what a looser one saves, and what it moves (issue 30).

The float32 L-BFGS stage of the exact probe walks the L2 grid and chooses each layer's value on dev; the float64
Newton polish then solves the chosen value to ``POLISH_GTOL`` (1e-9) whatever the stage's tolerance. So the stage's
``gtol`` might be loosened for speed (fewer L-BFGS iterations, a polish from a looser start) if the choice does not
move. For each task and each ``--gtols`` value, on MiniLM's features of UD English EWT (as ``bench_probe_exact``
loads them), the default exact probe (``LayerwiseProbe``, only ``gtol`` changed) is fitted on the features and on
the features moved by ``--noise``; recorded: the seconds (the faster of the two fits), the iterations (L-BFGS plus
the polish's products, halved), how many layers choose another L2 than at the first (reference) tolerance, and
the largest change of a layer's test accuracy from the reference and under the noise. Beside them, in the same
process and on the same features, the early-stopped probe (``stop="early"``) as issue 30's speed baseline.

    BERTOLOGY_DATA=../shared/data .venv/bin/python -m benchmarks.perf.bench_probe_gtol \\
        --tasks upos,word_content,sentence_length --gtols 1e-6,1e-5,1e-4 --max-train 4000 --cache DIR
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from benchmarks.perf.bench_probe_exact import load_features
from benchmarks.stored import save_run, table

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = "the exact probe at the default float32 tolerance (the first of --gtols), and the early-stopped probe"


def fit(X: dict, y: dict, **settings) -> dict:
    """One probe fitted on ``X``: test accuracy per layer, the L2 each layer chose, seconds, iterations."""
    from bertology.probing.probes import LayerwiseProbe

    probe = LayerwiseProbe(device="cpu", **settings)
    start = time.perf_counter()
    probe.fit(X["train"], y["train"], X["dev"], y["dev"])
    seconds = time.perf_counter() - start
    return {"test": [float(v) for v in probe.score_layers(X["test"], y["test"])], "seconds": seconds,
            "l2": [float(v) for v in getattr(probe, "best_l2_", [])], "iterations": int(probe.n_iter_)}


def compare(tasks: list[str], gtols: list[float], cache: Path, max_train: int | None, noise: float) -> dict:
    """Every task's fits at every tolerance (base and shifted features) and its early-stopped fits."""
    runs = {}
    for task, X, y, layers in load_features(tasks, cache, max_train):
        rng = np.random.default_rng(1)
        shifted = {s: X[s] + noise * rng.standard_normal(X[s].shape).astype(np.float32) for s in X}
        record = {"layers": layers, "n_train": int(X["train"].shape[1]), "n_test": int(X["test"].shape[1]),
                  "early": [fit(X, y, stop="early"), fit(shifted, y, stop="early")], "exact": {}}
        for gtol in gtols:
            record["exact"][repr(gtol)] = [fit(X, y, gtol=gtol), fit(shifted, y, gtol=gtol)]
            base = record["exact"][repr(gtol)][0]
            print(task, gtol, f"{base['seconds']:.1f} s", base["iterations"], base["l2"], flush=True)
        runs[task] = record
    return runs


def published(runs: dict, gtols: list[float]) -> dict:
    from bertology.tasks import TABLE2_COLUMNS

    rows = []
    reference = repr(gtols[0])
    for task, record in runs.items():
        early = min(run["seconds"] for run in record["early"])
        ref = record["exact"][reference][0]
        for gtol in gtols:
            base, moved = record["exact"][repr(gtol)]
            seconds = min(base["seconds"], moved["seconds"])
            other = sum(a != b for a, b in zip(base["l2"], ref["l2"]))
            change = 100 * float(np.abs(np.subtract(base["test"], ref["test"])).max())
            shift = 100 * float(np.abs(np.subtract(base["test"], moved["test"])).max())
            rows.append([TABLE2_COLUMNS.get(task, task), f"{gtol:.0e}", f"{seconds:.1f}", str(base["iterations"]),
                         f"{other} of {len(ref['l2'])}", f"{change:.2f}", f"{shift:.2f}", f"{early:.1f}",
                         f"{seconds / early:.2f}"])
    return {"gtol": table(["task", "float32 gtol", "exact fit (s)", "iterations", "layers choosing another L2",
                           "largest test change from the default (points)", "features +1e-6 (points)",
                           "early-stopped (s)", "exact / early"], rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="upos,word_content,sentence_length")
    parser.add_argument("--gtols", default="1e-6,1e-5,1e-4", help="float32 tolerances, the default's first")
    parser.add_argument("--max-train", type=int, default=4000, help="cap on training examples per task")
    parser.add_argument("--noise", type=float, default=1e-6)
    parser.add_argument("--cache", default=None, help="cache folder (default: a temporary one)")
    parser.add_argument("--name", default="probe_gtol_minilm_cpu")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    gtols = [float(v) for v in args.gtols.split(",")]
    cache = Path(args.cache or tempfile.mkdtemp(prefix="bench-probe-gtol-"))
    before = os.getloadavg()
    runs = compare(args.tasks.split(","), gtols, cache, args.max_train, args.noise)
    save_run(args.name, raw={"runs": runs, "gtols": gtols, "noise": args.noise, "max_train": args.max_train},
             tables=published(runs, gtols), cpu_capability=torch.backends.cpu.get_cpu_capability(),
             threads=1, load_average_before=before, load_average_after=os.getloadavg())


if __name__ == "__main__":
    main()
