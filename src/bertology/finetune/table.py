"""The Convexity report's Table 1: model variant x task (dev, headline metric x 100), with the average.

Unlike the report's single numbers, every cell is a mean over seeds with its standard deviation.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bertology.data.glue import glue_task

#: The report's Table 1 (GLUE dev; CoLA Matthews, MRPC acc., STS-B Pearson, RTE acc.; x100), BERT-base.
CONVEXITY_TABLE1 = pd.DataFrame(
    [
        ("bert-base-uncased", "baseline", 58.73, 85.29, 87.37, 72.00, 75.84),
        ("bert-base-uncased", "multi-objective", 59.83, 83.33, 89.86, 70.31, 75.83),
        ("bert-base-uncased", "multi-objective+extra-layer", 60.6, 84.8, 89.59, 66.43, 75.35),
        ("bert-base-uncased", "copy-last", 58.8, 86.76, 88.33, 63.18, 74.26),
        ("bert-base-cased", "baseline", 58.71, 84.64, 87.9, 71.48, 75.68),
        ("bert-base-cased", "drop-last:2", 55.27, 85.05, 85.84, 67.15, 73.32),
    ],
    columns=["model", "variant", "cola", "mrpc", "stsb", "rte", "average"],
)


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """Tidy summary of per-seed results: one row per model x variant x task x metric, mean/std/n over seeds."""
    if results.empty:
        return pd.DataFrame(columns=["model", "variant", "task", "metric", "mean", "std", "n_seeds", "main"])
    grouped = results.groupby(["model", "variant", "task", "metric"], sort=False)["value"]
    summary = grouped.agg(mean="mean", std=lambda v: v.std(ddof=1) if len(v) > 1 else float("nan"),
                          n_seeds="count").reset_index()
    summary["main"] = [glue_task(t).main_metric == m for t, m in zip(summary["task"], summary["metric"])]
    return summary


def variants_table(results: pd.DataFrame, scale: float = 100.0) -> pd.DataFrame:
    """Table 1 as a wide frame: rows (model, variant), per task ``<task>`` mean and ``<task>_std`` over
    seeds of the headline metric x ``scale``, and ``average`` (mean of the task means, as the report)."""
    summary = summarize(results)
    summary = summary[summary["main"]]
    if summary.empty:
        return pd.DataFrame()
    summary = summary.assign(mean=summary["mean"] * scale, std=summary["std"] * scale)
    means = summary.pivot_table(index=["model", "variant"], columns="task", values="mean", sort=False)
    stds = summary.pivot_table(index=["model", "variant"], columns="task", values="std", sort=False, dropna=False)
    seeds = summary.pivot_table(index=["model", "variant"], columns="task", values="n_seeds", sort=False)
    order = [t for t in ("cola", "sst2", "mrpc", "stsb", "rte") if t in means.columns]
    table = means[order].copy()
    for task in order:
        table[f"{task}_std"] = stds[task] if task in stds else float("nan")
    table["average"] = means[order].mean(axis=1)
    table["n_seeds"] = seeds[order].min(axis=1).astype(int)
    return table.reset_index()


def render_table(table: pd.DataFrame, title: str = "GLUE dev (x100), mean ± std over seeds"):
    """A rich Table of :func:`variants_table`'s output."""
    from rich.table import Table

    rich_table = Table(title=title)
    tasks = [c for c in ("cola", "sst2", "mrpc", "stsb", "rte") if c in table.columns]
    for column in ["model", "variant", *tasks, "average", "seeds"]:
        rich_table.add_column(column, justify="left" if column in ("model", "variant") else "right")
    for _, row in table.iterrows():
        cells = [str(row["model"]), str(row["variant"])]
        for task in tasks:
            mean, std = row[task], row.get(f"{task}_std")
            cells.append("—" if pd.isna(mean) else f"{mean:.2f}" + ("" if pd.isna(std) else f" ± {std:.2f}"))
        cells.append(f"{row['average']:.2f}")
        cells.append(str(row["n_seeds"]))
        rich_table.add_row(*cells)
    return rich_table


def write_tables(results: pd.DataFrame, out_dir: str | Path) -> dict[str, Path]:
    """Write results, summary and Table 1 as CSV and Parquet under ``out_dir`` (temp file, then rename)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, frame in (("results", results), ("summary", summarize(results)), ("table1", variants_table(results))):
        for suffix in ("csv", "parquet"):
            path = out_dir / f"{name}.{suffix}"
            tmp = path.with_name(f".{path.name}.tmp")
            if suffix == "csv":
                frame.to_csv(tmp, index=False)
            else:
                frame.to_parquet(tmp, index=False)
            tmp.replace(path)
            written[f"{name}.{suffix}"] = path
    return written
