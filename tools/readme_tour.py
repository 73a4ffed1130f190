"""Run the README's command tour from a source tree, and compare the tables two tours wrote.

A refactor that promises "numbers unchanged" runs the tour from a `git archive` of the commit before it and
from the tree after it, then compares every CSV table and every table of the report's HTML::

    git archive BEFORE | tar -x -C /tmp/before-src
    python tools/readme_tour.py run /tmp/before-src /tmp/tour-before
    python tools/readme_tour.py run . /tmp/tour-after
    python tools/readme_tour.py compare /tmp/tour-before /tmp/tour-after

Offline, with the packaged data only (BERTOLOGY_DATA unset, as on a user's clone) and one thread per command.
Columns that are timings or paths are left out of the comparison; rows are compared in a canonical order.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd

SKIPPED_COLUMNS = {"seconds", "tokens_per_second", "sentences_per_second", "checkpoint", "path", "train_seconds",
                   "io_share", "latency_ms"}


def tour_commands(readme: Path) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", readme.read_text(encoding="utf-8"), flags=re.S)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()
            if line.startswith("bertology ")]


def run(source: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "BERTOLOGY_DATA"}
    env.update(PYTHONPATH=str(source.resolve() / "src"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               BERTOLOGY_CACHE=str(out.resolve() / "cache"))
    with open(out / "tour.log", "w") as log:
        for command in tour_commands(source / "README.md"):
            log.write(f"== {command}\n")
            log.flush()
            argv = [sys.executable, "-m", "bertology.cli", *shlex.split(command)[1:]]
            code = subprocess.call(argv, cwd=out, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
            log.write(f"rc={code}\n")
            if code:
                raise SystemExit(f"{command}: exit {code} (see {out / 'tour.log'})")


def _canonical(frame: pd.DataFrame) -> pd.DataFrame:
    kept = frame[[c for c in frame.columns if c not in SKIPPED_COLUMNS and not c.endswith("_seconds")]]
    return kept.sort_values(list(kept.columns)).reset_index(drop=True) if len(kept.columns) else kept


def _html_tables(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [re.sub(r"\s+", " ", table) for table in re.findall(r"<table.*?</table>", text, flags=re.S)]


def compare(before: Path, after: Path) -> int:
    problems = same = 0
    for file in sorted(before.rglob("*.csv")):
        relative = file.relative_to(before)
        if "cache" in relative.parts:
            continue
        if not (after / relative).exists():
            problems += 1
            print(f"missing after: {relative}")
            continue
        a, b = _canonical(pd.read_csv(file)), _canonical(pd.read_csv(after / relative))
        if a.equals(b):
            same += 1
        else:
            problems += 1
            print(f"differs: {relative}")
    for page in sorted(before.rglob("index.html")):
        relative = page.relative_to(before)
        if not (after / relative).exists():
            problems += 1
            print(f"missing after: {relative}")
        else:
            a, b = _html_tables(page), _html_tables(after / relative)
            equal = sum(x == y for x, y in zip(a, b))
            if len(a) != len(b) or equal != len(a):
                problems += 1
                print(f"differs: {relative}: {equal} of {len(a)} tables equal ({len(b)} after)")
            else:
                same += 1
    print(f"{same} tables or pages equal, {problems} differ")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("run", "compare"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "run":
        run(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        raise SystemExit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
