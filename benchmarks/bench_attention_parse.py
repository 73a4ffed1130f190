"""Benchmark: `bertology attention parse` on UD EWT with its defaults, stage by stage.

The command's stages on the default sizes (dev and test whole, the probe's training set capped at 2,000
train sentences, 3 probe seeds x 20 epochs): extracting word-level attentions of the three splits,
Clark's head statistics on dev, every head as a parser on train/dev/test plus the offset baselines, and
the attention-only probe. The probe is timed twice in the same process: the previous scheme (features
rebuilt from the attention arrays for every seed, for fitting and for predicting) and ours (features built
once, :meth:`AttentionOnlyProbe.prepare`, shared by every seed); both give the same UAS.

usage: python benchmarks/bench_attention_parse.py [--max-sentences N] [--max-train-sentences 2000] [--seeds 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bertology.attention.parsing import (AttentionOnlyProbe, attachment_score, heads_as_parsers,
                                         offset_baselines)
from bertology.attention.stats import head_statistics
from bertology.data import read_conllu, shared_data_dir
from bertology.data.treebank import find_splits
from bertology.extraction import extract
from bertology.models import load_encoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--max-sentences", type=int, default=None, help="cap dev and test (default: whole)")
    parser.add_argument("--max-train-sentences", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()

    splits = find_splits(shared_data_dir() / "ud_english_ewt", required=("dev", "test"))
    data = {split: read_conllu(path) for split, path in splits.items()}
    data["train"] = data["train"][: args.max_train_sentences]
    for split in ("dev", "test"):
        data[split] = data[split][: args.max_sentences]
    encoder = load_encoder(args.model)
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        stores = {split: extract(encoder, data[split], Path(tmp) / f"{split}.store", attentions=True, progress=False)
                  for split in ("train", "dev", "test")}
        times["extract attentions (3 splits)"] = time.perf_counter() - started

        started = time.perf_counter()
        head_statistics(stores["dev"].iter_attentions(), data["dev"], progress=False, total=len(data["dev"]),
                        layers=stores["dev"].attention_layers)
        times["head statistics (dev)"] = time.perf_counter() - started

        started = time.perf_counter()
        for split in ("train", "dev", "test"):
            heads_as_parsers(stores[split].iter_attentions(), data[split], progress=False, total=len(data[split]),
                             layers=stores[split].attention_layers)
            offset_baselines(data[split])
        times["heads as parsers + offsets (3 splits)"] = time.perf_counter() - started

        seeds = range(args.seeds)
        started = time.perf_counter()
        before = []
        for seed in seeds:  # the previous scheme: every seed rebuilds the features
            probe = AttentionOnlyProbe(epochs=args.epochs, seed=seed).fit(stores["train"].iter_attentions(),
                                                                          data["train"])
            before.append(attachment_score(probe.predict(stores["test"].iter_attentions(), data["test"]),
                                           data["test"]))
        baseline = time.perf_counter() - started

        started = time.perf_counter()
        batching = AttentionOnlyProbe(epochs=args.epochs)
        train = batching.prepare(stores["train"].iter_attentions(), data["train"])
        test = batching.prepare(stores["test"].iter_attentions(), data["test"], need_tree=False)
        after = [attachment_score(AttentionOnlyProbe(epochs=args.epochs, seed=seed).fit(train).predict(test),
                                  data["test"]) for seed in seeds]
        ours = time.perf_counter() - started
        times[f"attention-only probe ({args.seeds} seeds, features once)"] = ours

    assert before == after, (before, after)
    sizes = ", ".join(f"{split} {len(data[split])}" for split in ("train", "dev", "test"))
    print(f"attention parse stages, {args.model}, UD EWT ({sizes} sentences):")
    for stage, seconds in times.items():
        print(f"  {stage:<48} {seconds:7.1f} s")
    print(f"  {'total':<48} {sum(times.values()):7.1f} s")
    print(f"probe: features rebuilt per seed {baseline:.1f} s, built once {ours:.1f} s "
          f"({baseline / ours:.2f}x); UAS {', '.join(f'{u:.4f}' for u in after)} (identical)")


if __name__ == "__main__":
    main()
