"""Give earlier runs whose raw output is in the repo the stored-run format (benchmarks/stored.py): their
published tables, formatted from that raw output by the same functions the benchmarks use now.

Nothing is re-measured. Each record keeps the run's own command, commit, machine and date; ``raw`` is the
earlier file's whole content, and ``reformatted`` says what re-formatted it and when. Rerunning this script
gives the same tables (it reads ``raw`` back from a file it already converted).

    python -m benchmarks.formatters.store_earlier_runs

- make_demo_fresh_minilm_cpu.json, interventions_recipe_minilm_cpu.json, cli_startup_cpu.json: converted in place;
- peer_neurox_cpu.json and peer_neurox_cpu_run1.json (two runs of bench_scale.py's part 1, which wrote only
  their numbers) are left as they are; their table goes to peer_neurox_minilm_cpu.json, which holds both.
"""

from __future__ import annotations

import datetime
import json
import re

from benchmarks.stored import RESULTS, commit, save_run, table

RUN_FIELDS = ("command", "commit", "machine", "date")


def earlier(name: str) -> tuple[dict, dict]:
    """The run's own fields and its raw output: the file as it was, or ``raw`` of a file converted before."""
    record = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
    raw = record["raw"] if "reformatted" in record else {k: v for k, v in record.items() if k not in RUN_FIELDS}
    return {field: record[field] for field in RUN_FIELDS if field in record}, raw


def store(name: str, fields: dict, raw, tables: dict, sources: list[str]) -> None:
    reformatted = {"by": "python -m benchmarks.formatters.store_earlier_runs", "from": sources, "commit": commit(),
                   "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "note": "re-formatted from the earlier run's raw output (kept here as raw); not re-measured"}
    save_run(name, argv=[], raw=raw, tables=tables, **fields, reformatted=reformatted)


def make_demo() -> tuple:
    fields, raw = earlier("make_demo_fresh_minilm_cpu")
    sections = raw["section_seconds"]
    check = raw["interventions_check"]
    (training,) = [line for line in raw["raw_tail"] if f"{check['task']} baseline seed 0" in line]
    epochs, training_seconds = re.search(r"epoch (\d+) .* (\d+) s$", training).groups()
    minutes, seconds = re.fullmatch(r"(\d+)m([\d.]+)s", raw["make_demo_wall"]).groups()
    wall = int(minutes) * 60 + float(seconds)
    learned = (f"{100 * check['value']:.1f}% [{100 * check['ci_low']:.1f}, {100 * check['ci_high']:.1f}] on the "
               f"{check['n']} scored dev sentences vs {check['baseline_name']} {100 * check['baseline']:.1f}%")
    rows = [["tokenization", sections["tokenization"]], ["probing", sections["probing"]],
            ["attention", sections["attention"]],
            [f"interventions: {'BShift' if check['task'] == 'bshift' else check['task']} fine-tuned, {epochs} epochs "
             f"({training_seconds} s; {learned}), importance, pruning curves, flagged vs random heads",
             sections["interventions"]],
            ["knowledge (the MLM probe corrupts only the predicted token: one copy of a sentence per token)",
             sections["knowledge"]],
            ["**report written**", f"**{raw['report_seconds']}**"],
            ["**`make demo` wall, install from an empty cache included**",
             f"**{int(wall)} ({int(minutes)} min {int(float(seconds))} s)**"]]
    return ("make_demo_fresh_minilm_cpu", fields, raw, {"sections": table(["section", "seconds"], rows)},
            ["benchmarks/results/make_demo_fresh_minilm_cpu.json"])


def interventions_recipe() -> tuple:
    from benchmarks.experiments.report.interventions_recipe import recipe_table

    fields, raw = earlier("interventions_recipe_minilm_cpu")
    return ("interventions_recipe_minilm_cpu", fields, raw, {"recipes": recipe_table(raw["runs"], raw["majority"])},
            ["benchmarks/results/interventions_recipe_minilm_cpu.json"])


def cli_startup() -> tuple:
    from benchmarks.perf.bench_cli_startup import startup_table

    fields, raw = earlier("cli_startup_cpu")
    return ("cli_startup_cpu", fields, raw, {"startup": startup_table(raw["results"])},
            ["benchmarks/results/cli_startup_cpu.json"])


def peer_neurox() -> tuple:
    from benchmarks.perf.bench_scale import peer_table

    sources = ["peer_neurox_cpu", "peer_neurox_cpu_run1"]
    runs = {name: json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8")) for name in sources}
    # The command as it was run (before the layout of issue 34): a record keeps its historic invocation.
    fields = {"command": "python benchmarks/bench_scale.py --threads 1 --sentences 300 --neurox-sentences 100 "
                         "--ray-sentences 0 --json benchmarks/results/<one of the two files> (run twice)",
              "commit": "before ad1a81f (the commit that added both files)",
              "machine": "x86_64 AMD EPYC, 2 cores, 24 GiB, torch 2.13.0+cpu, Python 3.11.7; this session's host "
                         "reported AVX2 only (no AVX-512); shared: load average 4-9 (BENCHMARKS.md at ad1a81f)",
              "date": "2026-11-24"}
    return ("peer_neurox_minilm_cpu", fields, runs, {"peer": peer_table([runs[name]["peer"] for name in sources])},
            [f"benchmarks/results/{name}.json" for name in sources])


#: Each returns (name, the run's own fields, raw, tables, the files it read).
CONVERSIONS = (make_demo, interventions_recipe, cli_startup, peer_neurox)

if __name__ == "__main__":
    for convert in CONVERSIONS:
        store(*convert())
