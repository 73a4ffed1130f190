"""Compression of MiniLM (all-MiniLM-L6-v2) the Primer's way (issue 22): for each method, x smaller, x faster and
how much of the original's UPOS probe accuracy, structural-probe UUAS (each at its best layer, chosen on dev) and
parser-head accuracy the compressed model keeps, with 95% paired bootstrap intervals over test sentences.

One process: every variant is written as a checkpoint, reloaded through ``load_encoder`` and measured beside the
original on the same packaged UD EWT sentences; the speed-ups are ratios within one run (extract on the same test
sentences, one warm-up per model excluded, models interleaved round by round, the load average recorded).

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.experiments.compression.compression [--max-train 500 --max-dev 200
        --max-test 300 --rounds 3 --threads 1] [--methods default] [--name compression_minilm_cpu]

On a GPU machine the same command measures the GPU (extract runs on the encoder's device; add ``--device cuda``);
PyTorch's int8 kernels are CPU-only, so on a GPU leave int8 out of ``--methods``.
"""

from __future__ import annotations

import argparse
import json
import os
import time


from benchmarks.stored import save_run, table  # noqa: E402


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def _kept(row, measure: str) -> str:
    value, low, high = (row[f"{measure}_retention"], row[f"{measure}_ci_low"], row[f"{measure}_ci_high"])
    if low != low:
        return _pct(value)
    return f"{_pct(value)} [{_pct(low)}, {_pct(high)}]"


def tables_of(summary, layers, baselines, speed=None) -> dict:
    """The published tables, formatted here and only here. ``speed``: the speed-ups of a separate speed run
    (compression_speed.py's raw ``speedups``) to show instead of this run's own."""
    primer = []
    speed_of = {row["variant"]: row for row in speed} if speed is not None else None
    for _, row in summary.iterrows():
        if speed_of is None:
            faster = [f"{row['speedup']:.2f} [{row['speedup_min']:.2f}, {row['speedup_max']:.2f}]"]
        else:
            pace = speed_of[row["variant"]]
            faster = [f"{pace['speedup']:.2f} [{pace['speedup_min']:.2f}, {pace['speedup_max']:.2f}]"]
        primer.append([row["variant"], f"{row['parameter_bytes'] / 1e6:.1f}", f"{row['compression']:.2f}", *faster,
                       _kept(row, "upos"), _kept(row, "uuas"), _kept(row, "parser_heads"),
                       f"{100 * row['nonzero_fraction']:.0f}"])
    speed_header = ["x faster [min, max]"]
    scores = []
    for _, row in summary.iterrows():
        scores.append([row["variant"], _pct(row["upos"]), _pct(row["uuas"]), _pct(row["parser_heads"])])
    base = dict(zip(baselines["measure"], baselines["value"]))
    scores.append(["baseline (no model)", _pct(base["upos_majority"]) + " (majority tag)",
                   _pct(base["uuas_linear_chain"]) + " (linear chain)",
                   _pct(base["parser_heads_offset"]) + " (best offset)"])
    curves = []
    order = list(summary["variant"])
    for measure in ("upos", "uuas", "anisotropy"):
        wide = layers.pivot_table(index="layer", columns="variant", values=measure)
        for layer in wide.index:
            cells = []
            for variant in order:
                value = wide.loc[layer, variant] if variant in wide.columns else float("nan")
                cells.append("" if value != value else (_pct(value) if measure != "anisotropy" else f"{value:.2f}"))
            curves.append([measure, str(int(layer)), *cells])
    return {
        "primer": table(["method", "MB", "x smaller", *speed_header, "UPOS kept %", "UUAS kept %",
                         "parser heads kept %", "nonzero %"], primer),
        "scores": table(["method", "UPOS % (best layer)", "UUAS % (best layer)", "parser heads %"], scores),
        "layers": table(["measure", "layer", *order], curves),
    }


def task_table(task) -> str:
    """The --finetune table: each model's dev metric, how it was scored, and retention [95% CI]."""
    rows = []
    for _, row in task.iterrows():
        kept = "" if row["retention"] != row["retention"] else _kept(
            {"x_retention": row["retention"], "x_ci_low": row["ci_low"], "x_ci_high": row["ci_high"]}, "x")
        rows.append([row["variant"], row["scoring"], f"{100 * row['value']:.1f}", kept, row["note"] or ""])
    return table(["method", "scored as", f"{task['task'].iloc[0]} dev {task['metric'].iloc[0]} %", "kept % [95% CI]",
                  "note"], rows)


