"""The pieces of a report (text, tables, figures) and their rendering into one self-contained HTML file."""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import jinja2
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


@dataclass
class Text:
    html: str


@dataclass
class Table:
    frame: pd.DataFrame
    caption: str
    float_format: str = "{:.3f}"
    index: bool = False
    max_rows: int = 60


@dataclass
class Figure:
    """A matplotlib figure, embedded as PNG (base64) so the report works offline."""

    figure: "matplotlib.figure.Figure"
    caption: str
    alt: str = ""


@dataclass
class Image:
    """A PNG file written by another capability, embedded (base64) like a figure."""

    path: Path
    caption: str


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


def figure_data_uri(figure, dpi: int = 110) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _format_cell(value, float_format: str) -> str:
    if isinstance(value, float):
        return "" if pd.isna(value) else float_format.format(value)
    return html.escape(str(value))


def table_html(table: Table) -> str:
    frame = table.frame.reset_index() if table.index else table.frame
    shown = frame.head(table.max_rows)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in shown.columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{_format_cell(v, table.float_format)}</td>" for v in row) + "</tr>"
        for row in shown.itertuples(index=False)
    )
    more = (f"<p class='more'>{len(frame) - table.max_rows} more rows in the result files.</p>"
            if len(frame) > table.max_rows else "")
    return (f"<figure class='table'><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
            f"<figcaption>{html.escape(table.caption)}</figcaption>{more}</figure>")


_TEMPLATE = jinja2.Environment(
    loader=jinja2.PackageLoader("bertology.report", "templates"), autoescape=jinja2.select_autoescape(["html"])
)


def blocks_html(blocks: list) -> str:
    parts = []
    for block in blocks:
        if isinstance(block, Text):
            parts.append(block.html)
        elif isinstance(block, Table):
            parts.append(table_html(block))
        elif isinstance(block, Figure):
            parts.append(_image_html(figure_data_uri(block.figure), block.caption, block.alt))
        elif isinstance(block, Image):
            data = base64.b64encode(Path(block.path).read_bytes()).decode("ascii")
            parts.append(_image_html("data:image/png;base64," + data, block.caption, ""))
        elif isinstance(block, Columns):
            columns = "".join(f"<div class='column'><h3>{html.escape(title)}</h3>{blocks_html(group)}</div>"
                              for title, group in block.groups)
            parts.append(f"<div class='columns'>{columns}</div>")
        elif isinstance(block, Link):
            parts.append(f"<p class='link'><a href='{html.escape(block.href)}'>{html.escape(block.label)}</a> "
                         f"{html.escape(block.note)}</p>")
    return "\n".join(parts)


def _image_html(uri: str, caption: str, alt: str) -> str:
    return (f"<figure class='plot'><img src='{uri}' alt='{html.escape(alt or caption)}'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def render(title: str, header: dict, sections: list[Section], notes: list[str]) -> str:
    rendered = [{"id": s.id, "title": s.title, "note": s.note, "body": blocks_html(s.blocks)} for s in sections]
    return _TEMPLATE.get_template("report.html.j2").render(title=title, header=header, sections=rendered,
                                                           notes=notes)
