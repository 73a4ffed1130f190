"""``bertology claims``: run (or reuse) the report of one model or several and write the checklist of
:mod:`bertology.report.claims` as CSV and HTML, one verdict column per model when there are several."""

from __future__ import annotations

import html
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd

from bertology import __version__
from bertology.claims.evaluate import compare_claims
from bertology.errors import SettingError
from bertology.files import write_table, write_text
from bertology.models import Encoder
from bertology.report.claims import NOTE, SECTION_ID, STYLE, TITLE, checklist_html, evidence_link, verdict_html
from bertology.report.document import Section, Text, render
from bertology.report.interventions import is_finetuned
from bertology.report.run import report_handle, run_report


@dataclass
class ClaimsOutcome:
    """What ``bertology claims`` wrote: the checklist (CSV + HTML) and each model's report."""

    csv: Path
    html: Path
    table: pd.DataFrame
    reports: dict[str, Path] = field(default_factory=dict)
    failed: dict[str, dict[str, str]] = field(default_factory=dict)
    #: model -> the result tables its verdicts read (section -> table -> frame)
    results: dict[str, dict] = field(default_factory=dict)


def report_anchors(page: Path) -> set[str]:
    """The ids in a written report, so that a checklist beside it links only to what is there."""
    return set(re.findall(r"""id=['"]([^'"]+)['"]""", Path(page).read_text(encoding="utf-8")))


def _page(title: str, body: str, header: dict) -> str:
    section = Section(SECTION_ID, TITLE, note=NOTE, blocks=[Text(body)])
    return render(title, header, [section], [])


def _write(folder: Path, frame: pd.DataFrame, page: str) -> tuple[Path, Path]:
    """``claims.csv`` (and ``.parquet``) and ``claims.html`` in ``folder``, each written atomically."""
    write_table(frame, folder / "claims")
    return folder / "claims.csv", write_text(folder / "claims.html", page)


def run_claims(models: Sequence[str | Encoder], out: str | Path = "reports", *, fresh: bool = False,
               seeds: Sequence[int] = (0, 1, 2), max_sentences: int | None = None, device: str | None = None,
               progress: bool = True, languages: Sequence[str | Path] | None = None,
               sections: Sequence[str] | None = None) -> ClaimsOutcome:
    """The checklist for ``models`` (one or more; ``"untrained"`` is the first model's untrained twin, seed 0;
    a model may also be given as its :class:`~bertology.models.Encoder`). Each model's report is run (its
    finished parts reused from ``<out>/<model>/results``) and its verdicts read; one model writes ``<out>/<model>/claims.csv`` and ``claims.html`` beside its report, several write
    ``<out>/claims-<a>-vs-<b>.../`` with one verdict column per model. ``sections``: the report sections to run
    (default all); the claims that read the others cannot tell."""
    started = time.perf_counter()
    first = None
    tables, reports, failed, results = {}, {}, {}, {}
    for model in models:
        if str(model) == "untrained":
            if first is None:
                raise SettingError("models", [str(m) for m in models], "'untrained' is the untrained twin of the "
                                   "model before it (that model re-initialised); name that model first, e.g. "
                                   "['minilm', 'untrained']")
            encoder, name = report_handle(model, first.untrained(0), device)
        else:
            encoder, name = report_handle(model, model if isinstance(model, Encoder) else None, device)
        if first is None:
            first = encoder
        finetuned = model if isinstance(model, (str, Path)) and str(model) != "untrained" and is_finetuned(model) else None
        outcome = run_report(name, out, fresh=fresh, seeds=seeds, max_sentences=max_sentences, progress=progress,
                             device=device, encoder=encoder, finetuned=finetuned, languages=languages,
                             sections=sections)
        label = name if name not in tables else f"{name}-{len(tables)}"
        tables[label] = outcome.claims
        reports[label] = outcome.path
        failed[label] = dict(outcome.failed)
        results[label] = outcome.results
    header = {"models": ", ".join(tables), "seeds": ", ".join(map(str, seeds)),
              "max sentences": str(max_sentences or "all"), "bertology": __version__,
              "run time": f"{time.perf_counter() - started:.0f} s", "generated": time.strftime("%Y-%m-%d %H:%M")}
    if len(tables) == 1:
        label = next(iter(tables))
        frame = tables[label]
        folder = Path(reports[label]).parent
        body = checklist_html(frame, report_anchors(reports[label]), "index.html")
        csv, page = _write(folder, frame, _page(f"bertology claims: {label}", body, header))
        return ClaimsOutcome(csv, page, frame, reports, failed, results)
    folder = Path(out) / ("claims-" + "-vs-".join(tables))
    wide = compare_claims(tables)
    body = compare_html(wide, tables, {label: f"../{Path(path).parent.name}/index.html" for label, path in reports.items()},
                        {label: report_anchors(path) for label, path in reports.items()})
    csv, page = _write(folder, wide, _page("bertology claims: " + " vs ".join(tables), body, header))
    return ClaimsOutcome(csv, page, wide, reports, failed, results)


def compare_html(wide: pd.DataFrame, tables: dict[str, pd.DataFrame], pages: dict[str, str],
                 present: dict[str, set[str]] | None = None) -> str:
    """One row per claim, one column per model: its verdict, number and a link to its evidence."""
    models = list(tables)
    head = "<th>claim</th><th>paper's number</th>" + "".join(f"<th>{html.escape(m)}</th>" for m in models)
    rows = []
    for _, row in wide.iterrows():
        cells = []
        for model in models:
            own = tables[model].set_index("claim").loc[row["claim"]]
            link = evidence_link(own["evidence"], (present or {}).get(model), pages[model])
            number = html.escape(row[f"{model} number"])
            evidence = f" <a href='{html.escape(link)}'>evidence</a>" if link else ""
            cells.append(f"<td>{verdict_html(row[model])} {number}{evidence}"
                         f"<div class='why'>{html.escape(row[f'{model} why'])}</div></td>")
        rows.append(f"<tr><td>{html.escape(row['statement'])}<br><small>{html.escape(row['document'])}: "
                    f"{html.escape(row['paper'])}</small></td><td>{html.escape(row['paper_number'] or '–')}</td>"
                    + "".join(cells) + "</tr>")
    return (f"{STYLE}<div class='scroll'><table class='claims'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}"
            "</tbody></table></div>")
