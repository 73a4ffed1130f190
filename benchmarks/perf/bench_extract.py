"""Extraction throughput: the naive transformers loop vs `bertology.extract`, in one process.

Naive loop = what a user writes: input order, pad to the batch, `output_hidden_states=True`, fp32,
batch 32, then mean-pool subwords into words. Ours = length-bucketed batches under a token budget,
into the store. Also: the machine's matmul ceiling (fp32 and bf16) and the share of it we reach
(MiniLM costs about 21.2 MFLOP per token), bf16-autocast fidelity, and peak RSS for the corpus and
the corpus repeated 10 times (each in a fresh subprocess).

    python -m benchmarks.perf.bench_extract [--sentences N] [--model minilm] [--device cpu|cuda] [--name NAME]

The run is stored as ``benchmarks/results/<NAME>.json`` (default ``extract_<corpus>_<device>``; see
benchmarks/stored.py) with the tables BENCHMARKS.md publishes and the load average before and after.
``--format-stored FILE`` only formats those tables from an older run's raw numbers kept in FILE (the
``--json`` output of this script) into a stored run that names FILE; nothing is measured.
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

from benchmarks.stored import ROOT, save_run, table  # noqa: E402

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = ("the naive transformers loop: input order, padded to the batch, output_hidden_states=True, fp32, "
            "batch 32, subwords mean-pooled into words after")

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


def bare_forward(encoder, sentences, autocast: bool) -> float:
    """Tokens/s of the model alone over our batches: no pooling, no store (the best the pipeline can do)."""
    from bertology.extraction.alignment import encode_sentences
    from bertology.extraction.pipeline import _fast_attention
    from bertology.models.batching import pad_batch, token_budget_batches

    encoded = encode_sentences(encoder.tokenizer, list(sentences), encoder.max_length)
    segments = [segment for sentence in encoded for segment in sentence.segments]
    lengths = [len(segment.input_ids) for segment in segments]
    padded = [pad_batch([segments[i].input_ids for i in chosen], 0) for chosen in token_budget_batches(lengths, 4096, 128)]
    batches = [(inputs["input_ids"], inputs["attention_mask"]) for inputs in padded]
    tokens = sum(int(mask.sum()) for _, mask in batches)
    device = next(encoder.model.parameters()).device
    context = torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast)
    with torch.inference_mode(), context, _fast_attention(encoder, when=autocast and device.type == "cpu"):
        start = time.perf_counter()
        for ids, mask in batches:
            encoder.model(input_ids=ids.to(device), attention_mask=mask.to(device), output_hidden_states=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
    return tokens / (time.perf_counter() - start)


def gemm_share(encoder, device, tokens=4096, repeats=20) -> float:
    """bf16 FLOP/s of MiniLM's own linear layers (QKV, output, FFN in and out) on a 4,096-token batch."""
    d, ff = encoder.hidden_size, encoder.config.intermediate_size
    x = torch.randn(tokens, d, device=device, dtype=torch.bfloat16)
    h = torch.randn(tokens, ff, device=device, dtype=torch.bfloat16)
    weights = [(x, torch.randn(d, d, device=device, dtype=torch.bfloat16)) for _ in range(4)]
    weights += [(x, torch.randn(ff, d, device=device, dtype=torch.bfloat16)), (h, torch.randn(d, ff, device=device,
                                                                                          dtype=torch.bfloat16))]
    flop = sum(2 * a.shape[0] * w.shape[0] * w.shape[1] for a, w in weights)
    for a, w in weights:
        torch.nn.functional.linear(a, w)
    start = time.perf_counter()
    for _ in range(repeats):
        for a, w in weights:
            torch.nn.functional.linear(a, w)
    if device == "cuda":
        torch.cuda.synchronize()
    return flop * repeats / (time.perf_counter() - start)


ROWS = (("naive", "naive loop (fp32)"), ("ours", "ours, fp32"), ("ours_bf16", "ours, bf16 autocast"),
        ("compile_first_run", "ours, bf16, `--compile`, first run"),
        ("ours_bf16_compiled", "ours, bf16, `--compile`, later runs"),
        ("bare_forward_bf16", "bare MiniLM forward over our batches, bf16 (no pooling, no store)"))


