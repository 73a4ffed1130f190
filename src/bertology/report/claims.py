"""The report's first section, "The Primer, checked": every claim of :mod:`bertology.claims` judged on the
tables the other sections computed, each row linking to its evidence (``bertology claims`` writes it alone:
:mod:`bertology.report.checklist`).

Nothing here measures: the verdicts come from :func:`bertology.claims.check_claims` over
``context.results``; a claim whose table is not in the run says so.
"""

from __future__ import annotations

import html
from typing import Sequence

import pandas as pd

from bertology.claims.evaluate import check_claims, display_frame
from bertology.report.context import ReportContext
from bertology.report.document import Columns, Figure, Image, Section, Table, Text

SECTION_ID = "claims"
TITLE = "The Primer, checked"
NOTE = ("Each claim of the seed documents (the Primer in BERTology above all) judged on this model's tables "
        "below, by a rule stated before the run (docs/claims.md): holds = the 95% interval excludes the null in "
        "the claimed direction; does not hold = it excludes the claimed effect; cannot tell = it covers both, or "
        "the test does not apply or was not run (the reason says which). Numbers: % for accuracies and shares, "
        "pts for differences in percentage points. Every row links to the table it reads.")
STYLE = ("<style>span.verdict{font-weight:600;padding:0 .3rem;border-radius:3px;white-space:nowrap}"
         "span.v-holds{background:#e3f4e8;color:#1e6b34}span.v-does-not-hold{background:#fbe4e1;color:#9b2c1f}"
         "span.v-cannot-tell{background:#eef0f3;color:#4a5566}table.claims td{vertical-align:top}"
         "table.claims .why{font-size:.8rem;color:#555;max-width:26rem}</style>")


def anchors(sections: Sequence[Section]) -> set[str]:
    """The in-page ids the built sections will have: their own and their tables', figures' and images'."""
    found = set()
    for section in sections:
        found.add(section.id)
        blocks = list(section.blocks)
        while blocks:
            block = blocks.pop()
            if isinstance(block, Columns):
                blocks += [b for _, group in block.groups for b in group]
            elif isinstance(block, (Table, Figure, Image)) and block.id:
                found.add(block.id)
    return found


def evidence_link(anchor: str, present: set[str] | None, page: str = "") -> str:
    """``page#anchor`` for a claim's evidence: its own table when the report has it, else the section it
    belongs to (the anchor's first word), else nothing (""). ``present=None`` trusts the anchor."""
    if not anchor:
        return ""
    if present is not None and anchor not in present:
        section = anchor.split("-")[0]
        anchor = section if section in present else ""
    return f"{page}#{anchor}" if anchor else ""


def verdict_html(verdict: str) -> str:
    return f"<span class='verdict v-{verdict.replace(' ', '-')}'>{html.escape(verdict)}</span>"


def checklist_html(claims: pd.DataFrame, present: set[str] | None = None, page: str = "") -> str:
    """The checklist as an HTML table: claim (and its source), verdict and why, number, baseline, interval,
    the paper's number and the link to the evidence."""
    shown = display_frame(claims)
    head = "".join(f"<th>{h}</th>" for h in ("claim", "verdict", "number", "baseline", "95% interval",
                                              "paper's number", "evidence"))
    rows = []
    for (_, row), (_, raw) in zip(shown.iterrows(), claims.iterrows()):
        link = evidence_link(raw["evidence"], present, page)
        paper = row["paper's number"]
        evidence = f"<a href='{html.escape(link)}'>{html.escape(link.split('#')[-1])}</a>" if link else "–"
        rows.append(
            f"<tr id='claim-{html.escape(raw['claim'])}'><td>{html.escape(row['claim'])}<br><small>{html.escape(row['source'])}"
            f"</small></td><td>{verdict_html(row['verdict'])}<div class='why'>{html.escape(row['why'])}</div></td>"
            f"<td>{html.escape(row['number'])}</td><td>{html.escape(row['baseline'])}</td>"
            f"<td>{html.escape(row['interval'])}</td><td>{html.escape(paper)}</td><td>{evidence}</td></tr>")
    counts = claims["verdict"].value_counts()
    summary = ", ".join(f"{int(counts.get(v, 0))} {v}" for v in ("holds", "does not hold", "cannot tell"))
    return (f"{STYLE}<p><strong>{len(claims)} claims:</strong> {summary}.</p><div class='scroll'><table class='claims'>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def claims_section(context: ReportContext, built: Sequence[Section]) -> Section:
    """The checklist over ``context.results`` (the sections already built); sets ``context.claims``."""
    result = check_claims(context.results, model=context.model_name,
                          meta={"seeds": list(context.seeds), "max_sentences": context.max_sentences})
    claims = result["claims"]
    context.claims = claims
    present = anchors(built)
    section = Section(SECTION_ID, TITLE, note=NOTE)
    section.add(Text(checklist_html(claims, present)))
    # the evidence column names where this report holds it (its own table, else its section, else nothing)
    data = claims.drop(columns=["model"]).assign(
        evidence=[evidence_link(anchor, present).lstrip("#") for anchor in claims["evidence"]])
    section.add(Table(data, "Every claim with its numbers (fractions), its rule and the tables it reads.",
                      id="claims-table", collapsed=True, max_rows=100))
    return section
