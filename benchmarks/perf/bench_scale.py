"""Extraction at scale, in one process: ours against a peer toolkit and the bare forward pass, then the
Ray engine with 1 and 2 workers against the local engine.

Part 1 (peer): NeuroX 1.0.9's ``extract_representations`` (install it beside h5py with
``pip install --no-deps neurox==1.0.9 h5py``) on the same sentences and model, every layer, subwords
averaged into words, written to HDF5 (its fastest writer); its model is loaded before the clock starts
(the loader is replaced by one returning the preloaded model, nothing else is patched) and its per-sentence
prints go to a buffer. Ours: ``bertology.extract`` into a store (fp32, and bf16 autocast), and the bare
forward pass of the model over the same length-sorted batches (no pooling, no store): the share of the
bare forward's throughput the pipeline keeps.

Part 2 (Ray), measured fairly in one process: the local engine with N torch threads against
``extract_ray`` on a local Ray instance with N actors of one thread each (``--cpus-per-worker 1``), N in
``--workers`` (1,2), on the same sentences and shard size. Each configuration runs after a warm-up that is not
counted, on the whole corpus and on its first ``--small-sentences``, for ``--rounds`` rounds whose order
rotates, with the load average recorded before and after each run (the machine may be shared: the ratios
inside one round are what to trust). Printed: the median [min, max] whole-run throughput, Ray's time to its
first shard, the speed-up from N=1 to N=2 of each engine, and local time / Ray time per round; then, from
the two corpus sizes of each round, each configuration's rate at the margin (extra tokens / extra seconds)
and fixed seconds per run, and the corpus size above which Ray would pay off at those rates (where its
marginal rate beats the local engine's at all).

    python -m benchmarks.perf.bench_scale [--sentences 300] [--neurox-sentences 150] [--ray-sentences 2001]
        [--store scale_ewt_dev_cpu]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.perf.bench_extract import bare_forward, count_tokens  # noqa: E402

from bertology.data import default_corpus, read_conllu  # noqa: E402
from bertology.extraction import extract  # noqa: E402
from bertology.models import load_encoder  # noqa: E402

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = ("NeuroX 1.0.9 extract_representations and the bare forward pass (part 1); the local engine for the "
            "Ray engine (part 2)")


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def neurox_seconds(model_dir: str, sentences, tmp: Path, device: str = "cpu") -> float:
    """NeuroX 1.0.9 over ``sentences`` (one per line, words joined by spaces), model preloaded on ``device``
    (NeuroX's own ``device`` argument: one sentence per forward pass there)."""
    from neurox.data.extraction import transformers_extractor as nx

    model, tokenizer = nx.get_model_and_tokenizer(model_dir, device=device)
    model.eval()
    original = nx.get_model_and_tokenizer
    nx.get_model_and_tokenizer = lambda *args, **kwargs: (model, tokenizer)
    corpus = tmp / "neurox.txt"
    corpus.write_text("\n".join(" ".join(s.words) for s in sentences) + "\n", encoding="utf-8")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            _, seconds = timed(lambda: nx.extract_representations(model_dir, str(corpus), str(tmp / "neurox.hdf5"),
                                                                  aggregation="average", output_type="hdf5",
                                                                  device=device))
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


def peer_table(runs: list[dict], header: str = "fp32, 1 thread, shared") -> dict:
    """Part 1's published table; a second (third...) run of the same command goes in brackets."""
    from benchmarks.stored import table

    def cells(key, fmt):
        values = [fmt(run[key]) for run in runs if key in run]
        return values[0] + "".join(f" [{value}]" for value in values[1:])

    first = runs[0]
    rows = []
    if "neurox_tokens_per_s" in first:
        rows += [[f"NeuroX 1.0.9 `extract_representations` ({first['neurox_sentences']} sentences, HDF5, model "
                  "preloaded)", cells("neurox_tokens_per_s", "{:,.0f}".format), "1x"],
                 [f"ours, `bertology.extract` into the store (the same {first['neurox_sentences']} sentences)",
                  cells("ours_fp32_same_subset_tokens_per_s", "{:,.0f}".format),
                  f"**{cells('ours_vs_neurox', '{:.1f}x'.format)} NeuroX**"]]
    repeats = len(first["runs"]["ours_fp32"])
    per_repeat = " [".join(", ".join(f"{ratio:.2f}" for ratio in run["ratio_per_run_fp32"]) for run in runs)
    rows += [[f"ours, {first['sentences']} sentences, best of {repeats}", cells("ours_fp32_tokens_per_s",
                                                                                "{:,.0f}".format), ""],
             ["bare MiniLM forward over the same length-sorted batches (no pooling, no store), best of "
              f"{repeats}", cells("bare_fp32_tokens_per_s", "{:,.0f}".format), ""],
             ["ours / bare forward", "", f"**{cells('share_of_bare_fp32', '{:.0%}'.format)}** (per repeat "
              f"{per_repeat}{']' * (len(runs) - 1)})"]]
    return table([header, "tokens/s", "ratio"], rows)


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


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def median_and_range(values) -> dict:
    present = [value for value in values if value is not None]
    if not present:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(present), "min": min(present), "max": max(present), "n": len(present)}


