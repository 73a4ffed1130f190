"""Probing results summarised and shown: the Table 2 numbers and the best-layer verdicts, and their views.

The numbers are computed once, where the probing :class:`~bertology.results.Result` is made
(:func:`bertology.probing.experiment.run_probing`): :func:`summarize`, :func:`table2_frame` (the ``table2``
and ``table2_dev`` tables) and :func:`best_layer_table` (the ``best_layer`` table). Every view draws the
tables it is given and computes nothing: :func:`table2` (the Table 2 layout as a DataFrame),
:func:`table2_rich` and :func:`table2_vertical` (console tables), :func:`print_table2`, and
:func:`plot_layer_curves` (the figure); each takes a ``table2`` frame (filter its rows to show some tasks)
and, where it shows the best layer in words, the ``best_layer`` table. Numbers stay fractions in the frames;
the views show percent.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import matplotlib
import matplotlib.pyplot as plt
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from bertology.errors import DataError
from bertology.plots import finish_figure
from bertology.probing.names import PRIMARY_METRIC as STRUCTURAL_METRIC, SCALAR_MIX
from bertology.probing.summary import BestLayer, best_layer, best_layers, power_flags
from bertology.results import Result, percent
from bertology.tasks import TABLE2_COLUMNS

#: A task's headline metric: the structural probes' by kind, accuracy for every other task.
PRIMARY_METRIC = {f"structural-{kind}": metric for kind, metric in STRUCTURAL_METRIC.items()}
GROUP = ["model", "task", "probe", "component", "baseline", "split", "metric", "layer"]


def _results(results) -> pd.DataFrame:
    frame = results["results"] if isinstance(results, Result) else results
    if "component" not in frame.columns:
        frame = frame.assign(component=None)
    return frame


def _display_name(task: str) -> str:
    try:
        return TABLE2_COLUMNS.get(task, task)
    except ImportError:  # pragma: no cover - the tasks package ships with bertology
        return task


def summarize(results) -> pd.DataFrame:
    """Mean, standard deviation and number of seeds per (model, task, probe, component, baseline, split,
    metric, layer). Where a cell has a point fit (a row without a seed: the probe fitted on the whole
    training set, beside seeds that fit bootstrap resamples of it), ``mean`` is the point fit's value and
    ``std``/``n_seeds`` describe the seeds (:mod:`bertology.probing.summary`); ``seeds_mean`` is always
    the seeds' own mean (below the point fit by the bootstrap's bias)."""
    results = _results(results)
    if results.empty:
        raise DataError("no probing results to summarize")
    point = results["seed"].isna() if "seed" in results.columns else pd.Series(False, index=results.index)
    frame = results.assign(seeded=results["value"].where(~point), point=results["value"].where(point))
    summary = (frame.groupby(GROUP, dropna=False)
               .agg(seeds_mean=("seeded", "mean"), std=("seeded", "std"), n_seeds=("seeded", "count"),
                    point=("point", "first"))
               .reset_index())
    summary.insert(len(GROUP), "mean", summary["point"].fillna(summary["seeds_mean"]))
    return summary.drop(columns="point")[GROUP + ["mean", "std", "n_seeds", "seeds_mean"]]


def _metric_rows(summary: pd.DataFrame, task: str, split: str, baseline: str, mix: bool = False) -> pd.DataFrame:
    """Per-layer rows (or the scalar-mix row) of a task's primary metric for one baseline and split."""
    metric = PRIMARY_METRIC.get(task, "accuracy")
    rows = summary[(summary.task == task) & (summary.split == split) & (summary.baseline == baseline)
                   & (summary.metric == metric)]
    is_mix = rows.component.eq(SCALAR_MIX).fillna(False).astype(bool)
    return rows[is_mix] if mix else rows[~is_mix & rows.layer.notna()]


