"""Acceptance of the probing defaults on MiniLM (issue 13): BShift and SentLen built from UD English EWT.

1. ``run_probing`` with the default sizes (every training, dev and test sentence; 3 seeds, one untrained
   twin per seed; the scalar mix is left out, it does not affect the per-layer numbers) on BShift and
   SentLen: the best layer of BShift per :func:`bertology.probing.summary.best_layer` with its interval.
2. scikit-learn ``LogisticRegression`` on the *same* features by the same rule (mean word vectors per layer,
   the probe's standardisation, the L2 grid walked from 1e-2 while the dev cross-entropy falls, the chosen value
   refitted to the polish tolerance: :func:`sklearn_per_layer`), scored on test: printed beside ours for every
   layer.
3. SentLen's trained-minus-untrained deltas at the default size (all training sentences) and at half of
   it: the default is the doubled size of the half run, so the signs must agree.

    nice -n 10 .venv/bin/python -m benchmarks.experiments.probing.probe_defaults [--seeds 3] [--cache DIR] [--name NAME]

writes the stored run ``benchmarks/results/NAME.json`` (default ``probe_defaults_<split>_minilm_cpu``) with
BENCHMARKS.md's "Probing defaults" tables (``bshift``, ``sentlen``) and the raw numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np
from benchmarks.formatters.format_stored_tables import points, sign_cell
from benchmarks.stored import save_run, table


def sklearn_per_layer(X: dict, y: dict, grid) -> np.ndarray:
    """Test accuracy per layer of scikit-learn's logistic regression by our probe's rule: the probe's
    standardisation, the L2 grid walked from 1e-2 while the dev cross-entropy falls, the chosen value refitted
    from zero to the polish tolerance, C = 1 / (l2 * n_train) (2 / (l2 * n_train) for two classes, whose single
    weight vector carries both of our columns) (``bench_probe_exact.sklearn_layers``)."""
    from benchmarks.perf.bench_probe_exact import sklearn_layers

    return sklearn_layers(X, y, grid, refit="cold")[0]


def sentlen_signs(seeds, treebank, cache, split="pooled") -> dict:
    """SentLen's trained-minus-untrained deltas (with their paired-bootstrap intervals) at the default size
    (every training sentence) and at half of it: the default is the doubled size of the half run."""
    from bertology.probing.experiment import run_probing
    from bertology.probing.report import table2_frame

    full = table2_frame(run_probing("minilm", ["sentence_length"], treebank=treebank, seeds=seeds, scalar_mix=False,
                                    cache_dir=cache, progress=False, device="cpu", senteval_split=split))
    full = full[full.layer.notna()].set_index("layer")
    n_full = int(full["n_train"].iloc[0])
    half = table2_frame(run_probing("minilm", ["sentence_length"], treebank=treebank, seeds=seeds, scalar_mix=False,
                                    cache_dir=cache, progress=False, device="cpu", max_train=n_full // 2,
                                    senteval_split=split))
    half = half[half.layer.notna()].set_index("layer")
    print(f"SentLen delta = trained - untrained (points, [95% CI]) at n_train={n_full // 2} and {n_full} (doubled):")
    flips, resolved_flips = [], []
    record = {}
    for layer in full.index:
        a, b = half.loc[layer], full.loc[layer]
        flip = bool(np.sign(a["delta"]) != np.sign(b["delta"]))
        # A sign is established only when the delta's interval excludes 0 (table2_frame's delta_sign).
        sign_a, sign_b = a["delta_sign"], b["delta_sign"]
        resolved = {sign_a, sign_b} == {"+", "-"}
        flips += [int(layer)] if flip else []
        resolved_flips += [int(layer)] if resolved else []
        print(f"  layer {int(layer)}: {100 * a['delta']:+.1f} [{100 * a['delta_ci_low']:+.1f}, "
              f"{100 * a['delta_ci_high']:+.1f}] ({sign_a}) -> {100 * b['delta']:+.1f} [{100 * b['delta_ci_low']:+.1f}, "
              f"{100 * b['delta_ci_high']:+.1f}] ({sign_b}){'  point sign flips' if flip else ''}")
        record[int(layer)] = {"half": [float(a["delta"]), float(a["delta_ci_low"]), float(a["delta_ci_high"]), sign_a],
                              "full": [float(b["delta"]), float(b["delta_ci_low"]), float(b["delta_ci_high"]), sign_b]}
    print(f"SentLen: point deltas flip sign at layers {flips or 'none'}; established signs (+/- = interval excludes 0, "
          f"0 = it holds 0) flip between + and - at layers {resolved_flips or 'none'} "
          f"(acceptance: none) -> {'MET' if not resolved_flips else 'NOT MET'}")
    return {"n_half": n_full // 2, "n_full": n_full, "layers": record, "flips": flips, "resolved_flips": resolved_flips,
            "sklearn": sentlen_sklearn(treebank, cache, split)}


def sentlen_sklearn(treebank, cache, split="pooled") -> dict:
    """The same half/full comparison with scikit-learn's LogisticRegression on the same features (model and
    the seed-0 twin): whether the point deltas' drift with training size is in the data or in our probe."""
    from pathlib import Path

    from bertology.models import load_encoder
    from bertology.probing.datasets import SPLITS
    from bertology.probing.inputs import _extract_pools, _features_for, load_datasets, merge_pools
    from bertology.probing.probes import DEFAULT_L2

    datasets = load_datasets(["sentence_length"], treebank, cache_dir=cache, senteval_split=split)
    pools = merge_pools(datasets)
    encoder = load_encoder("minilm", device="cpu")
    y = {s: datasets[0].splits[s].labels.astype(str) for s in SPLITS}
    n = len(y["train"])
    accuracy = {}
    for name, model in (("trained", encoder), ("untrained", encoder.untrained(0))):
        stores = _extract_pools(model, pools, None, Path(cache), False, "cpu")
        X = _features_for(datasets, stores, list(next(iter(stores.values())).layers))
        X = {s: X["sentence_length", s] for s in SPLITS}
        for size in (n // 2, n):
            accuracy[name, size] = sklearn_per_layer({**X, "train": X["train"][:, :size]},
                                                     {**y, "train": y["train"][:size]}, DEFAULT_L2)
    out = {}
    for size in (n // 2, n):
        delta = 100 * (accuracy["trained", size] - accuracy["untrained", size])
        print(f"scikit-learn SentLen delta at n_train={size} (points, per layer): "
              + " ".join(f"{d:+.1f}" for d in delta))
        out[size] = {"trained": accuracy["trained", size].tolist(), "untrained": accuracy["untrained", size].tolist()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cache", default=None, help="cache folder (default: a temporary one)")
    parser.add_argument("--out", default=None, help="also write the raw numbers as JSON here")
    parser.add_argument("--name", default=None, help="stored run benchmarks/results/NAME.json "
                        "(default probe_defaults_<split>_minilm_cpu; 'none' stores nothing)")
    parser.add_argument("--sentlen-only", action="store_true", help="only the SentLen sign check")
    parser.add_argument("--senteval-split", default="pooled", choices=("treebank", "pooled"),
                        help="how the SentEval tasks are split (run_probing's senteval_split)")
    args = parser.parse_args()

    import torch

    from bertology.data import shared_data_dir
    from bertology.probing.datasets import SPLITS
    from bertology.probing.experiment import run_probing
    from bertology.probing.inputs import _extract_pools, _features_for, load_datasets, merge_pools
    from bertology.probing.probes import DEFAULT_L2
    from bertology.probing.report import table2_frame
    from bertology.probing.summary import best_layer

    cache = args.cache or tempfile.mkdtemp(prefix="bench-probe-defaults-")
    treebank = shared_data_dir() / "ud_english_ewt"
    seeds = tuple(range(args.seeds))
    if args.sentlen_only:
        sentlen = sentlen_signs(seeds, treebank, cache, args.senteval_split)
        if args.out:
            with open(args.out, "w") as handle:
                json.dump(sentlen, handle, indent=2)
        return
    started = time.perf_counter()
    result = run_probing("minilm", ["bigram_shift", "sentence_length"], treebank=treebank, seeds=seeds,
                         scalar_mix=False, cache_dir=cache, progress=False, device="cpu",
                         senteval_split=args.senteval_split)
    seconds = time.perf_counter() - started
    frame = table2_frame(result)
    sizes = result["datasets"].set_index("task")
    verdict = best_layer(frame, "bigram_shift")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; run_probing (BShift + SentLen, {len(seeds)} seeds): {seconds:.0f} s")
    for task in ("bigram_shift", "sentence_length"):
        print(f"{task}: n_train={sizes.loc[task, 'n_train']}, n_dev={sizes.loc[task, 'n_dev']}, "
              f"n_test={sizes.loc[task, 'n_test']}")
    print(verdict.sentence())

    # scikit-learn on the same features and data
    datasets = load_datasets(["bigram_shift"], treebank, cache_dir=cache, senteval_split=args.senteval_split)
    from bertology.models import load_encoder

    encoder = load_encoder("minilm", device="cpu")
    pools = merge_pools(datasets)
    stores = _extract_pools(encoder, pools, None, __import__("pathlib").Path(cache), False, "cpu")
    layers = list(next(iter(stores.values())).layers)
    X = _features_for(datasets, stores, layers)
    y = {s: datasets[0].splits[s].labels.astype(str) for s in SPLITS}
    started = time.perf_counter()
    sk_test = sklearn_per_layer({s: X["bigram_shift", s] for s in SPLITS}, y, DEFAULT_L2)
    sk_seconds = time.perf_counter() - started
    bshift = frame[(frame.task == "bigram_shift") & frame.layer.notna()].sort_values("layer")
    print("BShift test accuracy per layer (%):")
    print("  layer   ours [95% CI]            sklearn   diff")
    for row, sk in zip(bshift.itertuples(), sk_test):
        print(f"  {int(row.layer):>5}   {100 * row.mean:5.1f} [{100 * row.ci_low:.1f}, {100 * row.ci_high:.1f}]"
              f"      {100 * sk:5.1f}   {100 * (row.mean - sk):+.1f}")
    chosen = verdict.layer
    diff = 100 * (verdict.accuracy - sk_test[layers.index(chosen)])
    print(f"best layer {chosen} (marked: {verdict.marked is not None}; distinguishable: {verdict.distinguishable}; "
          f"beats majority {100 * verdict.majority:.1f}%: {verdict.beats_majority}): ours {100 * verdict.accuracy:.1f}, "
          f"sklearn {100 * sk_test[layers.index(chosen)]:.1f}, difference {diff:+.2f} points "
          f"(sklearn {sk_seconds:.0f} s)")

    half = 100 * (verdict.ci_high - verdict.ci_low) / 2
    print(f"BShift 95% interval at layer {chosen}: +/-{half:.1f} points with {sizes.loc['bigram_shift', 'n_test']} test "
          f"sentences (power rule +/-1.5: {'met' if half <= 1.5 else 'not met'}; split: {args.senteval_split})")
    sentlen = sentlen_signs(seeds, treebank, cache, args.senteval_split)
    selectivity = result["results"]
    negative = selectivity[(selectivity.metric == "selectivity") & (selectivity.value < 0)]
    print(f"sentence-level selectivity rows: {int((selectivity.metric == 'selectivity').sum())} "
          f"(no control by default), negative: {len(negative)}")
    if args.out:
        record = {
            "seconds": seconds, "seeds": len(seeds), "senteval_split": args.senteval_split, "sizes": sizes[["n_train", "n_dev", "n_test"]].to_dict("index"),
            "bshift": {"layer": chosen, "marked": verdict.marked, "layers": list(verdict.layers),
                       "ours": verdict.accuracy, "ci": [verdict.ci_low, verdict.ci_high],
                       "majority": verdict.majority, "sklearn": float(sk_test[layers.index(chosen)]),
                       "ours_per_layer": bshift["mean"].tolist(), "sklearn_per_layer": sk_test.tolist()},
            "sentlen_delta": sentlen,
        }
        with open(args.out, "w") as handle:
            json.dump(json.loads(json.dumps(record, default=lambda v: v.item() if hasattr(v, "item") else str(v))),
                      handle, indent=2)
    name = args.name or f"probe_defaults_{args.senteval_split}_minilm_cpu"
    if name != "none":
        ours = [f"{100 * row.mean:.1f} [{100 * row.ci_low:.1f}, {100 * row.ci_high:.1f}]"
                + (" (chosen on dev)" if int(row.layer) == chosen else "") for row in bshift.itertuples()]
        bshift_table = table(["layer", *layers], [["ours", *ours], ["scikit-learn", *(f"{100 * v:.1f}" for v in sk_test)]])
        rows = [[f"{sentlen[size]:,}", *(sign_cell(sentlen["layers"][layer][part]) for layer in sentlen["layers"])]
                for size, part in (("n_half", "half"), ("n_full", "full"))]
        for size in (sentlen["n_half"], sentlen["n_full"]):
            accuracy = sentlen["sklearn"][size]
            rows.append([f"scikit-learn {size:,}", *(points(a - b) for a, b in zip(accuracy["trained"], accuracy["untrained"]))])
        raw = {"seconds": seconds, "sklearn_seconds": sk_seconds, "seeds": len(seeds), "senteval_split": args.senteval_split,
               "sizes": sizes[["n_train", "n_dev", "n_test"]].astype(int).to_dict("index"),
               "bshift": {"layer": chosen, "marked": verdict.marked, "layers": list(verdict.layers),
                          "majority": verdict.majority, "per_layer": bshift[["layer", "mean", "ci_low", "ci_high", "dev_mean"]]
                          .astype(float).to_dict("records"), "sklearn_per_layer": sk_test.tolist(),
                          "chosen_minus_sklearn": (verdict.accuracy - float(sk_test[layers.index(chosen)])),
                          "max_abs_difference": float(np.max(np.abs(bshift["mean"].to_numpy() - sk_test)))},
               "sentlen_delta": sentlen,
               "selectivity_rows": int((selectivity.metric == "selectivity").sum()), "negative_selectivity_rows": len(negative),
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
                          f"{torch.get_num_threads()} threads"}
        save_run(name, argv=sys.argv, raw=json.loads(json.dumps(raw, default=lambda v: v.item() if hasattr(v, "item") else str(v))),
                 tables={"bshift": bshift_table, "sentlen": table(["layer", *layers], rows)})


if __name__ == "__main__":
    main()
