"""The three MEV definitions (bertology.geometry.measures.MEV_DEFINITIONS) on one model's word types.

Mean over the word types of EWT dev that contextuality keeps (>= 5 occurrences, not punctuation) of each
type's maximum explainable variance per layer, under ``released`` (kawine's TruncatedSVD ratio, the
contextuality tables' definition), ``paper`` (s1^2 / sum s^2) and ``centred_pca``; a stored run
(benchmarks/stored.py) whose table docs/knowledge.md publishes.

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python -m benchmarks.experiments.knowledge.mev_definitions
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from benchmarks.stored import save_run, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--name", default="mev_definitions_minilm_cpu", help="stored run (benchmarks/results/NAME.json)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    from bertology.geometry import measures
    from bertology.geometry.contextuality import plan_sample
    from bertology.geometry.stores import cached_store, load_sentences
    from bertology.models import load_encoder

    encoder = load_encoder(args.model, device="cpu")
    sentences, path = load_sentences(None)
    plan = plan_sample([s.words for s in sentences], 0)
    store = cached_store(encoder, sentences, pool="word-mean", input_path=path, device="cpu")
    values = {}
    for layer in store.layers:
        x = store.layer(layer).astype(np.float64)[plan.type_rows]
        values[layer] = {d: float(np.nanmean(measures.max_explainable_variance_grouped(x, plan.type_offsets, d)))
                         for d in measures.MEV_DEFINITIONS}
        print(layer, {d: round(v, 4) for d, v in values[layer].items()}, flush=True)
    types = int(len(plan.type_offsets) - 1)
    header = ["layer", *(f"`{d}`" for d in measures.MEV_DEFINITIONS)]
    rows = [[layer, *(f"{values[layer][d]:.3f}" for d in measures.MEV_DEFINITIONS)] for layer in store.layers]
    save_run(args.name, argv=sys.argv, raw={"model": encoder.describe()["name"], "fingerprint": encoder.fingerprint,
                                             "data": f"packaged UD English EWT dev ({len(sentences)} sentences)",
                                             "word_types": types,
                                             "mean_mev_over_types": {str(k): v for k, v in values.items()}},
             tables={"mev": table(header, rows)})


if __name__ == "__main__":
    main()