def _tables_of(source, tasks: Sequence[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None]:
    """``(results, summary, datasets)`` from a Result, a mapping of its tables, or a bare results frame.
    The summary carries ``ci_low``/``ci_high`` when the run computed intervals (NaN otherwise)."""
    if isinstance(source, Result):
        tables = source.tables
    elif isinstance(source, Mapping):
        tables = source
    else:
        tables = {"results": source}
    results = _results(tables["results"])
    if tasks is not None:
        results = results[results["task"].isin(list(tasks))]
    summary = tables.get("summary")
    if summary is None or "ci_low" not in summary.columns:
        summary = summarize(results).assign(ci_low=np.nan, ci_high=np.nan)
    else:
        summary = summary[summary["task"].isin(set(results["task"]))]
    return results, summary, tables.get("datasets")


def _sizes(datasets: pd.DataFrame | None, task: str) -> dict:
    """``n_train``, ``n_dev``, ``n_test`` of a task (the structural tasks share the ``structural`` row)."""
    empty = {"n_train": pd.NA, "n_dev": pd.NA, "n_test": pd.NA}
    if datasets is None or datasets.empty:
        return empty
    name = "structural" if task.startswith("structural-") else task
    rows = datasets[datasets["task"] == name]
    if rows.empty:
        return empty
    row = rows.iloc[0]
    used = row["n_train"] if "n_train" in rows else row.get("train_used", row["train"])
    return {"n_train": int(used), "n_dev": int(row.get("n_dev", row["dev"])), "n_test": int(row.get("n_test", row["test"]))}


def table2_frame(results, split: str = "test", tasks: Sequence[str] | None = None) -> pd.DataFrame:
    """Numbers behind Table 2: one row per (task, layer) with the encoder's mean (the point fit on every training
    example where the run made one, :func:`summarize`) and std over seeds, its
    95% interval (``ci_low``, ``ci_high``), the dev mean (``dev_mean``, what the best layer is chosen on),
    the untrained twin's mean, ``delta`` = encoder - twin with its own 95% interval (``delta_ci_low``,
    ``delta_ci_high``: paired bootstrap of the per-example differences, pooled over seeds) and its
    ``delta_sign`` (:func:`delta_signs`: ``"+"``/``"-"`` where the interval excludes 0, ``"0"`` where it
    holds 0, so no sign is established; ``""`` without an interval), the control accuracy and selectivity, the
    majority and word-identity baselines (``linear_chain`` for structural tasks), the sizes used
    (``n_train``, ``n_dev``, ``n_test``), ``best_on_dev`` (the layer with the highest dev mean, never
    chosen on test), ``best_marked`` (that layer, only when :func:`bertology.probing.summary.best_layer`
    finds it distinguishable and above the majority baseline), ``powered`` and ``small_split``
    (:func:`bertology.probing.summary.power_flags`). Fractions (the primary metric of structural
    tasks: UUAS, root accuracy). The scalar mix is a row with ``layer`` <NA> and ``component``
    ``"scalar-mix"``.

    ``results``: a :class:`~bertology.results.Result` of :func:`~bertology.probing.run_probing` or a
    mapping of its tables (intervals and sizes come from its ``summary`` and ``datasets``), or a bare
    ``results`` frame (then without intervals or sizes). ``tasks`` restricts the table to some tasks."""
    results, summary, datasets = _tables_of(results, tasks)
    records = []
    for task in dict.fromkeys(results.task):  # the order tasks were run in
        ours = _metric_rows(summary, task, split, "none")
        if ours.empty:
            continue
        dev = _metric_rows(summary, task, "dev", "none").set_index("layer")["mean"]
        best = dev.idxmax() if not dev.empty else pd.NA
        twin = _metric_rows(summary, task, split, "untrained").set_index("layer")["mean"]
        control = _metric_rows(summary, task, split, "control").set_index("layer")["mean"]
        baselines = {}
        for baseline in ("majority", "word-identity", "linear-chain"):
            part = _metric_rows(summary, task, split, baseline)
            baselines[baseline] = part["mean"].iloc[0] if not part.empty else np.nan
        sizes = _sizes(datasets, task)
        for row in ours.sort_values("layer").itertuples():
            untrained = twin.get(row.layer, np.nan)
            ctrl = control.get(row.layer, np.nan)
            records.append({
                "task": task, "component": None, "layer": int(row.layer), "metric": row.metric, "split": split,
                "mean": row.mean, "std": row.std, "n_seeds": row.n_seeds, "ci_low": row.ci_low,
                "ci_high": row.ci_high, "dev_mean": dev.get(row.layer, np.nan),
                "untrained": untrained, "delta": (row.mean - untrained),
                "delta_ci_low": getattr(row, "delta_ci_low", np.nan), "delta_ci_high": getattr(row, "delta_ci_high", np.nan),
                "control": ctrl, "selectivity": (row.mean - ctrl),
                "majority": baselines["majority"], "word_identity": baselines["word-identity"],
                "linear_chain": baselines["linear-chain"], **sizes,
                "best_on_dev": bool(row.layer == best),
            })
        mix = _metric_rows(summary, task, split, "none", mix=True)
        mix_twin = _metric_rows(summary, task, split, "untrained", mix=True)
        if not mix.empty:
            twin_value = mix_twin["mean"].iloc[0] if not mix_twin.empty else np.nan
            dev_mix = _metric_rows(summary, task, "dev", "none", mix=True)
            records.append({
                "task": task, "component": SCALAR_MIX, "layer": pd.NA, "metric": "accuracy", "split": split,
                "mean": mix["mean"].iloc[0], "std": mix["std"].iloc[0], "n_seeds": mix["n_seeds"].iloc[0],
                "ci_low": mix["ci_low"].iloc[0], "ci_high": mix["ci_high"].iloc[0],
                "dev_mean": dev_mix["mean"].iloc[0] if not dev_mix.empty else np.nan,
                "untrained": twin_value, "delta": (mix["mean"].iloc[0] - twin_value),
                "delta_ci_low": mix.get("delta_ci_low", pd.Series([np.nan])).iloc[0],
                "delta_ci_high": mix.get("delta_ci_high", pd.Series([np.nan])).iloc[0],
                "control": np.nan, "selectivity": np.nan, "majority": baselines["majority"],
                "word_identity": baselines["word-identity"], "linear_chain": baselines["linear-chain"], **sizes,
                "best_on_dev": False,
            })
    if not records:
        raise DataError(f"no '{split}' results with baseline 'none' to tabulate")
    frame = pd.DataFrame(records)
    frame["layer"] = frame["layer"].astype("Int64")
    for column in ("n_train", "n_dev", "n_test"):
        frame[column] = frame[column].astype("Int64")
    frame["delta_sign"] = delta_signs(frame)
    frame["best_marked"] = False
    for task in dict.fromkeys(frame["task"]):
        verdict = best_layer(frame, task)
        if verdict.marked is not None:
            frame.loc[(frame["task"] == task) & (frame["layer"] == verdict.marked), "best_marked"] = True
    return power_flags(frame)


#: Columns of the ``best_layer`` table: one row per layer the verdict names (``chosen``: the one chosen on dev;
#: the others are indistinguishable from it), the verdict's numbers repeated on each.
BEST_LAYER_COLUMNS = ["task", "layer", "chosen", "metric", "split", "accuracy", "ci_low", "ci_high", "runner_up",
                      "distinguishable", "majority", "beats_majority", "powered", "marked"]


def best_layer_table(table2: pd.DataFrame) -> pd.DataFrame:
    """The best-layer verdict (:func:`bertology.probing.summary.best_layer`) of every task of a ``table2``
    frame, tidy: one row per layer in the verdict's ``layers`` (``chosen`` marks the layer chosen on dev)."""
    rows = []
    for verdict in best_layers(table2).values():
        for layer in verdict.layers:
            rows.append({"task": verdict.task, "layer": layer, "chosen": layer == verdict.layer,
                         "metric": verdict.metric, "split": verdict.split, "accuracy": verdict.accuracy,
                         "ci_low": verdict.ci_low, "ci_high": verdict.ci_high, "runner_up": verdict.runner_up,
                         "distinguishable": verdict.distinguishable, "majority": verdict.majority,
                         "beats_majority": verdict.beats_majority, "powered": verdict.powered,
                         "marked": verdict.marked})
    table = pd.DataFrame(rows, columns=BEST_LAYER_COLUMNS)
    return table.astype({"layer": "Int64", "runner_up": "Int64", "marked": "Int64", "chosen": bool,
                         "distinguishable": bool, "beats_majority": bool, "powered": bool})


def best_layer_verdicts(table: pd.DataFrame) -> dict[str, BestLayer]:
    """The :class:`~bertology.probing.summary.BestLayer` of every task of a ``best_layer`` table (in its order)."""
    out = {}
    for task, part in table.groupby("task", sort=False):
        chosen = part[part["chosen"].astype(bool)].iloc[0]
        runner_up = chosen["runner_up"]
        out[str(task)] = BestLayer(
            task=str(task), metric=str(chosen["metric"]), split=str(chosen["split"]), layer=int(chosen["layer"]),
            layers=tuple(sorted(int(l) for l in part["layer"])), accuracy=float(chosen["accuracy"]),
            ci_low=float(chosen["ci_low"]), ci_high=float(chosen["ci_high"]),
            runner_up=None if pd.isna(runner_up) else int(runner_up), distinguishable=bool(chosen["distinguishable"]),
            majority=float(chosen["majority"]), beats_majority=bool(chosen["beats_majority"]),
            powered=bool(chosen["powered"]))
    return out


def delta_signs(frame: pd.DataFrame) -> pd.Series:
    """The established sign of every row's delta vs the untrained twin: ``"+"`` or ``"-"`` when its 95%
    interval (``delta_ci_low``, ``delta_ci_high``) excludes 0, ``"0"`` when the interval holds 0 (the
    trained model and its twin are not told apart), ``""`` when the run computed no interval. A
    conclusion is drawn from this, never from the point delta's sign, which can flip with the training size
    while the interval holds 0 (docs/probing.md, "Deltas and their sign")."""
    low = pd.to_numeric(frame.get("delta_ci_low", pd.Series(np.nan, index=frame.index)), errors="coerce")
    high = pd.to_numeric(frame.get("delta_ci_high", pd.Series(np.nan, index=frame.index)), errors="coerce")
    signs = np.where(low > 0, "+", np.where(high < 0, "-", "0"))
    return pd.Series(np.where(low.isna() | high.isna(), "", signs), index=frame.index, dtype=object)


def _delta_text(delta: float, delta_sign: str = "") -> str:
    """A delta in points with its sign, and ``ns`` when its interval holds 0 (no established sign)."""
    if pd.isna(delta):
        return percent(delta)
    return f"{'+' if delta > 0 else ''}{percent(delta)}{' ns' if delta_sign == '0' else ''}"


def _cell(mean: float, delta: float, std: float, with_std: bool, ci_low: float = np.nan,
          ci_high: float = np.nan, delta_sign: str = "") -> str:
    if pd.isna(mean):
        return ""
    text = percent(mean)
    if not pd.isna(ci_low) and not pd.isna(ci_high):
        text += f" [{percent(ci_low)}, {percent(ci_high)}]"
    elif with_std and not pd.isna(std):
        text += f"±{percent(std)}"
    if not pd.isna(delta):
        text += f" ({_delta_text(delta, delta_sign)})"
    return text


#: The extra rows of the Table 2 display, in order.
EXTRA_ROWS = ("mix", "majority", "word identity", "linear chain (right-branching)", "n train/dev/test",
              "best layer (dev)")


def _sizes_text(part: pd.DataFrame) -> str:
    row = part.iloc[0]
    if pd.isna(row.get("n_test", pd.NA)):
        return ""
    text = f"{int(row['n_train']):,}/{int(row['n_dev']):,}/{int(row['n_test']):,}"
    return text + (" (<200!)" if bool(row.get("small_split", False)) else "")


def _verdicts(best: pd.DataFrame | None) -> dict:
    return {} if best is None else best_layer_verdicts(best)


def table2(numbers: pd.DataFrame, best: pd.DataFrame | None = None, with_std: bool = False) -> pd.DataFrame:
    """The Convexity report's Table 2 layout of a ``table2`` frame (:func:`table2_frame`, a probing Result's
    ``table2``), for display: layers as rows, tasks as columns, cells ``"acc [ci_low, ci_high] (delta)"`` in
    percent with the 95% interval (when the run computed one) and delta = encoder - untrained twin (mean over
    seeds), followed by ``ns`` when the delta's own interval holds 0 (:func:`delta_signs`). Extra rows
    (:data:`EXTRA_ROWS`): ``mix`` (scalar mix), the baselines ``majority``, ``word identity`` (word, arc and
    span tasks) and ``linear chain (right-branching)`` (structural probes: distance |i - j|, root = the first
    word), the sizes used, and, given the Result's ``best_layer`` table as ``best``, ``best layer (dev)``: the
    layer chosen on dev when it is distinguishable from every other layer, else the indistinguishable layers
    ``"2-4 (tied)"``; ``"<maj"`` flags a chosen layer not above the majority baseline
    (:func:`bertology.probing.summary.best_layer`). Column names follow Table 2 (``BShift``); an underpowered
    task (interval wider than +/-1.5 points or a split under 200) gets a ``*``."""
    verdicts = _verdicts(best)
    columns = {}
    for task, part in numbers.groupby("task", sort=False):
        cells = {}
        for row in part.itertuples():
            key = "mix" if pd.isna(row.layer) else int(row.layer)
            cells[key] = _cell(row.mean, row.delta, row.std, with_std, row.ci_low, row.ci_high, row.delta_sign)
        for name, column in (("majority", "majority"), ("word identity", "word_identity"),
                             ("linear chain (right-branching)", "linear_chain")):
            value = part[column].iloc[0]
            cells[name] = percent(value) if not pd.isna(value) else ""
        cells["n train/dev/test"] = _sizes_text(part)
        if task in verdicts:
            cells["best layer (dev)"] = verdicts[task].label()
        name = _display_name(task)
        metric = part.metric.iloc[0]
        name = name if metric == "accuracy" else f"{name} [{metric}]"
        layered = part[part.layer.notna()]
        known = layered["ci_low"].notna().all()  # a bare results frame has no intervals to judge
        underpowered = (known and not layered["powered"].all()) or layered["small_split"].any()
        columns[name + ("*" if underpowered else "")] = cells
    table = pd.DataFrame(columns)
    layers = sorted(k for k in table.index if isinstance(k, (int, np.integer)))
    extra = [k for k in EXTRA_ROWS if k in table.index and (table.loc[k].fillna("") != "").any()]
    table = table.reindex(layers + extra).fillna("")
    table.index.name = "layer"
    return table


def _title(model: str | None, split: str) -> str:
    return f"{model + ': ' if model else ''}{split} accuracy per layer, % [95% CI] (delta vs untrained twin)"


def table2_rich(numbers: pd.DataFrame, best: pd.DataFrame | None = None, model: str | None = None,
                title: str | None = None, with_std: bool = True):
    """:func:`table2` as a :class:`rich.table.Table`; the marked best layer (distinguishable, above majority,
    the ``table2`` frame's ``best_marked``) is in bold. Cells fold rather than being cut
    (``overflow="fold"``); :func:`print_table2` switches to one narrow table per task when the terminal is
    too narrow for this one."""
    frame = table2(numbers, best, with_std=with_std)
    marked = {(_display_name(t), int(l)) for t, l in numbers[numbers.best_marked][["task", "layer"]].itertuples(index=False)}
    split = str(numbers["split"].iloc[0]) if len(numbers) else "test"
    table = Table(title=title or _title(model, split))
    table.add_column("layer", justify="right", overflow="fold")
    for column in frame.columns:
        table.add_column(str(column), justify="right", overflow="fold")
    for layer, row in frame.iterrows():
        cells = []
        for column in frame.columns:
            text = row[column]
            plain = str(column).split(" [")[0].rstrip("*")
            cells.append(f"[bold]{text}[/bold]" if (plain, layer) in marked and text else text)
        table.add_row(str(layer), *cells)
    table.caption = CAPTION
    return table


CAPTION = ("bold = best layer: chosen on dev and outside every other layer's 95% interval (tied = layers whose "
           "interval reaches it; <maj = not above the majority baseline); numbers = the probe fitted on every "
           "training example; [95% CI] = bootstrap over test examples plus the spread of the seeds' probes (each "
           "fitted on a bootstrap resample of the training set); (delta) = minus the untrained twin, ns = its 95% interval holds 0 (no "
           "established sign); * = underpowered (CI wider than ±1.5 points or a split under 200); "
           "mix = learned scalar mix of all layers; layer 0 = embeddings")


def table2_vertical(numbers: pd.DataFrame, best: pd.DataFrame | None = None) -> list:
    """One narrow :class:`rich.table.Table` per task of a ``table2`` frame (layers as rows; accuracy,
    interval, baselines as columns), captioned with the task's best-layer verdict when ``best`` is given:
    the layout for terminals too narrow for :func:`table2_rich`."""
    verdicts = _verdicts(best)
    out = []
    for task, part in numbers.groupby("task", sort=False):
        metric = part.metric.iloc[0]
        split = part.split.iloc[0]
        table = Table(title=f"{_display_name(task)} ({metric}, {split}, %)",
                      caption=verdicts[task].sentence() if task in verdicts else None)
        for column in ("layer", "mean", "95% CI", "untrained", "delta", "control"):
            table.add_column(column, justify="right", overflow="fold")
        for row in part.itertuples():
            layer = "mix" if pd.isna(row.layer) else str(int(row.layer))
            ci = "" if pd.isna(row.ci_low) else f"{percent(row.ci_low)}-{percent(row.ci_high)}"
            cells = [percent(row.mean), ci, percent(row.untrained), _delta_text(row.delta, row.delta_sign),
                     percent(row.control)]
            if bool(row.best_marked):
                cells = [f"[bold]{c}[/bold]" for c in cells]
            table.add_row(layer, *cells)
        for name, column in (("majority", "majority"), ("word identity", "word_identity"),
                             ("linear chain (right-branching)", "linear_chain")):
            if not pd.isna(part[column].iloc[0]):
                table.add_row(name, percent(part[column].iloc[0]), "", "", "", "")
        table.add_row("n train/dev/test", _sizes_text(part), "", "", "", "")
        out.append(table)
    return out


def print_table2(numbers: pd.DataFrame, best: pd.DataFrame | None = None, console=None,
                 model: str | None = None) -> None:
    """Print Table 2 of a ``table2`` frame without ever truncating it: the wide layout when it fits the
    console, else one narrow table per task (:func:`table2_vertical`); cells fold instead of being cut."""
    console = console or Console()
    wide = table2_rich(numbers, best, model)
    needed = Measurement.get(console, console.options.update_width(10**5), wide).maximum
    if needed <= console.width:
        console.print(wide)
        return
    for table in table2_vertical(numbers, best):
        console.print(table)
    console.print(f"[dim]{CAPTION}[/dim]")


def plot_layer_curves(numbers: pd.DataFrame, path: str | os.PathLike | None = None, model: str | None = None,
                      formats: Sequence[str] = ("png", "svg")):
    """Accuracy per layer for each task of a ``table2`` frame (its ``mean``: the point fit, or the mean over seeds
    without one; in percent, with its 95%
    interval as a band, or +- std when the run computed no interval) beside its baselines: majority (dashed),
    word identity (dash-dot), linear chain (structural), untrained twin, control task, and the scalar mix
    (dotted); a star marks the frame's ``best_marked`` layer (distinguishable and above the majority
    baseline, :func:`bertology.probing.summary.best_layer`). Saved as ``path`` with each suffix in
    ``formats`` (atomically; a PNG with its SVG and PDF siblings). Returns the matplotlib Figure."""
    matplotlib.use("Agg")
    frame = numbers.copy()
    split = str(frame["split"].iloc[0]) if len(frame) else "test"
    shown = ["mean", "std", "untrained", "control", "majority", "word_identity", "linear_chain", "ci_low", "ci_high"]
    frame[shown] = frame[shown] * 100  # figures show percent
    names = list(dict.fromkeys(frame.task))
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
        if part["ci_low"].notna().all():
            ax.fill_between(x, part["ci_low"], part["ci_high"], color="C0", alpha=0.2, label="95% CI")
        else:
            ax.fill_between(x, part["mean"] - part["std"].fillna(0), part["mean"] + part["std"].fillna(0),
                            color="C0", alpha=0.2, label="± std")
        if part.untrained.notna().any():
            ax.plot(x, part.untrained, "s-", color="C1", ms=3, label="untrained twin")
        if part.control.notna().any():
            ax.plot(x, part.control, "^-", color="C2", ms=3, label="control task")
        if part.majority.notna().any():
            ax.axhline(part.majority.iloc[0], ls="--", color="grey", label="majority")
        if part.word_identity.notna().any():
            ax.axhline(part.word_identity.iloc[0], ls="-.", color="C4", label="word identity")
        if part.linear_chain.notna().any():
            ax.axhline(part.linear_chain.iloc[0], ls="--", color="C5", label="linear chain")
        if not mix.empty:
            ax.axhline(mix["mean"].iloc[0], ls=":", color="C0", label="scalar mix")
        best = part[part.best_marked]
        if not best.empty:
            ax.plot(best.layer.astype(int), best["mean"], "*", color="C3", ms=12, label="best layer")
        metric = part.metric.iloc[0] if not part.empty else "accuracy"
        ax.set_title(_display_name(task))
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel(f"{metric} (%)")
        ax.set_xticks(x)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    legend: dict = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=min(6, max(1, len(legend))), frameon=False)
    fig.suptitle(f"{model + ': ' if model else ''}probing accuracy per layer ({split}) with 95% interval")
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    if path is None:
        plt.close(fig)
        return fig
    base = Path(path)
    stem = base.with_suffix("") if base.suffix in {".png", ".svg", ".pdf"} else base
    # a PNG brings its SVG and PDF siblings (finish_figure); other formats are saved as asked
    asked = ["png", *(fmt for fmt in formats if fmt not in ("png", "svg", "pdf"))] if "png" in formats else formats
    for fmt in asked:
        finish_figure(fig, stem.with_suffix(f".{fmt}"), layout=False, dpi=150)
    return fig
