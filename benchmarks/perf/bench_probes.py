"""Batched all-layer probe vs scikit-learn LogisticRegression fitted per layer, on the same features.

Task: UPOS on MiniLM word vectors of UD English EWT (train capped at --max-train words, dev/test at
--max-eval), all 7 layers (embeddings + 6). Both sides get the same standardised features, the same L2
grid (sklearn's C = 1 / (l2 * n_train)) and choose the L2 per layer on dev; both are scored on test.

    .venv/bin/python -m benchmarks.perf.bench_probes [--max-train 4000] [--max-eval 1000] [--repeats 1] [--name NAME]

writes the stored run benchmarks/results/NAME.json (default probes_upos_minilm_cpu) with the tables
docs/benchmarks_probes.md and BENCHMARKS.md publish (``speed``, ``accuracy``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
from benchmarks.stored import save_run, table

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = "scikit-learn LogisticRegression fitted layer by layer on the same features"


def features(max_train: int, max_eval: int, cache: str):
    from bertology.data import shared_data_dir
    from bertology.extraction import extract
    from bertology.models import load_encoder
    from bertology.probing.datasets import build_dataset, features as gather, keep_referenced, load_ud_pools
    from bertology.probing.tasks import get_task

    upos = get_task("upos")
    pools = load_ud_pools(shared_data_dir() / "ud_english_ewt")
    dataset = build_dataset("upos", upos.level, upos.source, upos.builder, pools, max_train, max_eval)
    keep_referenced([dataset])
    pools = dataset.pools
    encoder = load_encoder("minilm")
    out = {}
    for split in ("train", "dev", "test"):
        store = extract(encoder, pools[split], os.path.join(cache, f"upos-{split}"), progress=False)
        refs = dataset.splits[split].refs
        out[split] = (np.stack([gather("token", store.layer(l), store.offsets, refs) for l in store.layers]),
                      dataset.splits[split].labels.astype(str))
    return out


def ours(data, grid, device):
    from bertology.probing.probes import LayerwiseProbe

    (Xtr, ytr), (Xdv, ydv), (Xte, yte) = data["train"], data["dev"], data["test"]
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    probe = LayerwiseProbe(kind="linear", l2=grid, device=device).fit(Xtr, ytr, Xdv, ydv)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return seconds, probe.score_layers(Xte, yte)


def sklearn_per_layer(data, grid):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    (Xtr, ytr), (Xdv, ydv), (Xte, yte) = data["train"], data["dev"], data["test"]
    n = Xtr.shape[1]
    scores, unconverged = [], 0
    start = time.perf_counter()
    for layer in range(Xtr.shape[0]):
        mean, scale = Xtr[layer].mean(0), Xtr[layer].std(0)
        scale[scale < 1e-6] = 1.0
        tr, dv, te = ((X[layer] - mean) / scale for X in (Xtr, Xdv, Xte))
        best = (-1.0, None)
        for l2 in sorted(grid, reverse=True):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                clf = LogisticRegression(C=1.0 / (l2 * n), max_iter=1000).fit(tr, ytr)
            unconverged += any(issubclass(w.category, ConvergenceWarning) for w in caught)
            dev = clf.score(dv, ydv)
            if dev > best[0]:
                best = (dev, clf)
        scores.append(best[1].score(te, yte))
    return time.perf_counter() - start, np.asarray(scores), unconverged


def main() -> None:
    from bertology.probing.probes import DEFAULT_L2

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-train", type=int, default=4000)
    parser.add_argument("--max-eval", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--cache", default=None, help="folder for the extracted stores (default: a temp dir)")
    parser.add_argument("--name", default="probes_upos_minilm_cpu", help="stored run name ('none': store nothing)")
    args = parser.parse_args()
    grid = DEFAULT_L2
    cache = args.cache or tempfile.mkdtemp(prefix="bench-probes-")
    data = features(args.max_train, args.max_eval, cache)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), cuda: {torch.cuda.is_available()}")
    print(f"UPOS / MiniLM: {data['train'][0].shape[0]} layers, train {data['train'][0].shape[1]}, "
          f"dev {data['dev'][0].shape[1]}, test {data['test'][0].shape[1]} words, dim {data['train'][0].shape[2]}, "
          f"{len(set(data['train'][1]))} tags, L2 grid {grid}")
    ours(data, grid, "cpu")  # warm-up (thread pools, allocator)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    results = {d: [ours(data, grid, d) for _ in range(args.repeats)] for d in devices}
    sk = [sklearn_per_layer(data, grid) for _ in range(args.repeats)]
    sk_time = min(r[0] for r in sk)
    sk_scores = sk[0][1]
    print(f"sklearn LogisticRegression (lbfgs, per layer x L2): {sk_time:7.2f} s  test acc per layer "
          f"{np.round(100 * sk_scores, 1).tolist()}  ({sk[0][2]} of {len(grid) * len(sk_scores)} fits hit max_iter)")
    speed_rows, raw = [], {"sklearn_seconds": [r[0] for r in sk], "sklearn_accuracy": sk_scores.tolist(),
                           "sklearn_unconverged_fits": sk[0][2], "fits": len(grid) * len(sk_scores),
                           "repeats": args.repeats, "sizes": {s: int(data[s][0].shape[1]) for s in data},
                           "threads": torch.get_num_threads(), "ours": {}}
    accuracy_rows = [[layer, f"{100 * s:.1f}"] for layer, s in enumerate(sk_scores)]
    for device, runs in results.items():
        seconds = min(r[0] for r in runs)
        scores = runs[0][1]
        diff = 100 * np.abs(scores - sk_scores)
        print(f"ours LayerwiseProbe ({device}, all layers x L2 batched): {seconds:7.2f} s  test acc per layer "
              f"{np.round(100 * scores.astype(float), 1).tolist()}")
        print(f"  speed-up {sk_time / seconds:.1f}x; |acc difference| max {diff.max():.2f} points, "
              f"mean {diff.mean():.2f}; best layer acc: ours {100 * scores.max():.1f}, sklearn {100 * sk_scores.max():.1f}")
        raw["ours"][device] = {"seconds": [r[0] for r in runs], "accuracy": scores.astype(float).tolist()}
        where = (f"CPU, {os.cpu_count()} cores shared, {torch.get_num_threads()} torch threads" if device == "cpu"
                 else torch.cuda.get_device_name(0))
        speed_rows.append([where, f"{sk_time:.2f} s", f"{seconds:.2f} s", f"{sk_time / seconds:.1f}x",
                           f"{diff.mean():.2f} / {diff.max():.2f} points",
                           f"{100 * scores.max():.1f} vs {100 * sk_scores.max():.1f}"])
        for row, score in zip(accuracy_rows, scores):
            row.append(f"{100 * float(score):.1f}")
    if args.name != "none":
        save_run(args.name, argv=sys.argv, raw=raw, tables={
            "speed": table(["machine", "scikit-learn", "ours", "speed-up",
                            "accuracy difference (mean / max over layers)", "best layer, ours vs scikit-learn"],
                           speed_rows),
            "accuracy": table(["layer", "scikit-learn", *(f"ours ({d})" for d in results)], accuracy_rows)})


if __name__ == "__main__":
    main()
