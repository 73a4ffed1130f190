"""The exact probe's thin preconditioner against the full one, where a probe has fewer examples than half its
features: the report's probing at quick sizes (``bertology report --max-sentences N``, as the README's tour runs it).

With ``n`` training examples and ``dim`` features, the feature factor of the exact probe's preconditioner
(:class:`bertology.probing.kronecker._KroneckerPreconditioner`) has rank at most ``n``. Where ``2 n <= dim``
(:data:`~bertology.probing.kronecker.THIN`) it is decomposed from the ``n x n`` Gram matrix and its rotations
take ``n`` columns instead of ``dim``: the same preconditioner, so the same optimum. This runs the report's
linear probes (the ten SentEval tasks and the treebank tasks, the point fit, one bootstrap seed, the control
task and the untrained twin, as ``report --max-sentences N --seeds 1`` fits them) on MiniLM, in one process,
rounds alternating thin and full (the full one by setting ``THIN`` out of reach), after a warm-up run that
extracts the features; it times the whole probing run and the solver's part of it (``fit_multinomial``), and
checks that both forms give every task and layer the same test accuracy (to a test example). Stored as
``benchmarks/results/<--name>.json``:

    BERTOLOGY_DATA=../shared/data .venv/bin/python -m benchmarks.perf.bench_probe_thin [--sizes 30,100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

from benchmarks.stored import save_run, table

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = "the same probes with the full preconditioner (a dim x dim eigenbasis), in the same process"


def quick_spec(size: int):
    """The report's probing spec at ``--max-sentences size --seeds 1`` (report_probing_spec's quick branch),
    its linear tasks only (the structural probes have a trainer of their own)."""
    from bertology.probing.spec import ProbingSpec
    from bertology.report.sections import report_probing_tasks

    tasks = tuple(task for task in report_probing_tasks() if task != "structural")
    return ProbingSpec(tasks=tasks, seeds=(0,), max_train=size, max_eval=min(size, max(20, size // 2)),
                       max_sentences=size, quick=True, twin_per_seed=False, control="token", scalar_mix=False,
                       probe_options={"max_iter": 100})


def timed_run(spec, encoder, cache: str, thin: bool) -> tuple[float, float, dict]:
    """One probing run: ``(seconds, solver seconds, test accuracy per (task, baseline, layer))``."""
    from benchmarks.perf.bench_probe_polish import timed
    from bertology.probing import experiment, fits, kronecker, probes, solver

    spent = [0.0]
    original = solver.fit_multinomial
    counted = timed(original, spent)
    chosen = kronecker.THIN
    kronecker.THIN = chosen if thin else 10**9
    fits.fit_multinomial = probes.fit_multinomial = counted
    try:
        start = time.perf_counter()
        result = experiment.run_probing(encoder, spec, cache_dir=cache, device="cpu", progress=False)
        seconds = time.perf_counter() - start
    finally:
        kronecker.THIN, fits.fit_multinomial, probes.fit_multinomial = chosen, original, original
    rows = result["results"]
    rows = rows[(rows["metric"] == "accuracy") & (rows["split"] == "test") & rows["seed"].isna()]
    accuracy = {(r.task, r.baseline, int(r.layer)): float(r.value) for r in rows.itertuples() if r.layer == r.layer}
    return seconds, spent[0], accuracy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="30,100", help="--max-sentences values (comma-separated)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--name", default="probe_thin_minilm_cpu")
    args = parser.parse_args()
    from bertology.models import load_encoder

    encoder = load_encoder("minilm")
    load_before = os.getloadavg()
    raw, rows = {}, []
    with tempfile.TemporaryDirectory() as cache:
        for size in [int(s) for s in args.sizes.split(",")]:
            spec = quick_spec(size)
            timed_run(spec, encoder, cache, thin=True)  # extracts the features once (cached for every round)
            runs = {"thin": [], "full": []}
            accuracy = {}
            for round_ in range(args.rounds):
                for form in (("thin", "full") if round_ % 2 == 0 else ("full", "thin")):
                    seconds, solver_seconds, accuracy[form] = timed_run(spec, encoder, cache, thin=form == "thin")
                    runs[form].append((seconds, solver_seconds))
                    print(f"--max-sentences {size} round {round_} {form}: {seconds:.1f} s, solver {solver_seconds:.1f} s",
                          flush=True)
            moved = max(abs(accuracy["thin"][key] - accuracy["full"][key]) for key in accuracy["full"])
            best = {form: min(runs[form]) for form in runs}
            median = {form: statistics.median(s for s, _ in runs[form]) for form in runs}
            raw[str(size)] = {"runs": runs, "largest_accuracy_change": moved, "layers_compared": len(accuracy["full"])}
            rows.append([str(size), f"{best['full'][0]:.1f}", f"{best['thin'][0]:.1f}",
                         f"{best['full'][0] / best['thin'][0]:.2f}x", f"{median['full'] / median['thin']:.2f}x",
                         f"{best['full'][1]:.1f}", f"{best['thin'][1]:.1f}",
                         f"{best['full'][1] / best['thin'][1]:.2f}x", f"{100 * moved:.2f}"])
    load_after = os.getloadavg()
    capability = torch.backends.cpu.get_cpu_capability()
    heading = f"--max-sentences (CPU {capability}, {torch.get_num_threads()} threads, load {load_before[0]:.1f} -> {load_after[0]:.1f})"
    tables = {"speed": table([heading, "probing, full (s)", "probing, thin (s)", "speed-up (best)",
                              "speed-up (median)", "solver, full (s)", "solver, thin (s)", "solver speed-up",
                              "largest test-accuracy change (points)"], rows)}
    save_run(args.name, raw=raw, tables=tables, cpu_capability=capability, load_average_before=load_before,
             load_average_after=load_after, rounds=args.rounds)


if __name__ == "__main__":
    main()
