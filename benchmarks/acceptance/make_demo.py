"""`make demo` on a fresh machine, timed section by section, and stored.

Clones this repository's HEAD into an empty folder (nothing beside it: no ``../shared``), unsets
``$BERTOLOGY_DATA`` and points ``HOME`` at an empty folder (no pip, Hugging Face or bertology cache), runs
``make demo`` there and parses its output: the seconds of each report section (``report <section>: N s``),
the report's path and time, sections that failed or were skipped, and the wall time of the whole command
(the install from an empty pip cache included). Stored as ``benchmarks/results/<--name>.json``:

    .venv/bin/python -m benchmarks.acceptance.make_demo [--dir /tmp/fresh-demo] [--name make_demo_fresh_current_minilm_cpu]
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.stored import ROOT, save_run, table

SECTION_LINE = re.compile(r"^report (\S+): (\d+) s(?: \((failed|skipped)\))?$")
WRITTEN_LINE = re.compile(r"report written to (\S+) \((\d+) s\)")


def parse(log: str) -> dict:
    """Section seconds, failed/skipped sections and the report line of a ``make demo`` log."""
    sections, unavailable, report = {}, {}, None
    for line in log.splitlines():
        line = line.strip()
        if match := SECTION_LINE.match(line):
            sections[match.group(1)] = int(match.group(2))
            if match.group(3):
                unavailable[match.group(1)] = match.group(3)
        elif match := WRITTEN_LINE.search(line):
            report = {"path": match.group(1), "seconds": int(match.group(2))}
    return {"section_seconds": sections, "unavailable": unavailable, "report": report}


FINDING = re.compile(r"<li( class='flagged')?>(.*?)</li>", re.S)
FLAG = re.compile(r"<span class='flag'>\[(underpowered[^\]]*)\]</span>")


def findings_power(page: str) -> dict:
    """How many findings the report's page states, and the underpowered flags among them (``task: flag``)."""
    lists = re.findall(r"<ul class='findings'>(.*?)</ul>", page, re.S)
    items = [match.group(2) for block in lists for match in FINDING.finditer(block)]
    flagged = []
    for item in items:
        for flag in FLAG.findall(item):
            flagged.append(f"{html.unescape(item.split(':', 1)[0].strip())}: {html.unescape(flag)}")
    return {"findings": len(items), "underpowered": flagged}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/fresh-demo", help="emptied, then holds the clone and the empty HOME")
    parser.add_argument("--name", default="make_demo_fresh_current_minilm_cpu", help="stored run: benchmarks/results/<name>.json")
    args = parser.parse_args()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    (root / "home").mkdir(parents=True)
    clone = root / "bertology"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True,
                            check=True).stdout.strip()
    env = {key: value for key, value in os.environ.items() if key not in ("BERTOLOGY_DATA", "BERTOLOGY_CACHE",
                                                                          "VIRTUAL_ENV", "PYTHONPATH")}
    env["HOME"] = str(root / "home")
    load_before = os.getloadavg()
    started = time.perf_counter()
    with open(root / "demo.log", "w", encoding="utf-8") as log:
        status = subprocess.run(["make", "demo"], cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - started
    text = (root / "demo.log").read_text(encoding="utf-8", errors="replace")
    parsed = parse(text)
    print(text[-3000:])
    if status != 0 or parsed["report"] is None:
        sys.exit(f"make demo exited {status} without writing the report; the log: {root / 'demo.log'}")
    power = findings_power((clone / parsed["report"]["path"]).read_text(encoding="utf-8"))
    rows = [[section + (f" ({parsed['unavailable'][section]})" if section in parsed["unavailable"] else ""), str(seconds)]
            for section, seconds in parsed["section_seconds"].items()]
    rows.append(["**report written**", f"**{parsed['report']['seconds']}**"])
    rows.append(["**`make demo` wall, install from an empty cache included**",
                 f"**{wall:.0f} ({int(wall // 60)} min {int(wall % 60)} s)**"])
    save_run(args.name, argv=sys.argv, commit=commit,
             raw={**parsed, **power, "exit_code": status, "wall_seconds": wall, "load_before": load_before,
                  "load_after": os.getloadavg(), "log_tail": text.splitlines()[-60:]},
             tables={"sections": table(["section", "seconds"], rows),
                     "power": table(["findings", "flagged underpowered", "their flags"],
                                    [[str(power["findings"]), str(len(power["underpowered"])),
                                      "; ".join(power["underpowered"]) or "–"]])})


if __name__ == "__main__":
    main()
