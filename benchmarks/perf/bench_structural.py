"""Benchmark: structural-probe training, all layers batched in one model vs one probe per layer.

Baseline: the authors' scheme (structural-probes/probe.py + regimen.py), one layer at a time, padded
batches, ``||B(h_i - h_j)||^2`` from materialised pairwise differences. Ours: StructuralProbe, every layer a
slice of one batched model, packed projection and Gram-matrix distances. Same sentences (UD EWT dev trees),
same batch size (20), same number of epochs, early stopping off, so both do the same optimisation steps.
Word vectors are random with MiniLM's shape (7 layers x 384): training time depends on shapes only.

usage: python -m benchmarks.perf.bench_structural [--sentences 2000] [--epochs 2] [--rank 128] [--device cpu] [--name NAME]

writes the stored run benchmarks/results/NAME.json (default structural_bench_<device>) with the table
docs/benchmarks_structural.md publishes (``speed``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch
from benchmarks.stored import save_run, table

from bertology.data import default_corpus, read_conllu
from bertology.data.treebank import tree_depths, tree_distances
from bertology.probing.structural_probe import StructuralProbe

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = ("the authors' scheme (structural-probes): one probe per layer, padded batches, materialised pairwise "
            "differences")


def per_layer_baseline(X, offsets, gold, kind, rank, epochs, batch_size, device, seed=0):
    """One probe per layer, trained one after another, as in the authors' code."""
    n_layers, _, dim = X.shape
    lengths = np.diff(offsets)
    for layer in range(n_layers):
        torch.manual_seed(seed)
        proj = torch.nn.Parameter(torch.empty(dim, rank, device=device).uniform_(-0.05, 0.05))
        optimizer = torch.optim.Adam([proj], lr=1e-3)
        rng = np.random.default_rng(seed)
        for _ in range(epochs):
            order = rng.permutation(len(lengths))
            for start in range(0, len(order), batch_size):
                batch = order[start:start + batch_size]
                n_max = int(lengths[batch].max())
                words = torch.zeros(len(batch), n_max, dim, device=device)
                labels = torch.full((len(batch), n_max, n_max) if kind == "distance" else (len(batch), n_max),
                                    -1.0, device=device)
                for b, i in enumerate(batch):
                    n = lengths[i]
                    words[b, :n] = X[layer, offsets[i]:offsets[i + 1]]
                    if kind == "distance":
                        labels[b, :n, :n] = gold[i]
                    else:
                        labels[b, :n] = gold[i]
                optimizer.zero_grad()
                transformed = words @ proj
                if kind == "distance":
                    t = transformed.unsqueeze(2).expand(-1, -1, n_max, -1)
                    predictions = ((t - t.transpose(1, 2)) ** 2).sum(-1)
                else:
                    predictions = (transformed**2).sum(-1)
                mask = (labels != -1).float()
                per_sentence = ((predictions - labels).abs() * mask).sum(dim=tuple(range(1, labels.ndim)))
                norm = torch.as_tensor(lengths[batch], device=device).float()
                norm = norm**2 if kind == "distance" else norm
                (per_sentence / norm).mean().backward()
                optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rank", type=int, default=128)
    parser.add_argument("--layers", type=int, default=7)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--name", default=None, help="stored run name (default structural_bench_<device>)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sentences = read_conllu(default_corpus("ewt-dev"))[: args.sentences]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sentences])])
    rng = np.random.default_rng(0)
    X_np = rng.normal(size=(args.layers, offsets[-1], args.dim)).astype(np.float32)
    X = torch.from_numpy(X_np).to(device)
    dev = sentences[:50]
    X_dev = X_np[:, : offsets[50]]
    print(f"machine: {os.cpu_count()} CPUs, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"device {device}" + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))
    print(f"data: {len(sentences)} EWT sentences, {offsets[-1]} words, {args.layers} layers x {args.dim}, "
          f"rank {args.rank}, batch 20, {args.epochs} epochs")

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    if device.type == "cuda":
        machine = f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    else:
        machine = f"{os.cpu_count()} CPUs (shared), torch {torch.__version__}, {torch.get_num_threads()} thread(s)"
    data = f"{len(sentences):,} sentences ({offsets[-1]:,} words), {args.epochs} epoch(s)"
    rows, raw = [], {"sentences": len(sentences), "words": int(offsets[-1]), "epochs": args.epochs, "rank": args.rank,
                     "layers": args.layers, "dim": args.dim, "device": str(device), "seconds": {}}
    for kind in ("distance", "depth"):
        gold = [torch.as_tensor((tree_distances if kind == "distance" else tree_depths)(s.heads),
                                dtype=torch.float32, device=device) for s in sentences]
        sync()
        start = time.perf_counter()
        per_layer_baseline(X, offsets, gold, kind, args.rank, args.epochs, 20, device)
        sync()
        baseline = time.perf_counter() - start
        probe = StructuralProbe(kind=kind, rank=args.rank, epochs=args.epochs, batch_size=20,
                                patience=10**6, device=device)
        sync()
        start = time.perf_counter()
        probe.fit(X_np, sentences, X_dev, dev)  # includes one dev pass per epoch and moving X to the device
        sync()
        ours = time.perf_counter() - start
        print(f"{kind:8s}  per-layer baseline {baseline:7.2f}s   batched layers (ours) {ours:7.2f}s   "
              f"speed-up x{baseline / ours:.2f}")
        raw["seconds"][kind] = {"baseline": baseline, "ours": ours}
        rows.append([machine if not rows else "same", data if not rows else "same", kind, f"{baseline:.2f} s",
                     f"{ours:.2f} s", f"x{baseline / ours:.1f}"])
    save_run(args.name or f"structural_bench_{device.type}", argv=sys.argv, raw=raw,
             tables={"speed": table(["machine", "data", "probe", "baseline", "ours", "speed-up"], rows)})


if __name__ == "__main__":
    main()
