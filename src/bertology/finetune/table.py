"""The Convexity report's Table 1: model variant x task (dev, headline metric), with the average.

Unlike the report's single numbers, every cell is a mean over seeds with its standard deviation. Values
are fractions (accuracy 0.79) or correlations (Matthews, Pearson) in every table; the console shows
them x100, as the report printed them.
"""

from __future__ import annotations

import pandas as pd
from rich.table import Table

from bertology.data.glue import glue_task
from bertology.results import MISSING, Result, percent

#: Table 1's task columns in the Convexity report's order; the packaged bshift (not in the report) comes last.
TASK_ORDER = ("cola", "sst2", "mrpc", "stsb", "rte", "bshift")

#: The report's Table 1 (GLUE dev; CoLA Matthews, MRPC acc., STS-B Pearson, RTE acc.), BERT-base, as
#: fractions (the report printed them x100: 58.73 is 0.5873).
CONVEXITY_TABLE1 = pd.DataFrame(
    [
        ("bert-base-uncased", "baseline", 0.5873, 0.8529, 0.8737, 0.7200, 0.7584),
        ("bert-base-uncased", "multi-objective", 0.5983, 0.8333, 0.8986, 0.7031, 0.7583),
        ("bert-base-uncased", "multi-objective+extra-layer", 0.606, 0.848, 0.8959, 0.6643, 0.7535),
        ("bert-base-uncased", "copy-last", 0.588, 0.8676, 0.8833, 0.6318, 0.7426),
        ("bert-base-cased", "baseline", 0.5871, 0.8464, 0.879, 0.7148, 0.7568),
        ("bert-base-cased", "drop-last:2", 0.5527, 0.8505, 0.8584, 0.6715, 0.7332),
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


def variants_table(results: pd.DataFrame) -> pd.DataFrame:
    """Table 1 as a wide frame: rows (model, variant), per task ``<task>`` mean and ``<task>_std`` over
    seeds of the headline metric (a fraction or correlation), ``average`` (mean of the task means, as the
    report) and ``n_seeds``."""
    summary = summarize(results)
    summary = summary[summary["main"]]
    if summary.empty:
        return pd.DataFrame(columns=["model", "variant", "average", "n_seeds"])
    means = summary.pivot_table(index=["model", "variant"], columns="task", values="mean", sort=False)
    stds = summary.pivot_table(index=["model", "variant"], columns="task", values="std", sort=False, dropna=False)
    seeds = summary.pivot_table(index=["model", "variant"], columns="task", values="n_seeds", sort=False)
    order = [t for t in TASK_ORDER if t in means.columns]
    table = means[order].copy()
    for task in order:
        table[f"{task}_std"] = stds[task] if task in stds else float("nan")
    table["average"] = means[order].mean(axis=1)
    table["n_seeds"] = seeds[order].min(axis=1).astype(int)
    return table.reset_index()


def render_table(table: pd.DataFrame, title: str = "GLUE dev (x100), mean ± std over seeds"):
    """A rich Table of :func:`variants_table`'s output, values shown x100."""
    rich_table = Table(title=title)
    tasks = [c for c in TASK_ORDER if c in table.columns]
    for column in ["model", "variant", *tasks, "average", "seeds"]:
        rich_table.add_column(column, justify="left" if column in ("model", "variant") else "right")
    for _, row in table.iterrows():
        cells = [str(row["model"]), str(row["variant"])]
        for task in tasks:
            mean, std = row[task], row.get(f"{task}_std")
            cells.append(MISSING if pd.isna(mean) else percent(mean, 2) + ("" if pd.isna(std) else f" ± {percent(std, 2)}"))
        cells.append(percent(row["average"], 2))
        cells.append(str(row["n_seeds"]))
        rich_table.add_row(*cells)
    return rich_table


def variants_result(results: pd.DataFrame) -> Result:
    """The per-seed ``results``, their ``summary`` (mean, std, n over seeds) and ``table1`` (the report's
    layout) as one :class:`Result`; ``.save(out)`` writes them beside the checkpoints."""
    return Result("finetune_table", tables={"results": results, "summary": summarize(results),
                                            "table1": variants_table(results)},
                  meta={"models": sorted(set(results["model"].dropna())) if len(results) else [],
                        "units": "fractions (accuracy) or correlations; the console shows them x100"})
