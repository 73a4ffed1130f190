"""Benchmark: `bertology attention parse` on UD EWT with its defaults, stage by stage.

The command's stages on the default sizes (dev and test whole, the probe's training set capped at 2,000
train sentences, 3 probe seeds x 20 epochs): extracting word-level attentions of the three splits,
Clark's head statistics on dev, every head as a parser on train/dev/test plus the offset baselines, and
the attention-only probe. The probe is timed twice in the same process, the two schemes alternating seed
by seed: the previous scheme (features rebuilt from the attention arrays for every seed, for fitting and for
predicting) and ours (features built once, :func:`probe_batches`, shared by every seed, its
preparation counted); both give the same UAS.

``--command`` also runs ``bertology attention parse -m MODEL`` with its defaults in a fresh process and records
its wall time and peak memory. The run is stored in ``benchmarks/results/attention_parse_<model>_cpu.json``
(``--name``) with the load average before and after, since the machine is shared.

usage: python -m benchmarks.perf.bench_attention_parse [--max-sentences N] [--max-train-sentences 2000] [--seeds 3]
                                                   [--command] [--name NAME]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bertology.attention.parsing_heads import attachment_score, heads_as_parsers, offset_baselines
from bertology.attention.parsing_probe import AttentionOnlyProbe, probe_batches
from bertology.attention.stats import head_statistics
from bertology.data import read_conllu, shared_data_dir
from bertology.data.treebank import find_splits
from bertology.extraction import extract
from bertology.models import load_encoder

from benchmarks.stored import save_run, table  # noqa: E402

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = "the previous attention-only probe scheme: features rebuilt from the attention arrays for every seed"


def run_command(model: str) -> dict[str, float]:
    """Wall seconds and peak RSS (MiB) of ``bertology attention parse -m model`` with its defaults."""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", "bertology.cli", "attention", "parse", "-m", model,
                                    "-o", str(Path(tmp) / "parse")], stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bertology attention parse exited with {os.waitstatus_to_exitcode(status)}")
    return {"wall_s": seconds, "peak_rss_mib": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--max-sentences", type=int, default=None, help="cap dev and test (default: whole)")
    parser.add_argument("--max-train-sentences", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--command", action="store_true", help="also time the command itself in a fresh process")
    parser.add_argument("--name", help="stored run's name (default attention_parse_<model>_cpu)")
    args = parser.parse_args()
    load_before = os.getloadavg()

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
        times[f"extract word-level attentions (3 splits, {sum(len(data[s]) for s in stores):,} sentences)"] = (
            time.perf_counter() - started)

        started = time.perf_counter()
        head_statistics(stores["dev"].iter_attentions(), data["dev"], progress=False, total=len(data["dev"]),
                        layers=stores["dev"].attention_layers)
        times["head statistics (dev)"] = time.perf_counter() - started

        started = time.perf_counter()
        for split in ("train", "dev", "test"):
            heads_as_parsers(stores[split].iter_attentions(), data[split], progress=False, total=len(data[split]),
                             layers=stores[split].attention_layers)
            offset_baselines(data[split])
        times["heads as parsers + offset baselines (3 splits)"] = time.perf_counter() - started

        # The two schemes alternate seed by seed, so a change of load on a shared machine hits both alike.
        started = time.perf_counter()
        train = probe_batches(stores["train"].iter_attentions(), data["train"])
        test = probe_batches(stores["test"].iter_attentions(), data["test"], need_tree=False)
        prepare_seconds = time.perf_counter() - started
        before, after, seed_seconds = [], [], {"rebuilt": [], "once": []}
        for seed in range(args.seeds):
            started = time.perf_counter()  # the previous scheme: every seed rebuilds the features
            probe = AttentionOnlyProbe(epochs=args.epochs, seed=seed).fit(stores["train"].iter_attentions(),
                                                                          data["train"])
            before.append(attachment_score(probe.predict(stores["test"].iter_attentions(), data["test"]),
                                           data["test"]))
            seed_seconds["rebuilt"].append(time.perf_counter() - started)
            started = time.perf_counter()
            after.append(attachment_score(AttentionOnlyProbe(epochs=args.epochs, seed=seed).fit(train).predict(test),
                                          data["test"]))
            seed_seconds["once"].append(time.perf_counter() - started)
        baseline = sum(seed_seconds["rebuilt"])
        ours = prepare_seconds + sum(seed_seconds["once"])
        times[f"attention-only probe, {args.seeds} seeds (features built once)"] = ours

    assert before == after, (before, after)
    sizes = ", ".join(f"{split} {len(data[split])}" for split in ("train", "dev", "test"))
    print(f"attention parse stages, {args.model}, UD EWT ({sizes} sentences):")
    for stage, seconds in times.items():
        print(f"  {stage:<48} {seconds:7.1f} s")
    print(f"  {'total':<48} {sum(times.values()):7.1f} s")
    print(f"probe: features rebuilt per seed {baseline:.1f} s, built once {ours:.1f} s "
          f"({baseline / ours:.2f}x); UAS {', '.join(f'{u:.4f}' for u in after)} (identical)")
    command = run_command(args.model) if args.command else None
    if command:
        print(f"bertology attention parse -m {args.model} (defaults): {command['wall_s']:.0f} s wall, "
              f"peak RSS {command['peak_rss_mib']:,.0f} MiB")
    load_after = os.getloadavg()
    print(f"load average (1 min) before {load_before[0]:.1f}, after {load_after[0]:.1f}; "
          f"torch threads {torch.get_num_threads()}")
    stages = table(["stage", "seconds"], [[stage, f"{seconds:.1f}"] for stage, seconds in times.items()]
                   + [["**the stages together**", f"**{sum(times.values()):.1f}**"]])
    probe = table(["attention-only probe, 3 seeds", "seconds", "UAS per seed"],
                  [["features rebuilt for every seed's fit and predict (before)", f"{baseline:.1f}",
                    ", ".join(f"{u:.4f}" for u in before)],
                   ["features built once for all seeds (ours)", f"{ours:.1f}", ", ".join(f"{u:.4f}" for u in after)],
                   ["ratio", f"**{baseline / ours:.2f}x**", "identical" if before == after else "differ"]])
    tables = {"stages": stages, "probe": probe}
    if command:
        tables["command"] = table(["command (defaults)", "wall time", "peak RSS"],
                                  [[f"`bertology attention parse -m {args.model} -o runs/parse`",
                                    f"{command['wall_s']:.0f} s", f"{command['peak_rss_mib'] / 1024:.1f} GiB"]])
    save_run(args.name or f"attention_parse_{args.model}_cpu", raw={
        "sizes": {split: len(data[split]) for split in data}, "seeds": args.seeds, "epochs": args.epochs,
        "stage_seconds": times, "probe_rebuilt_seconds": baseline, "probe_once_seconds": ours,
        "uas_rebuilt": before, "uas_once": after, "probe_prepare_seconds": prepare_seconds,
        "probe_seed_seconds": seed_seconds, "command": command, "torch_threads": torch.get_num_threads(),
        "load_average_before": load_before, "load_average_after": load_after}, tables=tables)


if __name__ == "__main__":
    main()
