"""Extraction at scale, in one process: ours against a peer toolkit and the bare forward pass, then the
Ray engine with 1 and 2 workers against the local engine.

Part 1 (peer): NeuroX 1.0.9's ``extract_representations`` (install it beside h5py with
``pip install --no-deps neurox==1.0.9 h5py``) on the same sentences and model, every layer, subwords
averaged into words, written to HDF5 (its fastest writer); its model is loaded before the clock starts
(the loader is replaced by one returning the preloaded model, nothing else is patched) and its per-sentence
prints go to a buffer. Ours: ``bertology.extract`` into a store (fp32, and bf16 autocast), and the bare
forward pass of the model over the same length-sorted batches (no pooling, no store): the share of the
bare forward's throughput the pipeline keeps.

Part 2 (Ray): the local engine, then ``extract_ray`` on a local Ray instance (``ray.init(num_cpus=C)``,
timed: start-up) with 1 and 2 actors of 1 CPU each, on the same corpus and shard size; the scaling
efficiency (2-worker throughput / (2 x 1-worker)); Ray's fixed cost per run (a one-shard corpus through
Ray minus the same through the local engine: actor start-up, model shipping, scheduling); and the corpus
size at which the Ray run's extra throughput pays for that cost.

    python benchmarks/bench_scale.py [--sentences 300] [--neurox-sentences 150] [--ray-sentences 2001]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_extract import bare_forward, count_tokens  # noqa: E402

from bertology.data import default_corpus, read_conllu  # noqa: E402
from bertology.extraction import extract  # noqa: E402
from bertology.models import load_encoder  # noqa: E402


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def neurox_seconds(model_dir: str, sentences, tmp: Path) -> float:
    """NeuroX 1.0.9 over ``sentences`` (one per line, words joined by spaces), model preloaded."""
    from neurox.data.extraction import transformers_extractor as nx

    model, tokenizer = nx.get_model_and_tokenizer(model_dir)
    model.eval()
    original = nx.get_model_and_tokenizer
    nx.get_model_and_tokenizer = lambda *args, **kwargs: (model, tokenizer)
    corpus = tmp / "neurox.txt"
    corpus.write_text("\n".join(" ".join(s.words) for s in sentences) + "\n", encoding="utf-8")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            _, seconds = timed(lambda: nx.extract_representations(model_dir, str(corpus), str(tmp / "neurox.hdf5"),
                                                                  aggregation="average", output_type="hdf5"))
    finally:
        nx.get_model_and_tokenizer = original
    return seconds


def neurox_agreement(store, path: Path) -> dict:
    """Same vectors? NeuroX's word averages against the store's word-mean rows, every layer."""
    import h5py
    import numpy as np

    worst, compared = 0.0, 0
    with h5py.File(path, "r") as handle:
        for i in range(store.n_sentences):
            theirs = np.asarray(handle[str(i)])  # [layers, words, dim]
            if theirs.shape[1] != len(store.words(i)):
                continue
            ours = np.stack([store.sentence_rows(i, layer) for layer in store.layers])
            worst = max(worst, float(np.abs(theirs - ours).max()))
            compared += 1
    return {"sentences_compared": compared, "sentences": store.n_sentences, "max_abs_diff": worst}


def peer(args, encoder, tmp: Path) -> dict:
    sentences = read_conllu(default_corpus(args.corpus))[: args.sentences]
    tokens = count_tokens(encoder, sentences)
    runs = iter(range(10**6))

    def ours(**options) -> float:
        _, seconds = timed(lambda: extract(encoder, sentences, tmp / f"peer{next(runs)}", progress=False, **options))
        return tokens / seconds

    ours()  # warm-up
    results = {"sentences": len(sentences), "tokens": tokens}
    precisions = ("fp32", "bf16") if args.bf16 else ("fp32",)
    rows = {f"{kind}_{precision}": [] for precision in precisions for kind in ("ours", "bare")}
    for _ in range(args.repeats):  # interleaved, so a slow phase of a shared machine hits both alike
        rows["ours_fp32"].append(ours())
        rows["bare_fp32"].append(bare_forward(encoder, sentences, False))
        if args.bf16:
            rows["ours_bf16"].append(ours(autocast="bfloat16"))
            rows["bare_bf16"].append(bare_forward(encoder, sentences, True))
    results.update({f"{key}_tokens_per_s": max(values) for key, values in rows.items()})
    results["runs"] = rows
    results["ratio_per_run_fp32"] = [o / b for o, b in zip(rows["ours_fp32"], rows["bare_fp32"])]
    for precision in precisions:
        results[f"share_of_bare_{precision}"] = (results[f"ours_{precision}_tokens_per_s"]
                                                 / results[f"bare_{precision}_tokens_per_s"])
    if args.neurox_sentences:
        try:
            import neurox  # noqa: F401
        except ImportError:
            print("neurox not installed: pip install --no-deps neurox==1.0.9 h5py")
        else:
            subset = sentences[: args.neurox_sentences]
            sub_tokens = count_tokens(encoder, subset)
            seconds = neurox_seconds(encoder.source, subset, tmp)
            store, ours_seconds = timed(lambda: extract(encoder, subset, tmp / "peer-nx", progress=False))
            results["neurox_agreement"] = neurox_agreement(store, tmp / "neurox.hdf5")
            results.update({"neurox_sentences": len(subset), "neurox_tokens_per_s": sub_tokens / seconds,
                            "ours_fp32_same_subset_tokens_per_s": sub_tokens / ours_seconds})
            results["ours_vs_neurox"] = results["ours_fp32_same_subset_tokens_per_s"] / results["neurox_tokens_per_s"]
            if args.bf16:
                results["ours_bf16_vs_neurox"] = results["ours_bf16_tokens_per_s"] / results["neurox_tokens_per_s"]
    return results


def scale(args, encoder, tmp: Path) -> dict:
    import ray

    from bertology.scale import extract_ray

    sentences = read_conllu(default_corpus(args.corpus))[: args.ray_sentences]
    tokens = count_tokens(encoder, sentences)
    shard_bytes = int(args.shard_mb * 2**20)
    runs = iter(range(10**6))
    options = dict(progress=False, shard_bytes=shard_bytes)

    def local(subset, n_tokens):
        _, seconds = timed(lambda: extract(encoder, subset, tmp / f"local{next(runs)}", **options))
        return n_tokens / seconds, seconds

    results = {"sentences": len(sentences), "tokens": tokens, "shard_mb": args.shard_mb,
               "torch_threads_local": torch.get_num_threads(), "ray": ray.__version__}
    _, results["ray_init_seconds"] = timed(lambda: ray.init(num_cpus=args.ray_cpus, include_dashboard=False,
                                                            logging_level="WARNING"))
    results.update(device=args.device, cpus_per_worker=args.cpus_per_worker, gpus_per_worker=args.gpus_per_worker)
    results["ray_cpus"] = args.ray_cpus
    local(sentences[:50], 1)  # warm-up
    threads = torch.get_num_threads()
    for count in sorted(set(args.local_threads or {1, threads})):
        torch.set_num_threads(count)
        results[f"local_{count}_threads"] = dict(zip(("tokens_per_s", "seconds"), local(sentences, tokens)))
    torch.set_num_threads(threads)
    best_local = max(value["tokens_per_s"] for key, value in results.items() if key.startswith("local_"))
    results["local_tokens_per_s"] = best_local
    for workers in args.workers:
        path = tmp / f"ray{workers}"
        store, seconds = timed(lambda: extract_ray(encoder, sentences, path, workers=workers,
                                                   cpus_per_worker=args.cpus_per_worker,
                                                   gpus_per_worker=args.gpus_per_worker, **options))
        stats = store.index["stats"]
        first = stats["first_shard_seconds"]
        results[f"ray{workers}"] = {
            "tokens_per_s": tokens / seconds, "seconds": seconds, "first_shard_seconds": first,
            "shards": len(store.shards),
            # after the first shard is back (actors started, model loaded): shards/s x tokens per shard
            "steady_tokens_per_s": tokens * (len(store.shards) - workers) / len(store.shards) / (seconds - first)
            if seconds > first and len(store.shards) > workers else None}
    # Fixed cost per run: one small shard through Ray and through the local engine.
    small = sentences[:20]
    small_tokens = count_tokens(encoder, small)
    _, small_local = local(small, small_tokens)
    _, small_ray = timed(lambda: extract_ray(encoder, small, tmp / "ray-small", workers=1,
                                             cpus_per_worker=args.cpus_per_worker,
                                             gpus_per_worker=args.gpus_per_worker, **options))
    results["fixed_overhead_seconds"] = small_ray - small_local
    if 1 in args.workers:  # throughput with w workers / (w x the 1-worker throughput)
        for workers in args.workers[1:]:
            results[f"scaling_efficiency_{workers}_workers"] = (results[f"ray{workers}"]["tokens_per_s"]
                                                                / (workers * results["ray1"]["tokens_per_s"]))
    best = max((results[f"ray{w}"]["tokens_per_s"], w) for w in args.workers)
    results["best_ray_workers"] = best[1]
    gain_per_token = 1 / best_local - 1 / best[0]
    results["payoff_tokens"] = (results["fixed_overhead_seconds"] / gain_per_token) if gain_per_token > 0 else None
    # The same from the big run alone: its time to the first shard as the fixed cost, its rate after that.
    run = results[f"ray{best[1]}"]
    steady = max((results[f"ray{w}"]["steady_tokens_per_s"] or 0, w) for w in args.workers)
    run = results[f"ray{steady[1]}"]
    gain = 1 / best_local - 1 / steady[0] if steady[0] else 0
    results["payoff_tokens_from_steady"] = run["first_shard_seconds"] / gain if gain > 0 else None
    results["payoff_workers_from_steady"] = steady[1]
    ray.shutdown()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--corpus", default="ewt-dev")
    parser.add_argument("--sentences", type=int, default=300, help="part 1: first N sentences")
    parser.add_argument("--neurox-sentences", type=int, default=150, help="part 1: NeuroX on the first N (0: skip)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ray-sentences", type=int, default=2001, help="part 2: first N sentences (0: skip part 2)")
    parser.add_argument("--ray-cpus", type=int, default=os.cpu_count())
    parser.add_argument("--workers", type=lambda text: [int(w) for w in text.split(",")], default=[1, 2])
    parser.add_argument("--device", default="cpu", help="the local engine's device (cuda on a GPU machine)")
    parser.add_argument("--cpus-per-worker", type=float, default=1.0, help="part 2: CPUs (torch threads) per actor")
    parser.add_argument("--gpus-per-worker", type=float, default=0.0, help="part 2: GPUs per actor (then on cuda)")
    parser.add_argument("--untrained-seed", type=int, default=None,
                        help="a random-weight twin of the model (same shapes) where the weights are absent")
    parser.add_argument("--local-threads", type=lambda text: [int(t) for t in text.split(",")], default=None,
                        help="part 2: torch threads of the local engine runs (default: 1 and torch's default)")
    parser.add_argument("--shard-mb", type=float, default=8.0, help="part 2: shard size (several shards per worker)")
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--bf16", action="store_true", help="part 1: also bf16 autocast rows (needs AVX-512 BF16/AMX "
                        "on CPU: without, bf16 matrix products are ~100x slower than fp32)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of this process (default: torch's)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    encoder = load_encoder(args.model, device=args.device, untrained_seed=args.untrained_seed)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads); model {encoder.name}; corpus UD EWT {args.corpus}")
    results = {}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if not args.skip_peer and args.sentences:
            results["peer"] = p = peer(args, encoder, tmp)
            print(f"part 1: {p['sentences']} sentences, {p['tokens']} tokens; best of {args.repeats}, interleaved")
            for key, label in (("ours_fp32", "bertology fp32"), ("bare_fp32", "bare forward fp32"),
                               ("ours_bf16", "bertology bf16"), ("bare_bf16", "bare forward bf16")):
                if key + "_tokens_per_s" in p:
                    print(f"  {label:22s}: {p[key + '_tokens_per_s']:9.0f} tokens/s")
            print("  pipeline / bare forward: " + ", ".join(f"{k.removeprefix('share_of_bare_')} {v:.0%}"
                                                          for k, v in p.items() if k.startswith("share_of_bare_"))
                  + f" (per run, fp32: {', '.join(f'{r:.2f}' for r in p['ratio_per_run_fp32'])})")
            if "neurox_tokens_per_s" in p:
                print(f"  NeuroX 1.0.9 ({p['neurox_sentences']} sentences): {p['neurox_tokens_per_s']:.0f} tokens/s; "
                      f"ours fp32 on the same {p['ours_fp32_same_subset_tokens_per_s']:.0f}: "
                      f"{p['ours_vs_neurox']:.1f}x NeuroX")
                agree = p["neurox_agreement"]
                print(f"  same vectors: {agree['sentences_compared']}/{agree['sentences']} sentences with the same "
                      "words, "
                      f"max |NeuroX - ours| {agree['max_abs_diff']:.4f} (ours stored as float16)")
        if args.ray_sentences:
            results["scale"] = s = scale(args, encoder, tmp)
            print(f"part 2: {s['sentences']} sentences, {s['tokens']} tokens, shards of {s['shard_mb']} MB; "
                  f"ray.init({s['ray_cpus']} CPUs) took {s['ray_init_seconds']:.1f} s")
            for key in sorted(k for k in s if k.startswith("local_") and k.endswith("_threads")):
                r = s[key]
                print(f"  local engine, {key.split('_')[1]} thread(s): {r['tokens_per_s']:.0f} tokens/s "
                      f"({r['seconds']:.1f} s)")
            for workers in args.workers:
                r = s[f"ray{workers}"]
                print(f"  ray, {workers} worker(s) x {args.cpus_per_worker:g} CPU, {args.gpus_per_worker:g} GPU: "
                      f"{r['tokens_per_s']:.0f} tokens/s ({r['seconds']:.1f} s, "
                      f"first shard after {r['first_shard_seconds']:.1f} s, {r['shards']} shards; after the first "
                      f"shards: {r['steady_tokens_per_s'] or float('nan'):.0f} tokens/s)")
            for key in (k for k in s if k.startswith("scaling_efficiency_")):
                print(f"  scaling efficiency 1 -> {key.split('_')[2]} workers: {s[key]:.0%}")
            print(f"  Ray's fixed cost per run: {s['fixed_overhead_seconds']:.1f} s; pays off above "
                  + (f"{s['payoff_tokens']:,.0f} tokens" if s["payoff_tokens"] else "never on this machine "
                     "(no faster than the local engine)"))
            if s.get("payoff_tokens_from_steady"):
                print(f"  from the big run alone ({s['payoff_workers_from_steady']} workers: first-shard latency "
                      "as the "
                      f"fixed cost, the rate after it): pays off above {s['payoff_tokens_from_steady']:,.0f} tokens")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
