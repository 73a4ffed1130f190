"""docs/tasks.md's counts: the SentEval tasks built from UD English EWT, with the treebank's split and pooled.

``build_tasks(<EWT>, out, seed=0)`` and ``build_tasks(..., split="pooled")`` into temporary folders; the input
after the length filter and de-duplication, the sentences per task and split, the labels, the pooled
split's shares and the build times (process CPU and wall) go to the stored run
``benchmarks/results/tasks_counts_ewt.json``:

    OMP_NUM_THREADS=1 BERTOLOGY_DATA=/work/shared/data PYTHONPATH=src .venv/bin/python -m benchmarks.experiments.tasks.tasks_counts
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.stored import save_run, table


def label_text(task: str, entry: dict) -> str:
    """The "labels" cell: how many, and how they are spread over the splits."""
    counts = entry["counts"]
    labels = entry["labels"]
    per_split = {split: sorted(set(counts.get(split, {}).values())) for split in ("train", "dev", "test")}
    if task == "sentence_length":
        return f"{len(labels)} (balanced per split: {' / '.join(str(per_split[s][0]) for s in ('train', 'dev', 'test'))} each)"
    if task in ("word_content", "top_constituents"):
        unit = "words" if task == "word_content" else ""
        largest = max(max(per_split["dev"]), max(per_split["test"]))
        per = "word" if task == "word_content" else "class"
        return f"{len(labels)}{' ' + unit if unit else ''} ({per_split['train'][0]} per {per} in train, ≤ {largest} in dev/test)"
    if task == "tree_depth":
        return f"{len(labels)} (depths {', '.join(sorted(labels, key=int))})"
    return str(len(labels))


def build(treebank: Path, split: str) -> tuple[dict, float, float]:
    from bertology.tasks import build_tasks

    with tempfile.TemporaryDirectory() as folder:
        wall, cpu = time.perf_counter(), time.process_time()
        report = build_tasks(treebank, folder, seed=0, split=split)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        manifest = json.loads(report.manifest_path.read_text(encoding="utf-8"))
    return manifest, wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--treebank", type=Path, default=None, help="default: $BERTOLOGY_DATA/ud_english_ewt")
    parser.add_argument("--name", default="tasks_counts_ewt")
    args = parser.parse_args()
    from bertology.data import shared_data_dir
    from bertology.tasks import TABLE2_COLUMNS, TASK_NAMES

    treebank = args.treebank or shared_data_dir() / "ud_english_ewt"
    treebank_manifest, treebank_wall, treebank_cpu = build(treebank, "treebank")
    pooled_manifest, pooled_wall, pooled_cpu = build(treebank, "pooled")
    tasks = [task for task in TASK_NAMES if task in treebank_manifest["tasks"]]
    first = treebank_manifest["tasks"][tasks[0]]["input"]
    input_table = table(["split", "sentences", "dropped as duplicates", "dropped outside 5–28 words", "used"],
                        [[split, f"{first[split]['sentences']:,}", f"{first[split]['duplicates_dropped']:,}",
                          f"{first[split]['outside_length_range']:,}", f"{first[split]['used']:,}"]
                         for split in ("train", "dev", "test")])
    treebank_rows, pooled_rows, shares = [], [], {}
    for task in tasks:
        entry = treebank_manifest["tasks"][task]
        totals = entry["totals"]
        treebank_rows.append([task, TABLE2_COLUMNS[task], totals["train"], totals["dev"], totals["test"], label_text(task, entry)])
        pooled = pooled_manifest["tasks"][task]["totals"]
        pooled_rows.append([task, pooled["train"], pooled["dev"], pooled["test"]])
        whole = sum(pooled.values())
        shares[task] = {split: round(100 * pooled[split] / whole) for split in ("train", "dev", "test")}
    raw = {"treebank": str(treebank), "seed": 0,
           "seconds": {"treebank": {"wall": treebank_wall, "cpu": treebank_cpu},
                       "pooled": {"wall": pooled_wall, "cpu": pooled_cpu}},
           "pooled_shares_percent": shares,
           "treebank_totals": {t: treebank_manifest["tasks"][t]["totals"] for t in tasks},
           "pooled_totals": {t: pooled_manifest["tasks"][t]["totals"] for t in tasks},
           "input": {"treebank": first, "pooled": pooled_manifest["tasks"][tasks[0]]["input"]}}
    print(json.dumps({"seconds": raw["seconds"], "shares": shares}, indent=1))
    save_run(args.name, argv=sys.argv, raw=raw,
             tables={"input": input_table,
                     "treebank": table(["task", "Table 2", "train", "dev", "test", "labels"], treebank_rows),
                     "pooled": table(["task", "train", "dev", "test"], pooled_rows)})


if __name__ == "__main__":
    main()
