"""Command-line start-up: ``bertology --help``, ``bertology probe --help`` and a usage error, each a fresh process.

Baseline = what the command line did before it imported the heavy libraries only when a command runs (at
49dbb35): every capability's package imported in full (their public names, as the eager ``__init__``s did)
plus torch, transformers, sklearn and pandas, then the same ``main()``; that is the same set of modules the
old ``import bertology.cli`` loaded (checked: 3,807 modules, none missing). Ours = ``main()`` alone. Each command
runs ``--repeats`` times per side, interleaved so a busy phase of a shared machine hits both alike; the
median wall time and the peak memory (max RSS) of the process are printed, with the ratio.

    .venv/bin/python -m benchmarks.perf.bench_cli_startup [--repeats 5] [--store cli_startup_cpu]

``--old-src DIR`` also times an old checkout's own command line (``git archive 49dbb35 src | tar -x -C DIR``,
then ``--old-src DIR/src``), as a check that the baseline is what users waited for.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = ("the command line at 49dbb35: every capability, torch, transformers, sklearn and pandas imported "
            "before parsing")

HERE = Path(__file__).resolve().parent
#: The packages the command line imported in full before (their ``cli.py`` reached each ``__init__``).
PACKAGES = ("tasks", "probing", "finetune", "compare", "intervention", "geometry", "knowledge", "heads")
BASELINE_PRELOAD = ("import torch, transformers, sklearn, pandas\n"
                    + "".join(f"from bertology.{name} import *\n" for name in PACKAGES))
COMMANDS = {
    "bertology --help": ["--help"],
    "bertology probe --help": ["probe", "--help"],
    "bertology probe --tasks nope": ["probe", "--tasks", "nope"],
}


def script(argv: list[str], preload: str) -> str:
    return f"{preload}import sys\nfrom bertology.cli import main\nsys.argv = ['bertology', *{argv!r}]\nmain()\n"


def run(code: str, pythonpath: str | None = None) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MiB and exit status of ``python -c code``."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=env)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    return seconds, usage.ru_maxrss / 1024, process.returncode


def commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE,
                               capture_output=True, text=True).stdout.strip()
        return head + (" + uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def startup_table(rows: dict) -> dict:
    """The published table: median wall time per side, the ratio and the peak memory of each command."""
    from benchmarks.stored import table

    def command(label: str) -> str:
        return f"`{label}`" + (" (one-line error, exit 1)" if rows[label]["ours"]["exit_status"] == 1 else "")

    return table(["command", "baseline", "ours", "ratio", "memory, baseline -> ours"],
                 [[command(label), f"{row['baseline']['seconds']:.2f} s", f"**{row['ours']['seconds']:.2f} s**",
                   f"{row['ratio']:.1f}x", f"{row['baseline']['max_rss_mib']:.0f} -> {row['ours']['max_rss_mib']:.0f} MiB"]
                  for label, row in rows.items()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--store", help="save the run as benchmarks/results/<STORE>.json (benchmarks/stored.py)")
    parser.add_argument("--old-src", type=Path, help="also time the command line of an old checkout's src folder")
    args = parser.parse_args()
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
               f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} at start")
    say(f"machine: {machine}")
    say(f"commit: {commit()}; {args.repeats} runs per command and side, interleaved; median wall time")
    rows = {}
    for label, argv in COMMANDS.items():
        sides = [("baseline", BASELINE_PRELOAD, None), ("ours", "", None)]
        if args.old_src:
            sides.append(("old checkout", "", str(args.old_src.resolve())))
        samples = {side: [] for side, _, _ in sides}
        statuses = {}
        for _ in range(args.repeats):
            for side, preload, pythonpath in sides:
                seconds, rss, status = run(script(argv, preload), pythonpath)
                samples[side].append((seconds, rss))
                statuses[side] = status
        row = {side: {"seconds": statistics.median(s for s, _ in runs), "max_rss_mib": statistics.median(m for _, m in runs),
                      "runs_seconds": [round(s, 3) for s, _ in runs], "exit_status": statuses[side]}
               for side, runs in samples.items()}
        row["ratio"] = row["baseline"]["seconds"] / row["ours"]["seconds"]
        rows[label] = row
    say(f"load average at end: {os.getloadavg()[0]:.1f}")
    say(f"{'command':32s} {'baseline':>10s} {'ours':>8s} {'ratio':>7s} {'baseline RSS':>13s} {'ours RSS':>9s}  exit")
    for label, row in rows.items():
        base, ours = row["baseline"], row["ours"]
        say(f"{label:32s} {base['seconds']:8.2f} s {ours['seconds']:6.2f} s {row['ratio']:6.1f}x "
            f"{base['max_rss_mib']:9.0f} MiB {ours['max_rss_mib']:5.0f} MiB  {base['exit_status']}/{ours['exit_status']}")
    if args.old_src:
        say(f"old checkout ({args.old_src}), the same commands:")
        for label, row in rows.items():
            old = row["old checkout"]
            say(f"  {label:30s} {old['seconds']:8.2f} s {old['max_rss_mib']:6.0f} MiB  exit {old['exit_status']}")
    if args.store:
        from benchmarks.stored import save_run

        save_run(args.store, raw={"machine_at_start": machine, "baseline_preload": BASELINE_PRELOAD, "results": rows,
                                  "output": "\n".join(lines)},
                 tables={"startup": startup_table(rows)})


if __name__ == "__main__":
    main()
