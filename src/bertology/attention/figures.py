"""Layers x heads heatmaps of head statistics and of heads-as-parsers accuracies, and stacked bars of
Kovaleva pattern-type shares per layer (matplotlib, Agg).

Rows are labelled with the layers the table actually holds (a store extracted with ``layers=[3, 6]``
gives rows 3 and 6), in the one numbering (:mod:`bertology.numbering`: layer = hidden_states layer,
1..L; head from 0). Accuracies are fractions in the tables and shown as percent here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Sequence

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bertology.attention.pattern_classifiers import PATTERN_TYPES  # noqa: E402
from bertology.attention.patterns import type_proportions  # noqa: E402
from bertology.attention.stats import STATISTICS, statistic_matrix  # noqa: E402
from bertology.errors import DataError  # noqa: E402
from bertology.plots import finish_figure  # noqa: E402
from bertology.results import Result  # noqa: E402


def plot_heatmap(matrix: pd.DataFrame | np.ndarray, title: str, colorbar_label: str, ax=None, vmin=None, vmax=None,
                 cmap: str = "viridis", annotate: bool | None = None, layers: Sequence[int] | None = None,
                 heads: Sequence[int] | None = None, value_format: str = "{:.2f}"):
    """A layers x heads heatmap, first layer at the top.

    ``matrix`` is a frame indexed by layer with head columns (what :func:`~bertology.attention.stats.statistic_matrix`
    returns; its index and columns become the tick labels) or a plain ``[n_layers, n_heads]`` array, whose
    rows are the transformer layers 1..L unless ``layers`` names them.
    """
    if isinstance(matrix, pd.DataFrame):
        layers = list(matrix.index) if layers is None else layers
        heads = list(matrix.columns) if heads is None else heads
    values = np.asarray(matrix, dtype=float)
    if values.ndim != 2:
        raise DataError(f"heatmap needs a [layers, heads] matrix; got shape {values.shape}")
    n_layers, n_heads = values.shape
    layers = list(range(1, n_layers + 1)) if layers is None else [int(layer) for layer in layers]
    heads = list(range(n_heads)) if heads is None else [int(head) for head in heads]
    if len(layers) != n_layers or len(heads) != n_heads:
        raise DataError(f"{len(layers)} layer and {len(heads)} head labels for a {n_layers} x {n_heads} matrix")
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.45 * n_heads, 1.0 + 0.4 * n_layers))
    image = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(n_heads), [str(h) for h in heads])
    ax.set_yticks(range(n_layers), [str(layer) for layer in layers])
    ax.set_xlabel("head (from 0)")
    ax.set_ylabel("layer (1 = first transformer layer)")
    ax.set_title(title, fontsize=10)
    colorbar = ax.figure.colorbar(image, ax=ax)
    colorbar.set_label(colorbar_label)
    if annotate is None:
        annotate = n_layers * n_heads <= 200
    if annotate:
        finite = values[np.isfinite(values)]
        middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        for row in range(n_layers):
            for column in range(n_heads):
                value = values[row, column]
                if np.isfinite(value):
                    ax.text(column, row, value_format.format(value), ha="center", va="center", fontsize=6,
                            color="white" if value < middle else "black")
    return ax


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def statistic_figure(stats: pd.DataFrame | Result, statistic: str, model_name: str = "",
                     uniform_entropy: float | None = None):
    """The heatmap of one statistic of :func:`~bertology.attention.stats.head_statistics` (a Figure).

    With a :class:`~bertology.results.Result`, ``uniform_entropy`` defaults to its ``meta``."""
    if isinstance(stats, Result):
        uniform_entropy = stats.meta.get("uniform_entropy") if uniform_entropy is None else uniform_entropy
    matrix = statistic_matrix(stats, statistic)
    is_attention = statistic.startswith("attn_")
    label = "mean attention weight" if is_attention else ("nats" if "entropy" in statistic else "words")
    title = STATISTICS[statistic]
    if statistic.startswith("entropy") and uniform_entropy is not None:
        title += f"\n(uniform attention: {uniform_entropy:.2f} nats)"
    if model_name:
        title = f"{model_name}: {title}"
    fig, ax = plt.subplots(figsize=(1.5 + 0.45 * matrix.shape[1], 1.2 + 0.4 * matrix.shape[0]))
    plot_heatmap(matrix, title, label, ax=ax, vmin=0.0, vmax=1.0 if is_attention else None,
                 cmap="viridis" if is_attention else "magma")
    return fig


def plot_head_statistics(stats: pd.DataFrame | Result, out_dir: str | Path, model_name: str = "",
                         fmt: str = "png", uniform_entropy: float | None = None) -> list[Path]:
    """One heatmap file per statistic (``head_stat_<name>.<fmt>``); returns the files."""
    table = stats["statistics"] if isinstance(stats, Result) else stats
    paths = []
    for statistic in [s for s in STATISTICS if s in set(table["statistic"])]:
        fig = statistic_figure(stats, statistic, model_name=model_name, uniform_entropy=uniform_entropy)
        paths.append(_save(fig, Path(out_dir) / f"head_stat_{statistic}.{fmt}"))
    return paths


def relation_figure(parse: pd.DataFrame, relation: str, direction: str | None = None, model_name: str = ""):
    """Every head's accuracy as a parser of ``relation`` (best direction per head unless one is given),
    shown in percent; a Figure."""
    sub = parse[parse["relation"] == relation]
    if direction is not None:
        sub = sub[sub["direction"] == direction]
    if sub.empty:
        raise DataError(f"relation {relation!r} not in the heads-as-parsers table")
    table = sub.groupby(["layer", "head"])["accuracy"].max().unstack("head").sort_index().sort_index(axis=1)
    which = direction or "best direction per head"
    count = int(sub["count"].iloc[0])
    title = f"{relation} ({which}, {count} words)"
    if model_name:
        title = f"{model_name}: {title}"
    fig, ax = plt.subplots(figsize=(1.5 + 0.45 * table.shape[1], 1.2 + 0.4 * table.shape[0]))
    plot_heatmap(table * 100, title, "accuracy (%)", ax=ax, vmin=0.0, vmax=100.0, value_format="{:.0f}")
    return fig


def plot_relation_heatmaps(parse: pd.DataFrame, relations: Iterable[str], out_dir: str | Path,
                           direction: str | None = None, model_name: str = "", fmt: str = "png") -> list[Path]:
    """One heatmap file per relation (``parse_<relation>.<fmt>``); returns the files."""
    return [_save(relation_figure(parse, relation, direction, model_name), Path(out_dir) / f"parse_{_slug(relation)}.{fmt}")
            for relation in relations]


def _save(fig, path: Path) -> Path:
    return finish_figure(fig, path, layout=False, bbox_inches="tight")


#: Relations drawn by :func:`write_parse_figures` when the table has them.
FIGURE_RELATIONS = ("det", "obj", "nsubj", "amod", "nmod:poss", "aux", "case", "mark", "all")


def write_parse_figures(result: Result, out_dir: str | Path) -> list[Path]:
    """The figures of :func:`~bertology.attention.parsing.run_attention_analysis`, one folder per model under
    ``out_dir``: a heatmap per relation of :data:`FIGURE_RELATIONS` (dev) and one per head statistic."""
    paths = []
    for model_name, heads in result["heads"].groupby("model", sort=False):
        folder = Path(out_dir) / (_slug(model_name) or "model")
        dev = heads[heads["split"] == "dev"]
        relations = [r for r in FIGURE_RELATIONS if r in set(dev["relation"])]
        paths += plot_relation_heatmaps(dev, relations, folder, model_name=model_name)
        if "statistics" in result:
            stats = result["statistics"]
            paths += plot_head_statistics(stats[stats["model"] == model_name], folder, model_name=model_name,
                                          uniform_entropy=result.meta.get("uniform_entropy"))
    return paths


PATTERN_COLOURS = {
    "vertical": "#4c72b0",
    "diagonal": "#dd8452",
    "vertical+diagonal": "#8172b3",
    "block": "#55a868",
    "heterogeneous": "#c7c7c7",
}


def plot_pattern_proportions(tables: dict[str, pd.DataFrame] | pd.DataFrame, path: str | Path | None = None,
                             title: str | None = None):
    """Stacked bars of pattern shares per layer, one panel per model (as in the Dark Secrets post).

    ``tables`` is ``{model: pattern_types(...)}`` or one types table with a ``model`` column (the ``types``
    table of :func:`pattern_analysis`). Bars are labelled with the layers the tables hold. Returns the
    matplotlib Figure; with ``path`` it is also saved (PNG/SVG/PDF by suffix).
    """
    if isinstance(tables, pd.DataFrame):
        if "model" not in tables.columns:
            tables = {"model": tables}
        else:
            tables = {str(name): frame for name, frame in tables.groupby("model", sort=False, observed=True)}
    fig, axes = plt.subplots(1, len(tables), figsize=(4.2 * len(tables) + 1.6, 3.6), sharey=True, squeeze=False)
    for ax, (name, table) in zip(axes[0], tables.items()):
        props = type_proportions(table, ["layer"]).pivot(index="layer", columns="type", values="proportion")
        props = props.reindex(columns=list(PATTERN_TYPES)).fillna(0.0).sort_index()
        bottom = np.zeros(len(props))
        for kind in PATTERN_TYPES:
            ax.bar([str(int(layer)) for layer in props.index], props[kind], bottom=bottom,
                   color=PATTERN_COLOURS[kind], label=kind, edgecolor="white", linewidth=0.5)
            bottom += props[kind].to_numpy()
        ax.set_title(name)
        ax.set_xlabel("layer")
        ax.set_ylim(0, 1)
    axes[0][0].set_ylabel("share of heads")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles[::-1], labels[::-1], loc="center right", frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1 - 1.5 / fig.get_figwidth(), 1))
    if path is not None:
        finish_figure(fig, path, layout=False, dpi=150)
    return fig
