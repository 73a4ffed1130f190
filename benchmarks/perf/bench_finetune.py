"""Fine-tuning throughput (train examples/s) of MiniLM on CPU: naive vs ours, same process, same data.

naive: fp32, every batch padded to max_length=128, plain shuffled batches (what a fixed-shape
       DataLoader/`padding="max_length"` pipeline does).
ours:  fp32, dynamic padding (each batch padded to its own longest example) + length-grouped batches
       (bertology.finetune's default).

Both run the same model, optimizer (AdamW), loss and examples; only the batching differs. Timed steps
exclude one warm-up step per arm. Usage: python -m benchmarks.perf.bench_finetune [--steps 6] [--tasks sst2,rte]

The run is stored as ``benchmarks/results/finetune_throughput_minilm_cpu.json`` (``--name``) with the load
average before and after.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import time

import numpy as np
import torch

from bertology.data.glue import glue_task, read_glue
from bertology.finetune.batching import collate, encode_examples
from bertology.runtime import seeded_subset
from bertology.training import training_batches
from bertology.finetune.model import build_glue_model
from bertology.models import load_encoder

from benchmarks.stored import save_run, table  # noqa: E402

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = "every batch padded to max_length=128, plain shuffled batches (a fixed-shape pipeline)"

TASK_NAMES = {"sst2": "SST-2", "rte": "RTE", "cola": "CoLA", "mrpc": "MRPC", "stsb": "STS-B"}


def run_arm(encoder, data, num_labels: int, steps: int, batch_size: int, dynamic: bool, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    model = build_glue_model(copy.deepcopy(encoder.model), num_labels, "baseline", seed=seed).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    rng = np.random.default_rng(seed)
    batches = training_batches(data.lengths, batch_size, rng, group_by_length=dynamic)
    pad_to = None if dynamic else 128
    seen, tokens, seconds = 0, 0, 0.0
    for step, indices in enumerate(batches[: steps + 1]):
        start = time.perf_counter()
        batch = collate(data, indices, pad_to=pad_to)
        labels = batch.pop("labels")
        output = model(**batch, labels=labels)
        output.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        elapsed = time.perf_counter() - start
        if step == 0:
            continue  # warm-up
        seconds += elapsed
        seen += len(indices)
        tokens += int(batch["input_ids"].numel())
    return {"examples_per_s": seen / seconds, "padded_tokens_per_example": tokens / seen, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6, help="timed optimizer steps per arm and repeat")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--tasks", default="sst2,rte")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--name", default="finetune_throughput_minilm_cpu", help="stored run's name")
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows, raw = [], {}
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs (load avg {os.getloadavg()[0]:.1f}), "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, Python {platform.python_version()}")
    encoder = load_encoder("minilm")
    print(f"model: MiniLM ({encoder.num_layers} layers, {encoder.num_parameters / 1e6:.1f} M parameters), fp32, CPU, "
          f"batch {args.batch_size}, {args.steps} timed steps x {args.repeats} repeats per arm (interleaved)")
    for task in args.tasks.split(","):
        spec = glue_task(task)
        examples = read_glue(spec.name, "train")
        data = encode_examples(encoder.tokenizer, seeded_subset(examples, 2000, seed=0), 128)
        results = {"naive": [], "ours": []}
        for repeat in range(args.repeats):
            for arm in ("naive", "ours"):
                results[arm].append(run_arm(encoder, data, spec.num_labels, args.steps, args.batch_size,
                                            dynamic=(arm == "ours"), seed=repeat))
        naive = statistics.median(r["examples_per_s"] for r in results["naive"])
        ours = statistics.median(r["examples_per_s"] for r in results["ours"])
        print(f"{task}: mean length {data.lengths.mean():.1f} tokens (max {data.lengths.max()})")
        print(f"  naive (pad to 128):                {naive:8.1f} examples/s, "
              f"{results['naive'][0]['padded_tokens_per_example']:.0f} padded tokens/example")
        print(f"  ours (dynamic + length-grouped):   {ours:8.1f} examples/s, "
              f"{statistics.mean(r['padded_tokens_per_example'] for r in results['ours']):.1f} padded tokens/example")
        print(f"  speed-up: {ours / naive:.2f}x")
        ours_padded = statistics.mean(r["padded_tokens_per_example"] for r in results["ours"])
        rows.append([TASK_NAMES.get(task, task), f"{data.lengths.mean():.1f}", f"{naive:.1f}", f"{ours:.1f}",
                     f"{results['naive'][0]['padded_tokens_per_example']:.0f} → {ours_padded:.1f}",
                     f"**{ours / naive:.1f}x**"])
        raw[task] = {"runs": results, "mean_length": float(data.lengths.mean()), "naive_median": naive,
                     "ours_median": ours}
    load_after = os.getloadavg()
    print(f"load average (1 min) before {load_before[0]:.1f}, after {load_after[0]:.1f}")
    save_run(args.name, raw={"tasks": raw, "steps": args.steps, "repeats": args.repeats,
                             "batch_size": args.batch_size, "torch_threads": torch.get_num_threads(),
                             "load_average_before": load_before, "load_average_after": load_after},
             tables={"throughput": table(["task", "mean length (tokens)", "naive (examples/s)", "ours (examples/s)",
                                          "padded tokens/example naive → ours", "speed-up"], rows)})


if __name__ == "__main__":
    main()
