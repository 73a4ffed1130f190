"""Summaries of probing results: the Table 2 layout (layers x tasks, "acc (delta vs untrained)") as a
DataFrame and as a rich table, and the layer-curve figure (accuracy per layer with its baselines).

Every function takes the tidy ``results`` table of :func:`~bertology.probing.run_probing` (or its
:class:`~bertology.results.Result`). Numbers stay fractions in the frames; the display forms (``table2``,
``table2_rich``, the figure) show percent.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from bertology.errors import DataError
from bertology.files import save_figure
from bertology.results import Result, percent

#: The metric a task's Table 2 cell shows; classification tasks show accuracy.
PRIMARY_METRIC = {"structural-distance": "uuas", "structural-depth": "root_acc"}
GROUP = ["model", "task", "probe", "component", "baseline", "split", "metric", "layer"]
#: The ``component`` value of scalar-mix rows (see :mod:`bertology.probing.experiment`).
SCALAR_MIX = "scalar-mix"


def _results(results) -> pd.DataFrame:
    frame = results["results"] if isinstance(results, Result) else results
    if "component" not in frame.columns:
        frame = frame.assign(component=None)
    return frame


def _display_name(task: str) -> str:
    try:
        from bertology.tasks import TABLE2_COLUMNS

        return TABLE2_COLUMNS.get(task, task)
    except ImportError:  # pragma: no cover - the tasks package ships with bertology
        return task


def summarize(results) -> pd.DataFrame:
    """Mean, standard deviation and number of seeds per (model, task, probe, component, baseline, split,
    metric, layer)."""
    results = _results(results)
    if results.empty:
        raise DataError("no probing results to summarize")
    return (results.groupby(GROUP, dropna=False)["value"].agg(mean="mean", std="std", n_seeds="count")
            .reset_index())


def _metric_rows(summary: pd.DataFrame, task: str, split: str, baseline: str, mix: bool = False) -> pd.DataFrame:
    """Per-layer rows (or the scalar-mix row) of a task's primary metric for one baseline and split."""
    metric = PRIMARY_METRIC.get(task, "accuracy")
    rows = summary[(summary.task == task) & (summary.split == split) & (summary.baseline == baseline)
                   & (summary.metric == metric)]
    is_mix = rows.component.eq(SCALAR_MIX).fillna(False).astype(bool)
    return rows[is_mix] if mix else rows[~is_mix & rows.layer.notna()]


def table2_frame(results, split: str = "test") -> pd.DataFrame:
    """Numbers behind Table 2: one row per (task, layer) with the encoder's mean and std over seeds, the
    untrained twin's mean, ``delta`` = encoder - twin, the control accuracy and selectivity, the majority
    baseline, and ``best_on_dev`` marking the layer chosen on dev (never on test). Fractions (the
    primary metric of structural tasks: UUAS, root accuracy). The scalar mix is a row with ``layer``
    <NA> and ``component`` ``"scalar-mix"``."""
    results = _results(results)
    summary = summarize(results)
    records = []
    for task in dict.fromkeys(results.task):  # the order tasks were run in
        ours = _metric_rows(summary, task, split, "none")
        if ours.empty:
            continue
        dev = _metric_rows(summary, task, "dev", "none")
        best_layer = dev.loc[dev["mean"].idxmax(), "layer"] if not dev.empty else pd.NA
        twin = _metric_rows(summary, task, split, "untrained").set_index("layer")["mean"]
        control = _metric_rows(summary, task, split, "control").set_index("layer")["mean"]
        majority = summary[(summary.task == task) & (summary.split == split) & (summary.baseline == "majority")]
        majority_value = majority["mean"].iloc[0] if not majority.empty else np.nan
        for row in ours.sort_values("layer").itertuples():
            untrained = twin.get(row.layer, np.nan)
            ctrl = control.get(row.layer, np.nan)
            records.append({
                "task": task, "component": None, "layer": int(row.layer), "metric": row.metric,
                "mean": row.mean, "std": row.std, "n_seeds": row.n_seeds,
                "untrained": untrained, "delta": (row.mean - untrained),
                "control": ctrl, "selectivity": (row.mean - ctrl),
                "majority": majority_value, "best_on_dev": bool(row.layer == best_layer),
            })
        mix = _metric_rows(summary, task, split, "none", mix=True)
        mix_twin = _metric_rows(summary, task, split, "untrained", mix=True)
        if not mix.empty:
            twin_value = mix_twin["mean"].iloc[0] if not mix_twin.empty else np.nan
            records.append({
                "task": task, "component": SCALAR_MIX, "layer": pd.NA, "metric": "accuracy", "mean": mix["mean"].iloc[0],
                "std": mix["std"].iloc[0], "n_seeds": mix["n_seeds"].iloc[0],
                "untrained": twin_value, "delta": (mix["mean"].iloc[0] - twin_value),
                "control": np.nan, "selectivity": np.nan, "majority": majority_value,
                "best_on_dev": False,
            })
    if not records:
        raise DataError(f"no '{split}' results with baseline 'none' to tabulate")
    frame = pd.DataFrame(records)
    frame["layer"] = frame["layer"].astype("Int64")
    return frame


def _cell(mean: float, delta: float, std: float, with_std: bool) -> str:
    if pd.isna(mean):
        return ""
    text = percent(mean)
    if with_std and not pd.isna(std):
        text += f"±{percent(std)}"
    if not pd.isna(delta):
        text += f" ({percent(delta)})"
    return text


