"""The common end of every figure written to a file: layout, save (with vector siblings), close."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt

from bertology.files import save_figure


def finish_layer_figure(figure, axes, path: str | os.PathLike, title: str | None = None, legend_size: int = 8) -> Path:
    """The common end of a per-layer figure: x axis "layer (0 = embeddings)", a grid, one legend, the title;
    then :func:`finish_figure`."""
    for axis in axes:
        axis.set_xlabel("layer (0 = embeddings)")
        axis.grid(True, linewidth=0.3)
    axes[0].legend(fontsize=legend_size)
    if title:
        figure.suptitle(title, fontsize=10)
    return finish_figure(figure, path)


def finish_figure(figure, path: str | os.PathLike, layout: dict | bool | None = None, **save) -> Path:
    """Lay out (``tight_layout``; ``figure.subplots_adjust(**layout)`` where tight_layout cannot, e.g. a colorbar
    shared by several axes; ``layout=False`` for a figure laid out already, e.g. ``tight_layout(rect=...)`` around
    a legend), save with :func:`save_figure` (``save``: its ``savefig`` keywords, e.g. ``dpi``, ``bbox_inches``) and
    close (figures are many in a report run). A ``.png`` gets ``.svg`` and ``.pdf`` siblings (vector versions for
    papers; the report offers them as downloads). The one way a figure is written to a file
    (``tests/test_architecture.py::test_figures_are_saved_by_finish_figure``); the figure stays drawable after."""
    if layout is None:
        figure.tight_layout()
    elif layout is not False:
        figure.subplots_adjust(**layout)
    saved = save_figure(figure, path, **save)
    if saved.suffix == ".png":
        # the same figure gives the same bytes: no dates, and SVG clip-path ids from a fixed salt, not a random one
        with plt.rc_context({"svg.hashsalt": "bertology"}):
            for suffix in (".svg", ".pdf"):
                save_figure(figure, saved.with_suffix(suffix), **save, metadata={"Date": None} if suffix == ".svg"
                            else {"CreationDate": None})
    plt.close(figure)
    return saved