def scale(args, encoder, tmp: Path) -> dict:
    """The local engine with N torch threads against Ray with N actors of ``cpus_per_worker`` each, N in
    ``args.workers``, on the same sentences; each configuration on the whole corpus and on its first
    ``small_sentences``, ``rounds`` times, interleaved (the order rotates each round), after a warm-up of each."""
    import ray

    from bertology.scale import extract_ray

    sentences = read_conllu(default_corpus(args.corpus))[: args.ray_sentences]
    sizes = {"full": sentences, "small": sentences[: args.small_sentences]}
    tokens = {size: count_tokens(encoder, subset) for size, subset in sizes.items()}
    options = dict(progress=False, shard_bytes=int(args.shard_mb * 2**20))
    runs = iter(range(10**6))
    default_threads = torch.get_num_threads()

    def run_local(threads: int, subset) -> dict:
        torch.set_num_threads(threads)
        try:
            _, seconds = timed(lambda: extract(encoder, subset, tmp / f"local{next(runs)}", **options))
        finally:
            torch.set_num_threads(default_threads)
        return {"seconds": seconds}

    def run_ray(workers: int, subset) -> dict:
        store, seconds = timed(lambda: extract_ray(encoder, subset, tmp / f"ray{next(runs)}", workers=workers,
                                                   cpus_per_worker=args.cpus_per_worker,
                                                   gpus_per_worker=args.gpus_per_worker, **options))
        stats = store.index["stats"]
        return {"seconds": seconds, "first_shard_seconds": stats["first_shard_seconds"],
                "shards": len(store.shards), "workers_used": stats["workers"]}

    local_threads = {n: max(1, int(n * args.cpus_per_worker)) for n in args.workers}
    configs = [(engine, n) for n in args.workers for engine in ("local", "ray")]
    results = {"sentences": {size: len(subset) for size, subset in sizes.items()}, "tokens": tokens,
               "shard_mb": args.shard_mb, "ray": ray.__version__, "device": args.device,
               "cpus_per_worker": args.cpus_per_worker, "gpus_per_worker": args.gpus_per_worker,
               "local_threads": local_threads, "rounds": args.rounds, "ray_cpus": args.ray_cpus,
               "load_before_init": load_average()}
    _, results["ray_init_seconds"] = timed(lambda: ray.init(num_cpus=args.ray_cpus, include_dashboard=False,
                                                            logging_level="WARNING"))
    for engine, n in configs:  # warm-up, not counted: imports, first actor processes, page cache
        (run_local(local_threads[n], sizes["small"]) if engine == "local" else run_ray(n, sizes["small"]))
    measurements = []
    for round_number in range(args.rounds):
        shift = round_number % len(configs)
        for engine, n in configs[shift:] + configs[:shift]:
            for size in ("full", "small"):
                before = load_average()
                measured = (run_local(local_threads[n], sizes[size]) if engine == "local"
                            else run_ray(n, sizes[size]))
                measured.update(engine=engine, n=n, size=size, round=round_number, load_before=before,
                                load_after=load_average(), tokens_per_s=tokens[size] / measured["seconds"])
                measurements.append(measured)
                print(f"  round {round_number + 1}: {engine} N={n} {size}: {measured['seconds']:.1f} s, "
                      f"{measured['tokens_per_s']:.0f} tokens/s (load {before} -> {measured['load_after']})",
                      flush=True)
    ray.shutdown()
    results["measurements"] = measurements

    def seconds_of(engine, n, size, round_number):
        (found,) = [m for m in measurements if (m["engine"], m["n"], m["size"], m["round"])
                    == (engine, n, size, round_number)]
        return found

    summary = {}
    extra_tokens = tokens["full"] - tokens["small"]
    for engine, n in configs:
        per_round = [seconds_of(engine, n, "full", r) for r in range(args.rounds)]
        smalls = [seconds_of(engine, n, "small", r) for r in range(args.rounds)]
        # The marginal rate (tokens/s once running) and the fixed cost per run, from the two sizes in one round.
        marginal = [extra_tokens / (full["seconds"] - small["seconds"]) if full["seconds"] > small["seconds"] else None
                    for full, small in zip(per_round, smalls)]
        fixed = [small["seconds"] - tokens["small"] / rate if rate else None for small, rate in zip(smalls, marginal)]
        summary[f"{engine}{n}"] = {
            "tokens_per_s": median_and_range([m["tokens_per_s"] for m in per_round]),
            "seconds": median_and_range([m["seconds"] for m in per_round]),
            "first_shard_seconds": median_and_range([m.get("first_shard_seconds") for m in per_round]),
            "marginal_tokens_per_s": median_and_range(marginal), "fixed_seconds": median_and_range(fixed),
            "per_round": {"marginal": marginal, "fixed": fixed}}
    for n in args.workers:
        local, ray_run = summary[f"local{n}"], summary[f"ray{n}"]
        ratios = [seconds_of("local", n, "full", r)["seconds"] / seconds_of("ray", n, "full", r)["seconds"]
                  for r in range(args.rounds)]
        ray_run["ray_over_local_whole_run"] = median_and_range(ratios)
        break_even = []
        for m_local, m_ray, f_local, f_ray in zip(local["per_round"]["marginal"], ray_run["per_round"]["marginal"],
                                                  local["per_round"]["fixed"], ray_run["per_round"]["fixed"]):
            gain = (1 / m_local - 1 / m_ray) if m_local and m_ray else 0
            break_even.append((f_ray - f_local) / gain if gain > 0 and f_ray > f_local else None)
        ray_run["break_even_tokens_per_round"] = break_even
    for n in args.workers[1:]:
        for engine in ("local", "ray"):
            first = args.workers[0]
            speedups = [seconds_of(engine, first, "full", r)["seconds"] / seconds_of(engine, n, "full", r)["seconds"]
                        for r in range(args.rounds)]
            summary[f"{engine}{n}"][f"speedup_over_{first}"] = median_and_range(speedups)
    loads = [value for m in measurements for value in (m["load_before"], m["load_after"])]
    results.update(summary=summary, load_min=min(loads), load_max=max(loads))
    return results


