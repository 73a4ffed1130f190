"""Speed-up of each compression method on MiniLM: tokens per second of ``bertology extract`` on the same EWT test
sentences for the original and every variant, all in one process (issue 22's speed-up figures).

Each variant is made by ``bertology.compression.compress``, written as a checkpoint and reloaded through
``load_encoder``, as ``bertology compress`` does. One warm-up run per model is not counted; then ``--rounds``
rounds run every model once, each round starting one model later (no model always runs first); x faster is the
ratio to the original within each round (median, min, max over rounds) and of the best rounds (each model's
fastest round: the one least slowed by other work on a shared machine). The magnitude-pruned variants compute
exactly what the original computes (zeros stored dense), so their x faster is this machine's noise floor.

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.experiments.compression.compression_speed [--rounds 5] [--sentences 300]
        [--threads 1] [--name compression_speed_minilm_cpu]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path


from benchmarks.stored import save_run, table  # noqa: E402

METHODS = ("int8-dynamic,int8-static,fp16,bf16,magnitude:0.3,magnitude:0.5,magnitude:0.7,heads-importance:0.25,"
           "heads-random:0.25,heads-importance:0.5,heads-random:0.5,drop-top:1,drop-top:2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--methods", default=METHODS)
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--name", default="compression_speed_minilm_cpu")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from bertology.compression.measure import packaged_sets
    from bertology.models import load_encoder

    started = time.perf_counter()
    encoder = load_encoder(args.model)
    sets = packaged_sets(200, 1, args.sentences)
    work = Path(tempfile.mkdtemp(prefix="bench-compression-speed-"))
    try:
        measure(args, encoder, sets, work, started)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(args, encoder, sets, work: Path, started: float) -> None:
    import torch

    from bertology.compression import compress, parse_methods, probe_importance, save_checkpoint, stored_bytes
    from bertology.compression.measure import machine_load, speedups, throughput
    from bertology.compression.methods import Variant
    from bertology.models import load_encoder

    importance = None
    models = {"original": load_encoder(save_checkpoint(Variant("original", encoder), work / "original"))}
    calibration = [dict(encoder.tokenizer([list(s.words) for s in sets.train[i:i + 16]], is_split_into_words=True,
                                          padding=True, return_tensors="pt")) for i in range(0, 64, 16)]
    for method in parse_methods(args.methods):
        if method.name == "heads-importance" and importance is None:
            importance = probe_importance(encoder, sets.train[:200])
        variant = compress(encoder, method, calibration=calibration, importance=importance)
        models[variant.label] = load_encoder(save_checkpoint(variant, work / variant.label))
    load_before = machine_load()
    timed = throughput(models, sets.test, work / "throughput", rounds=args.rounds)
    load_after = machine_load()
    speed = speedups(timed, "original")
    sizes = {label: stored_bytes(model.model) for label, model in models.items()}
    rows = []
    for row in speed.itertuples():
        rows.append([row.variant, f"{sizes[row.variant] / 1e6:.1f}", f"{sizes['original'] / sizes[row.variant]:.2f}",
                     f"{row.tokens_per_second:,.0f}", f"{row.speedup:.2f} [{row.speedup_min:.2f}, {row.speedup_max:.2f}]",
                     f"{row.speedup_best:.2f}"])
    raw = {"throughput": json.loads(timed.to_json(orient="records")),
           "speedups": json.loads(speed.to_json(orient="records")), "parameter_bytes": sizes,
           "sentences": len(sets.test), "tokens": int(timed["tokens"].iloc[0]), "rounds": args.rounds,
           "threads": args.threads, "engine": torch.backends.quantized.engine,
           "quantized_engines": list(torch.backends.quantized.supported_engines),
           "machine_load": {"before": load_before, "after": load_after},
           "seconds": round(time.perf_counter() - started, 1)}
    save_run(args.name, raw=raw, tables={"speed": table(
        ["method", "MB", "x smaller", "tokens/s (median)", "x faster, per round: median [min, max]",
         "x faster, best rounds"], rows)})


if __name__ == "__main__":
    main()
