"""The pieces of a report (text, tables, figures) and their rendering into one self-contained HTML file."""

from __future__ import annotations

import base64
import hashlib
import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence, Union

import jinja2
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bertology import __version__
from bertology.files import ensure_dir, write_bytes
from bertology.results import MISSING, is_missing, percent  # noqa: E402


@dataclass
class Text:
    html: str


@dataclass
class Table:
    """A table shown on the page and downloadable as CSV.

    ``frame`` is what is shown; ``data`` what the CSV holds (default ``frame``: rates stay fractions there).
    ``percent`` names fraction columns shown as percent with one decimal; ``headers`` renames columns for
    display (default: ``snake_case`` -> ``snake case``); ``bold`` marks cells ``(row position, column)``.
    ``id`` is the anchor other parts of the page link to (default: ``<section>-table-<n>``).
    """

    frame: pd.DataFrame
    caption: str
    float_format: str = "{:.3f}"
    index: bool = False
    max_rows: int = 60
    id: str = ""
    percent: Sequence[str] = ()
    headers: dict | None = None
    data: pd.DataFrame | None = None
    bold: set = field(default_factory=set)
    collapsed: bool = False


@dataclass
class Figure:
    """A matplotlib figure: shown as PNG, downloadable as SVG and PDF (and its ``data`` as CSV), all embedded
    as ``data:`` URIs so the report stays one self-contained file.

    ``figure`` is a Figure or a function making one: given a function and a ``render_cache`` folder,
    :func:`render` draws it only when the PNG/SVG/PDF for the same id, caption and data are not there yet
    (rendering three formats is most of a rerun's time otherwise).
    """

    figure: object
    caption: str
    alt: str = ""
    id: str = ""
    data: pd.DataFrame | None = None
    narrow: bool = False  # small enough to sit beside its pair in a comparison (for figure functions)


@dataclass
class Image:
    """A PNG file written by another capability, embedded (base64) like a figure; its ``.svg`` and ``.pdf``
    siblings (when the capability wrote them) and ``data`` are offered as downloads."""

    path: Path
    caption: str
    id: str = ""
    data: pd.DataFrame | None = None


@dataclass
class Columns:
    """Two or more groups of blocks side by side (a comparison), each under its own heading."""

    groups: list[tuple[str, list]]


@dataclass
class Link:
    href: str
    label: str
    note: str = ""


Block = Union[Text, Table, Figure, Image, Columns, Link]


@dataclass
class Section:
    id: str
    title: str
    blocks: list[Block] = field(default_factory=list)
    note: str = ""

    def add(self, block: Block) -> "Section":
        self.blocks.append(block)
        return self


def _data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode("ascii")


def figure_bytes(figure, fmt: str, dpi: int = 110) -> bytes:
    buffer = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else ({"CreationDate": None} if fmt == "pdf" else None)
    figure.savefig(buffer, format=fmt, dpi=dpi, bbox_inches="tight", metadata=metadata)
    return buffer.getvalue()


def figure_data_uri(figure, dpi: int = 110) -> str:
    uri = _data_uri(figure_bytes(figure, "png", dpi), "image/png")
    plt.close(figure)
    return uri


def csv_bytes(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False).encode("utf-8")


def display_header(column) -> str:
    """``held_out_accuracy`` -> ``held out accuracy``: tables never show raw snake_case."""
    return str(column).replace("_", " ")


def _format_cell(value, float_format: str, as_percent: bool = False) -> str:
    if is_missing(value):  # a dash where a percentage is missing; an empty cell in other columns
        return MISSING if as_percent else ""
    if as_percent and isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return percent(float(value))
    if isinstance(value, (float, np.floating)):
        return float_format.format(value)
    return html.escape(str(value))


def _downloads(links: list[tuple[str, str, str]]) -> str:
    """``Download: SVG · PDF · data (CSV)`` as ``<a download>`` links to data: URIs."""
    if not links:
        return ""
    items = " · ".join(f"<a class='download' download='{html.escape(name)}' href='{uri}'>{html.escape(label)}</a>"
                       for label, name, uri in links)
    return f"<p class='downloads'>Download: {items}</p>"


def table_html(table: Table, anchor: str = "") -> str:
    frame = table.frame.reset_index() if table.index else table.frame
    shown = frame.head(table.max_rows)
    headers = table.headers or {}
    rates = set(table.percent)
    head = "".join(f"<th>{html.escape(headers.get(c, display_header(c)))}</th>" for c in shown.columns)
    rows = []
    for position, row in enumerate(shown.itertuples(index=False)):
        cells = []
        for column, value in zip(shown.columns, row):
            text = _format_cell(value, table.float_format, column in rates)
            if (position, column) in table.bold and text:
                text = f"<strong class='best'>{text}</strong>"
            cells.append(f"<td>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = (f"<p class='more'>{len(frame) - table.max_rows} more rows in the CSV and the result files.</p>"
            if len(frame) > table.max_rows else "")
    data = table.data if table.data is not None else frame
    name = (anchor or "table") + ".csv"
    downloads = _downloads([("table (CSV)", name, _data_uri(csv_bytes(data), "text/csv"))])
    id_attr = f" id='{html.escape(anchor)}'" if anchor else ""
    body = f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    if table.collapsed:
        body = f"<details><summary>show the {len(frame)} rows</summary>{body}</details>"
    return (f"<figure class='table'{id_attr}>{body}"
            f"<figcaption>{html.escape(table.caption)}</figcaption>{more}{downloads}</figure>")


_TEMPLATE = jinja2.Environment(
    loader=jinja2.PackageLoader("bertology.report", "templates"), autoescape=jinja2.select_autoescape(["html"])
)


