"""What the `bertology readouts` commands print: the results as console tables (percent for people)."""

from __future__ import annotations

import pandas as pd
from rich.table import Table

from bertology.results import MISSING, is_missing, number, percent


def _share(value) -> str:
    if is_missing(value):
        return MISSING
    return f"{100 * value:.3g}%" if value < 0.1 else f"{100 * value:.1f}%"


def _seconds(value) -> str:
    return number(value, 0, " s", thousands=True)


def squad_table(summary: pd.DataFrame, title: str) -> Table:
    """One line per (checkpoint, readout, task) tested on its own checkpoint's activations (the seed's
    cross-checkpoint tests stay in the saved table)."""
    table = Table(title=title)
    for column in ("model/readout", "fine-tuned", "trainable params (% of encoder)", "EM", "F1", "HasAns F1",
                   "NoAns acc", "answerable acc", "training time", "I/O share", "seeds"):
        table.add_column(column, justify="left" if column == "model/readout" else "right")
    own = summary[summary["checkpoint"] == summary["test_checkpoint"]]
    for row in own.to_dict("records"):
        name = row["component"] if row["task"] == "span" else f"{row['component']} (answerable?)"
        table.add_row(name, f"{row['checkpoint']:g} epoch",
                      f"{row['trainable_params']:,.0f} ({_share(row['param_share'])})",
                      percent(row["exact"]), percent(row["f1"]), percent(row["has_ans_f1"]),
                      percent(row["no_ans_accuracy"]), percent(row["answerable_accuracy"]),
                      _seconds(row["train_seconds"]), _share(row["io_share"]), str(row["n_seeds"]))
    return table


def glue_summary(scores: pd.DataFrame) -> pd.DataFrame:
    keys = ["task", "component", "metric"]
    frame = scores.copy()
    for column in ("trainable_params", "param_share", "value", "train_seconds", "io_share"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    grouped = frame.groupby(keys, sort=False)
    table = grouped[["trainable_params", "param_share", "value", "train_seconds", "io_share"]].mean().reset_index()
    table["value_std"] = grouped["value"].std().values
    table["n_seeds"] = grouped["seed"].nunique().values
    return table


def glue_table(scores: pd.DataFrame, title: str) -> Table:
    table = Table(title=title)
    for column in ("model/readout", "metric", "score", "± sd", "trainable params (% of encoder)", "training time",
                   "I/O share", "seeds"):
        table.add_column(column, justify="left" if column in ("model/readout", "metric") else "right")
    for row in glue_summary(scores).to_dict("records"):
        rate = row["metric"] in ("accuracy", "f1")
        shown = percent if rate else number
        score, spread = shown(row["value"]), shown(row["value_std"])
        table.add_row(row["component"], row["metric"], score, spread,
                      f"{row['trainable_params']:,.0f} ({_share(row['param_share'])})", _seconds(row["train_seconds"]),
                      _share(row["io_share"]), str(row["n_seeds"]))
    return table
