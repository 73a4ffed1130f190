"""The stored checklist run: `bertology claims` on MiniLM beside its untrained twin (docs/claims.md).

    BERTOLOGY_DATA=../shared/data python -m benchmarks.experiments.claims.claims_minilm [--out reports] [--max-sentences 100] [--seeds 2]

runs (or reuses, from ``<out>/<model>/results``) both reports, then stores

* ``benchmarks/results/claims_minilm_cpu.json``: the verdicts table docs/claims.md shows (``verdicts``) and every
  verdict with its numbers (``raw``);
* ``tests/data/claims/<model>/<section>__<table>.parquet``: the result tables the verdicts read, for
  ``tests/test_claims.py`` (the twin fails the syntactic-specialisation claims MiniLM holds; the stored verdicts are
  what these tables give).

It is the same as ``bertology claims -m minilm --compare minilm untrained --max-sentences 100 --seeds 2`` plus the
storing; rerun it when the probing defaults change. ``--from-tables`` runs no report: it judges the tables stored
in ``tests/data/claims`` again (after a verdict rule changed; the run's settings and time are kept from the stored
run).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time

from benchmarks.stored import RESULTS, ROOT, save_run, table

import pandas as pd
import torch

from bertology.claims.evaluate import check_claims, display_frame, format_interval
from bertology.report.checklist import run_claims

#: The result tables the claims read (section, table): what tests/data/claims keeps of each run (those it has).
READ = [("probing", "table2"), ("probing", "arc_length"), ("attention", "best_heads"), ("attention", "probe_summary"),
        ("attention", "statistics"), ("attention", "patterns"), ("interventions", "check"),
        ("interventions", "curve"), ("interventions", "flagged_summary"), ("interventions", "flagged_runs"),
        ("knowledge", "contextuality"), ("knowledge", "contextuality.types"), ("tokenization", "by_upos"),
        ("compare", "cka"), ("knowledge", "pairs.paradigms"), ("knowledge", "lama.corpora"), ("knowledge", "numeracy.layers"),
        ("compression", "summary"),
        ("languages", "identity_summary"), ("languages", "transfer_best")]
TABLES = ROOT / "tests" / "data" / "claims"


def stored_tables(model: str) -> dict:
    """The result tables kept of one model's run (``tests/data/claims/<model>``), as ``results`` maps them."""
    results: dict = {}
    for path in sorted((TABLES / model).glob("*.parquet")):
        section, name = path.stem.split("__", 1)
        results.setdefault(section, {})[name] = pd.read_parquet(path)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="reports")
    parser.add_argument("--max-sentences", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--from-tables", action="store_true", help="judge the stored tables again; run no report")
    args = parser.parse_args()
    if args.from_tables:
        record = json.loads((RESULTS / "claims_minilm_cpu.json").read_text(encoding="utf-8"))
        previous = record["raw"]
        results = {"minilm": stored_tables("minilm"), "untrained": stored_tables("untrained")}
        settings, seconds = previous["settings"], previous["seconds"]
        # the command and commit that ran the reports, kept through any number of re-judgings
        settings = {"run_command": record["command"], "run_commit": record["commit"], **settings,
                    "verdicts": "judged again from the stored tables (--from-tables)"}
    else:
        started = time.perf_counter()
        outcome = run_claims(["minilm", "untrained"], args.out, seeds=tuple(range(args.seeds)),
                             max_sentences=args.max_sentences, progress=False)
        seconds = round(time.perf_counter() - started, 1)
        settings = {"max_sentences": args.max_sentences, "seeds": args.seeds, "out": args.out}
        results = dict(zip(["minilm", "untrained"], outcome.results.values()))
        for model, tables in results.items():
            folder = TABLES / model
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            for section, name in READ:
                frame = (tables.get(section) or {}).get(name)
                if frame is not None:
                    frame.to_parquet(folder / f"{section}__{name}.parquet", index=False)
    frames = {model: check_claims(tables, model=model)["claims"] for model, tables in results.items()}
    minilm, twin = frames["minilm"], frames["untrained"]
    shown = display_frame(minilm)
    rows = []
    for (_, raw), (_, row), (_, other) in zip(minilm.iterrows(), shown.iterrows(), twin.iterrows()):
        rows.append([raw["claim"], raw["document"], row["verdict"], row["number"], row["baseline"],
                     format_interval(raw), other["verdict"], row["paper's number"]])
    verdicts = table(["claim", "seed", "MiniLM", "number", "baseline", "interval", "untrained twin", "paper's number"],
                     rows)
    save_run("claims_minilm_cpu", argv=sys.argv,
             raw={"settings": settings, "seconds": seconds,
                  "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                  "verdicts": {model: frame.drop(columns=["model"]).to_dict(orient="records")
                               for model, frame in frames.items()}},
             tables={"verdicts": verdicts})
    print(f"stored benchmarks/results/claims_minilm_cpu.json and {TABLES} ({seconds:.0f} s)")


if __name__ == "__main__":
    main()
