"""Extraction throughput: the naive transformers loop vs `bertology.extract`, in one process.

Naive loop = what a user writes: input order, pad to the batch, `output_hidden_states=True`, fp32,
batch 32, then mean-pool subwords into words. Ours = length-bucketed batches under a token budget,
into the store. Also: the machine's matmul ceiling (fp32 and bf16) and the share of it we reach
(MiniLM costs about 21.2 MFLOP per token), bf16-autocast fidelity, and peak RSS for the corpus and
the corpus repeated 10 times (each in a fresh subprocess).

    python benchmarks/bench_extract.py [--sentences N] [--model minilm] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bertology.data import default_corpus, read_conllu
from bertology.extraction import extract
from bertology.models import load_encoder

FLOP_PER_TOKEN = {"minilm": 21.2e6}


def naive_loop(encoder, sentences, device, batch_size=32):
    model, tokenizer = encoder.model, encoder.tokenizer
    tokens = 0
    outputs = []
    with torch.inference_mode():
        for start in range(0, len(sentences), batch_size):
            batch = [list(s.words) for s in sentences[start : start + batch_size]]
            enc = tokenizer(batch, is_split_into_words=True, padding=True, truncation=True, return_tensors="pt")
            tokens += int(enc["attention_mask"].sum())
            out = model(**{k: v.to(device) for k, v in enc.items()}, output_hidden_states=True)
            hidden = torch.stack(out.hidden_states, dim=1).cpu()  # [B, L+1, T, D]
            for row in range(len(batch)):
                word_ids = enc.word_ids(row)
                words = []
                for w in range(len(batch[row])):
                    idx = [i for i, x in enumerate(word_ids) if x == w]
                    words.append(hidden[row, :, idx].mean(1))
                outputs.append(torch.stack(words, 1).half())
    return tokens, outputs


def matmul_ceiling(device, dtype, size=2048, repeats=10):
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    if device == "cuda":
        torch.cuda.synchronize()
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def timed(fn):
    start = time.perf_counter()
    result = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return result, time.perf_counter() - start


def peak_rss_child(model, corpus, n, repeat, device, untrained_seed=None):
    code = f"""
