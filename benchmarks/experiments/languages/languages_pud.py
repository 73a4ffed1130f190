"""The languages acceptance run: ``run_languages`` on a model over the ten UD PUD treebanks, stored.

Reads ``$BERTOLOGY_DATA/ud_pud`` (the product itself takes the path as ``--treebanks``), writes the result
folder to ``--out`` (tables, meta.json, figures), copies the figures to ``docs/figures/languages-<model>-*``
and stores the display tables and the unrounded summaries as ``benchmarks/results/languages_<model>_pud_cpu.json``
(``benchmarks/stored.py``). Sized for about 20-25 minutes on one shared CPU core (10,000 sentences extracted by
the model and by its twin, then 66 UPOS probes of 4,000 training words and 6 language-identity probes):

    OMP_NUM_THREADS=1 BERTOLOGY_DATA=../shared/data BERTOLOGY_CACHE=/tmp/lang/cache \
        .venv/bin/python -m benchmarks.experiments.languages.languages_pud --model minilm --out /tmp/lang/pud-minilm
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path


from benchmarks.stored import ROOT, save_run, table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--out", type=Path, default=Path("/tmp/lang/pud-minilm"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-train", type=int, default=5000)
    parser.add_argument("--max-dev", type=int, default=2000)
    parser.add_argument("--max-sentences", type=int, default=None)
    parser.add_argument("--tasks", default="upos")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--name", default=None, help="stored run name (default languages_<model>_pud_cpu)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from bertology.data import shared_data_dir
    from bertology.languages import display_tables, run_languages, save_figures

    treebanks = shared_data_dir() / "ud_pud"
    started = time.perf_counter()
    result = run_languages(args.model, treebanks, seeds=tuple(range(args.seeds)), tasks=args.tasks.split(","),
                           max_train=args.max_train, max_dev=args.max_dev, max_sentences=args.max_sentences,
                           device="cpu", progress=True)
    seconds = time.perf_counter() - started
    figures = save_figures(result, args.out, result.meta["model"])
    result.save(args.out)
    docs = ROOT / "docs" / "figures"
    slug = Path(args.model).name
    for name, path in figures.items():
        for suffix in (".png", ".svg"):
            source = Path(path).with_suffix(suffix)
            # A vector copy of a scatter of thousands of points is a megabyte: that figure keeps its PNG only.
            if source.exists() and (suffix == ".png" or source.stat().st_size < 500_000):
                shutil.copyfile(source, docs / f"languages-{slug}-{name.replace('_', '-')}{suffix}")
    shown = {name: table([str(c) for c in frame.columns], frame.astype(str).values.tolist())
             for name, frame in display_tables(result).items()}
    keep = ("identity_summary", "retrieval_summary", "retrieval", "transfer_summary", "transfer_ratio",
            "transfer_best", "tokenizer", "centroids", "tasks", "languages", "absent")
    raw = {"seconds": seconds, "meta": result.meta,
           "tables": {k: result[k].astype(object).where(result[k].notna(), None).to_dict("records")
                      for k in keep if k in result}}
    save_run(args.name or f"languages_{slug}_pud_cpu", argv=sys.argv, raw=raw, tables=shown,
             settings={"seeds": args.seeds, "max_train": args.max_train, "max_dev": args.max_dev,
                       "tasks": args.tasks, "threads": args.threads, "max_sentences": args.max_sentences})
    print(f"{seconds:.0f} s; result folder {args.out}")


if __name__ == "__main__":
    main()
