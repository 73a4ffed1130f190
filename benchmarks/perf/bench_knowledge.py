"""Knowledge benchmarks, baseline and ours in one process, ratio printed.

1. ``mlm``: the Convexity MLM probe's heads, all layers trained in one pass over the store (stacked
   weights, batched products) vs a loop that trains one layer's head at a time (reading only that layer
   from the store each time). Same store, same seeds, same batches: the per-layer results must agree,
   and the largest difference is printed beside the timings.
2. ``pairs``: pseudo-log-likelihood scoring of minimal pairs, sentences per second, ours (every masked
   copy of a sentence in one forward pass, several sentences per batch) vs minicons' MaskedLMScorer
   (``sequence_score(..., reduction=sum)``, PLL), on the same model and sentences; the largest score
   difference is printed too.

    PYTHONPATH=src .venv/bin/python -m benchmarks.perf.bench_knowledge mlm --model minilm --sentences 200
    PYTHONPATH=src .venv/bin/python -m benchmarks.perf.bench_knowledge pairs --model minilm --sentences 200
    PYTHONPATH=src .venv/bin/python -m benchmarks.perf.bench_knowledge page --threads 1

``page`` runs the four settings docs/knowledge.md and BENCHMARKS.md publish and writes them as the stored
run ``benchmarks/results/knowledge_bench_cpu.json`` (table ``bench``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import numpy as np
import torch
from benchmarks.stored import save_run, table

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = "mlm: one layer's head trained at a time; pairs: minicons' MaskedLMScorer (PLL)"


def bench_mlm(model: str, sentences: int, epochs: int, batch_size: int, decoder: str, repeats: int) -> dict:
    from bertology.data import default_corpus, read_corpus
    from bertology.models.encoders import as_encoder
    from bertology.knowledge.mlm_probe import dropout_store, evaluate_predictors, token_rows, train_predictors
    from bertology.models.tiny import tiny_encoder

    encoder = tiny_encoder("bert", seed=1, attentions=False) if model == "tiny" else as_encoder(model, device="cpu")
    text = read_corpus(default_corpus("ewt-dev"))[:sentences]
    with tempfile.TemporaryDirectory() as cache:
        store = dropout_store(encoder, text, 0.9, 0, corrupt="all", cache_dir=cache)
        rows = token_rows(store, encoder.tokenizer)
        layers = store.layers
        vocab = int(encoder.model.get_input_embeddings().weight.shape[0])
        tied = encoder.model.get_input_embeddings().weight.detach() if decoder == "tied" else None
        common = dict(seed=0, epochs=epochs, batch_size=batch_size, lr=2e-3, tied_embeddings=tied)
        print(f"MLM probe heads: {encoder.name}, {len(layers)} layers, {rows.n_targets:,} tokens, vocab {vocab:,}, "
              f"decoder {decoder}, {epochs} epoch(s), batch {batch_size}, torch threads {torch.get_num_threads()}")
        loop_times, batched_times = [], []
        for _ in range(repeats):
            started = time.perf_counter()
            loop_scores = []
            for layer in layers:
                head, _ = train_predictors(rows, [layer], vocab, **common)
                loop_scores.append(evaluate_predictors(head, rows, [layer]))
            loop_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            head, _ = train_predictors(rows, layers, vocab, **common)
            batched = evaluate_predictors(head, rows, layers)
            batched_times.append(time.perf_counter() - started)
        loop_ce = np.array([s["cross_entropy"].iloc[0] for s in loop_scores])
        loop_top1 = np.array([s["top1"].iloc[0] for s in loop_scores])
        diff_ce = float(np.max(np.abs(loop_ce - batched["cross_entropy"].to_numpy())))
        diff_top1 = float(np.max(np.abs(loop_top1 - batched["top1"].to_numpy())))
        loop, ours = min(loop_times), min(batched_times)
        tokens = rows.n_targets * epochs * len(layers)
        print(f"  per-layer loop : {loop:8.2f} s  ({tokens / loop:,.0f} token-layers/s)")
        print(f"  all layers     : {ours:8.2f} s  ({tokens / ours:,.0f} token-layers/s)")
        print(f"  ratio          : {loop / ours:.2f}x   (best of {repeats}; largest difference: top-1 {diff_top1:.2e}, "
              f"cross-entropy {diff_ce:.2e} nats)")
        return {"model": encoder.name, "layers": len(layers), "vocab": vocab, "tokens": int(rows.n_targets),
                "sentences": len(text), "epochs": epochs, "batch_size": batch_size, "decoder": decoder,
                "repeats": repeats, "loop_seconds": loop_times, "batched_seconds": batched_times,
                "loop": loop, "ours": ours, "ratio": loop / ours, "max_difference_top1": diff_top1,
                "max_difference_cross_entropy": diff_ce}


def bench_pairs(model: str, sentences: int, batch_tokens: int, repeats: int, chunk: int) -> dict | None:
    from transformers import AutoConfig, AutoTokenizer, BertForMaskedLM

    from bertology.data import default_corpus, read_corpus
    from bertology.knowledge.mlm import load_masked_lm
    from bertology.knowledge.pairs import pseudo_log_likelihoods
    from bertology.models.encoders import resolve_model_source

    try:
        from minicons import scorer
    except ImportError:
        print("pairs: minicons is not installed (pip install --no-deps minicons wonderwords); skipped")
        return None

    from tests.knowledge_models import save_tiny_mlm

    texts = [" ".join(s.words) for s in read_corpus(default_corpus("ewt-dev"))[:sentences]]
    with tempfile.TemporaryDirectory() as folder:
        if model == "tiny":
            save_tiny_mlm(folder)
        else:  # a masked LM of MiniLM's shape (MiniLM itself has no MLM head): random weights, same FLOPs
            source = resolve_model_source(model)[1]
            torch.manual_seed(0)
            BertForMaskedLM(AutoConfig.from_pretrained(source)).save_pretrained(folder)
            AutoTokenizer.from_pretrained(source).save_pretrained(folder)
        network = load_masked_lm(folder)
        tokenizer = network.tokenizer
        texts = [t for t in texts if len(tokenizer(t)["input_ids"]) <= 126]  # the tiny model has 128 positions
        their_tokenizer = AutoTokenizer.from_pretrained(folder)
        their_tokenizer.batch_encode_plus = their_tokenizer.__call__  # removed in transformers 5; same call
        theirs_scorer = scorer.MaskedLMScorer(folder, "cpu", tokenizer=their_tokenizer)
        tokens = sum(len(tokenizer(t)["input_ids"]) - 2 for t in texts)
        ours_times, theirs_times = [], []
        for _ in range(repeats):
            started = time.perf_counter()
            ours = pseudo_log_likelihoods(network, texts, batch_tokens=batch_tokens)
            ours_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            theirs = []
            for start in range(0, len(texts), chunk):
                theirs += theirs_scorer.sequence_score(texts[start:start + chunk], reduction=lambda x: x.sum(0).item())
            theirs_times.append(time.perf_counter() - started)
        diff = float(np.max(np.abs(np.asarray(ours) - np.asarray(theirs))))
        o, t = min(ours_times), min(theirs_times)
        print(f"PLL scoring: {model} masked LM, {len(texts)} EWT dev sentences ({tokens:,} tokens), "
              f"torch threads {torch.get_num_threads()}")
        print(f"  minicons MaskedLMScorer ({chunk} sentences a call): {t:7.2f} s  ({len(texts) / t:,.1f} sentences/s)")
        print(f"  ours (batches of {batch_tokens} padded tokens)      : {o:7.2f} s  "
              f"({len(texts) / o:,.1f} sentences/s)")
        print(f"  ratio : {t / o:.2f}x   (best of {repeats}; largest PLL difference {diff:.2e} nats)")
        return {"model": model, "sentences": len(texts), "tokens": int(tokens), "chunk": chunk,
                "batch_tokens": batch_tokens, "repeats": repeats, "ours_seconds": ours_times,
                "minicons_seconds": theirs_times, "ours_rate": len(texts) / o, "minicons_rate": len(texts) / t,
                "ratio": t / o, "max_difference_nats": diff}


def page(args) -> None:
    """The four settings the pages publish, one stored run."""
    runs = {"mlm_minilm": bench_mlm("minilm", 200, 1, 64, "tied", 1),
            "mlm_tiny": bench_mlm("tiny", 400, 2, 64, "tied", 2),
            "pairs_minilm": bench_pairs("minilm", 100, args.batch_tokens, 1, args.chunk),
            "pairs_tiny": bench_pairs("tiny", 100, args.batch_tokens, 2, args.chunk)}

    def repeats(run: dict) -> str:
        return f", best of {run['repeats']}" if run["repeats"] > 1 else ""

    def difference(value: float) -> str:
        return "difference exactly 0" if value == 0 else f"largest difference {value:.1e}"

    rows = []
    for key, label in (("mlm_minilm", "MiniLM"), ("mlm_tiny", "tiny BERT")):
        run = runs[key]
        rows.append([f"MLM-probe heads, {label} ({run['layers']} layers, vocab {run['vocab']:,}, {run['decoder']}), "
                     f"{run['tokens']:,} EWT dev tokens, {run['epochs']} epoch(s), batch {run['batch_size']}{repeats(run)}",
                     f"per-layer loop {run['loop']:.2f} s", f"all layers in one pass {run['ours']:.2f} s",
                     f"{run['ratio']:.2f}x",
                     f"top-1: {difference(run['max_difference_top1'])}; cross-entropy: "
                     f"{difference(run['max_difference_cross_entropy'])}"])
    for key, label in (("pairs_minilm", "random masked LM of MiniLM's shape"), ("pairs_tiny", "tiny BERT MLM")):
        run = runs[key]
        if run is None:
            continue
        rows.append([f"PLL scoring, {label}, {run['sentences']} EWT dev sentences ({run['tokens']:,} tokens){repeats(run)}",
                     f"minicons, {run['chunk']} sentences a call: {run['minicons_rate']:.1f} sentences/s",
                     f"{run['ours_rate']:.1f} sentences/s", f"{run['ratio']:.2f}x",
                     f"largest PLL difference {run['max_difference_nats']:.1e} nats"])
    save_run("knowledge_bench_cpu", argv=sys.argv, raw=runs,
             tables={"bench": table(["what", "baseline", "ours", "ratio", "agreement"], rows)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["mlm", "pairs", "page"])
    parser.add_argument("--model", default="tiny", help="tiny (built in code) or an encoder (minilm)")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--decoder", default="tied", choices=["tied", "untied"])
    parser.add_argument("--batch-tokens", type=int, default=8192, help="pairs: padded tokens per forward pass")
    parser.add_argument("--chunk", type=int, default=16, help="pairs: sentences per minicons call")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}")
    if args.what == "page":
        page(args)
    elif args.what == "mlm":
        bench_mlm(args.model, args.sentences, args.epochs, args.batch_size, args.decoder, args.repeats)
    else:
        bench_pairs(args.model, args.sentences, args.batch_tokens, args.repeats, args.chunk)


if __name__ == "__main__":
    main()
