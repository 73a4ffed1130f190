"""MDL probing of UPOS on MiniLM (Voita and Titov 2020's online code), beside its control task and the untrained twin.

Runs ``bertology probe``'s experiment (:func:`bertology.probing.run_probing`) on UPOS from UD English EWT with
``mdl=True``: per layer, the online codelength of the training labels (kbits), the uniform codelength and the
compression (uniform / online), for the task, Hewitt and Liang's control task and the untrained twin, beside the
test accuracy of the same probes (mean over ``--seeds``, bootstrap training resamples). Stored as
``benchmarks/results/<--name>.json``; docs/probing.md shows it:

    BERTOLOGY_DATA=../shared/data .venv/bin/python -m benchmarks.experiments.probing.mdl_upos [--max-train 20000] [--seeds 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.stored import save_run, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-train", type=int, default=None, help="training words (default: the probe's)")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--cache", default=None)
    parser.add_argument("--name", default="mdl_upos_minilm_cpu")
    args = parser.parse_args()
    import torch

    from bertology.data import shared_data_dir
    from bertology.probing import run_probing
    from bertology.probing.spec import ProbingSpec

    cache = Path(args.cache or tempfile.mkdtemp(prefix="bench-mdl-"))
    spec = ProbingSpec(tasks=("upos",), treebank=shared_data_dir() / "ud_english_ewt", seeds=tuple(range(args.seeds)),
                       max_train=args.max_train, mdl=True, scalar_mix=False)
    start = time.perf_counter()
    result = run_probing("minilm", spec, cache_dir=cache, device="cpu")
    seconds = time.perf_counter() - start
    summary = result["summary"]
    upos = summary[summary["task"] == "upos"]

    def value(baseline, metric, split, layer):
        rows = upos[(upos["baseline"] == baseline) & (upos["metric"] == metric) & (upos["split"] == split)
                    & (upos["layer"] == layer)]
        return float(rows["mean"].iloc[0]) if len(rows) else float("nan")

    layers = sorted(int(l) for l in upos["layer"].dropna().unique())
    rows, raw = [], {"seconds": seconds, "layers": layers, "load_average": os.getloadavg()}
    for layer in layers:
        cells = {b: {m: value(b, m, "train", layer) for m in ("codelength", "uniform_codelength", "compression")}
                 for b in ("none", "control", "untrained")}
        accuracy = {b: value(b, "accuracy", "test", layer) for b in ("none", "control", "untrained")}
        raw[str(layer)] = {"mdl": cells, "accuracy": accuracy}
        rows.append([str(layer), f"{100 * accuracy['none']:.1f}", f"{cells['none']['codelength'] / 1000:.1f}",
                     f"{cells['none']['compression']:.2f}", f"{100 * accuracy['control']:.1f}",
                     f"{cells['control']['codelength'] / 1000:.1f}", f"{cells['control']['compression']:.2f}",
                     f"{100 * accuracy['untrained']:.1f}", f"{cells['untrained']['codelength'] / 1000:.1f}",
                     f"{cells['untrained']['compression']:.2f}"])
    n_train = int(result["datasets"].set_index("task").loc["upos", "n_train"])
    uniform = value("none", "uniform_codelength", "train", layers[0])
    raw["n_train"], raw["uniform_codelength"] = n_train, uniform
    save_run(args.name, argv=sys.argv, raw=raw, cpu_capability=torch.backends.cpu.get_cpu_capability(),
             note=f"UPOS, {n_train:,} training words (uniform code {uniform / 1000:.1f} kbits), MiniLM, seeds "
                  f"{args.seeds}, {seconds:.0f} s", tables={
                 "mdl": table(["layer", "task acc. (%)", "task codelength (kbits)", "task compression",
                               "control acc. (%)", "control codelength (kbits)", "control compression",
                               "twin acc. (%)", "twin codelength (kbits)", "twin compression"], rows)})


if __name__ == "__main__":
    main()
