"""The Convexity MLM probe in both input-dropout modes on one model and text, stored as one JSON.

``target`` (the default: only the predicted token's embedding is dropped out, the context clean) and
``all`` (every token's embedding, the context included), with the same seeds, text and head settings;
the raw per-seed, per-layer rows, the summaries, the unigram baseline and the times go to ``--out``
with the command, the commit, the machine and the date (docs/knowledge.md's MLM-probe tables).

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python -m benchmarks.experiments.knowledge.mlm_probe_modes \\
        --max-sentences 800 --seeds 1 --epochs 1 --batch-size 64

writes the stored run benchmarks/results/knowledge_mlm_probe_modes_minilm_cpu.json (the per-mode tables; the
page's stored run of 2026-11-24 was formatted from the older raw record by benchmarks/formatters/format_stored_tables.py mlm-modes).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.formatters.format_stored_tables import mlm_mode_table
from benchmarks.stored import command_line, save_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--max-sentences", type=int, default=None, help="first N sentences of EWT dev (default all)")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds (0, 1, ...)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--dropout", type=float, default=0.9)
    parser.add_argument("--modes", default="target,all")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="also write the raw record (the older format) here")
    parser.add_argument("--name", default="knowledge_mlm_probe_modes_minilm_cpu",
                        help="stored run benchmarks/results/NAME.json with docs/knowledge.md's tables")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from bertology.data import default_corpus
    from bertology.knowledge.mlm_probe import mlm_probe

    from benchmarks.stored import ROOT as root

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=root, capture_output=True,
                                text=True).stdout.strip())
    record = {
        "command": "OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/" + " ".join(command_line(sys.argv)),
        "commit": commit, "src_modified_since_commit": dirty,
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads()},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "data": "packaged UD English EWT dev, every fifth sentence held out", "modes": {},
    }
    for mode in args.modes.split(","):
        started = time.perf_counter()
        result = mlm_probe(args.model, default_corpus("ewt-dev"), seeds=tuple(range(args.seeds)), dropout=args.dropout,
                           corrupt=mode, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, decoder="tied",
                           max_sentences=args.max_sentences, device="cpu")
        seconds = time.perf_counter() - started
        record["modes"][mode] = {
            "seconds": round(seconds, 1), "meta": result.meta,
            "layers": json.loads(result["layers"].to_json(orient="records")),
            "summary": json.loads(result["summary"].to_json(orient="records")),
            "baselines": json.loads(result["baselines"].to_json(orient="records")),
        }
        print(f"{mode}: {seconds:.0f} s", flush=True)
        print(result["summary"][["weights", "layer", "top1", "top10", "perplexity"]].to_string(index=False), flush=True)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
    tables = {mode: mlm_mode_table(record["modes"][mode]["summary"]) for mode in record["modes"]}
    save_run(args.name, argv=sys.argv, raw=json.loads(json.dumps(record["modes"], default=str)), tables=tables)


if __name__ == "__main__":
    main()