def _figure_files(block: Figure, name: str, cache: Path | None) -> dict[str, bytes]:
    """PNG, SVG and PDF bytes of a figure block, from ``cache`` when an identical figure was drawn before."""
    target = None
    if cache is not None and callable(block.figure):
        digest = hashlib.sha256("\0".join([__version__, name, block.caption]).encode()
                                + (csv_bytes(block.data) if block.data is not None else b"")).hexdigest()[:16]
        target = Path(cache) / f"{name}-{digest}"
        if all((target.with_suffix(f".{fmt}")).is_file() for fmt in FIGURE_FORMATS):
            return {fmt: target.with_suffix(f".{fmt}").read_bytes() for fmt in FIGURE_FORMATS}
    figure = block.figure() if callable(block.figure) else block.figure
    files = {fmt: figure_bytes(figure, fmt) for fmt in FIGURE_FORMATS}
    plt.close(figure)
    if target is not None:
        ensure_dir(target.parent)
        for fmt, data in files.items():
            write_bytes(target.with_suffix(f".{fmt}"), data)
    return files


FIGURE_FORMATS = ("png", "svg", "pdf")


def blocks_html(blocks: list, section_id: str = "block", prefix: str = "", cache: Path | None = None) -> str:
    """The blocks as HTML. Tables and figures get ``id`` anchors (their own, else ``<section>-table-<n>``);
    ``prefix`` goes before every anchor and in-page link of the blocks (one model's half of a comparison)."""
    parts = []
    counts = {"table": 0, "figure": 0}

    def anchor(block, kind: str) -> str:
        counts[kind] += 1
        return prefix + (block.id or f"{section_id}-{kind}-{counts[kind]}")

    for block in blocks:
        if isinstance(block, Text):
            parts.append(block.html.replace("href='#", f"href='#{prefix}") if prefix else block.html)
        elif isinstance(block, Table):
            parts.append(table_html(block, anchor(block, "table")))
        elif isinstance(block, Figure):
            name = anchor(block, "figure")
            files = _figure_files(block, name, cache)
            png = _data_uri(files["png"], "image/png")
            links = [("SVG", f"{name}.svg", _data_uri(files["svg"], "image/svg+xml")),
                     ("PDF", f"{name}.pdf", _data_uri(files["pdf"], "application/pdf"))]
            if block.data is not None:
                links.append(("data (CSV)", f"{name}.csv", _data_uri(csv_bytes(block.data), "text/csv")))
            parts.append(_image_html(png, block.caption, block.alt, name, links))
        elif isinstance(block, Image):
            name = anchor(block, "figure")
            path = Path(block.path)
            links = []
            for suffix, mime in ((".svg", "image/svg+xml"), (".pdf", "application/pdf")):
                if path.with_suffix(suffix).is_file():
                    links.append((suffix[1:].upper(), f"{name}{suffix}",
                                  _data_uri(path.with_suffix(suffix).read_bytes(), mime)))
            if block.data is not None:
                links.append(("data (CSV)", f"{name}.csv", _data_uri(csv_bytes(block.data), "text/csv")))
            parts.append(_image_html(_data_uri(path.read_bytes(), "image/png"), block.caption, "", name, links))
        elif isinstance(block, Columns):
            parts.append(_paired_html(block, section_id, cache))
        elif isinstance(block, Link):
            parts.append(f"<p class='link'><a href='{html.escape(block.href)}'>{html.escape(block.label)}</a> "
                         f"{html.escape(block.note)}</p>")
    return "\n".join(parts)


#: Figures at most this wide (pixels at the report's resolution) sit side by side in a comparison.
SIDE_BY_SIDE_PX = 560


def _narrow(block) -> bool:
    if isinstance(block, Figure) and not callable(block.figure):
        width, _ = block.figure.get_size_inches()
        return width * 110 <= SIDE_BY_SIDE_PX
    if isinstance(block, Figure):
        return block.narrow
    return False


def _paired_html(block: Columns, section_id: str, cache: Path | None = None) -> str:
    """A comparison: the groups' blocks paired in order. Narrow figures sit side by side; tables, text and
    wide figures are stacked (each at full width, under its model's name), so nothing is squeezed."""
    titles = [title for title, _ in block.groups]
    longest = max((len(group) for _, group in block.groups), default=0)
    rows = []
    for position in range(longest):
        items = [(index, group[position]) for index, (_, group) in enumerate(block.groups) if position < len(group)]
        side = all(_narrow(item) for _, item in items)
        cells = "".join(f"<div class='column'><h4>{html.escape(titles[index])}</h4>"
                        f"{blocks_html([item], f'{section_id}-{position}', f'{chr(97 + index)}-', cache)}</div>"
                        for index, item in items)
        rows.append(f"<div class='{'columns' if side else 'stacked'}'>{cells}</div>")
    return "\n".join(rows)


def _image_html(uri: str, caption: str, alt: str, anchor: str = "", links: list | None = None) -> str:
    id_attr = f" id='{html.escape(anchor)}'" if anchor else ""
    return (f"<figure class='plot'{id_attr}><img src='{uri}' alt='{html.escape(alt or caption)}'>"
            f"<figcaption>{html.escape(caption)}</figcaption>{_downloads(links or [])}</figure>")


def render(title: str, header: dict, sections: list[Section], notes: list[str],
           render_cache: str | Path | None = None) -> str:
    """The report page; ``render_cache``: a folder keeping drawn figures, so a rerun does not draw them again."""
    rendered = [{"id": s.id, "title": s.title, "note": s.note, "body": blocks_html(s.blocks, s.id, cache=render_cache)}
                for s in sections]
    return _TEMPLATE.get_template("report.html.j2").render(title=title, header=header, sections=rendered,
                                                           notes=notes)
