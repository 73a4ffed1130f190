"""Every published table equals the stored run it cites (benchmarks/stored.py describes the format)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!--\s*(stored|not-a-result):\s*(.*?)\s*-->")
STORED_FIELDS = ("command", "commit", "machine", "date", "tables")


def split_row(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [cell.strip().replace("\\|", "|") for cell in cells]


def tables_on(text: str) -> list[dict]:
    """Each markdown table on a page: its first line number, the marker before it (if any), header and rows."""
    lines = text.splitlines()
    found, number = [], 0
    while number < len(lines):
        if not lines[number].lstrip().startswith("|"):
            number += 1
            continue
        start = number
        while number < len(lines) and lines[number].lstrip().startswith("|"):
            number += 1
        block = [split_row(line) for line in lines[start:number]]
        if len(block) < 2 or not all(re.fullmatch(r":?-+:?", cell) for cell in block[1]):
            continue  # a line that starts with "|" in prose ("|x - y|"), not a table
        rows = block[2:]
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        marker = MARKER.search(lines[before]) if before >= 0 else None
        found.append({"line": start + 1, "header": block[0], "rows": rows,
                      "marker": (marker.group(1), marker.group(2)) if marker else None})
    return found


def stored_table(citation: str) -> dict:
    path, _, key = citation.partition("#")
    record = json.loads((ROOT / path).read_text(encoding="utf-8"))
    missing = [field for field in STORED_FIELDS if field not in record]
    assert not missing, f"{path} lacks {missing}"
    assert key in record["tables"], f"{path} has no table {key!r} (it has {sorted(record['tables'])})"
    return record["tables"][key]


def differences(published: dict, stored: dict) -> list[str]:
    if published["header"] != stored["header"]:
        return [f"header {published['header']} != stored {stored['header']}"]
    if len(published["rows"]) != len(stored["rows"]):
        return [f"{len(published['rows'])} rows, stored {len(stored['rows'])}"]
    return [f"row {number}: {row} != stored {expected}"
            for number, (row, expected) in enumerate(zip(published["rows"], stored["rows"]), 1) if row != expected]


CITED = [pytest.param(page, found, id=f"{page.name}:{found['line']}")
         for page in PAGES for found in tables_on(page.read_text(encoding="utf-8"))
         if found["marker"] and found["marker"][0] == "stored"]


@pytest.mark.parametrize(("page", "published"), CITED)
def test_published_table_equals_its_stored_run(page, published):
    problems = differences(published, stored_table(published["marker"][1]))
    assert not problems, f"{page.name}:{published['line']} differs from {published['marker'][1]}: {problems[:3]}"


def test_a_number_edited_by_hand_is_caught(tmp_path):
    page = ("<!-- stored: x.json#t -->\n| layer | accuracy |\n|---|---|\n| 1 | 80.5 |\n| 2 | 81.0 |\n")
    stored = {"header": ["layer", "accuracy"], "rows": [["1", "80.5"], ["2", "81.0"]]}
    (published,) = tables_on(page)
    assert published["marker"] == ("stored", "x.json#t") and not differences(published, stored)
    (edited,) = tables_on(page.replace("81.0", "81.2"))
    assert differences(edited, stored) == ["row 2: ['2', '81.2'] != stored ['2', '81.0']"]
    (unmarked,) = tables_on(page.split("\n", 1)[1])
    assert unmarked["marker"] is None
    assert tables_on("- the largest\n  |NeuroX - ours| was 0.002\n") == []  # prose, not a table


def test_the_stored_format_round_trips(tmp_path):
    from benchmarks.stored import markdown, save_run, table
    made = table(["method", "F1"], [["lp", 14.6], ["ap", "13.1"]])
    path = save_run(str(tmp_path / "run.json"), argv=["bench.py"], raw={"f1": [0.146, 0.131]}, tables={"t": made})
    record = json.loads(path.read_text())
    assert record["command"] == "python bench.py" and record["raw"] == {"f1": [0.146, 0.131]}
    (published,) = tables_on(f"<!-- stored: {path}#t -->\n" + markdown(made))
    assert not differences(published, record["tables"]["t"])
    with pytest.raises(ValueError, match="row 1 has 1 cells, the header 2"):
        table(["a", "b"], [["x"]])


def test_every_table_is_a_stored_run_or_says_why_not():
    unmarked = [f"{page.relative_to(ROOT)}:{found['line']}" for page in PAGES
                for found in tables_on(page.read_text(encoding="utf-8")) if not found["marker"]]
    assert not unmarked, ("tables with neither <!-- stored: benchmarks/results/<run>.json#<table> --> nor "
                          f"<!-- not-a-result: why --> before them: {unmarked}")
