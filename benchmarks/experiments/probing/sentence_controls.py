"""Sentence-level control tasks on MiniLM (docs/probing.md, "Sentence-level tasks: no control by default").

``run_probing`` on BShift, SOMO, CoordInv and TreeDepth (SentEval tasks from EWT, the default pooled split),
one seed, no twin, no scalar mix, with ``sentence_control="bag-of-words"`` and then ``"first-word"``:
per task and layer the task's test accuracy, each control's accuracy and the selectivity, and per task each
control's majority baseline (the commonest training control label's share of the test sentences: the
first-word control's labels follow the skewed distribution of first words, so its majority is above the
task's). Stored as
``benchmarks/results/sentence_controls_minilm_cpu.json``:

    OMP_NUM_THREADS=1 BERTOLOGY_DATA=/work/shared/data PYTHONPATH=src .venv/bin/python \\
        -m benchmarks.experiments.probing.sentence_controls --cache /tmp/cache
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from benchmarks.stored import save_run, table

TASKS = ("bigram_shift", "odd_man_out", "coordination_inversion", "tree_depth")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache", default=None)
    parser.add_argument("--name", default="sentence_controls_minilm_cpu")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from bertology.data import shared_data_dir
    from bertology.probing.experiment import run_probing
    from bertology.probing.inputs import build_datasets
    from bertology.probing.report import table2_frame
    from bertology.results import percent
    from bertology.tasks import TABLE2_COLUMNS

    frames, seconds = {}, {}
    for control in ("bag-of-words", "first-word"):
        started = time.perf_counter()
        result = run_probing("minilm", list(TASKS), treebank=shared_data_dir() / "ud_english_ewt", seeds=(args.seed,),
                             untrained=False, control=True, sentence_control=control, scalar_mix=False,
                             cache_dir=args.cache, device="cpu", progress=False)
        seconds[control] = time.perf_counter() - started
        frame = table2_frame(result)
        frames[control] = frame[frame["layer"].notna()].assign(layer=lambda f: f["layer"].astype(int))
        print(f"{control}: {seconds[control]:.0f} s", flush=True)
    datasets, _ = build_datasets(list(TASKS), treebank=shared_data_dir() / "ud_english_ewt")
    majorities = {}
    for dataset in datasets:
        for control in ("bag-of-words", "first-word"):
            labels = dataset.control_labels(args.seed, sentence_control=control)
            values, counts = np.unique(labels["train"], return_counts=True)
            majorities[(dataset.name, control)] = float(np.mean(labels["test"] == values[counts.argmax()]))
    rows, raw = [], {"seconds": seconds, "seed": args.seed,
                     "control_majority": {f"{task} {control}": value for (task, control), value in majorities.items()}}
    for task in TASKS:
        bag = frames["bag-of-words"][frames["bag-of-words"]["task"] == task].set_index("layer")
        first = frames["first-word"][frames["first-word"]["task"] == task].set_index("layer")
        for layer in bag.index:
            rows.append([TABLE2_COLUMNS[task], layer, percent(bag.loc[layer, "mean"]), percent(bag.loc[layer, "control"]),
                         f"{100 * bag.loc[layer, 'selectivity']:+.1f}", percent(first.loc[layer, "control"]),
                         f"{100 * first.loc[layer, 'selectivity']:+.1f}"])
        raw[task] = {"bag_of_words": json.loads(bag.reset_index().to_json(orient="records")),
                     "first_word": json.loads(first.reset_index().to_json(orient="records"))}
    majority_rows = [[TABLE2_COLUMNS[task], percent(float(frames["bag-of-words"][frames["bag-of-words"]["task"] == task]["majority"].iloc[0])),
                      percent(majorities[(task, "bag-of-words")]), percent(majorities[(task, "first-word")])] for task in TASKS]
    save_run(args.name, argv=sys.argv, raw=raw, tables={"controls": table(
        ["task", "layer", "accuracy", "bag-of-words control", "selectivity", "first-word control", "selectivity"],
        rows), "majorities": table(["task", "task majority", "bag-of-words control majority",
                                    "first-word control majority"], majority_rows)})


if __name__ == "__main__":
    main()
