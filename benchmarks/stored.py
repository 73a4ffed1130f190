"""Stored runs: the one format behind every number the docs publish.

A benchmark (or an experiment script) ends with::

    from benchmarks.stored import save_run, table
    save_run("heads_squad_minilm_cpu", argv=sys.argv, raw={...},
             tables={"squad": table(["model", "F1"], [["lp", f"{f1:.1f}"], ...])})

which writes ``benchmarks/results/<name>.json`` atomically with the command, the commit, the machine, the date,
the raw output (``raw``: whatever the script measured, unrounded) and ``tables``: each published table exactly as
the docs show it (header and rows of strings, formatted by the script, never by hand).

A page cites a stored table by a marker on the line before it::

    <!-- stored: benchmarks/results/heads_squad_minilm_cpu.json#squad -->
    | model | F1 |
    |---|---|
    | lp | 14.6 |

and ``tests/test_published_numbers.py`` checks that the table under each marker equals the stored one, cell for
cell. A table that is not a result (options, definitions, formulas) carries ``<!-- not-a-result: why -->``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, list]:
    """A published table: every cell a string, as the page shows it."""
    header = [str(cell) for cell in header]
    body = [[str(cell) for cell in row] for row in rows]
    for number, row in enumerate(body, 1):
        if len(row) != len(header):
            raise ValueError(f"table row {number} has {len(row)} cells, the header {len(header)}")
    return {"header": header, "rows": body}


def markdown(stored_table: dict[str, list]) -> str:
    """The table as the page writes it (paste this under the marker)."""
    lines = ["| " + " | ".join(stored_table["header"]) + " |", "|" + "---|" * len(stored_table["header"])]
    lines += ["| " + " | ".join(row) + " |" for row in stored_table["rows"]]
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    described: dict[str, Any] = {"platform": platform.platform(), "cpus": os.cpu_count(),
                                 "python": platform.python_version()}
    try:
        import torch

        described["torch"] = torch.__version__
        described["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        if torch.cuda.is_available():
            described["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return described


def commit() -> str:
    """The checkout's commit (``+changes`` when tracked files differ); on a machine that got a copy of the tree
    without its git folder (a lent GPU), ``BENCHMARK_COMMIT`` as the sender set it. ``BENCHMARK_COMMIT`` wins
    wherever it is set: a lent machine's copy may hold a git folder of another commit (session 22)."""
    if os.environ.get("BENCHMARK_COMMIT"):
        return os.environ["BENCHMARK_COMMIT"]
    try:
        found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
    except FileNotFoundError:  # no git on this machine
        found, dirty = None, ""
    if found is None or found.returncode != 0 or not found.stdout.strip():
        return os.environ.get("BENCHMARK_COMMIT", "unknown (no git checkout)")
    return found.stdout.strip() + ("+changes" if dirty else "")


def command_line(argv: Sequence[str]) -> list[str]:
    """The command that ran: ``python -m benchmarks.perf.bench_extract --name X`` when ``argv`` is this process's
    own (``sys.argv[0]`` is the ``__main__`` module's file, run with ``-m``), else ``python`` and ``argv`` as given.
    Runs stored before the layout of issue 34 keep their ``python benchmarks/<script>.py`` commands."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    file = getattr(main, "__file__", None)
    if argv and spec is not None and spec.name and file and Path(argv[0]).resolve() == Path(file).resolve():
        return ["python", "-m", spec.name.removesuffix(".__main__"), *argv[1:]]
    return ["python", *argv]


def save_run(name: str, *, argv: Sequence[str] | None = None, raw: Any = None,
             tables: dict[str, dict[str, list]] | None = None, **fields: Any) -> Path:
    """Write ``benchmarks/results/<name>.json`` (or ``name`` itself when it is a path ending in .json)."""
    path = Path(name) if name.endswith(".json") else RESULTS / f"{name}.json"
    argv = list(sys.argv if argv is None else argv)
    record = {"command": " ".join(command_line(argv)), "commit": commit(), "machine": machine(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              **fields, "tables": tables or {}, "raw": raw}
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(staging, path)
    for key, stored_table in (tables or {}).items():
        print(f"\n<!-- stored: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}#{key} -->")
        print(markdown(stored_table))
    return path