def published_tables(results: dict, heading: str) -> dict[str, dict]:
    """BENCHMARKS.md's tables of one run: throughput beside the naive loop and the bf16 matmul ceiling, and
    the fidelity of bf16 autocast and float16 storage, the ceilings and the peak memory."""
    naive = results.get("naive_tokens_per_s")
    rows = []
    for key, label in ROWS:
        if f"{key}_tokens_per_s" not in results:
            continue
        speed = results[f"{key}_tokens_per_s"]
        if key == "compile_first_run":
            label += f" ({results['compile_first_run_seconds']:.1f} s of compiling)"
        ratio = "1x" if key == "naive" else (f"{speed / naive:.2f}x" if naive else "–")
        share = results.get(f"{key}_share_of_bf16_ceiling")
        shown = "–" if share is None else f"{100 * share:.0f}%"
        if key == "ours" and "share_of_fp32_ceiling" in results:
            shown += f" ({100 * results['share_of_fp32_ceiling']:.0f}% of the fp32 ceiling)"
        rows.append([label, f"{speed:,.0f}", ratio, shown])
    tables = {"throughput": table([heading, "tokens/s", "vs naive", "share of the bf16 ceiling"], rows)}
    checks = [["bf16 autocast vs fp32: max abs difference per layer (0..L)",
               " / ".join(f"{d:.3f}" for d in results["bf16_max_abs_diff_per_layer"])],
              ["float16 vs float32 storage: max abs difference", f"{results['fp16_storage_max_abs_diff']:.3f}"]]
    if "bf16_probe" in results:
        probe = results["bf16_probe"]
        checks.append(["UPOS probe on layer 3, fp32 -> bf16 features (70/30 split of the words)",
                       f"{100 * probe['fp32']:.2f}% -> {100 * probe['bf16']:.2f}% "
                       f"({probe['change_points']:+.3f} points)"])
    if "bare_forward_bf16_tokens_per_s" in results:
        checks.append(["ours bf16 / bare forward bf16 (the pipeline's share of the model's own speed)",
                       f"{100 * results['ours_bf16_tokens_per_s'] / results['bare_forward_bf16_tokens_per_s']:.0f}%"])
    if "ours_bf16_compiled_tokens_per_s" in results:
        checks.append(["ours bf16, `--compile` later runs / eager",
                       f"{results['ours_bf16_compiled_tokens_per_s'] / results['ours_bf16_tokens_per_s']:.2f}x"])
    ceilings = results["matmul_bf16_flops_runs"]
    checks.append(["bf16 matmul ceiling (2048^3; best of a measurement before and one after)",
                   f"{results['matmul_bf16_flops'] / 1e9:.0f} GFLOP/s "
                   f"({' and '.join(f'{c / 1e9:.0f}' for c in ceilings)})"])
    checks.append(["fp32 matmul ceiling", f"{results['matmul_fp32_flops'] / 1e9:.0f} GFLOP/s"])
    checks.append(["MiniLM's matrix products alone, bf16, 4,096 tokens",
                   f"{results['minilm_gemm_bf16_flops'] / 1e9:.0f} GFLOP/s "
                   f"({100 * results['minilm_gemm_bf16_flops'] / results['matmul_bf16_flops']:.0f}% of the ceiling)"])
    if "peak_rss_mib" in results:
        rss = results["peak_rss_mib"]
        checks.append([f"peak RSS, {rss['sentences']} sentences -> the same x10 (fresh process each)",
                       f"{rss['corpus']:,.0f} MiB -> {rss['corpus_x10']:,.0f} MiB ({rss['growth']:.2f}x)"])
    tables["checks"] = table(["check", "value"], checks)
    return tables


