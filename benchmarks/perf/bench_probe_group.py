"""A task's probe fits solved together against one by one, at the report's sizes.

The probing experiment fits each task many times on the same features: the point fit on every training example,
one fit per bootstrap seed (each on its own resample), and the same fits of the control task (Hewitt and Liang's
labels, one draw per seed): with the report's three seeds, eight fits on the encoder's features (and four on the
untrained twin's). Solved together (:func:`bertology.probing.fits.fit_group`), each layer's features meet all
eight weight matrices in one product. For each task, on MiniLM's features of UD English EWT (training sets
capped as the report caps them, ``REPORT_MAX_TRAIN``; every dev and test example), this times the report's
encoder fits one by one (``fit_and_score`` per fit: the baseline, what the experiment did before) and together
(``fit_and_score_group``), in the same process, and checks that both give every fit the same test accuracy of
every layer (to a test example). Also four fits (the point fit and the three seeds, the untrained twin's group)
together against one by one. torch's default threads, as the report runs. Stored as
``benchmarks/results/<--name>.json``:

    BERTOLOGY_DATA=../shared/data .venv/bin/python -m benchmarks.perf.bench_probe_group \\
        --tasks upos,xpos,deprel,bigram_shift --cache DIR
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.stored import save_run, table

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = "the same fits one by one (fit_and_score per fit, as the experiment ran them before), same features"


def report_jobs(dataset, seeds, types: str, control: bool) -> list[tuple]:
    """The report's fits of one task on the encoder's features: ``(seed, labels, training index, baseline)``."""
    from bertology.probing.experiment import _labels, training_fits

    y = _labels(dataset)
    jobs = []
    for seed in seeds:
        labels = dataset.control_labels(seed, types, "none") if control else None
        for fit in training_fits(seed, seeds, dataset.name, y["train"], 1.0, "bootstrap"):
            jobs.append((seed, y, fit.index, "none"))
            if labels is not None:
                jobs.append((seed, labels, fit.index, "control"))
    return jobs


def report_features(tasks: list[str], cache: Path):
    """The tasks' datasets at the report's sizes (``REPORT_MAX_TRAIN``; every dev and test example), MiniLM's
    control-task types, its layers and the features of every task and split (extracted into ``cache`` once)."""
    from bertology.data import shared_data_dir
    from bertology.models import load_encoder
    from bertology.probing.controls import resolve_types
    from bertology.probing.inputs import _extract_pools, _features_for, load_datasets, merge_pools
    from bertology.report.context import REPORT_MAX_TRAIN

    datasets = load_datasets(tasks, shared_data_dir() / "ud_english_ewt", cache_dir=cache,
                             max_train=dict(REPORT_MAX_TRAIN))
    encoder = load_encoder("minilm", device="cpu")
    types = resolve_types("auto", encoder.tokenizer)
    stores = _extract_pools(encoder, merge_pools(datasets), None, cache, False, "cpu")
    layers = list(next(iter(stores.values())).layers)
    return datasets, types, layers, _features_for(datasets, stores, layers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="upos,xpos,deprel,bigram_shift")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cache", default=None, help="cache folder (default: a temporary one)")
    parser.add_argument("--name", default="probe_group_minilm_cpu")
    args = parser.parse_args()
    import torch

    from bertology.probing.datasets import SPLITS
    from bertology.probing.experiment import fit_and_score, fit_and_score_group
    from bertology.probing.probes import DEFAULT_L2

    cache = Path(args.cache or tempfile.mkdtemp(prefix="bench-probe-group-"))
    seeds = tuple(range(args.seeds))
    raw = {"load_average_before": os.getloadavg(), "threads": torch.get_num_threads(), "seeds": seeds}
    datasets, types, layers, features = report_features(args.tasks.split(","), cache)
    probe_kwargs = {"l2": DEFAULT_L2, "hidden": 128, "device": "cpu"}
    rows = []
    for dataset in datasets:
        X = {s: features[dataset.name, s] for s in SPLITS}
        control = dataset.level != "sentence"
        every = report_jobs(dataset, seeds, types, control)
        shapes = {"encoder (task and control)" if control else "encoder": every,
                  "untrained twin's shape (task only)": [job for job in every if job[3] == "none"]}
        for shape, jobs in shapes.items():
            if shape.startswith("untrained") and not control:
                continue  # without a control task the encoder's group is already the twin's shape
            fit_and_score_group("linear", probe_kwargs, X, jobs[:2], layers, "minilm", dataset.name)  # warm-up
            start = time.perf_counter()
            alone = [fit_and_score("linear", probe_kwargs, seed, X, y, index, layers, "minilm", dataset.name,
                                   baseline, False) for seed, y, index, baseline in jobs]
            alone_seconds = time.perf_counter() - start
            start = time.perf_counter()
            together = fit_and_score_group("linear", probe_kwargs, X, jobs, layers, "minilm", dataset.name)
            together_seconds = time.perf_counter() - start
            # test accuracy of every layer of every fit, both ways, in test examples
            n_test = len(dataset.splits["test"].labels)
            hits = lambda scores: np.array([[r["value"] for r in s.rows if r["split"] == "test"  # noqa: E731
                                             and r["metric"] == "accuracy"] for s in scores]) * n_test
            differ = float(np.abs(hits(alone) - hits(together)).max())
            n, dim = X["train"].shape[1:]
            classes = len(set(dataset.splits["train"].labels.tolist()))
            raw[f"{dataset.name} {shape}"] = {"fits": len(jobs), "alone_seconds": alone_seconds,
                                              "together_seconds": together_seconds, "n_train": int(n), "dim": int(dim),
                                              "classes": classes, "most_test_examples_apart": differ}
            rows.append([dataset.name, f"{n:,} x {dim:,} x {classes}", shape, str(len(jobs)), f"{alone_seconds:.1f}",
                         f"{together_seconds:.1f}", f"{alone_seconds / together_seconds:.2f}x", f"{differ:.0f}"])
            print(rows[-1], flush=True)
    raw["load_average_after"] = os.getloadavg()
    save_run(args.name, argv=sys.argv, raw=raw, cpu_capability=torch.backends.cpu.get_cpu_capability(), tables={
        "group": table(["task", "train x dim x classes", "fits", "how many", "one by one (s)", "together (s)",
                        "speed-up", "test examples apart (most, any fit and layer)"], rows),
    })


if __name__ == "__main__":
    main()
