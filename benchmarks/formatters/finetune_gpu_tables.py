"""docs/finetune.md's GPU table, formatted from the stored raw output of the H100 runs (nothing re-measured).

The source is ``benchmarks/results/finetune_gpu/results.csv`` (one row per task x variant x seed x metric,
written by the H100 run of 2026-11-23, first committed in 0501c58): MiniLM, ``bertology.finetune``
defaults (3 epochs, lr 2e-5, batch 32, max length 128, bf16 autocast), full GLUE train sets, dev after the
last epoch, seeds 0-2. The stored run ``finetune_gpu_minilm_table1`` holds the page's Table 1 (our rows from
that file, BERT-base's from the Convexity report, :data:`bertology.finetune.table.CONVEXITY_TABLE1`), the
secondary metrics, per-seed values and the majority-class accuracy of each dev set (computed here from the
packaged GLUE data).

usage: python -m benchmarks.formatters.finetune_gpu_tables
"""

from __future__ import annotations


import pandas as pd

from bertology.data.glue import read_glue
from bertology.finetune.table import CONVEXITY_TABLE1, summarize, variants_table
from bertology.results import percent

from benchmarks.stored import ROOT, save_run, table  # noqa: E402

SOURCE = ROOT / "benchmarks" / "results" / "finetune_gpu" / "results.csv"
TASKS = ("cola", "mrpc", "stsb", "rte")
REPORT_ROWS = ("baseline", "multi-objective")


def majority_share(task: str) -> float:
    labels = pd.Series([example.label for example in read_glue(task, "dev")])
    return float(labels.value_counts(normalize=True).iloc[0])


def main() -> None:
    results = pd.read_csv(SOURCE)
    ours = variants_table(results)
    rows = []
    for _, row in ours.iterrows():
        rows.append(["MiniLM (ours)", row["variant"],
                     *[f"{percent(row[task], 2)} ± {percent(row[f'{task}_std'], 2)}" for task in TASKS],
                     percent(row["average"], 2)])
    report = CONVEXITY_TABLE1[(CONVEXITY_TABLE1["model"] == "bert-base-uncased")
                              & CONVEXITY_TABLE1["variant"].isin(REPORT_ROWS)]
    for _, row in report.iterrows():
        rows.append(["BERT-base uncased (report)", row["variant"], *[percent(row[task], 2) for task in TASKS],
                     percent(row["average"], 2)])
    table1 = table(["model", "variant", "CoLA", "MRPC", "STS-B", "RTE", "average"], rows)

    summary = summarize(results)
    secondary = summary[~summary["main"]]
    secondary_table = table(["task", "metric", "variant", "mean ± std over 3 seeds (x100)"],
                            [[row["task"], row["metric"], row["variant"],
                              f"{percent(row['mean'], 2)} ± {percent(row['std'], 2)}"]
                             for _, row in secondary.iterrows()])
    majority = {task: majority_share(task) for task in ("cola", "mrpc", "rte")}
    per_seed = {f"{task} {variant} {metric}": group.sort_values("seed")["value"].tolist()
                for (task, variant, metric), group in results.groupby(["task", "variant", "metric"])}
    save_run("finetune_gpu_minilm_table1", raw={
        "summary": summary.to_dict("records"), "per_seed": per_seed, "majority_class_dev_accuracy": majority,
        "base_fingerprint": sorted(results["base_fingerprint"].unique())},
        tables={"table1": table1, "secondary": secondary_table},
        formatted_from=[str(SOURCE.relative_to(ROOT))],
        original_run={"machine": "1 x NVIDIA H100 80GB HBM3 (the project's lent GPU machine), torch 2.11.0+cu130, "
                                 "transformers 5.17", "date": "2026-11-23", "commit_first_stored": "0501c58"},
        note="re-formatted from the stored raw per-seed results of the GPU run; nothing re-measured")


if __name__ == "__main__":
    main()
