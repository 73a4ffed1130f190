"""``plots.finish_figure``: the one end of a figure written to a file (lay out, save with SVG and PDF siblings,
close); the same figure gives the same bytes."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

from bertology.plots import finish_figure  # noqa: E402


def _figure():
    figure, axis = plt.subplots(figsize=(3, 2))
    axis.plot([0, 1, 2], [1, 0, 2], label="line")
    axis.legend()
    return figure


def test_a_png_gets_svg_and_pdf_siblings_and_the_figure_is_closed(tmp_path):
    figure = _figure()
    saved = finish_figure(figure, tmp_path / "a.png", dpi=50)
    assert saved == tmp_path / "a.png" and not plt.fignum_exists(figure.number)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pdf", "a.png", "a.svg"]
    assert Image.open(saved).size == (150, 100)  # the savefig keywords reach the file: 3 x 2 inches at 50 dpi
    finish_figure(_figure(), tmp_path / "b.png", dpi=50)
    for suffix in (".png", ".svg", ".pdf"):  # no dates, no random ids: the same figure, the same bytes
        assert (tmp_path / f"a{suffix}").read_bytes() == (tmp_path / f"b{suffix}").read_bytes(), suffix
    assert finish_figure(_figure(), tmp_path / "c.svg").name == "c.svg" and not (tmp_path / "c.png").exists()


def test_layout_false_keeps_the_figure_s_own_layout(tmp_path):
    figure = _figure()
    figure.tight_layout(rect=(0, 0.2, 1, 1))  # room for a legend below, which tight_layout() would take back
    bottom = figure.axes[0].get_position().y0
    finish_figure(figure, tmp_path / "kept.png", layout=False)
    assert figure.axes[0].get_position().y0 == bottom
    relaid = _figure()
    relaid.tight_layout(rect=(0, 0.2, 1, 1))
    finish_figure(relaid, tmp_path / "relaid.png")
    assert relaid.axes[0].get_position().y0 < bottom
