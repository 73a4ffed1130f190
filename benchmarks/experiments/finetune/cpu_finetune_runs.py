"""Real CPU runs the docs show, run as their commands and stored: fine-tuning CoLA, and masking SST-2's flagged heads.

``cola`` (docs/finetune.md, "CPU: a real run"): ``bertology finetune --model minilm --task cola --max-train N
--epochs 3 --lr LR --seeds 1 --seed 0 --threads 1 --final-eval-only`` for each ``--lrs``; stored as
``finetune_cpu_cola_minilm`` with dev Matthews correlation, the last epoch's train loss, train time and
throughput (read from each checkpoint's ``finetune.json``).

``flagged`` (docs/intervention.md, "A real run"): ``bertology finetune --model minilm --task sst2 --seeds 2
--seed 0 --epochs 1 --lr 5e-5 --max-train 3000``, then ``bertology ablate flagged`` on seed 0 (``--draws``
random draws) and, with ``--single-head-table``, ``bertology ablate table`` on both seeds; stored as
``intervention_sst2_flagged_minilm``.

Every command runs in a fresh process in a temporary folder; wall times and the load average are recorded.

usage: python -m benchmarks.experiments.finetune.cpu_finetune_runs cola [--max-train 4000] [--lrs 2e-5,5e-5]
       python -m benchmarks.experiments.finetune.cpu_finetune_runs flagged [--draws 10] [--single-head-table]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from benchmarks.stored import save_run, table  # noqa: E402


def bertology(*arguments: str) -> float:
    """Run ``bertology ARGUMENTS`` in a fresh process; its wall seconds (the output goes to stderr)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bertology.cli", *arguments, "--no-progress"], check=True,
                   stdout=sys.stderr)
    return time.perf_counter() - started


def checkpoint_meta(folder: Path) -> dict:
    return json.loads((folder / "finetune.json").read_text(encoding="utf-8"))


def cola(args, work: Path) -> None:
    rows, raw = [], {}
    for lr in args.lrs.split(","):
        out = work / f"cola-{lr}"
        wall = bertology("finetune", "--model", "minilm", "--task", "cola", "--max-train", str(args.max_train),
                         "--epochs", "3", "--lr", lr, "--seeds", "1", "--seed", "0", "--threads", "1",
                         "--final-eval-only", "--out", str(out))
        meta = checkpoint_meta(out / "cola" / "baseline" / "seed-0")
        last = meta["history"][-1]
        raw[lr] = {"wall_s": wall, "metrics": meta["metrics"], "history": meta["history"],
                   "train_seconds": meta["train_seconds"],
                   "train_examples_per_second": meta["train_examples_per_second"],
                   "n_train": meta["n_train"], "n_dev": meta["n_dev"], "load_average_after": os.getloadavg()}
        rows.append([lr + (" (default)" if lr == "2e-5" else ""), f"{meta['metrics']['matthews_corr']:.3f}",
                     f"{last['train_loss']:.3f}", f"{meta['train_seconds']:.0f} s",
                     f"{meta['train_examples_per_second']:.1f} examples/s"])
    save_run("finetune_cpu_cola_minilm", raw={"runs": raw, "max_train": args.max_train,
                                              "load_average_before": args.load_before},
             tables={"cola": table(["lr", "dev Matthews corr.", "train loss (epoch 3)", "train time", "throughput"],
                                   rows)})


def flagged(args, work: Path) -> None:
    out = work / "sst2"
    seconds = {"finetune": bertology("finetune", "--model", "minilm", "--task", "sst2", "--seeds", "2", "--seed", "0",
                                     "--epochs", "1", "--lr", "5e-5", "--max-train", "3000", "--threads", "1",
                                     "--out", str(out))}
    checkpoints = [out / "sst2" / "baseline" / f"seed-{seed}" for seed in (0, 1)]
    accuracy = [checkpoint_meta(folder)["metrics"]["accuracy"] for folder in checkpoints]
    train_seconds = [checkpoint_meta(folder)["train_seconds"] for folder in checkpoints]
    seconds["flagged"] = bertology("ablate", "flagged", "--model", str(checkpoints[0]), "--draws", str(args.draws),
                                   "--out", str(work / "flagged"))
    summary = pd.read_csv(work / "flagged" / "summary.csv").iloc[0]
    masked = pd.read_csv(work / "flagged" / "masked.csv")
    flagged_heads = masked[masked["condition"] == "flagged"]["head_label"].tolist()
    n = int(summary["n_masked"])
    rows = [["unablated", f"{100 * summary['baseline']:.2f}"],
            [f"the {n} flagged heads masked", f"{100 * summary['flagged_delta']:+.2f} points"],
            [f"{n} random heads masked ({args.draws} seeded draws)",
             f"{100 * summary['random_delta_mean']:+.2f} ± {100 * summary['random_delta_std']:.2f} points"],
            ["share of random draws that hurt as much", f"{summary['p_random_as_harmful']:.2f}"]]
    raw = {"accuracy_per_seed": accuracy, "train_seconds_per_seed": train_seconds, "flagged_heads": flagged_heads,
           "flagged_summary": summary.to_dict(), "runs": pd.read_csv(work / "flagged" / "runs.csv").to_dict("records")}
    tables = {"flagged": table(["SST-2 dev accuracy", "change"], rows)}
    if args.single_head_table:
        models = [item for folder in checkpoints for item in ("--model", str(folder))]
        seconds["table"] = bertology("ablate", "table", *models, "--out", str(work / "table"))
        heads = pd.read_csv(work / "table" / "summary.csv")
        raw["single_head"] = heads.to_dict("records")
        order = heads.sort_values("delta_mean")
        raw["single_head_reading"] = {
            "delta_min_points": 100 * float(heads["delta_mean"].min()),
            "delta_max_points": 100 * float(heads["delta_mean"].max()),
            "heads_lowering": int((heads["delta_mean"] < 0).sum()), "heads": len(heads),
            "largest_drops": [{"head": row.head_label, "delta_points": 100 * row.delta_mean,
                               "std_points": 100 * row.delta_std} for row in order.head(3).itertuples()],
            "seed_spread_points": 100 * float(heads["seed_spread"].iloc[0])}
    raw.update(seconds=seconds, load_average_before=args.load_before, load_average_after=os.getloadavg())
    save_run("intervention_sst2_flagged_minilm", raw=raw, tables=tables)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="run", required=True)
    cola_parser = commands.add_parser("cola")
    cola_parser.add_argument("--max-train", type=int, default=4000)
    cola_parser.add_argument("--lrs", default="2e-5,5e-5")
    flagged_parser = commands.add_parser("flagged")
    flagged_parser.add_argument("--draws", type=int, default=10)
    flagged_parser.add_argument("--single-head-table", action="store_true")
    args = parser.parse_args()
    args.load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bertology-cpu-runs-") as work:
        (cola if args.run == "cola" else flagged)(args, Path(work))


if __name__ == "__main__":
    main()
