"""tools/readme_tour.py: the README tour it runs, and the comparison that says whether numbers moved."""

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import readme_tour  # noqa: E402


def test_the_tour_is_the_readmes_bertology_lines_without_comments():
    commands = readme_tour.tour_commands(ROOT / "README.md")
    assert commands and all(c.startswith("bertology ") and "#" not in c for c in commands)
    assert "bertology report -m minilm --max-sentences 30 --seeds 1 -o reports/small" in commands


def test_compare_ignores_row_order_and_timings_but_not_values(tmp_path, capsys):
    before, after = tmp_path / "before", tmp_path / "after"
    for folder in (before, after):
        folder.mkdir()
    pd.DataFrame({"layer": [0, 1], "value": [0.5, 0.7], "seconds": [1.0, 2.0]}).to_csv(before / "t.csv", index=False)
    pd.DataFrame({"layer": [1, 0], "value": [0.7, 0.5], "seconds": [9.0, 8.0]}).to_csv(after / "t.csv", index=False)
    assert readme_tour.compare(before, after) == 0
    pd.DataFrame({"layer": [0, 1], "value": [0.5, 0.8], "seconds": [1.0, 2.0]}).to_csv(after / "t.csv", index=False)
    assert readme_tour.compare(before, after) == 1
    assert "differs: t.csv" in capsys.readouterr().out
    (after / "t.csv").unlink()  # a table the refactor stopped writing is a difference too
    assert readme_tour.compare(before, after) == 1
    assert "missing after: t.csv" in capsys.readouterr().out
