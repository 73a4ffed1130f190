"""The extraction pipeline's own cost: `bertology.extract` as a share of the bare forward pass over the same
batches, beside the naive transformers loop, all in one process (issue 31).

Two models on UD EWT dev (2,001 sentences):

* **the overhead proxy**: a tiny random BERT (2 layers, hidden 64, 2 heads; MiniLM's real tokenizer) on ONE
  torch thread. Its forward pass is so cheap that what the pipeline does per token (tokenizing, alignment,
  pooling, planning, writing) shows, as it does beside a GPU's forward pass;
* **MiniLM** (the embedded all-MiniLM-L6-v2), fp32 and bf16 autocast, torch's default threads.

Bare forward = the model alone (``output_hidden_states=True``, nothing kept) over exactly the batches the
pipeline cuts (each shard's, from the same planning), under the same precision and attention implementation.
Ours = ``extract`` into a fresh store: planning, tokenizing, pooling, float16 storage, SHA-256, fsync and rename
of every shard included. Naive = bench_extract.py's loop (input order, batch 32, pooling in Python after).
The measurements are interleaved round by round (the machine may be shared: ratios within a round are what to
trust); each figure is the best of the rounds, and the per-round ratios are stored too, with the load average.
Beside wall-clock shares, the CPU seconds the process spent (every thread: the tokenizing and writer threads
too) give the work per token, which a crowded machine's scheduling does not move as much.

    python -m benchmarks.perf.bench_extract_overhead [--rounds 5] [--models proxy,minilm] [--name extract_overhead_cpu] [--ahead] [--lazy]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.perf.bench_extract import naive_loop  # noqa: E402
from benchmarks.stored import save_run, table  # noqa: E402

from bertology.data import default_corpus, read_conllu  # noqa: E402
from bertology.extraction import ExtractionSpec, extract, pipeline  # noqa: E402
from bertology.extraction.pipeline import ShardComputer, plan_extraction, run_context  # noqa: E402
from bertology.models import load_encoder  # noqa: E402
from bertology.models.encoders import Encoder, as_encoder  # noqa: E402

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = ("the bare forward pass over the same batches (the pipeline's share of it), beside the naive "
            "transformers loop")


def proxy_encoder(tokenizer, seed: int = 0, hidden: int = 64, layers: int = 2, heads: int = 2) -> Encoder:
    """A random BERT of ``layers`` x ``hidden`` on ``tokenizer`` (MiniLM's): the overhead proxy, or (with
    bert-base's sizes) the GPU check's model."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=4 * hidden, max_position_embeddings=512)
    return as_encoder(BertModel(config).eval(), tokenizer=tokenizer, name=f"random-bert-L{layers}-H{hidden}")


def our_batches(encoder: Encoder, sentences, spec: ExtractionSpec) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The model inputs ``extract`` runs, batch by batch: each shard's, from the same planning."""
    with tempfile.TemporaryDirectory() as tmp:
        plan = plan_extraction(encoder, sentences, Path(tmp) / "plan", spec)
        computer = ShardComputer(encoder, dict(enumerate(plan.encoded)), spec, plan.layers,
                                 max_rows=plan.largest_shard_rows())
        batches = []
        for shard in plan.index["shards"]:
            start, stop = shard["start"], shard["stop"]
            rows = plan.row_counts[start:stop]
            first_rows = dict(zip(range(start, stop), (np.cumsum(rows) - rows).tolist()))
            batches += [(batch.ids, batch.mask) for batch in computer.batches(range(start, stop), first_rows)]
    return batches


def bare_seconds(encoder: Encoder, batches, autocast: str | None) -> float:
    """The model alone over ``batches`` (hidden states of every layer returned, nothing kept)."""
    device = encoder.device
    with torch.inference_mode(), run_context(encoder, autocast, []):
        start = time.perf_counter()
        for ids, mask in batches:
            encoder.model(input_ids=ids.to(device), attention_mask=mask.to(device), output_hidden_states=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start


def ours_seconds(encoder: Encoder, sentences, out: Path, ahead: bool = False, lazy: bool = False,
                 **settings) -> float:
    """``extract`` into a fresh store; ``ahead``: its batches made a shard ahead on a thread of their own, as
    beside a GPU (``pipeline._batches_ahead``), rather than in line as on a CPU; ``lazy``: in line, each batch made
    just before it runs rather than a shard's at once (``pipeline._Parts.at_once``)."""
    chosen, at_once = pipeline._batches_ahead, pipeline._Parts.at_once
    if ahead:
        pipeline._batches_ahead = lambda device: True
    if lazy:
        pipeline._Parts.at_once = False
    start = time.perf_counter()
    try:
        extract(encoder, sentences, out, progress=False, **settings)
    finally:
        pipeline._batches_ahead, pipeline._Parts.at_once = chosen, at_once
    if encoder.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def naive_seconds(encoder: Encoder, sentences) -> float:
    start = time.perf_counter()
    naive_loop(encoder, sentences, encoder.device)
    if encoder.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(encoder: Encoder, sentences, rounds: int, autocast: str | None, tmp: Path, naive: bool,
            label: str, ahead: bool = False, lazy: bool = False) -> dict:
    """Interleaved rounds of bare forward, ours (and the naive loop; with ``ahead``, ours with the batches made on
    a thread of their own: "ahead"; with ``lazy``, ours with each batch made just before it runs: "lazy"); tokens/s
    of the best, per-round ratios."""
    spec = ExtractionSpec(autocast=autocast)
    batches = our_batches(encoder, sentences, spec)
    tokens = sum(int(mask.sum()) for _, mask in batches)
    runs: dict[str, list[float]] = {"bare": [], "ours": [], "naive": [], "ahead": [], "lazy": []}
    cpu: dict[str, list[float]] = {name: [] for name in runs}  # the process's CPU seconds
    loads = []
    ours_seconds(encoder, sentences[:200], tmp / f"{label}-warm", autocast=autocast)  # warm-up, not counted
    bare_seconds(encoder, batches[:4], autocast)
    for round_ in range(rounds):
        loads.append(os.getloadavg()[0])
        order = [("bare", lambda: bare_seconds(encoder, batches, autocast)),
                 ("ours", lambda: ours_seconds(encoder, sentences, tmp / f"{label}-{round_}", autocast=autocast))]
        if ahead:
            order.append(("ahead", lambda: ours_seconds(encoder, sentences, tmp / f"{label}-{round_}-ahead", ahead=True,
                                                        autocast=autocast)))
        if lazy:
            order.append(("lazy", lambda: ours_seconds(encoder, sentences, tmp / f"{label}-{round_}-lazy", lazy=True,
                                                       autocast=autocast)))
        if naive and round_ == 0:
            order.append(("naive", lambda: naive_seconds(encoder, sentences)))
        for name, run in (order if round_ % 2 == 0 else order[::-1]):
            started = time.process_time()
            runs[name].append(run())
            cpu[name].append(time.process_time() - started)
        also = (f", ahead {runs['ahead'][-1]:.3f} s" if ahead else "") + (f", lazy {runs['lazy'][-1]:.3f} s"
                                                                          if lazy else "")
        print(f"{label} round {round_}: bare {runs['bare'][-1]:.3f} s, ours {runs['ours'][-1]:.3f} s "
              f"({runs['bare'][-1] / runs['ours'][-1]:.0%}){also}, load {loads[-1]:.1f}", flush=True)
    result = {"tokens": tokens, "batches": len(batches), "autocast": autocast, "threads": torch.get_num_threads(),
              "seconds": runs, "cpu_seconds": cpu, "load_average_per_round": loads,
              "ratio_per_round": [b / o for b, o in zip(runs["bare"], runs["ours"])]}
    for name, values in runs.items():
        if values:
            result[f"{name}_tokens_per_s"] = tokens / min(values)
    result["share_of_bare"] = result["ours_tokens_per_s"] / result["bare_tokens_per_s"]
    # The work per token, whatever the scheduler does on a shared machine: bare CPU seconds / ours (all threads).
    result["cpu_share_of_bare"] = min(cpu["bare"]) / min(cpu["ours"])
    result["share_of_bare_median_round"] = statistics.median(result["ratio_per_round"])
    for variant in ("ahead", "lazy"):
        if runs[variant]:
            result[f"{variant}_ratio_per_round"] = [b / o for b, o in zip(runs["bare"], runs[variant])]
            result[f"{variant}_share_of_bare"] = result[f"{variant}_tokens_per_s"] / result["bare_tokens_per_s"]
            result[f"{variant}_cpu_share_of_bare"] = min(cpu["bare"]) / min(cpu[variant])
            result[f"{variant}_share_of_bare_median_round"] = statistics.median(result[f"{variant}_ratio_per_round"])
    return result


def published(results: dict, heading: str) -> dict[str, dict]:
    rows = []
    for label, run in results.items():
        naive = run.get("naive_tokens_per_s")
        rows.append([label, str(run["threads"]), "bf16 autocast" if run["autocast"] else "fp32",
                     f"{naive:,.0f}" if naive else "–", f"{run['ours_tokens_per_s']:,.0f}",
                     f"{run['bare_tokens_per_s']:,.0f}", f"**{100 * run['share_of_bare']:.0f}%**",
                     f"{100 * run['share_of_bare_median_round']:.0f}%",
                     f"{100 * run['cpu_share_of_bare']:.0f}%",
                     f"{run['ours_tokens_per_s'] / naive:.1f}x" if naive else "–"])
    tables = {"overhead": table([heading, "threads", "precision", "naive loop, tokens/s", "ours, tokens/s",
                                 "bare forward, tokens/s", "ours / bare (best of each)",
                                 "ours / bare (median round)", "bare / ours, CPU seconds (all threads)",
                                 "ours vs naive"], rows)}
    # Each variant beside ours, the same rounds: "ahead" (batches on a thread of their own, as beside a GPU) and
    # "lazy" (in line, each batch made just before it runs: what ours did before its shards' batches were made at once).
    for variant, ours_name in (("ahead", "in line"), ("lazy", "at once")):
        rows = [[label, f"{100 * run['share_of_bare']:.0f}%", f"{100 * run['share_of_bare_median_round']:.0f}%",
                 f"{100 * run['cpu_share_of_bare']:.0f}%", f"{100 * run[f'{variant}_share_of_bare']:.0f}%",
                 f"{100 * run[f'{variant}_share_of_bare_median_round']:.0f}%",
                 f"{100 * run[f'{variant}_cpu_share_of_bare']:.0f}%",
                 f"{max(run['seconds']['ours']) / min(run['seconds']['ours']):.2f}",
                 f"{max(run['seconds'][variant]) / min(run['seconds'][variant]):.2f}"]
                for label, run in results.items() if f"{variant}_share_of_bare" in run]
        if rows:
            tables[variant] = table([heading, f"{ours_name} / bare (best)", f"{ours_name} / bare (median round)",
                                     f"{ours_name}, CPU seconds", f"{variant} / bare (best)",
                                     f"{variant} / bare (median round)", f"{variant}, CPU seconds",
                                     f"{ours_name}, slowest / fastest round", f"{variant}, slowest / fastest round"],
                                    rows)
    return tables


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", default="proxy,minilm")
    parser.add_argument("--sentences", type=int, default=None, help="first N sentences of EWT dev (default all)")
    parser.add_argument("--minilm-sentences", type=int, default=None, help="first N for MiniLM (default --sentences)")
    parser.add_argument("--name", default="extract_overhead_cpu")
    parser.add_argument("--ahead", action="store_true",
                        help="also time ours with the batches made a shard ahead on a thread, as beside a GPU")
    parser.add_argument("--lazy", action="store_true",
                        help="also time ours with each batch made just before it runs, not a shard's at once")
    args = parser.parse_args()
    sentences = read_conllu(default_corpus("ewt-dev"))[: args.sentences]
    minilm = load_encoder("minilm")
    load_before = os.getloadavg()
    results = {}
    default_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        if "proxy" in args.models:
            torch.set_num_threads(1)
            results["overhead proxy (random BERT, 2 layers x 64, MiniLM's tokenizer)"] = measure(
                proxy_encoder(minilm.tokenizer), sentences, args.rounds, None, Path(tmp), True, "proxy", args.ahead,
                args.lazy)
            torch.set_num_threads(default_threads)
        if "minilm" in args.models:
            some = sentences[: args.minilm_sentences]
            label = "MiniLM" + (f" (first {len(some):,} sentences)" if len(some) < len(sentences) else "")
            results[label] = measure(minilm, some, args.rounds, None, Path(tmp), True, "minilm-fp32", args.ahead,
                                     args.lazy)
            results[label + ", bf16"] = measure(minilm, some, args.rounds, "bfloat16", Path(tmp), False, "minilm-bf16",
                                              args.ahead, args.lazy)
    load_after = os.getloadavg()
    heading = f"EWT dev, CPU ({torch.backends.cpu.get_cpu_capability()}), load {load_before[0]:.1f} -> {load_after[0]:.1f}"
    save_run(args.name, raw=results, tables=published(results, heading),
             cpu_capability=torch.backends.cpu.get_cpu_capability(), load_average_before=load_before,
             load_average_after=load_after,
             note="shared machine (5 engineers on 2 cores): rounds interleaved, ratios within a round are what "
                  "to trust")


if __name__ == "__main__":
    main()
