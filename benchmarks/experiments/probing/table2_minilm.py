"""MiniLM's Table 2 with the defaults: ``bertology probe -m minilm --tasks senteval --seeds 3`` from an empty cache.

Runs the command under ``/usr/bin/time -v`` (wall clock, peak RSS), stores what it cost
(``benchmarks/results/probe_senteval_minilm_default_run.json``), copies the run's ``table2`` and ``datasets``
tables as written (``..._table2.csv``, ``..._datasets.csv``) and formats docs/probing.md's tables from them
(``python -m benchmarks.formatters.format_stored_tables table2``). Needs ``BERTOLOGY_DATA`` (UD English EWT) or the packaged treebank:

    BERTOLOGY_DATA=../shared/data .venv/bin/python -m benchmarks.experiments.probing.table2_minilm
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.stored import RESULTS, ROOT, save_run, table

COMMAND = ["bertology", "probe", "-m", "minilm", "--tasks", "senteval", "--seeds", "3"]


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", default="the 2-core machine was quiet (nothing else running)",
                        help="what else ran on the machine meanwhile (stored with the run)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="table2-minilm-"))
    out, cache = work / "out", work / "cache"
    bertology = Path(sys.executable).with_name("bertology")
    command = [str(bertology), *COMMAND[1:], "--out", str(out), "--cache-dir", str(cache)]
    before = os.getloadavg()
    run = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"{' '.join(COMMAND)} failed (exit {run.returncode}):\n{run.stderr[-4000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", run.stderr).group(1)
    parts = [float(p) for p in wall.split(":")]
    seconds = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    rss_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr).group(1))
    cache_bytes = folder_bytes(cache)
    for name in ("table2", "datasets"):
        shutil.copyfile(out / f"{name}.csv", RESULTS / f"probe_senteval_minilm_default_{name}.csv")
    import json

    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    raw = {"wall_clock": wall, "wall_seconds": seconds, "peak_rss_kib": rss_kib, "cache_bytes": cache_bytes,
           "load": args.load, "load_average_before": before, "load_average_after": os.getloadavg(), "meta": meta}
    import torch

    save_run("probe_senteval_minilm_default_run", argv=sys.argv, raw=raw,
             cpu_capability=torch.backends.cpu.get_cpu_capability(),
             tables={"resources": table(["wall clock", "peak RSS", "cache (model + 3 twins)", "machine"],
                                        [[f"{seconds / 60:.1f} min", f"{rss_kib / 2**20:.1f} GiB",
                                          f"{cache_bytes / 2**30:.2f} GiB",
                                          f"{os.cpu_count()} CPUs, {torch.backends.cpu.get_cpu_capability()}"]])})
    subprocess.run([sys.executable, "-m", "benchmarks.formatters.format_stored_tables", "table2"], cwd=ROOT, check=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
