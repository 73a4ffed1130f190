"""Layers x heads heatmaps of head statistics and of heads-as-parsers accuracies (matplotlib, Agg)."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Iterable

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bertology.attention.stats import STATISTICS, statistic_matrix  # noqa: E402
from bertology.errors import DataError  # noqa: E402


def plot_heatmap(matrix: np.ndarray, title: str, colorbar_label: str, ax=None, vmin=None, vmax=None,
                 cmap: str = "viridis", annotate: bool | None = None):
    """A layers x heads heatmap; layer 1 at the top; ticks follow the tables (layers from 1, heads from 0)."""
    matrix = np.asarray(matrix, dtype=float)
    if matrix.ndim != 2:
        raise DataError(f"heatmap needs a [layers, heads] matrix; got shape {matrix.shape}")
    n_layers, n_heads = matrix.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.45 * n_heads, 1.0 + 0.4 * n_layers))
    image = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(n_heads), [str(h) for h in range(n_heads)])
    ax.set_yticks(range(n_layers), [str(layer + 1) for layer in range(n_layers)])
    ax.set_xlabel("head (from 0)")
    ax.set_ylabel("layer (from 1)")
    ax.set_title(title, fontsize=10)
    colorbar = ax.figure.colorbar(image, ax=ax)
    colorbar.set_label(colorbar_label)
    if annotate is None:
        annotate = n_layers * n_heads <= 200
    if annotate:
        finite = matrix[np.isfinite(matrix)]
        middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        for layer in range(n_layers):
            for head in range(n_heads):
                value = matrix[layer, head]
                if np.isfinite(value):
                    ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=6,
                            color="white" if value < middle else "black")
    return ax


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def _save(fig, path: Path) -> Path:
    """Write to a temporary file beside the target, then rename, so no half-written figure is left."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, suffix=path.suffix)
    os.close(handle)
    try:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def plot_head_statistics(stats: pd.DataFrame, out_dir: str | Path, model_name: str = "",
                         fmt: str = "png") -> list[Path]:
    """One heatmap per statistic of :func:`bertology.attention.stats.head_statistics`; returns the files."""
    out_dir = Path(out_dir)
    paths = []
    for statistic in [s for s in STATISTICS if s in set(stats["statistic"])]:
        matrix = statistic_matrix(stats, statistic)
        is_attention = statistic.startswith("attn_")
        label = "mean attention weight" if is_attention else ("nats" if "entropy" in statistic else "words")
        title = STATISTICS[statistic]
        if statistic.startswith("entropy") and "uniform_entropy" in stats.attrs:
            title += f"\n(uniform attention: {stats.attrs['uniform_entropy']:.2f} nats)"
        if model_name:
            title = f"{model_name}: {title}"
        fig, ax = plt.subplots(figsize=(1.5 + 0.45 * matrix.shape[1], 1.2 + 0.4 * matrix.shape[0]))
        plot_heatmap(matrix, title, label, ax=ax, vmin=0.0, vmax=1.0 if is_attention else None,
                     cmap="viridis" if is_attention else "magma")
        paths.append(_save(fig, out_dir / f"head_stat_{statistic}.{fmt}"))
    return paths


def plot_relation_heatmaps(parse: pd.DataFrame, relations: Iterable[str], out_dir: str | Path,
                           direction: str | None = None, model_name: str = "", fmt: str = "png") -> list[Path]:
    """Per relation, every head's accuracy as a parser (best direction per head unless one is given)."""
    out_dir = Path(out_dir)
    paths = []
    for relation in relations:
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
        matrix = table.to_numpy()
        fig, ax = plt.subplots(figsize=(1.5 + 0.45 * matrix.shape[1], 1.2 + 0.4 * matrix.shape[0]))
        plot_heatmap(matrix, title, "accuracy", ax=ax, vmin=0.0, vmax=1.0)
        paths.append(_save(fig, out_dir / f"parse_{_slug(relation)}.{fmt}"))
    return paths
