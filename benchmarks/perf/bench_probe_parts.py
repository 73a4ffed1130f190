"""Where an exact probe's fit spends its time: each L2 value's float32 solve and the float64 polish, at the report's sizes.

For each task, on MiniLM's features of UD English EWT (as ``bertology probe`` builds them; training sets capped
as the report caps them, ``REPORT_MAX_TRAIN``), the default exact probe (``LayerwiseProbe``) is fitted once with
the solver's L-BFGS calls recorded: for each L2 value of the walk, the layers still on the path, the iterations
(the largest layer's: the layers run together) and the seconds; then the polish of each layer's chosen value in
float64. The parts add up to the fit (the rest: standardising, dev scoring). Beside it, in the same process, the
early-stopped probe the exact one replaced, on the same features (the baseline). torch's default threads, as the
report runs. Stored as ``benchmarks/results/<--name>.json``:

    BERTOLOGY_DATA=../shared/data .venv/bin/python -m benchmarks.perf.bench_probe_parts \\
        --tasks upos,xpos,deprel --cache DIR
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.perf.bench_probe_exact import load_features, ours
from benchmarks.stored import save_run, table

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = "the early-stopped probe the exact one replaced, on the same features (and the exact fit's own total)"


def recorded_fit(X: dict, y: dict) -> tuple[float, list[dict]]:
    """The exact probe's fit: its seconds and one record per L-BFGS call of the solver."""
    import torch

    from bertology.probing import solver

    calls: list[dict] = []
    original, original_polish = solver._lbfgs, solver.polish_multinomial

    def chosen(l2, active):
        rows = torch.arange(len(l2)) if active is None else active.nonzero().squeeze(1)
        return rows, sorted({float(f"{value:.3g}") for value in l2[rows].tolist()})

    def recording(data, l2, W, b, **settings):
        # one float32 L-BFGS call: the problems still on the path (``active``), each at its own value
        start = time.perf_counter()
        result = original(data, l2, W, b, **settings)
        rows, values = chosen(l2, settings.get("active"))
        calls.append({"precision": "float32", "l2": values, "layers": len(rows), "iterations": int(result[2]),
                      "seconds": time.perf_counter() - start, "gradient_max": float(result[3][rows].max())})
        return result

    def recording_polish(data, l2, W, b, **settings):
        # the float64 Newton polish of each problem's chosen value; its cost in feature products, halved to
        # compare with L-BFGS iterations (two products each)
        start = time.perf_counter()
        result = original_polish(data, l2, W, b, **settings)
        rows, values = chosen(l2, settings.get("active"))
        calls.append({"precision": "float64 polish", "l2": values, "layers": len(rows),
                      "iterations": int(result[2]) // 2, "seconds": time.perf_counter() - start})
        return result

    solver._lbfgs, solver.polish_multinomial = recording, recording_polish
    try:
        _, seconds, _ = ours(X, y, "converged")
    finally:
        solver._lbfgs, solver.polish_multinomial = original, original_polish
    return seconds, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="upos,xpos,deprel")
    parser.add_argument("--cache", default=None, help="cache folder (default: a temporary one)")
    parser.add_argument("--name", default="probe_parts_minilm_cpu")
    args = parser.parse_args()
    import torch

    from bertology.report.context import REPORT_MAX_TRAIN

    cache = Path(args.cache or tempfile.mkdtemp(prefix="bench-probe-parts-"))
    raw, rows, rows_total = {"load_average_before": os.getloadavg(), "threads": torch.get_num_threads()}, [], []
    cap = max(value for value in REPORT_MAX_TRAIN.values() if value is not None)
    for task, X, y, layers in load_features(args.tasks.split(","), cache, cap):
        ours(X, y, "converged")  # warm-up (first use of each kernel), not counted
        seconds, calls = recorded_fit(X, y)
        _, early_seconds, _ = ours(X, y, "early")
        n, dim = X["train"].shape[1:]
        classes = len(set(y["train"].tolist()))
        raw[task] = {"n_train": int(n), "dim": int(dim), "classes": classes, "layers": layers, "seconds": seconds,
                     "early_seconds": early_seconds, "calls": calls}
        for call in calls:
            rows.append([task, " / ".join(f"{value:g}" for value in call["l2"]), call["precision"], str(call["layers"]),
                         str(call["iterations"]), f"{call['seconds']:.1f}", f"{100 * call['seconds'] / seconds:.0f}%"])
        parts = sum(call["seconds"] for call in calls)
        rows_total.append([task, f"{n:,} x {dim:,} x {classes}", f"{seconds:.1f}", f"{100 * parts / seconds:.0f}%",
                           f"{early_seconds:.1f}", f"{seconds / early_seconds:.1f}x"])
        print(task, rows_total[-1], flush=True)
    raw["load_average_after"] = os.getloadavg()
    save_run(args.name, argv=sys.argv, raw=raw, cpu_capability=torch.backends.cpu.get_cpu_capability(), tables={
        "parts": table(["task", "L2", "solve", "layers", "iterations", "seconds", "share of the fit"], rows),
        "total": table(["task", "train x dim x classes", "exact fit (s)", "in the solver's parts", "early-stopped (s)",
                        "exact / early"], rows_total),
    })


if __name__ == "__main__":
    main()
