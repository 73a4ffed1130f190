"""Control tasks keyed on lower-cased vs exact word types, and the word-identity baseline (docs/probing.md).

``run_probing`` on MiniLM (UD English EWT, the default caps: 20,000 training words, 10,000 training arcs),
one seed, no untrained twin, no scalar mix, once with ``control_types="lower"`` (what ``auto`` picks for an
uncased tokenizer) and once with ``"exact"``. Per task and layer: test accuracy, control accuracy and
selectivity under each type definition, beside the majority and word-identity baselines (which use the same
type definition). Stored as ``benchmarks/results/control_types_minilm_cpu.json``:

    OMP_NUM_THREADS=1 BERTOLOGY_CACHE=/tmp/cache PYTHONPATH=src .venv/bin/python -m benchmarks.experiments.probing.control_types
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from benchmarks.stored import save_run, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="upos,deprel")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache", default=None, help="cache folder (default $BERTOLOGY_CACHE)")
    parser.add_argument("--max-sentences", type=int, default=None, help="smoke tests only")
    parser.add_argument("--name", default="control_types_minilm_cpu")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from bertology.probing.experiment import run_probing
    from bertology.probing.report import table2_frame
    from bertology.results import percent

    tasks = args.tasks.split(",")
    frames, seconds = {}, {}
    for kind in ("lower", "exact"):
        started = time.perf_counter()
        result = run_probing("minilm", tasks, seeds=(args.seed,), untrained=False, control=True, control_types=kind,
                             scalar_mix=False, cache_dir=args.cache, device="cpu", progress=False,
                             max_sentences=args.max_sentences)
        seconds[kind] = time.perf_counter() - started
        frame = table2_frame(result)
        frames[kind] = frame[frame["layer"].notna()].assign(layer=lambda f: f["layer"].astype(int))
        print(f"{kind}: {seconds[kind]:.0f} s", flush=True)
    tables, raw = {}, {"seconds": seconds, "seed": args.seed}
    for task in tasks:
        lower = frames["lower"][frames["lower"]["task"] == task].set_index("layer")
        exact = frames["exact"][frames["exact"]["task"] == task].set_index("layer")
        rows = [[layer, percent(lower.loc[layer, "mean"]), percent(lower.loc[layer, "control"]),
                 percent(lower.loc[layer, "selectivity"]), percent(exact.loc[layer, "control"]),
                 percent(exact.loc[layer, "selectivity"]),
                 f"{100 * (exact.loc[layer, 'selectivity'] - lower.loc[layer, 'selectivity']):+.1f}"]
                for layer in lower.index]
        first = lower.iloc[0]
        tables[task] = table(["layer", "accuracy", "control (lower)", "selectivity (lower)", "control (exact)",
                              "selectivity (exact)", "exact - lower"], rows)
        tables[f"{task}_baselines"] = table(
            ["baseline", "lower-cased types", "exact types"],
            [["majority", percent(first["majority"]), percent(exact.iloc[0]["majority"])],
             ["word identity", percent(first["word_identity"]), percent(exact.iloc[0]["word_identity"])]])
        difference = exact["selectivity"] - lower["selectivity"]
        raw[task] = {"lower": json.loads(lower.reset_index().to_json(orient="records")),
                     "exact": json.loads(exact.reset_index().to_json(orient="records")),
                     "selectivity_exact_minus_lower": {"min": float(difference.min()), "max": float(difference.max())},
                     "sizes": {k: int(first[k]) for k in ("n_train", "n_dev", "n_test")}}
        print(task, raw[task]["selectivity_exact_minus_lower"], raw[task]["sizes"], flush=True)
    save_run(args.name, argv=sys.argv, raw=raw, tables=tables)


if __name__ == "__main__":
    main()