def scale_tables(s: dict, args) -> dict:
    """The published tables: whole-run throughput with the Ray / local ratio, and the two-size fit."""
    from benchmarks.stored import table

    def spread(entry, digits=0, unit=""):
        if entry["median"] is None:
            return "-"
        fmt = f"{{:,.{digits}f}}"
        return f"{fmt.format(entry['median'])}{unit} [{fmt.format(entry['min'])}, {fmt.format(entry['max'])}]"

    def label(engine, n):
        if engine == "local":
            threads = s["local_threads"][n] if n in s["local_threads"] else s["local_threads"][str(n)]
            return f"local engine, {threads} thread{'s' if threads > 1 else ''}"
        gpu = f", {args.gpus_per_worker:g} GPU" if args.gpus_per_worker else ""
        return f"Ray, {n} worker{'s' if n > 1 else ''} x {args.cpus_per_worker:g} thread{gpu}"

    first = args.workers[0]
    whole, fit = [], []
    for n in args.workers:
        for engine in ("local", "ray"):
            entry = s["summary"][f"{engine}{n}"]
            speedup = entry.get(f"speedup_over_{first}")
            whole.append([label(engine, n), spread(entry["tokens_per_s"]), spread(entry["seconds"], 1, " s"),
                          spread(entry["first_shard_seconds"], 1, " s") if engine == "ray" else "",
                          spread(speedup, 2, "x") if speedup else "",
                          spread(entry["ray_over_local_whole_run"], 2, "x") if engine == "ray" else ""])
            break_even = [b for b in entry.get("break_even_tokens_per_round", []) if b is not None]
            rounds = len(entry.get("break_even_tokens_per_round", []))
            fit.append([label(engine, n), spread(entry["marginal_tokens_per_s"]), spread(entry["fixed_seconds"], 1, " s"),
                        "" if engine == "local" else
                        (f"{len(break_even)} of {rounds} rounds: " + ", ".join(f"{b:,.0f}" for b in break_even)
                         if break_even else f"never (0 of {rounds} rounds)")])
    sentences, tokens = s["sentences"], s["tokens"]
    return {
        "whole_run": table(["engine, N", f"tokens/s, {sentences['full']:,} sentences",
                            "wall time", "time to the first shard", f"speed-up over N={first}",
                            "local time / Ray time, same N and round"], whole),
        "fit": table(["engine, N", f"tokens/s at the margin ({tokens['full']:,} - {tokens['small']:,} tokens)",
                      "fixed seconds per run", "Ray pays off above (tokens)"], fit),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--corpus", default="ewt-dev")
    parser.add_argument("--sentences", type=int, default=300, help="part 1: first N sentences")
    parser.add_argument("--neurox-sentences", type=int, default=150, help="part 1: NeuroX on the first N (0: skip)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ray-sentences", type=int, default=2001, help="part 2: first N sentences (0: skip part 2)")
    parser.add_argument("--small-sentences", type=int, default=400,
                        help="part 2: the smaller corpus (its first N sentences) of the two-size fit")
    parser.add_argument("--rounds", type=int, default=3, help="part 2: interleaved rounds (medians are printed)")
    parser.add_argument("--ray-cpus", type=int, default=os.cpu_count())
    parser.add_argument("--workers", type=lambda text: [int(w) for w in text.split(",")], default=[1, 2],
                        help="part 2: N, compared as Ray with N workers against the local engine with N x "
                        "--cpus-per-worker torch threads")
    parser.add_argument("--device", default="cpu", help="the local engine's device (cuda on a GPU machine)")
    parser.add_argument("--cpus-per-worker", type=float, default=1.0, help="part 2: CPUs (torch threads) per actor")
    parser.add_argument("--gpus-per-worker", type=float, default=0.0, help="part 2: GPUs per actor (then on cuda)")
    parser.add_argument("--untrained-seed", type=int, default=None,
                        help="a random-weight twin of the model (same shapes) where the weights are absent")
    parser.add_argument("--shard-mb", type=float, default=8.0, help="part 2: shard size (several shards per worker)")
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--bf16", action="store_true", help="part 1: also bf16 autocast rows (needs AVX-512 BF16/AMX "
                        "on CPU: without, bf16 matrix products are ~100x slower than fp32)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of this process (default: torch's)")
    parser.add_argument("--store", help="save the run as benchmarks/results/<STORE>.json (benchmarks/stored.py)")
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
            print(f"part 2: {s['sentences']['full']} sentences ({s['tokens']['full']} tokens) and the first "
                  f"{s['sentences']['small']} ({s['tokens']['small']}), shards of {s['shard_mb']} MB, {args.rounds} "
                  f"rounds interleaved; ray.init({s['ray_cpus']} CPUs) took {s['ray_init_seconds']:.1f} s; load "
                  f"average {s['load_min']}-{s['load_max']}")
            from benchmarks.stored import markdown

            for key, made in scale_tables(s, args).items():
                print(f"\n{key}:\n{markdown(made)}")
    if args.store:
        from benchmarks.stored import save_run

        tables = {}
        if "peer" in results:
            threads = torch.get_num_threads()
            tables["peer"] = peer_table([results["peer"]], header=f"fp32, {threads} thread{'s' if threads > 1 else ''}")
        if "scale" in results:
            tables.update(scale_tables(results["scale"], args))
        save_run(args.store, raw=results, tables=tables)


if __name__ == "__main__":
    main()
