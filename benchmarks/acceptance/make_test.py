"""`make test` on a clean clone, launched as CI and job schedulers launch it, timed and stored.

Clones this repository's HEAD into ``--dir`` (which must sit beside ``../shared``, as CI's clone does), then runs
``make test`` there under ``setsid``, with stdin closed, ``LC_ALL=C`` and as a background job of a non-interactive
shell (``bash -c 'make test </dev/null & wait $!'``: SIGINT ignored, the case issue 35 names). ``--capability
avx2`` keeps every library to the instructions of a host without AVX-512 (:data:`AVX2_ONLY`: torch's own kernels,
oneDNN, MKL, OpenBLAS and numpy's dispatch); the host's clock and caches stay, so it approximates such a host, it
is not one. Parses pytest's summary line (passed, failed,
skipped, its seconds) and stores the wall time of the install and of the whole command, the CPU capability torch
reports under that setting and the load average, as ``benchmarks/results/<--name>.json``:

    .venv/bin/python -m benchmarks.acceptance.make_test --dir /work/suite-clone [--capability avx2] [--revision REV]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.stored import ROOT, commit, save_run, table

#: What keeps each library off AVX-512 (``--capability avx2``).
AVX2_ONLY = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "OPENBLAS_CORETYPE": "Haswell",
             "NPY_DISABLE_CPU_FEATURES": "AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR"}
#: pytest's last line (``-q`` prints it bare, without the ``=`` rules): ``1366 passed, 4 skipped in 821.2s (0:13:41)``.
SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed).*?) in ([\d.]+)s(?: \([\d:]+\))?\s*=*\s*$")


def counts(summary: str) -> dict[str, int]:
    """``{"passed": 1366, "skipped": 4, ...}`` from pytest's summary text (``1366 passed, 4 skipped, 21 warnings``)."""
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="emptied, then holds the clone (beside ../shared)")
    parser.add_argument("--capability", default=None, help="ATEN_CPU_CAPABILITY for the run (e.g. avx2)")
    parser.add_argument("--name", default=None, help="stored run (default make_test_clean_clone_<capability>_cpu)")
    parser.add_argument("--revision", default=None,
                        help="test this commit of the repository instead of HEAD (a before/after comparison); the "
                             "stored run names it as its commit, and the benchmark's own commit beside it")
    args = parser.parse_args()
    clone = Path(args.dir).resolve()
    if not (clone.parent / "shared" / "data").is_dir():
        sys.exit(f"{clone}: put the clone beside ../shared (CI's layout); {clone.parent / 'shared'} is missing")
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    tested = {}
    if args.revision:
        checkout = subprocess.run(["git", "-C", str(clone), "checkout", "-q", args.revision], capture_output=True,
                                  text=True)
        if checkout.returncode != 0:
            sys.exit(f"--revision {args.revision!r}: not a commit of this repository ({checkout.stderr.strip()})")
        short = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True,
                               text=True, check=True).stdout.strip()
        tested = {"commit": short, "benchmark_commit": commit()}
    env = {**os.environ, "LC_ALL": "C"}
    env.pop("VIRTUAL_ENV", None)
    env.pop("BERTOLOGY_DATA", None)
    limits = {}
    if args.capability == "avx2":
        limits = AVX2_ONLY
    elif args.capability:
        limits = {"ATEN_CPU_CAPABILITY": args.capability}
    env.update(limits)
    capability = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                                env=env, capture_output=True, text=True, check=True).stdout.strip()
    before = os.getloadavg()
    started = time.perf_counter()
    run = subprocess.run(["setsid", "bash", "-c", "make test </dev/null & wait $!"], cwd=clone, env=env,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True)
    wall = time.perf_counter() - started
    log = run.stdout + run.stderr
    (clone / "make-test.log").write_text(log, encoding="utf-8")
    match = next((m for m in map(SUMMARY.match, reversed(log.splitlines())) if m), None)
    if match is None:
        sys.exit(f"no pytest summary in the log (exit {run.returncode}); see {clone / 'make-test.log'}")
    found, pytest_seconds = counts(match.group(1)), float(match.group(2))
    name = args.name or f"make_test_clean_clone_{capability.lower()}_cpu"
    save_run(name, argv=sys.argv, cpu_capability=capability, raw={
        "exit": run.returncode, "counts": found, "pytest_seconds": pytest_seconds, "wall_seconds": wall,
        "capability_setting": args.capability, "environment": limits, "load_average_before": before, "load_average_after": os.getloadavg(),
        "launch": "setsid bash -c 'make test </dev/null & wait $!' with LC_ALL=C, from a fresh clone beside ../shared",
        "tail": log[-3000:],
    }, tables={"suite": suite_table(found, pytest_seconds, wall, capability, run.returncode)}, **tested)
    sys.exit(run.returncode)


def minutes(seconds: float) -> str:
    """``1050.1`` -> ``"17 min 30 s"``."""
    whole = int(round(seconds))
    return f"{whole // 60} min {whole % 60} s"


def suite_table(found: dict, pytest_seconds: float, wall: float, capability: str, exit_code: int) -> dict:
    return table(["passed", "failed", "skipped", "pytest", "make test (install included)", "CPU capability (torch)",
                  "exit"], [[found.get("passed", 0), found.get("failed", 0), found.get("skipped", 0),
                             minutes(pytest_seconds), minutes(wall), capability, exit_code]])


if __name__ == "__main__":
    main()
