"""The structural probes' dev loss, taken after every epoch: ours against the former code, on UD English EWT dev.

A structural probe keeps each layer's best epoch on dev loss, so every epoch ends with the loss over the whole dev
split; in the report that split (EWT dev, 2,001 sentences) is about eight times the training sentences (those of the
word tasks' capped training sets), and the dev loss was most of the probes' time. The former code (kept here) made
each evaluation batch from consecutive sentences, gathered and cast their float16 word vectors, projected them and
built the batch's gold distances from numpy, every epoch. Ours makes the batches once (gold targets included, on the
device), the distance probe's of sentences of similar length (its pairwise step pads every sentence to its batch's
longest), the depth probe's of consecutive sentences as before.
The projection itself (every dev word, every layer, each epoch) is the same work in both.

Word vectors are random with MiniLM's shape (7 layers x 384, float16 as the probe keeps them) and the probe's weights
random at the report's rank (128): the time depends on the shapes only. Both losses are checked to agree (relative
1e-5: the sums run in another order) before timing; one thread, the best of ``--rounds`` alternated rounds:

    BERTOLOGY_DATA=../shared/data .venv/bin/python -m benchmarks.perf.bench_structural_dev [--rounds 3]

Stored as ``benchmarks/results/structural_dev_cpu.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from benchmarks.stored import save_run, table

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py).
BASELINE = ("the former dev loss: consecutive sentences per batch, their word vectors gathered and projected and "
            "their gold targets built from numpy, every epoch")

LAYERS, DIM, RANK = 7, 384, 128


def former_mean_loss(probe, vectors, labels, layer_index, weights):
    """The dev loss as the former ``StructuralProbe._mean_loss`` took it (every batch made again)."""
    import torch

    total = torch.zeros(len(weights))
    n_sentences = len(labels.lengths)
    with torch.no_grad():
        for start in range(0, n_sentences, probe.eval_batch_size):
            batch = probe._batch(vectors, labels, np.arange(start, min(start + probe.eval_batch_size, n_sentences)),
                                 weights.device)
            total += probe._loss(probe._project(vectors, layer_index, batch.rows, weights), batch) * len(batch.lengths)
    return (total / n_sentences).numpy()


def our_batches(probe, vectors, labels):
    """The dev batches as :meth:`StructuralProbe.fit` makes them, once per fit."""
    from bertology.probing.structural_probe import _eval_batches

    return [probe._batch(vectors, labels, ids, vectors.data.device)
            for ids in _eval_batches(np.diff(vectors.offsets), probe.eval_batch_size, probe.kind)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--name", default="structural_dev_cpu")
    args = parser.parse_args()
    import torch

    from bertology.data import shared_data_dir
    from bertology.data.corpus import read_conllu
    from bertology.probing.structural_probe import StructuralProbe, _labels, as_word_vectors

    torch.set_num_threads(1)
    sentences = read_conllu(shared_data_dir() / "ud_english_ewt" / "en_ewt-ud-dev.conllu.gz")
    words = sum(len(s) for s in sentences)
    rng = np.random.default_rng(0)
    vectors = as_word_vectors(rng.standard_normal((LAYERS, words, DIM), dtype=np.float32).astype(np.float16),
                              sentences, None, torch.device("cpu"), "dev")
    weights = torch.from_numpy(rng.uniform(-0.05, 0.05, (LAYERS, DIM, RANK)).astype(np.float32))
    layer_index = torch.arange(LAYERS)
    rows, raw = [], {"sentences": len(sentences), "words": words, "layers": LAYERS, "dim": DIM, "rank": RANK,
                     "load_average_before": os.getloadavg()}
    for kind in ("distance", "depth"):
        probe = StructuralProbe(kind=kind, rank=RANK, device="cpu")
        labels = _labels(sentences, kind)
        expected = former_mean_loss(probe, vectors, labels, layer_index, weights)
        batches = our_batches(probe, vectors, labels)
        got = probe._mean_loss(vectors, batches, layer_index, list(weights))
        gap = float(np.abs(got / expected - 1).max())
        if gap > 1e-5:
            raise SystemExit(f"{kind}: ours and the former dev loss differ by {gap:.1e} (relative): nothing timed")
        times = {"former": [], "ours": [], "ours, batches made": []}
        for _ in range(args.rounds):
            start = time.perf_counter()
            former_mean_loss(probe, vectors, labels, layer_index, weights)
            times["former"].append(time.perf_counter() - start)
            start = time.perf_counter()
            our_batches(probe, vectors, labels)
            times["ours, batches made"].append(time.perf_counter() - start)
            start = time.perf_counter()
            probe._mean_loss(vectors, batches, layer_index, list(weights))
            times["ours"].append(time.perf_counter() - start)
        former, ours, made = min(times["former"]), min(times["ours"]), min(times["ours, batches made"])
        raw[kind] = {"seconds": times, "relative_gap": gap}
        rows.append([kind, f"EWT dev ({len(sentences):,} sentences, {words:,} words) x {LAYERS} layers",
                     f"{former:.3f}", f"{ours:.3f}", f"{former / ours:.1f}x", f"{made:.3f}", f"{gap:.0e}"])
        print(rows[-1], flush=True)
    raw["load_average_after"] = os.getloadavg()
    save_run(args.name, argv=sys.argv, cpu_capability=torch.backends.cpu.get_cpu_capability(), raw=raw,
             tables={"speed": table(["probe", "one epoch's dev loss", "former (s)", "ours (s)", "ours vs former",
                                     "ours: making the batches, once per fit (s)", "agreement (relative)"], rows)})


if __name__ == "__main__":
    main()
