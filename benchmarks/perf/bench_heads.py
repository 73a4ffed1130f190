"""Streaming activations to a head: share of training time spent waiting for data, and peak memory.

The seed (BERT Vision) materialised every layer of every token and found that "loading the data usually
takes more than 90% of the training time". Here a head trains for one epoch on a store of MiniLM-shaped
activations (7 layers x 384 hidden, float16, window lengths drawn like the SQuAD windows: mean ~186
tokens, at most 384), streamed by ``StreamingReader``:

* **I/O share**: ``wait / step time`` of the training loop, with the background prefetcher (ours) and with
  the same reading done on the training thread (baseline), for a compute-heavy head (the seed's best,
  ``adapter-shared-386-skip``) and the cheapest one (``lp``). Target < 10% for the former.
* **Peak RSS**: a fresh process streams and trains an epoch over 1x and over 4x the examples; the
  ratio (target < 1.2) shows memory is flat in the store's size.

The store is synthetic (random values, the real layout and sizes) so the benchmark needs no model
forward passes; it is written once under ``--dir`` and is in the page cache afterwards, as a store being
trained on for a second epoch would be.

    .venv/bin/python -m benchmarks.perf.bench_heads [--windows 300] [--dir /tmp/bench-heads] [--threads 1]

Stored as ``benchmarks/results/<--name>.json`` (default ``bench_heads_cpu``): tables ``io`` and ``rss``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = "the same reads done on the training thread (no background prefetcher)"

LAYERS, HIDDEN = 7, 384


def synthetic_store(path: Path, windows: int, seed: int = 0, shard_bytes: int = 48 << 20) -> Path:
    """A complete store of ``windows`` random MiniLM-shaped windows with span labels (written once)."""
    from bertology.store.names import INDEX_NAME
    from bertology.store.writer import StoreWriter, plan_shards

    if (path / INDEX_NAME).is_file():
        return path
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.normal(186, 50, windows).astype(int), 40, 384)
    block = torch.from_numpy(rng.standard_normal((LAYERS, 8192, HIDDEN)).astype(np.float16))
    starts = [int(rng.integers(0, n)) for n in lengths]
    key = {"model": {"name": "synthetic-minilm-shape", "fingerprint": "synthetic", "hidden_size": HIDDEN,
                     "num_heads": 12},
           "layers": list(range(LAYERS)), "pool": "tokens", "attentions": False, "dtype": "float16",
           "long_policy": "error", "autocast": None}
    writer = StoreWriter(path, key, f"synthetic-{windows}-{seed}")
    shards = plan_shards(lengths, LAYERS * HIDDEN * 2, shard_bytes)
    writer.start([{"id": f"w{i}", "words": []} for i in range(windows)], lengths, shards, {"path": None},
                 files={"labels.json": {"kind": "synthetic", "labels": {"start": starts, "end": starts}}})
    for k, (a, b) in enumerate(shards):
        rows = int(lengths[a:b].sum())
        offset = (k * 997) % (8192 - rows) if rows < 8192 else 0
        tensor = block[:, offset: offset + rows] if rows <= 8192 else block.repeat(1, rows // 8192 + 1, 1)[:, :rows]
        writer.record(k, writer.write(k, {f"layer.{l}": tensor[l] for l in range(LAYERS)}))
    writer.finish({})
    return path


def train_epoch(store_path: Path, head_name: str, prefetch: bool, batch_size: int) -> dict:
    from bertology.readouts.catalog import build_readout
    from bertology.readouts.train import ReadoutTrainConfig, train_readout
    from bertology.store import Store

    store = Store.open(store_path)
    head = build_readout(head_name, LAYERS, HIDDEN, "span", seed=0)
    config = ReadoutTrainConfig(epochs=1, batch_size=batch_size, progress=False, prefetch=prefetch, checkpoint_every=0)
    stats = train_readout(head, store, config)
    return {"head": head_name, "prefetch": prefetch, "steps": stats.steps, "seconds": stats.seconds,
            "wait_seconds": stats.wait_seconds, "io_share": stats.io_share,
            "tokens_per_second": float(store.row_counts.sum()) / stats.seconds}


def peak_rss_mb() -> float:
    """This process's peak resident set: VmHWM, which starts afresh at exec. (ru_maxrss survives exec on
    Linux, so a child forked from a large parent would report the parent's size.)"""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(args) -> None:
    torch.set_num_threads(args.threads)
    result = train_epoch(Path(args.store), args.head, True, args.batch_size)
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=300, help="windows in the 1x store (4x for the RSS check)")
    parser.add_argument("--dir", default="/tmp/bench-heads")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the training loop")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--name", default="bench_heads_cpu", help="stored run: benchmarks/results/<name>.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--head", default="lp", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    torch.set_num_threads(args.threads)
    root = Path(args.dir)
    started = time.perf_counter()
    small = synthetic_store(root / f"x1-{args.windows}", args.windows)
    large = synthetic_store(root / f"x4-{args.windows}", 4 * args.windows, seed=1)
    print(f"stores written in {time.perf_counter() - started:.0f} s: {args.windows} and {4 * args.windows} windows "
          f"({sum(f.stat().st_size for f in small.iterdir()) / 2**20:.0f} / "
          f"{sum(f.stat().st_size for f in large.iterdir()) / 2**20:.0f} MiB)")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads {args.threads}")

    print("\nI/O share of one epoch's training time (wait for data / training loop time):")
    rows = []
    for head in ("adapter-shared-386-skip", "lp"):
        train_epoch(small, head, True, args.batch_size)  # warm-up: page cache, allocator
        baseline = train_epoch(small, head, False, args.batch_size)
        ours = train_epoch(small, head, True, args.batch_size)
        rows += [baseline, ours]
        print(f"  {head:24s} baseline (read on the training thread): {100 * baseline['io_share']:5.1f}% of "
              f"{baseline['seconds']:.1f} s | prefetcher: {100 * ours['io_share']:5.1f}% of {ours['seconds']:.1f} s "
              f"| epoch time ratio baseline/ours {baseline['seconds'] / ours['seconds']:.2f}x")

    print("\npeak RSS of a fresh process streaming one epoch (head lp):")
    peaks = {}
    for label, store in (("1x", small), ("4x", large)):
        output = subprocess.run([sys.executable, "-m", "benchmarks.perf.bench_heads", "--child", "--store", str(store),
                                 "--head", "lp", "--threads", str(args.threads), "--batch-size", str(args.batch_size)],
                                capture_output=True, text=True, check=True,
                                cwd=Path(__file__).resolve().parents[2]).stdout
        peaks[label] = json.loads(output.strip().splitlines()[-1])
        print(f"  {label}: {peaks[label]['peak_rss_mb']:.0f} MiB ({Path(store).name})")
    ratio = peaks["4x"]["peak_rss_mb"] / peaks["1x"]["peak_rss_mb"]
    print(f"  ratio 4x/1x: {ratio:.2f} (target < 1.2)")
    from benchmarks.stored import save_run, table

    io_rows = []
    for baseline, ours in zip(rows[::2], rows[1::2]):
        io_rows.append([baseline["head"], f"{100 * baseline['io_share']:.1f}", f"{baseline['seconds']:.2f}",
                        f"{100 * ours['io_share']:.1f}", f"{ours['seconds']:.2f}",
                        f"{baseline['seconds'] / ours['seconds']:.2f}x"])
    save_run(args.name, argv=sys.argv, raw={"io": rows, "rss": peaks, "rss_ratio": ratio,
                                            "windows": args.windows, "threads": args.threads,
                                            "batch_size": args.batch_size, "load_average": os.getloadavg()},
             tables={"io": table(["readout", "I/O share, read on the training thread (%)", "epoch s",
                                  "I/O share, prefetcher (%)", "epoch s", "epoch time ratio"], io_rows),
                     "rss": table(["store", "windows", "peak RSS (MiB)"],
                                  [[label, str(args.windows * (1 if label == "1x" else 4)),
                                    f"{peaks[label]['peak_rss_mb']:.0f}"] for label in ("1x", "4x")]
                                  + [["ratio 4x/1x", "", f"{ratio:.2f}"]])})


if __name__ == "__main__":
    main()
