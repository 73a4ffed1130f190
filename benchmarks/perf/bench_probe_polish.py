"""The exact probe's float64 polish by Newton steps against the L-BFGS polish it replaced, at the report's sizes.

The exact probe solves every layer along the L2 grid in float32, then polishes each layer's chosen value in float64
to a largest gradient entry of 1e-9 (``solver.POLISH_GTOL``), so that the number does not depend on the solver's
path. Until session 23 the polish was L-BFGS in float64 from the float32 optimum, in the float32 solve's
preconditioner (at most 400 iterations: ``POLISH_ITER_FACTOR`` 4 times the cap of 100); now it is Newton steps,
each solved by conjugate gradients on float32 Hessian products for the problems still running, preconditioned by
the eigenvalue-corrected Kronecker factors (:func:`bertology.probing.solver._newton`). For each task, on
MiniLM's features of UD English EWT (training sets capped as the report caps them, every dev and test example),
this times the report's group of fits (:func:`bertology.probing.fits.fit_and_score_group`: the point fit and
the bootstrap seeds, with the control task's on the encoder's features; the task's alone in the untrained
twin's shape) with each polish, in the same process (the baseline re-created here as it was), and the polish's
own seconds, and checks that both give every fit the same test accuracy on every layer (in test examples).
torch's default threads, as the report runs. Stored as ``benchmarks/results/<--name>.json``:

    BERTOLOGY_DATA=../shared/data .venv/bin/python -m benchmarks.perf.bench_probe_polish --tasks upos,xpos,deprel \\
        --cache DIR
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchmarks.perf.bench_probe_group import report_features, report_jobs
from benchmarks.stored import save_run, table

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = "the float64 L-BFGS polish the Newton polish replaced (commit c4a66e6), re-created here, same fits"

#: The L-BFGS polish's iteration cap as it was: POLISH_ITER_FACTOR (4) times the solve's cap (100).
LBFGS_POLISH_ITER = 400


def lbfgs_polish(data, l2, W, b, *, gtol=None, max_steps=None, budget=1 << 30, factors=None, bias_l2=False,
                 active=None):
    """The polish as it was before session 23: L-BFGS in float64 from the float32 optimum, a few feature sets at a
    time, in the float32 solve's preconditioner (no refresh), returning iterations (counted as the Newton polish's
    products over two)."""
    import torch

    from bertology.probing.solver import POLISH_GTOL, REFRESH_EVERY, _lbfgs

    gtol = POLISH_GTOL if gtol is None else gtol
    G, device, P = data.groups, W.device, data.size
    active = torch.ones(P, dtype=torch.bool, device=device) if active is None else active
    sets = torch.unique(torch.div(active.nonzero().squeeze(1), G, rounding_mode="floor"))
    step = max(1, budget // max(1, data.n * data.dim * 8))
    W_out, b_out, iterations = W.clone(), b.clone(), 0
    for start in range(0, len(sets), step):
        part = sets[start:start + step]
        rows = (part[:, None] * G + torch.arange(G, device=device)).reshape(-1)
        chunk = data.to(torch.float64, part)
        lam = l2[rows].to(torch.float64)
        penalty = lam if bias_l2 else torch.zeros_like(lam)
        given = None if factors is None else factors.of_sets(part, torch.float64)
        W_part, b_part, used, _, _ = _lbfgs(chunk, lam, W[rows].to(torch.float64), b[rows].to(torch.float64),
                                            bias_l2=penalty, gtol=gtol, max_iter=LBFGS_POLISH_ITER,
                                            preconditioner=given,
                                            refresh_every=LBFGS_POLISH_ITER + 1 if given is not None else REFRESH_EVERY,
                                            active=active[rows])
        W_out[rows], b_out[rows] = W_part.to(W.dtype), b_part.to(b.dtype)
        iterations = max(iterations, used)
    return W_out, b_out, 2 * iterations


def timed(polish, clock: list):
    """``polish`` adding its seconds to ``clock[0]``."""
    def run(*args, **kwargs):
        start = time.perf_counter()
        try:
            return polish(*args, **kwargs)
        finally:
            clock[0] += time.perf_counter() - start
    return run


def fit_with(polish, X, jobs, layers, name):
    from bertology.probing import solver
    from bertology.probing.fits import fit_and_score_group
    from bertology.probing.probes import DEFAULT_L2

    original, clock = solver.polish_multinomial, [0.0]
    solver.polish_multinomial = timed(polish, clock)
    try:
        start = time.perf_counter()
        scores = fit_and_score_group("linear", {"l2": DEFAULT_L2, "hidden": 128, "device": "cpu"}, X, jobs, layers,
                                     "minilm", name)
        return scores, time.perf_counter() - start, clock[0]
    finally:
        solver.polish_multinomial = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="upos,xpos,deprel")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cache", default=None, help="cache folder (default: a temporary one)")
    parser.add_argument("--name", default="probe_polish_minilm_cpu")
    args = parser.parse_args()
    import torch

    from bertology.probing import solver
    from bertology.probing.datasets import SPLITS

    cache = Path(args.cache or tempfile.mkdtemp(prefix="bench-probe-polish-"))
    seeds = tuple(range(args.seeds))
    raw = {"load_average_before": os.getloadavg(), "threads": torch.get_num_threads(), "seeds": seeds}
    datasets, types, layers, features = report_features(args.tasks.split(","), cache)
    newton = solver.polish_multinomial
    rows = []
    for dataset in datasets:
        X = {s: features[dataset.name, s] for s in SPLITS}
        control = dataset.level != "sentence"
        every = report_jobs(dataset, seeds, types, control)
        shapes = {"encoder (task and control)" if control else "encoder": every}
        if control:
            shapes["untrained twin's shape (task only)"] = [job for job in every if job[3] == "none"]
        for shape, jobs in shapes.items():
            fit_with(newton, X, jobs[:2], layers, dataset.name)  # warm-up
            before, before_s, before_polish = fit_with(lbfgs_polish, X, jobs, layers, dataset.name)
            after, after_s, after_polish = fit_with(newton, X, jobs, layers, dataset.name)
            n_test = len(dataset.splits["test"].labels)
            hits = lambda scores: np.array([[r["value"] for r in s.rows if r["split"] == "test"  # noqa: E731
                                             and r["metric"] == "accuracy"] for s in scores]) * n_test
            differ = float(np.abs(hits(before) - hits(after)).max())
            n, dim = X["train"].shape[1:]
            classes = len(set(dataset.splits["train"].labels.tolist()))
            raw[f"{dataset.name} {shape}"] = {"fits": len(jobs), "lbfgs_seconds": before_s, "newton_seconds": after_s,
                                              "lbfgs_polish_seconds": before_polish,
                                              "newton_polish_seconds": after_polish, "n_train": int(n),
                                              "dim": int(dim), "classes": classes,
                                              "most_test_examples_apart": differ}
            rows.append([dataset.name, f"{n:,} x {dim:,} x {classes}", shape, str(len(jobs)),
                         f"{before_polish:.1f}", f"{after_polish:.1f}", f"{before_polish / after_polish:.2f}x",
                         f"{before_s:.1f}", f"{after_s:.1f}", f"{before_s / after_s:.2f}x", f"{differ:.0f}"])
            print(rows[-1], flush=True)
    raw["load_average_after"] = os.getloadavg()
    save_run(args.name, argv=sys.argv, raw=raw, cpu_capability=torch.backends.cpu.get_cpu_capability(), tables={
        "polish": table(["task", "train x dim x classes", "fits", "how many", "L-BFGS polish (s)",
                         "Newton polish (s)", "polish speed-up", "all fits, L-BFGS polish (s)",
                         "all fits, Newton polish (s)", "speed-up", "test examples apart (most, any fit and layer)"],
                        rows),
    })


if __name__ == "__main__":
    main()