def reformat(name: str, speed_from: str | None = None) -> None:
    """Re-save the stored run ``name`` with its tables rebuilt from its own raw output, the speed-ups taken from the
    stored run ``speed_from`` when given (both raw outputs are in the repo; nothing is re-measured)."""
    import pandas as pd

    from benchmarks.stored import RESULTS

    record = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
    raw = record["raw"]
    speed = None
    note = "tables re-formatted from this record's stored raw output (raw.reformatted_from: the run that measured it)"
    if speed_from:
        speed = json.loads((RESULTS / f"{speed_from}.json").read_text(encoding="utf-8"))["raw"]["speedups"]
        note += f"; the x faster columns from benchmarks/results/{speed_from}.json (its raw speedups)"
    tables = tables_of(pd.DataFrame(raw["summary"]), pd.DataFrame(raw["layers"]), pd.DataFrame(raw["baselines"]),
                       speed)
    first = raw.get("reformatted_from") or {"command": record["command"], "commit": record["commit"],
                                            "date": record["date"], "machine": record["machine"]}
    save_run(name, raw={**raw, "reformatted_from": first}, tables=tables, note=note, speed_from=speed_from)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--methods", default="default")
    parser.add_argument("--max-train", type=int, default=500)
    parser.add_argument("--max-dev", type=int, default=200)
    parser.add_argument("--max-test", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--structural-epochs", type=int, default=10)
    parser.add_argument("--device", default=None, help="cuda to measure a GPU (int8 is CPU-only)")
    parser.add_argument("--finetune", default=None, help="a finetune task (bshift, sst2...): dev-metric retention")
    parser.add_argument("--finetune-max-train", type=int, default=None, help="default: all (the report's recipe)")
    parser.add_argument("--finetune-epochs", type=float, default=2.0)
    parser.add_argument("--out", default="/tmp/compress/minilm")
    parser.add_argument("--name", default="compression_minilm_cpu")
    parser.add_argument("--reformat", action="store_true",
                        help="rebuild the published tables of the stored run --name from its stored raw output "
                             "(nothing is re-measured; the record says so)")
    parser.add_argument("--speed-from", default=None,
                        help="with --reformat: take the x faster columns from this stored speed run "
                             "(benchmarks.experiments.compression.compression_speed)")
    args = parser.parse_args()
    if args.reformat:
        reformat(args.name, args.speed_from)
        return

    import torch

    torch.set_num_threads(args.threads)
    from bertology.compression import packaged_sets, run_compression
    from bertology.models import load_encoder

    started = time.perf_counter()
    encoder = load_encoder(args.model, device=args.device)
    sets = packaged_sets(args.max_train, args.max_dev, args.max_test)
    config = None
    if args.finetune:
        from bertology.compression.finetuned import default_config

        config = default_config(max_train=args.finetune_max_train, epochs=args.finetune_epochs)
    result = run_compression(encoder, args.methods, args.out, sets=sets, rounds=args.rounds,
                             structural_epochs=args.structural_epochs, finetune_task=args.finetune,
                             finetune_config=config, progress=True)
    seconds = time.perf_counter() - started
    summary, layers, parser_heads = result["summary"], result["layers"], result["parser_heads"]
    tables = tables_of(summary, layers, result["baselines"])
    if "task" in result.tables:
        tables["task"] = task_table(result["task"])
    raw = {"summary": json.loads(summary.to_json(orient="records")),
           "retention": json.loads(result["retention"].to_json(orient="records")),
           "layers": json.loads(layers.to_json(orient="records")),
           "parser_heads": json.loads(parser_heads.to_json(orient="records")),
           "throughput": json.loads(result["throughput"].to_json(orient="records")),
           "sizes": json.loads(result["sizes"].to_json(orient="records")),
           "baselines": json.loads(result["baselines"].to_json(orient="records")),
           "meta": result.meta, "seconds": round(seconds, 1),
           "quantized_engines": list(torch.backends.quantized.supported_engines),
           "engine": torch.backends.quantized.engine, "threads": args.threads,
           "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    if "task" in result.tables:
        raw["task"] = json.loads(result["task"].to_json(orient="records"))
    save_run(args.name, raw=raw, tables=tables)


if __name__ == "__main__":
    main()
