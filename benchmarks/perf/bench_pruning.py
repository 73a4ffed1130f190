"""Speed-up of real head pruning: MiniLM (all-MiniLM-L6-v2) with 50 % of its heads pruned vs the full model.

Same process, same batch of UD EWT dev sentences, runs interleaved (full, masked, pruned, full, ...) so
that load on a shared machine hits all three alike. Masking (hooks) is shown too: it removes the heads'
effect but not their cost. Prints the machine, each latency, the ratio and the parameter counts.

    .venv/bin/python -m benchmarks.perf.bench_pruning [--fraction 0.5] [--sentences 64] [--repeats 15]

The run is stored as ``benchmarks/results/pruning_minilm_cpu.json`` (``--name``) with the load average
before and after, since absolute latencies on a shared machine mean little beside the ratios.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import time
import warnings

import numpy as np
import torch

from bertology.data import default_corpus, read_conllu
from bertology.intervention import attention_parameters, count_parameters, mask_heads, model_layout, prune_heads
from bertology.models import load_encoder

from benchmarks.stored import save_run, table  # noqa: E402

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = "the full MiniLM, no head pruned"

warnings.filterwarnings("ignore", message="Initializing zero-element tensors")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="pruning_minilm_cpu", help="stored run's name")
    args = parser.parse_args()
    load_before = os.getloadavg()

    encoder = load_encoder("minilm")
    model = encoder.model.eval()
    sentences = [s.text or " ".join(s.words) for s in read_conllu(default_corpus("ewt-dev"))[: args.sentences]]
    batch = dict(encoder.tokenizer(sentences, padding=True, truncation=True, max_length=128, return_tensors="pt"))

    layout = model_layout(model)
    heads = layout.all_heads()
    # Which heads barely matters for speed (only how many per layer); a seeded draw keeps it reproducible.
    chosen = [heads[i] for i in np.random.default_rng(args.seed).choice(len(heads), int(round(args.fraction * len(heads))), replace=False)]
    pruned = copy.deepcopy(model)
    prune_heads(pruned, chosen)

    with torch.inference_mode():
        with mask_heads(model, chosen):
            masked_out = model(**batch).last_hidden_state
        pruned_out = pruned(**batch).last_hidden_state
    real = batch["attention_mask"].bool()
    max_diff = float((masked_out[real] - pruned_out[real]).abs().max())

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    def run_full():
        model(**batch)

    def run_masked():
        with mask_heads(model, chosen):
            model(**batch)

    def run_pruned():
        pruned(**batch)

    times = {"full": [], "masked": [], "pruned": []}
    with torch.inference_mode():
        for _ in range(3):  # warm-up
            run_full(), run_masked(), run_pruned()
        for _ in range(args.repeats):
            times["full"].append(timed(run_full))
            times["masked"].append(timed(run_masked))
            times["pruned"].append(timed(run_pruned))
    median = {k: statistics.median(v) for k, v in times.items()}

    # heads pruned per layer, layers 1..L as in hidden_states
    per_layer = [len(layout.present_heads[l]) - len(model_layout(pruned).present_heads[l]) for l in layout.layers]
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), python {platform.python_version()}")
    print(f"model: minilm (all-MiniLM-L6-v2), attention {model.config._attn_implementation}; "
          f"batch: {len(sentences)} EWT dev sentences padded to {batch['input_ids'].shape[1]} tokens")
    print(f"pruned {len(chosen)}/{len(heads)} heads (seed {args.seed}); per layer: {per_layer}; "
          f"max |masked - pruned| = {max_diff:.2e}")
    print(f"{'':8s} {'median ms':>10s} {'min ms':>8s} {'params':>12s} {'attn params':>12s}")
    for name, m in (("full", model), ("masked", model), ("pruned", pruned)):
        print(f"{name:8s} {median[name] * 1000:10.1f} {min(times[name]) * 1000:8.1f} "
              f"{count_parameters(m):12,d} {attention_parameters(m):12,d}")
    print(f"speed-up pruned vs full: {median['full'] / median['pruned']:.2f}x "
          f"(masked vs full: {median['full'] / median['masked']:.2f}x); "
          f"parameters {count_parameters(pruned) / count_parameters(model):.1%} of full, "
          f"attention parameters {attention_parameters(pruned) / attention_parameters(model):.1%}")
    load_after = os.getloadavg()
    print(f"load average (1 min) before {load_before[0]:.1f}, after {load_after[0]:.1f}")
    models = (("full", "full", model), ("masked", "masked (hooks)", model),
              ("pruned", f"pruned {args.fraction:.0%}".replace("%", " %"), pruned))
    latency = table(["model", "median ms / batch", "min ms", "parameters", "attention (q/k/v/o) parameters"],
                    [[label, f"{median[name] * 1000:.1f}", f"{min(times[name]) * 1000:.1f}",
                      f"{count_parameters(m):,d}", f"{attention_parameters(m):,d}"] for name, label, m in models])
    ratios = table(["ratio (same process, interleaved runs)", "value"], [
        ["speed-up pruned vs full (medians)", f"**{median['full'] / median['pruned']:.2f}x**"],
        ["speed-up pruned vs full (minima)", f"{min(times['full']) / min(times['pruned']):.2f}x"],
        ["masked vs full (medians)", f"{median['full'] / median['masked']:.2f}x"],
        ["parameters, pruned / full", f"{count_parameters(pruned) / count_parameters(model):.1%}"],
        ["attention parameters, pruned / full", f"{attention_parameters(pruned) / attention_parameters(model):.1%}"],
        ["heads pruned per layer (1..L)", str(per_layer)],
        ["max abs(masked - pruned) on real tokens", f"{max_diff:.1e}"]])
    save_run(args.name, raw={
        "times_s": times, "median_s": median, "per_layer": per_layer, "max_diff": max_diff,
        "heads": [str(head) for head in chosen], "fraction": args.fraction, "sentences": len(sentences),
        "padded_tokens": int(batch["input_ids"].shape[1]), "torch_threads": torch.get_num_threads(),
        "attention": model.config._attn_implementation, "load_average_before": load_before,
        "load_average_after": load_after}, tables={"latency": latency, "ratios": ratios})


if __name__ == "__main__":
    main()
