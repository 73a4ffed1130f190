"""Run every perf benchmark (``benchmarks/perf/bench_*.py``) in turn, each in its own process, and summarise.

    python -m benchmarks.run_all            # all of them, default settings (tens of minutes on 2 cores)
    python -m benchmarks.run_all --list     # what would run
    python -m benchmarks.run_all extract probes   # only benchmarks.perf.bench_extract and bench_probes

Run from the repository root (``make bench`` does). Each benchmark runs as ``python -m benchmarks.perf.<name>``,
prints its machine, the baseline (its ``BASELINE``), ours and the ratio. Only perf/ runs here: the runs behind the
docs pages (``benchmarks/experiments/<page>/``), the formatters of stored results (``benchmarks/formatters/``) and
the README commands' timings (``benchmarks/acceptance/``) are run one by one, as their docstrings say. A number goes
in README.md, BENCHMARKS.md or docs/ only from a stored run (``benchmarks/stored.py``: a benchmark's ``--store NAME``,
or its fixed result name, writes ``benchmarks/results/NAME.json`` with the command, commit, machine, date, raw output
and the published tables); this runner stores nothing itself. Exit status: the number of benchmarks that failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PERF = HERE / "perf"
ROOT = HERE.parent

#: Benchmarks that take a sub-command: each listed run is one process.
RUNS = {"knowledge": [["mlm", "--model", "minilm"], ["pairs", "--model", "minilm"]]}


def benchmarks() -> dict[str, Path]:
    """The perf benchmarks by short name (``extract`` for ``perf/bench_extract.py``)."""
    return {path.stem.removeprefix("bench_"): path for path in sorted(PERF.glob("bench_*.py"))}


def module(path: Path) -> str:
    """``benchmarks/perf/bench_extract.py`` -> ``benchmarks.perf.bench_extract``."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


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
            print(f"{name}\tpython -m {module(path)}")
        return 0
    failures, summary = 0, []
    for name, path in chosen.items():
        print(f"\n=== {name} (python -m {module(path)}) ===", flush=True)
        for arguments in RUNS.get(name, [[]]):
            started = time.perf_counter()
            code = subprocess.call([sys.executable, "-m", module(path), *arguments], cwd=ROOT)
            label = " ".join([name, *arguments[:1]])
            summary.append((label, code, time.perf_counter() - started))
            failures += code != 0
    print("\n=== summary ===")
    for name, code, seconds in summary:
        print(f"{name:<16} {'ok' if code == 0 else f'FAILED (exit {code})':<16} {seconds:7.0f} s")
    return failures


if __name__ == "__main__":
    sys.exit(main())
