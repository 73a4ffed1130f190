"""The structural probes' evaluation: UUAS and the per-sentence hits behind its interval, ours against the former
scipy-based code, on UD English EWT's dev and test sentences.

What a structural run scores per (seed, baseline, split): every sentence's predicted distances on every layer
(``[7, n, n]``: MiniLM's embeddings and six layers; random values, an MST's cost does not depend on them), the
minimum spanning tree of each over the non-punctuation words, its edges against the gold tree's, summed into
UUAS and kept per sentence for the bootstrap. The baseline is the code before commit 55796d4 (kept here): scipy's
``minimum_spanning_tree`` per layer and sentence, the gold tree's MST rebuilt by each of the two calls. Both
give the same hits (checked before timing); the best of ``--rounds`` rounds each, alternated, one thread:

    BERTOLOGY_DATA=../shared/data .venv/bin/python -m benchmarks.perf.bench_structural_eval [--rounds 3]

Stored as ``benchmarks/results/structural_eval_cpu.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from benchmarks.stored import save_run, table

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py).
BASELINE = "the former UUAS code: scipy's minimum_spanning_tree per sentence and layer, gold MSTs rebuilt per call"

LAYERS = 7


def _scipy_mst(distances, keep):
    from scipy.sparse.csgraph import minimum_spanning_tree

    index = np.flatnonzero(keep)
    if len(index) < 2:
        return set()
    sub = np.asarray(distances, dtype=np.float64)[np.ix_(index, index)]
    sub = (sub + sub.T) / 2
    tree = minimum_spanning_tree(np.triu(sub - sub.min() + 1.0, k=1)).tocoo()
    return {(int(min(index[a], index[b])), int(max(index[a], index[b]))) for a, b in zip(tree.row, tree.col)}


def former_hits(predictions, sentences, punct="upos"):
    """The former ``uuas`` and ``sentence_hits`` of one split, as run_structural called them (two passes)."""
    from bertology.data.treebank import tree_distances
    from bertology.probing.tree_metrics import punctuation_mask

    out = []
    for _ in ("uuas", "sentence_hits"):
        hits, totals = [], []
        for prediction, sentence in zip(predictions, sentences):
            keep = ~punctuation_mask(sentence, punct)
            gold = _scipy_mst(tree_distances(sentence.heads), keep)
            hits.append([len(gold & _scipy_mst(layer, keep)) for layer in prediction])
            totals.append(len(gold))
        out.append((np.asarray(hits, dtype=np.float64), np.asarray(totals, dtype=np.float64)))
    return out[1]


def our_hits(predictions, sentences, punct="upos"):
    """Ours: ``uuas`` and ``sentence_hits`` as run_structural calls them now."""
    from bertology.probing.tree_metrics import sentence_hits, uuas

    uuas(predictions, sentences, punct)
    return sentence_hits("distance", predictions, sentences, punct)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--name", default="structural_eval_cpu")
    args = parser.parse_args()
    import torch

    from bertology.data import shared_data_dir
    from bertology.data.corpus import read_conllu
    from bertology.probing import tree_metrics

    torch.set_num_threads(1)
    folder = shared_data_dir() / "ud_english_ewt"
    sentences = [s for split in ("dev", "test") for s in read_conllu(folder / f"en_ewt-ud-{split}.conllu.gz")]
    rng = np.random.default_rng(0)
    predictions = [rng.random((LAYERS, len(s), len(s))) for s in sentences]
    load_before = os.getloadavg()
    expected = former_hits(predictions, sentences)
    got = our_hits(predictions, sentences)
    same = all(np.array_equal(a, b) for a, b in zip(expected, got))
    if not same:
        raise SystemExit("ours and the former code disagree on the hits: nothing timed")
    times = {"former": [], "ours": []}
    for _ in range(args.rounds):
        for name, run in (("former", former_hits), ("ours", our_hits)):
            if name == "ours":  # each round starts cold: no gold tree kept from the round before
                tree_metrics._gold_tree.cache_clear()
                tree_metrics._gold_of_heads.cache_clear()
            start = time.perf_counter()
            run(predictions, sentences)
            times[name].append(time.perf_counter() - start)
    former, ours = min(times["former"]), min(times["ours"])
    words = sum(len(s) for s in sentences)
    rows = [[f"EWT dev + test ({len(sentences):,} sentences, {words:,} words) x {LAYERS} layers",
             f"{former:.2f}", f"{ours:.2f}", f"{former / ours:.1f}x", "yes"]]
    print(rows[0], flush=True)
    save_run(args.name, argv=sys.argv, cpu_capability=torch.backends.cpu.get_cpu_capability(),
             raw={"seconds": times, "sentences": len(sentences), "words": words, "layers": LAYERS,
                  "load_average_before": load_before, "load_average_after": os.getloadavg(), "same_hits": same},
             tables={"speed": table(["one split's UUAS and per-sentence hits", "former, scipy (s)", "ours (s)",
                                     "ours vs former", "same hits"], rows)})


if __name__ == "__main__":
    main()