def best_of(repeats, fn):
    return max(fn() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--corpus", default="ewt-dev", help="a packaged corpus (ewt-dev, ewt-train, ewt-test)")
    parser.add_argument("--sentences", type=int, default=None, help="first N sentences (default all)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each; the best is reported")
    parser.add_argument("--no-naive", action="store_true", help="skip the naive loop (slow on big corpora)")
    parser.add_argument("--compile", action="store_true", help="also time the torch.compile path")
    parser.add_argument("--rss-sentences", type=int, default=400)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--name", help="stored run's name (default extract_<corpus>_<device>)")
    parser.add_argument("--heading", help="the throughput table's first header cell (default: device and load)")
    parser.add_argument("--format-stored", type=Path, metavar="FILE",
                        help="format the tables from an older run's raw numbers in FILE; measure nothing")
    parser.add_argument("--untrained-seed", type=int, default=None,
                        help="time a randomly initialised twin (same shapes and FLOPs) where the weights are absent")
    args = parser.parse_args()
    if args.format_stored:
        results = json.loads(args.format_stored.read_text(encoding="utf-8"))
        source = args.format_stored.resolve()
        save_run(args.name or f"{args.format_stored.stem}_tables", raw=results,
                 tables=published_tables(results, args.heading or "ours vs naive"),
                 formatted_from=str(source.relative_to(ROOT) if source.is_relative_to(ROOT) else source),
                 note="tables formatted from an older run's raw numbers (that file); nothing re-measured")
        return
    load_before = os.getloadavg()

    corpus = default_corpus(args.corpus)  # the same files as ../shared/data/ud_english_ewt/
    sentences = read_conllu(corpus)[: args.sentences]
    encoder = load_encoder(args.model, device=args.device, untrained_seed=args.untrained_seed)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), device {args.device}")
    print(f"corpus: UD EWT {args.corpus}, {len(sentences)} sentences, {sum(len(s) for s in sentences)} words")
    n_tokens = count_tokens(encoder, sentences)
    results = {"tokens": n_tokens, "corpus": args.corpus, "repeats": args.repeats}
    ceilings = [matmul_ceiling(args.device, torch.bfloat16)]

    if not args.no_naive:
        naive_loop(encoder, sentences[:64], args.device)  # warm-up
        results["naive_tokens_per_s"] = best_of(
            args.repeats, lambda: n_tokens / timed(lambda: naive_loop(encoder, sentences, args.device))[1])
    with tempfile.TemporaryDirectory() as tmp:
        runs = iter(range(10**6))

        def ours(**options):
            path = Path(tmp) / f"run{next(runs)}"
            store, seconds = timed(lambda: extract(encoder, sentences, path, progress=False, device=args.device,
                                                   **options))
            return store, n_tokens / seconds

        extract(encoder, sentences[:200], Path(tmp) / "warm", progress=False, autocast="bfloat16")
        store, _ = ours()
        results["ours_tokens_per_s"] = best_of(args.repeats, lambda: ours()[1])
        bf16_store, _ = ours(autocast="bfloat16")
        results["ours_bf16_tokens_per_s"] = best_of(args.repeats, lambda: ours(autocast="bfloat16")[1])
        if args.compile:
            started = time.perf_counter()
            _, first = ours(autocast="bfloat16", compile_model=True)
            results["compile_first_run_tokens_per_s"] = first
            results["compile_first_run_seconds"] = time.perf_counter() - started
            results["ours_bf16_compiled_tokens_per_s"] = best_of(
                args.repeats, lambda: ours(autocast="bfloat16", compile_model=True)[1])
        results["bare_forward_bf16_tokens_per_s"] = best_of(args.repeats, lambda: bare_forward(encoder, sentences, True))
        diffs = [float(np.abs(bf16_store.layer(layer) - store.layer(layer)).max()) for layer in store.layers]
        results["bf16_max_abs_diff_per_layer"] = diffs
        exact = extract(encoder, sentences[:200], Path(tmp) / "f32store", dtype="float32", progress=False,
                        device=args.device).layer(6)
        results["fp16_storage_max_abs_diff"] = float(np.abs(store.layer(6)[: len(exact)] - exact).max())
        if getattr(sentences[0], "upos", None):
            results["bf16_probe"] = bf16_probe_change(store, bf16_store, sentences)

    ceilings.append(matmul_ceiling(args.device, torch.bfloat16))
    results["matmul_bf16_flops_runs"] = ceilings
    results["matmul_bf16_flops"] = max(ceilings)
    results["matmul_fp32_flops"] = matmul_ceiling(args.device, torch.float32)
    results["minilm_gemm_bf16_flops"] = gemm_share(encoder, args.device)
    flop = FLOP_PER_TOKEN.get(args.model, FLOP_PER_TOKEN["minilm"] if encoder.hidden_size == 384 and
                              encoder.num_layers == 6 else None)
    ceiling = results["matmul_bf16_flops"]
    if "naive_tokens_per_s" in results:
        results["speedup_vs_naive"] = results["ours_tokens_per_s"] / results["naive_tokens_per_s"]
        results["speedup_bf16_vs_naive"] = results["ours_bf16_tokens_per_s"] / results["naive_tokens_per_s"]
    if flop:
        for key in [k for k in results if k.endswith("tokens_per_s")]:
            results[key.replace("tokens_per_s", "share_of_bf16_ceiling")] = results[key] * flop / ceiling
        results["share_of_fp32_ceiling"] = results["ours_tokens_per_s"] * flop / results["matmul_fp32_flops"]
    if args.rss_sentences:
        one = peak_rss_child(args.model, corpus, args.rss_sentences, 1, args.device, args.untrained_seed)
        ten = peak_rss_child(args.model, corpus, args.rss_sentences, 10, args.device, args.untrained_seed)
        results["peak_rss_mib"] = {"corpus": one, "corpus_x10": ten, "growth": ten / one,
                                   "sentences": args.rss_sentences}

    print(f"tokens          : {n_tokens} (specials included), best of {args.repeats} runs each")
    for key, label in (("naive", "naive loop"), ("ours", "bertology fp32"), ("ours_bf16", "bertology bf16"),
                       ("compile_first_run", "bf16 compiled, 1st"), ("ours_bf16_compiled", "bf16 compiled"),
                       ("bare_forward_bf16", "bare forward bf16")):
        if f"{key}_tokens_per_s" not in results:
            continue
        speed = results[f"{key}_tokens_per_s"]
        line = f"{label:20s}: {speed:10.0f} tokens/s"
        if "naive_tokens_per_s" in results and key != "naive":
            line += f"  ({speed / results['naive_tokens_per_s']:.2f}x naive)"
        if flop:
            line += f"  {100 * results[f'{key}_share_of_bf16_ceiling']:.0f}% of the bf16 ceiling"
        print(line)
    if "compile_first_run_seconds" in results:
        print(f"compile           : first compiled run took {results['compile_first_run_seconds']:.1f} s")
    print(f"matmul ceiling    : bf16 {ceiling / 1e9:.0f} GFLOP/s (2048^2, best of {len(ceilings)}: "
          f"{', '.join(f'{c / 1e9:.0f}' for c in ceilings)}), fp32 {results['matmul_fp32_flops'] / 1e9:.0f} GFLOP/s")
    print(f"MiniLM's GEMMs    : {results['minilm_gemm_bf16_flops'] / 1e9:.0f} GFLOP/s in bf16 at 4,096 tokens "
          f"({100 * results['minilm_gemm_bf16_flops'] / ceiling:.0f}% of the ceiling)")
    if flop:
        print(f"fp32 share        : {100 * results['share_of_fp32_ceiling']:.0f}% of the fp32 ceiling")
    print(f"fp16 storage      : max |diff| vs float32 storage {results['fp16_storage_max_abs_diff']:.4f}")
    print(f"bf16 fidelity     : max |diff| per layer {['%.3f' % d for d in diffs]}; "
          f"probe {results.get('bf16_probe')}")
    if "peak_rss_mib" in results:
        rss = results["peak_rss_mib"]
        print(f"peak RSS          : {rss['corpus']:.0f} MiB ({rss['sentences']} sentences), "
              f"{rss['corpus_x10']:.0f} MiB (x10), growth {rss['growth']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    results["load_average_before"], results["load_average_after"] = load_before, os.getloadavg()
    results["torch_threads"] = torch.get_num_threads()
    heading = args.heading or f"{args.device.upper()}, load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}"
    save_run(args.name or f"extract_{args.corpus.replace('-', '_')}_{args.device}", raw=results,
             tables=published_tables(results, heading))


def count_tokens(encoder, sentences) -> int:
    """Model input tokens (specials included) of the corpus: what every tokens/s here counts."""
    from bertology.extraction.alignment import encode_sentences

    encoded = encode_sentences(encoder.tokenizer, list(sentences), encoder.max_length)
    return sum(len(segment.input_ids) for sentence in encoded for segment in sentence.segments)


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