def table2(results, split: str = "test", with_std: bool = False) -> pd.DataFrame:
    """The Convexity report's Table 2 layout, for display: layers as rows, tasks as columns, cells
    ``"acc (delta)"`` in percent with delta = encoder - untrained twin (mean over seeds). Extra rows:
    ``mix`` (scalar mix over all layers), ``majority`` and ``best layer (dev)``. Column names follow
    Table 2 (``BShift``). The numbers, as fractions, are :func:`table2_frame`."""
    frame = table2_frame(results, split)
    columns = {}
    for task, part in frame.groupby("task", sort=False):
        cells = {}
        for row in part.itertuples():
            key = "mix" if pd.isna(row.layer) else int(row.layer)
            cells[key] = _cell(row.mean, row.delta, row.std, with_std)
        cells["majority"] = percent(part.majority.iloc[0]) if not pd.isna(part.majority.iloc[0]) else ""
        best = part[part.best_on_dev]
        cells["best layer (dev)"] = str(int(best.layer.iloc[0])) if not best.empty else ""
        name = _display_name(task)
        metric = part.metric.iloc[0]
        columns[name if metric == "accuracy" else f"{name} [{metric}]"] = cells
    table = pd.DataFrame(columns)
    layers = sorted(k for k in table.index if isinstance(k, (int, np.integer)))
    order = layers + [k for k in ("mix", "majority", "best layer (dev)") if k in table.index]
    table = table.reindex(order).fillna("")
    table.index.name = "layer"
    return table


def table2_rich(results, split: str = "test", title: str | None = None, with_std: bool = True):
    """Table 2 as a :class:`rich.table.Table`; the layer each task picks on dev is in bold."""
    from rich.table import Table

    results = _results(results)
    frame = table2(results, split, with_std=with_std)
    numbers = table2_frame(results, split)
    best = {(_display_name(t), int(l)) for t, l in numbers[numbers.best_on_dev][["task", "layer"]].itertuples(index=False)}
    models = ", ".join(sorted(map(str, results.model.dropna().unique())))
    table = Table(title=title or f"{models}: {split} accuracy per layer, % (delta vs untrained twin)")
    table.add_column("layer", justify="right")
    for column in frame.columns:
        table.add_column(str(column), justify="right")
    for layer, row in frame.iterrows():
        cells = []
        for column in frame.columns:
            text = row[column]
            plain = str(column).split(" [")[0]
            cells.append(f"[bold]{text}[/bold]" if (plain, layer) in best and text else text)
        table.add_row(str(layer), *cells)
    table.caption = ("bold = layer chosen on dev; mix = learned scalar mix of all layers; "
                     "layer 0 = embeddings; mean over seeds")
    return table


def plot_layer_curves(results, path: str | os.PathLike | None = None, split: str = "test",
                      tasks: Sequence[str] | None = None, formats: Sequence[str] = ("png", "svg")):
    """Accuracy per layer for each task (mean +- std over seeds, in percent) beside its baselines: majority
    (dashed), untrained twin, control task, and the scalar mix (dotted). Saved as ``path`` with each suffix
    in ``formats`` (atomically). Returns the matplotlib Figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = _results(results)
    frame = table2_frame(results, split)
    shown = ["mean", "std", "untrained", "control", "majority"]
    frame[shown] = frame[shown] * 100  # figures show percent
    names = list(dict.fromkeys(frame.task)) if tasks is None else list(tasks)
    if not names:
        raise DataError("no tasks to plot")
    cols = min(4, len(names))
    rows = int(np.ceil(len(names) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False)
    for ax, task in zip(axes.flat, names):
        part = frame[(frame.task == task) & frame.layer.notna()].sort_values("layer")
        mix = frame[(frame.task == task) & frame.layer.isna()]
        x = part.layer.astype(int).to_numpy()
        ax.plot(x, part["mean"], "o-", color="C0", label="encoder")
        ax.fill_between(x, part["mean"] - part["std"].fillna(0), part["mean"] + part["std"].fillna(0),
                        color="C0", alpha=0.2)
        if part.untrained.notna().any():
            ax.plot(x, part.untrained, "s-", color="C1", ms=3, label="untrained twin")
        if part.control.notna().any():
            ax.plot(x, part.control, "^-", color="C2", ms=3, label="control task")
        if part.majority.notna().any():
            ax.axhline(part.majority.iloc[0], ls="--", color="grey", label="majority")
        if not mix.empty:
            ax.axhline(mix["mean"].iloc[0], ls=":", color="C0", label="scalar mix")
        best = part[part.best_on_dev]
        if not best.empty:
            ax.plot(best.layer.astype(int), best["mean"], "*", color="C3", ms=12, label="best on dev")
        metric = part.metric.iloc[0] if not part.empty else "accuracy"
        ax.set_title(_display_name(task))
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel(f"{metric} (%)")
        ax.set_xticks(x)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), frameon=False)
    models = ", ".join(sorted(map(str, results.model.dropna().unique())))
    fig.suptitle(f"{models}: probing accuracy per layer ({split}), mean ± std over seeds")
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    if path is not None:
        base = Path(path)
        stem = base.with_suffix("") if base.suffix in {".png", ".svg", ".pdf"} else base
        for fmt in formats:
            save_figure(fig, stem.with_suffix(f".{fmt}"), dpi=150)
    plt.close(fig)
    return fig