import resource, tempfile, sys
from bertology.data import read_conllu
from bertology.extraction import extract
from bertology.models import load_encoder
sentences = read_conllu({str(corpus)!r})[:{n}] * {repeat}
sentences = [s.__class__(words=s.words, id=f"{{i}}") for i, s in enumerate(sentences)]
encoder = load_encoder({model!r}, device={device!r}, untrained_seed={untrained_seed!r})
with tempfile.TemporaryDirectory() as tmp:
    extract(encoder, sentences, tmp + "/s", progress=False)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--sentences", type=int, default=2001, help="EWT dev sentences (2001 = all)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rss-sentences", type=int, default=400)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--untrained-seed", type=int, default=None,
                        help="time a randomly initialised twin (same shapes and FLOPs) where the weights are absent")
    args = parser.parse_args()

    corpus = default_corpus("ewt-dev")  # the same file as ../shared/data/ud_english_ewt/en_ewt-ud-dev.conllu.gz
    sentences = read_conllu(corpus)[: args.sentences]
    encoder = load_encoder(args.model, device=args.device, untrained_seed=args.untrained_seed)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), device {args.device}")
    print(f"corpus: UD EWT dev, {len(sentences)} sentences, {sum(len(s) for s in sentences)} words")

    naive_loop(encoder, sentences[:64], args.device)  # warm-up
    (naive_tokens, _), naive_s = timed(lambda: naive_loop(encoder, sentences, args.device))
    results = {"naive_tokens_per_s": naive_tokens / naive_s}
    with tempfile.TemporaryDirectory() as tmp:
        store, ours_s = timed(lambda: extract(encoder, sentences, Path(tmp) / "fp32", progress=False,
                                              device=args.device))
        fp32_layer = store.layer(6)
        results["ours_tokens_per_s"] = naive_tokens / ours_s
        bf16_store, bf16_s = timed(lambda: extract(encoder, sentences, Path(tmp) / "bf16", progress=False,
                                                   autocast="bfloat16", device=args.device))
        results["ours_bf16_tokens_per_s"] = naive_tokens / bf16_s
        diffs = [float(np.abs(bf16_store.layer(layer) - store.layer(layer)).max()) for layer in store.layers]
        results["bf16_max_abs_diff_per_layer"] = diffs
        exact = extract(encoder, sentences[:200], Path(tmp) / "f32store", dtype="float32", progress=False,
                        device=args.device).layer(6)
        results["fp16_storage_max_abs_diff"] = float(np.abs(fp32_layer[: len(exact)] - exact).max())
        results["bf16_probe"] = bf16_probe_change(store, bf16_store, sentences)

    results["speedup_vs_naive"] = results["ours_tokens_per_s"] / results["naive_tokens_per_s"]
    results["speedup_bf16_vs_naive"] = results["ours_bf16_tokens_per_s"] / results["naive_tokens_per_s"]
    flop = FLOP_PER_TOKEN.get(args.model, FLOP_PER_TOKEN["minilm"] if encoder.hidden_size == 384 and
                              encoder.num_layers == 6 else None)
    results["matmul_fp32_flops"] = matmul_ceiling(args.device, torch.float32)
    results["matmul_bf16_flops"] = matmul_ceiling(args.device, torch.bfloat16)
    if flop:
        results["ours_flops"] = results["ours_tokens_per_s"] * flop
        results["ours_bf16_flops"] = results["ours_bf16_tokens_per_s"] * flop
        results["share_of_bf16_ceiling"] = max(results["ours_flops"], results["ours_bf16_flops"]) / results[
            "matmul_bf16_flops"]
        results["share_of_fp32_ceiling"] = results["ours_flops"] / results["matmul_fp32_flops"]
    if args.rss_sentences:
        one = peak_rss_child(args.model, corpus, args.rss_sentences, 1, args.device, args.untrained_seed)
        ten = peak_rss_child(args.model, corpus, args.rss_sentences, 10, args.device, args.untrained_seed)
        results["peak_rss_mib"] = {"corpus": one, "corpus_x10": ten, "growth": ten / one,
                                   "sentences": args.rss_sentences}

    print(f"naive loop      : {results['naive_tokens_per_s']:10.0f} tokens/s")
    print(f"bertology fp32  : {results['ours_tokens_per_s']:10.0f} tokens/s  ({results['speedup_vs_naive']:.2f}x)")
    print(f"bertology bf16  : {results['ours_bf16_tokens_per_s']:10.0f} tokens/s  "
          f"({results['speedup_bf16_vs_naive']:.2f}x)")
    print(f"matmul ceiling  : fp32 {results['matmul_fp32_flops'] / 1e9:.1f} GFLOP/s, "
          f"bf16 {results['matmul_bf16_flops'] / 1e9:.1f} GFLOP/s")
    if flop:
        print(f"achieved        : {results['ours_flops'] / 1e9:.1f} GFLOP/s fp32 "
              f"({100 * results['share_of_fp32_ceiling']:.0f}% of the fp32 ceiling), best "
              f"{100 * results['share_of_bf16_ceiling']:.0f}% of the bf16 ceiling")
    print(f"fp16 storage    : max |diff| vs float32 storage {results['fp16_storage_max_abs_diff']:.4f}")
    print(f"bf16 fidelity   : max |diff| per layer {['%.3f' % d for d in diffs]}; "
          f"probe {results['bf16_probe']}")
    if "peak_rss_mib" in results:
        rss = results["peak_rss_mib"]
        print(f"peak RSS        : {rss['corpus']:.0f} MiB ({rss['sentences']} sentences), "
              f"{rss['corpus_x10']:.0f} MiB (x10), growth {rss['growth']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


def bf16_probe_change(fp32_store, bf16_store, sentences):
    """UPOS accuracy of a logistic-regression probe on layer 3, fp32 vs bf16 features (fixed split)."""
    from sklearn.linear_model import LogisticRegression

    labels = np.asarray([tag for s in sentences for tag in s.upos])
    cut = int(fp32_store.offsets[int(len(sentences) * 0.7)])
    scores = {}
    for name, store in (("fp32", fp32_store), ("bf16", bf16_store)):
        features = store.layer(3)
        probe = LogisticRegression(max_iter=300, C=1.0)
        probe.fit(features[:cut], labels[:cut])
        scores[name] = float(probe.score(features[cut:], labels[cut:]))
    scores["change_points"] = 100 * (scores["bf16"] - scores["fp32"])
    return scores


if __name__ == "__main__":
    main()
