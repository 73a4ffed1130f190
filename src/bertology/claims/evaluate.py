"""Every claim judged on one run's result tables, and several runs side by side.

:func:`check_claims` returns a :class:`~bertology.results.Result` whose ``claims`` table has one row per claim
(numbers as fractions, differences of fractions or plain numbers, as ``unit`` says); :func:`compare_claims`
puts several of them side by side, one verdict column per model; :func:`display_frame` formats one for a
person (percent, points, intervals).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from bertology.claims.registry import CLAIMS, Claim
from bertology.claims.verdicts import UNKNOWN, Verdict
from bertology.results import MISSING, Result, is_missing

COLUMNS = ["claim", "statement", "document", "paper", "verdict", "reason", "value", "baseline", "baseline_name",
           "ci_low", "ci_high", "interval", "unit", "paper_number", "evidence", "tables", "statistic", "rule"]


def judge(entry: Claim, results: Mapping[str, Mapping[str, pd.DataFrame]]) -> Verdict:
    """``entry``'s verdict on ``results``; a table that breaks its rule's expectations is a ``cannot tell``
    naming the error, never a crash of the whole checklist."""
    try:
        return entry.check(results)
    except (KeyError, ValueError, IndexError, TypeError, ZeroDivisionError) as error:
        return Verdict(entry.id, UNKNOWN, f"the tables could not be read for this claim ({type(error).__name__}: "
                                          f"{error})", interval="")


def check_claims(results: Mapping[str, Mapping[str, pd.DataFrame]], model: str = "", claims: Sequence[Claim] = CLAIMS,
                 meta: dict | None = None) -> Result:
    """Judge every claim on ``results`` (section id -> table name -> frame, as a report computed them)."""
    rows = []
    for entry in claims:
        verdict = judge(entry, results)
        rows.append({"claim": entry.id, "statement": entry.statement, "document": entry.seed, "paper": entry.paper,
                     "verdict": verdict.verdict, "reason": verdict.reason, "value": verdict.value,
                     "baseline": verdict.baseline, "baseline_name": verdict.baseline_name, "ci_low": verdict.ci_low,
                     "ci_high": verdict.ci_high, "interval": verdict.interval, "unit": verdict.unit,
                     "paper_number": entry.paper_number, "evidence": verdict.evidence, "tables": entry.tables,
                     "statistic": entry.statistic, "rule": entry.rule})
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame.insert(0, "model", model)
    return Result("claims", {"claims": frame}, meta={"model": model, **(meta or {})})


def format_number(value, unit: str) -> str:
    if is_missing(value):
        return MISSING
    if unit == "fraction":
        return f"{100 * float(value):.1f}%"
    if unit == "points":
        return f"{100 * float(value):+.1f} pts"
    return f"{float(value):.3g}"


def format_interval(row) -> str:
    if is_missing(row["ci_low"]) or is_missing(row["ci_high"]):
        return MISSING if not row["interval"] else row["interval"]
    return (f"{format_number(row['ci_low'], row['unit'])} to {format_number(row['ci_high'], row['unit'])}"
            + (f" ({row['interval']})" if row["interval"] and row["interval"] != "95% CI" else ""))


def display_frame(claims: pd.DataFrame) -> pd.DataFrame:
    """The checklist as a person reads it: claim, verdict and why, number, baseline, interval, the paper's
    number, source and the evidence anchor (formatted strings)."""
    return pd.DataFrame({
        "claim": claims["statement"],
        "verdict": claims["verdict"],
        "why": claims["reason"],
        "number": [format_number(v, u) for v, u in zip(claims["value"], claims["unit"])],
        "baseline": [f"{format_number(v, u)} ({name})" if name else format_number(v, u)
                     for v, u, name in zip(claims["baseline"], claims["unit"], claims["baseline_name"])],
        "interval": [format_interval(row) for _, row in claims.iterrows()],
        "paper's number": claims["paper_number"].replace("", "–"),
        "source": [f"{seed}: {paper}" for seed, paper in zip(claims["document"], claims["paper"])],
        "evidence": claims["evidence"],
    })


def compare_claims(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per claim, one verdict column per model (``tables``: model -> its ``claims`` table) and, beside
    each, the model's number: ``claim, statement, document, paper, paper_number, <model>, <model> number``."""
    models = list(tables)
    first = tables[models[0]]
    out = first[["claim", "statement", "document", "paper", "paper_number"]].copy()
    for model in models:
        frame = tables[model].set_index("claim")
        out[model] = out["claim"].map(frame["verdict"])
        out[f"{model} number"] = [format_number(frame.loc[c, "value"], frame.loc[c, "unit"]) for c in out["claim"]]
        out[f"{model} why"] = out["claim"].map(frame["reason"])
    return out
