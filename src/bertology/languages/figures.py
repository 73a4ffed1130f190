"""The figures of a ``languages`` result: what a paper would show. Axes show percent; tables keep fractions."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from bertology.plots import finish_figure, finish_layer_figure
from bertology.results import Result

_STYLE = {"none": ("#2a5db0", "-"), "untrained": ("#999999", "--"), "majority": ("#d95f02", ":")}
#: What a figure calls each value of the ``baseline`` column.
_LABEL = {"none": "model", "untrained": "untrained twin", "majority": "majority"}


def _band(axis, rows: pd.DataFrame, label: str, color: str, style: str = "-") -> None:
    rows = rows.sort_values("layer")
    layers = rows["layer"].astype(int).to_numpy()
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.plot(layers, 100 * rows["mean"].to_numpy(), style, color=color, marker="o", markersize=3, label=label)
    if "ci_low" in rows and rows["ci_low"].notna().any():
        axis.fill_between(layers, 100 * rows["ci_low"].to_numpy(float), 100 * rows["ci_high"].to_numpy(float),
                          color=color, alpha=0.15, linewidth=0)


def plot_identity(result: Result, path: str | os.PathLike, title: str = "") -> Path:
    """Language-identity probe accuracy (test) per layer: model, untrained twin, majority."""
    summary = result["identity_summary"]
    test = summary[summary["split"] == "test"]
    figure, axis = plt.subplots(figsize=(5.5, 3.4))
    for kind, label in _LABEL.items():
        rows = test[test["baseline"] == kind]
        if len(rows):
            _band(axis, rows, label, *_STYLE[kind])
    axis.set_ylabel("language identity accuracy (%)")
    return finish_layer_figure(figure, [axis], path, title or "Language identity from mean-pooled sentence vectors")


def plot_projection(result: Result, path: str | os.PathLike, baseline: str = "none", title: str = "") -> Path:
    """Per layer, the first two principal components of a sample of sentences (dots) and of the language
    centroids (labelled markers): Libovický et al. (2019)'s Figure 7, at every layer; ``baseline`` ``none``
    (the model) or ``untrained`` (its twin)."""
    table = result["projection"]
    table = table[table["baseline"] == baseline]
    layers = sorted(int(v) for v in table["layer"].unique())
    codes = list(dict.fromkeys(table["language"]))
    colors = plt.get_cmap("tab10" if len(codes) <= 10 else "tab20")
    columns = min(4, len(layers))
    rows = -(-len(layers) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.4 * columns, 3.2 * rows), squeeze=False)
    for axis, layer in zip(axes.ravel(), layers):
        at = table[table["layer"] == layer]
        for k, code in enumerate(codes):
            dots = at[(at["language"] == code) & (at["kind"] == "sentence")]
            axis.scatter(dots["x"], dots["y"], s=4, alpha=0.35, color=colors(k % colors.N), linewidths=0)
        for k, code in enumerate(codes):
            centre = at[(at["language"] == code) & (at["kind"] == "centroid")]
            axis.scatter(centre["x"], centre["y"], s=60, marker="X", color=colors(k % colors.N), edgecolors="black",
                         linewidths=0.6, label=code)
            for _, point in centre.iterrows():
                axis.annotate(code, (point["x"], point["y"]), fontsize=8, xytext=(3, 3), textcoords="offset points")
        explained = at["explained_1"].iloc[0], at["explained_2"].iloc[0]
        axis.set_title(f"layer {layer}", fontsize=9)
        axis.set_xlabel(f"PC1 ({100 * explained[0]:.0f}% of variance)", fontsize=8)
        axis.set_ylabel(f"PC2 ({100 * explained[1]:.0f}%)", fontsize=8)
        axis.tick_params(labelsize=7)
    for axis in axes.ravel()[len(layers):]:
        axis.axis("off")
    axes.ravel()[0].legend(fontsize=6, ncol=2, markerscale=0.6)
    figure.suptitle(title or f"Language centroids (X) and sampled sentences, {_LABEL[baseline]}", fontsize=10)
    return finish_figure(figure, path)


def plot_retrieval(result: Result, path: str | os.PathLike, title: str = "") -> Path:
    """Parallel sentence retrieval accuracy @1 (test queries, mean over ordered language pairs) per layer,
    raw and centred, model and twin."""
    summary = result["retrieval_summary"]
    figure, axis = plt.subplots(figsize=(5.5, 3.4))
    for kind, label in (("none", "model"), ("untrained", "untrained twin")):
        for centering, marker_style in (("none", "-"), ("centered", "-.")):
            rows = summary[(summary["baseline"] == kind) & (summary["centering"] == centering)]
            if len(rows):
                color = _STYLE[kind][0] if centering == "none" else ("#1b9e77" if kind == "none" else "#66a61e")
                _band(axis, rows, f"{label}, {'centred' if centering == 'centered' else 'raw'}", color,
                      marker_style if kind == "none" else "--")
    axis.set_ylabel("retrieval accuracy @1 (%)")
    return finish_layer_figure(figure, [axis], path, title or "Parallel sentence retrieval (mean over language pairs)")


def retrieval_matrix(result: Result, baseline: str = "none", centering: str = "centered") -> tuple[int, pd.DataFrame]:
    """``(layer, query x target accuracy table)`` at the layer chosen on the selection queries."""
    summary = result["retrieval_summary"]
    chosen = summary[(summary["baseline"] == baseline) & (summary["centering"] == centering) & summary["best"]]
    layer = int(chosen["layer"].iloc[0])
    rows = result["retrieval"]
    rows = rows[(rows["baseline"] == baseline) & (rows["centering"] == centering) & (rows["layer"] == layer)]
    codes = list(dict.fromkeys(list(rows["query_language"]) + list(rows["target_language"])))
    matrix = rows.pivot(index="query_language", columns="target_language", values="accuracy").reindex(
        index=codes, columns=codes)
    return layer, matrix


def plot_retrieval_matrix(result: Result, path: str | os.PathLike, baseline: str = "none", title: str = "") -> Path:
    """Query language x target language retrieval accuracy @1 at the best layer, raw and centred."""
    figure, axes = plt.subplots(1, 2, figsize=(10, 4.4))
    for axis, centering in zip(axes, ("none", "centered")):
        layer, matrix = retrieval_matrix(result, baseline, centering)
        values = 100 * matrix.to_numpy(dtype=float)
        image = axis.imshow(values, vmin=0, vmax=100, cmap="viridis")
        axis.set_xticks(range(len(matrix.columns)), matrix.columns, fontsize=8)
        axis.set_yticks(range(len(matrix.index)), matrix.index, fontsize=8)
        axis.set_xlabel("searched language")
        axis.set_ylabel("query language")
        for (i, j), value in np.ndenumerate(values):
            if np.isfinite(value):
                axis.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=6,
                          color="white" if value < 50 else "black")
        axis.set_title(f"{'centred' if centering == 'centered' else 'raw'}, layer {layer}", fontsize=9)
    figure.colorbar(image, ax=axes, shrink=0.8).set_label("accuracy @1 (%)")
    figure.suptitle(title or f"Retrieval accuracy @1 per language pair ({_LABEL[baseline]}, best layer)", fontsize=10)
    return _finish_with_colorbar(figure, path)


def _finish_with_colorbar(figure, path) -> Path:
    # tight_layout does not know about a colorbar shared by several axes; the layout is fixed by hand.
    return finish_figure(figure, path, layout={"left": 0.06, "right": 0.82, "top": 0.88, "bottom": 0.12,
                                               "wspace": 0.3})


def plot_transfer(result: Result, path: str | os.PathLike, task: str = "upos", title: str = "") -> Path:
    """Per language (one panel each): the probe trained within the language and the one trained on English,
    per layer, for the model and its twin, with the majority baseline."""
    summary = result["transfer_summary"]
    summary = summary[(summary["task"] == task) & (summary["split"] == "test")]
    codes = [c for c in dict.fromkeys(summary["language"]) if c != "source"]
    columns = min(5, len(codes))
    rows = -(-len(codes) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(2.9 * columns, 2.5 * rows), squeeze=False, sharey=True)
    lines = (("none", "in-language", "#2a5db0", "-", "in-language"), ("none", "zero-shot", "#d62728", "-",
             "zero-shot from English"), ("untrained", "in-language", "#2a5db0", "--", "twin, in-language"),
             ("untrained", "zero-shot", "#d62728", "--", "twin, zero-shot"),
             ("majority", "in-language", "#d95f02", ":", "majority"))
    for axis, code in zip(axes.ravel(), codes):
        at = summary[summary["language"] == code]
        for kind, setting, color, style, label in lines:
            part = at[(at["baseline"] == kind) & (at["setting"] == setting)]
            if len(part):
                _band(axis, part, label, color, style)
        axis.set_title(code, fontsize=9)
        axis.grid(True, linewidth=0.3)
        axis.tick_params(labelsize=7)
    for axis in axes.ravel()[len(codes):]:
        axis.axis("off")
    for axis in axes[:, 0]:
        axis.set_ylabel(f"{task.upper()} accuracy (%)", fontsize=8)
    for axis in axes[-1]:
        axis.set_xlabel("layer", fontsize=8)
    axes.ravel()[0].legend(fontsize=6)
    figure.suptitle(title or f"{task.upper()} probes: within the language vs zero-shot from English", fontsize=10)
    return finish_figure(figure, path)


def plot_tokenizer(result: Result, path: str | os.PathLike, title: str = "") -> Path:
    """Fertility (subwords per word) and the shares of unknown and split words, per language."""
    table = result["tokenizer"]
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    axes[0].bar(table["language"], table["fertility"], color="#2a5db0")
    axes[0].set_ylabel("subwords per word")
    width = 0.4
    x = np.arange(len(table))
    axes[1].bar(x - width / 2, 100 * table["split_word_share"], width, label="words split", color="#7570b3")
    axes[1].bar(x + width / 2, 100 * table["unk_word_share"], width, label="words [UNK]", color="#d95f02")
    axes[1].set_xticks(x, table["language"])
    axes[1].set_ylabel("share of words (%)")
    axes[1].legend(fontsize=8)
    for axis in axes:
        axis.grid(True, axis="y", linewidth=0.3)
    figure.suptitle(title or "The tokenizer per language", fontsize=10)
    return finish_figure(figure, path)


def save_figures(result: Result, out: str | os.PathLike, title_prefix: str = "") -> dict[str, Path]:
    """Every figure the result supports into ``out`` (PNG with SVG and PDF siblings); also kept in
    ``result.figures``."""
    out = Path(out)
    prefix = f"{title_prefix}: " if title_prefix else ""
    made = {"identity": plot_identity(result, out / "identity.png", prefix + "language identity per layer"),
            "projection": plot_projection(result, out / "projection.png"),
            "tokenizer": plot_tokenizer(result, out / "tokenizer.png", prefix + "the tokenizer per language")}
    if "retrieval_summary" in result:
        made["retrieval"] = plot_retrieval(result, out / "retrieval.png", prefix + "parallel sentence retrieval")
        made["retrieval_matrix"] = plot_retrieval_matrix(result, out / "retrieval_matrix.png")
    if "transfer_summary" in result:
        for task in dict.fromkeys(result["transfer_summary"]["task"]):
            made[f"transfer_{task}"] = plot_transfer(result, out / f"transfer_{task}.png", task)
    result.figures.update(made)
    return made
