"""The published tables of the scale-out, demo, recipe and start-up runs are what their formatting code makes of
the stored raw output: editing a number in a stored table by hand (page and record alike) is caught here."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def stored_tables(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))["tables"]


def test_earlier_runs_tables_follow_from_their_raw_output():
    from benchmarks.formatters import store_earlier_runs

    for convert in store_earlier_runs.CONVERSIONS:
        name, fields, _, tables, sources = convert()
        assert stored_tables(name) == tables, f"{name}: the stored tables differ from its raw output's formatting"
        assert {"command", "commit", "machine", "date"} <= set(fields) and sources


def test_scale_tables_follow_from_the_measurements():
    from benchmarks.perf.bench_scale import scale_tables

    raw = json.loads((RESULTS / "scale_ewt_dev_cpu.json").read_text(encoding="utf-8"))["raw"]["scale"]
    args = SimpleNamespace(workers=sorted(int(n) for n in raw["local_threads"]),
                           cpus_per_worker=raw["cpus_per_worker"], gpus_per_worker=raw["gpus_per_worker"])
    assert scale_tables(raw, args) == stored_tables("scale_ewt_dev_cpu")
    # and the medians in those tables are the measurements' own
    full = [m["seconds"] for m in raw["measurements"] if (m["engine"], m["n"], m["size"]) == ("local", 1, "full")]
    assert sorted(full)[1] == pytest.approx(raw["summary"]["local1"]["seconds"]["median"])


def test_a_changed_raw_number_changes_the_table(monkeypatch):
    """The comparison above is sensitive: one second more in the raw output is a different published table."""
    from benchmarks.formatters import store_earlier_runs

    fields, raw = store_earlier_runs.earlier("make_demo_fresh_minilm_cpu")
    raw["section_seconds"]["probing"] += 1
    monkeypatch.setattr(store_earlier_runs, "earlier", lambda name: (fields, raw))
    _, _, _, tables, _ = store_earlier_runs.make_demo()
    assert tables != stored_tables("make_demo_fresh_minilm_cpu")
    assert tables["sections"]["rows"][1] == ["probing", str(raw["section_seconds"]["probing"])]


def test_the_make_demo_run_counts_the_reports_underpowered_findings():
    """benchmarks/acceptance/make_demo.py reads the findings off the report page the way the page states them."""
    from benchmarks.acceptance.make_demo import findings_power
    from bertology.report.findings import Finding, findings_html

    def finding(text, flags):
        return Finding(topic="surface", text=text, value=0.8, baseline=0.2, baseline_name="majority", ci_low=0.78,
                       ci_high=0.82, anchor="probing-senteval", source="probing.results", interval="95% CI",
                       flags=flags)

    page = "<ul><li>a list that is not the findings</li></ul>" + findings_html([
        finding("SentLen peaks at layer 1: 80% (95% CI 78–82%).", ["underpowered: ±2.0 points with 1,290 test examples"]),
        finding("WC & co is best on dev at layer 2: 50%.", ["layers 2–3 are indistinguishable on test"]),
        finding("BShift peaks at layer 4: 90%.", [])])
    assert findings_power(page) == {"findings": 3, "underpowered": [
        "SentLen peaks at layer 1: underpowered: ±2.0 points with 1,290 test examples"]}
