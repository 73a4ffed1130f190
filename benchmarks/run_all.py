"""Run every benchmark (``benchmarks/bench_*.py``) in turn, each in its own process, and summarise.

    python benchmarks/run_all.py            # all of them, default settings (tens of minutes on 2 cores)
    python benchmarks/run_all.py --list     # what would run
    python benchmarks/run_all.py extract probes   # only bench_extract.py and bench_probes.py

Each benchmark prints its machine, the baseline, ours and the ratio. A number goes in README.md, BENCHMARKS.md
or docs/ only from a stored run (``benchmarks/stored.py``: a benchmark's ``--store NAME``, or its fixed result
name, writes ``benchmarks/results/NAME.json`` with the command, commit, machine, date, raw output and the
published tables); this runner stores nothing itself. Exit status: the number of benchmarks that failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Benchmarks that take a sub-command: each listed run is one process.
RUNS = {"knowledge": [["mlm", "--model", "minilm"], ["pairs", "--model", "minilm"]]}


def benchmarks() -> dict[str, Path]:
    return {path.stem.removeprefix("bench_"): path for path in sorted(HERE.glob("bench_*.py"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)
    found = benchmarks()
    unknown = [name for name in args.names if name not in found]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; expected some of {', '.join(found)}")
    chosen = {name: found[name] for name in (args.names or found)}
    if args.list:
        for name, path in chosen.items():
            print(f"{name}\t{path.relative_to(HERE.parent)}")
        return 0
    failures, summary = 0, []
    for name, path in chosen.items():
        print(f"\n=== {name} ({path.name}) ===", flush=True)
        for arguments in RUNS.get(name, [[]]):
            started = time.perf_counter()
            code = subprocess.call([sys.executable, str(path), *arguments])
            label = " ".join([name, *arguments[:1]])
            summary.append((label, code, time.perf_counter() - started))
            failures += code != 0
    print("\n=== summary ===")
    for name, code, seconds in summary:
        print(f"{name:<16} {'ok' if code == 0 else f'FAILED (exit {code})':<16} {seconds:7.0f} s")
    return failures


if __name__ == "__main__":
    sys.exit(main())
