"""Structural probes (Hewitt and Manning, NAACL 2019) end to end: is a parse tree embedded in a linear subspace?

:func:`run_structural` trains the distance and depth probes
(:class:`~bertology.probing.structural_probe.StructuralProbe`) on every layer over seeds, beside the
untrained-twin and linear-chain baselines, and scores them with the tree metrics of
:mod:`bertology.probing.tree_metrics` (UUAS, DSpr., root accuracy, NSpr.) on dev and test;
:func:`summarize_structural` flags the layer that is best on dev. See docs/structural_probes.md for what
differs from the paper.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from bertology.data import Sentence
from bertology.errors import DataError
from bertology.probing.structural_probe import StructuralProbe, as_word_vectors
from bertology.probing.tree_metrics import (
    TASK_NAMES,
    linear_chain_depths,
    linear_chain_distances,
    sentence_hits,
    structural_metrics,
)
from bertology.progress import progress_bar
from bertology.results import Result
from bertology.runtime import resolve_device
from bertology.settings import spec_of
from bertology.probing.spec import StructuralSpec

COLUMNS = ["model", "task", "layer", "seed", "metric", "value", "baseline", "split"]


def _linear_chain_rows(kind: str, sentences: Sequence[Sentence], split: str, layers: list[int],
                       seeds: Sequence[int], punct: str, model: str | None) -> list[dict]:
    chain = linear_chain_distances if kind == "distance" else linear_chain_depths
    metrics = structural_metrics(kind, [chain(len(s)) for s in sentences], sentences, punct)
    # Deterministic and layer-independent; repeated for every (layer, seed) so it lines up with the probes
    # in any per-layer table or plot and its seed spread reads, truthfully, as 0.
    return [{"model": model, "task": TASK_NAMES[kind], "layer": layer, "seed": seed, "metric": metric,
             "value": float(value), "baseline": "linear-chain", "split": split}
            for metric, value in metrics.items() for layer in layers for seed in seeds]


def run_structural(store_train, sentences_train: Sequence[Sentence], store_dev, sentences_dev: Sequence[Sentence],
                   store_test, sentences_test: Sequence[Sentence], spec: StructuralSpec | None = None, *,
                   untrained: tuple | Mapping[int, tuple] | None = None, device: str | None = "auto",
                   model: str | None = None, progress: bool = True, collect: dict | None = None,
                   **settings) -> Result:
    """Distance and depth probes on every layer, over seeds, with the untrained-twin and linear-chain baselines.

    Each probe trains on train, keeps its best-dev-loss epoch per layer, and is scored on dev and test
    (``split`` column: pick a layer on dev, report test). ``untrained`` is optional: the
    ``(store_train, store_dev, store_test)`` of an untrained twin (``load_encoder(name, untrained_seed=s)``),
    extracted from the same sentences, used for every seed; or ``{seed: (store_train, store_dev,
    store_test)}`` so that probe seed s runs on twin s.

    Returns a :class:`~bertology.results.Result` named ``structural`` with tables ``results`` (tidy:
    ``model, task, layer, seed, metric, value, baseline, split``; ``baseline`` is ``"none"`` (the encoder),
    ``"untrained"`` or ``"linear-chain"``; task in ``structural-distance|structural-depth``; metric in
    ``uuas, dspr`` (distance) and ``root_acc, nspr`` (depth); UUAS and root accuracy are fractions) and
    ``summary`` (:func:`summarize_structural`). The linear chain is deterministic and repeated for every
    layer and seed so it lines up with the curves (its spread is, truthfully, 0). ``collect`` (optional)
    receives per-sentence hits for intervals: ``collect[(task, baseline, split)][seed] = (hits
    [n_sentences, n_layers], totals [n_sentences])`` (:func:`sentence_hits`).

    The settings are ``spec`` (:class:`~bertology.probing.spec.StructuralSpec`: seeds, rank, kinds, layers,
    epochs, lr, batch_size, punct), or its fields as keywords, checked once.
    """
    spec = spec_of(StructuralSpec, spec, settings, "structural probe")
    seeds, rank, kinds, layers, punct = spec.seeds, spec.rank, spec.kinds, spec.layers, spec.punct
    epochs, lr, batch_size = spec.epochs, spec.lr, spec.batch_size
    torch_device = resolve_device(device)
    # (baseline, seeds, stores) jobs: the encoder for every seed, then the twin(s).
    jobs: list[tuple[str, tuple, tuple]] = [("none", tuple(seeds), (store_train, store_dev, store_test))]
    if isinstance(untrained, Mapping):
        missing = [s for s in seeds if s not in untrained]
        if missing:
            raise DataError(f"untrained has twins for seeds {sorted(untrained)}, not for seeds {missing}")
        jobs += [("untrained", (seed,), tuple(untrained[seed])) for seed in seeds]
    elif untrained is not None:
        jobs.append(("untrained", tuple(seeds), tuple(untrained)))
    for baseline, _, job_stores in jobs:
        if len(job_stores) != 3:
            raise DataError(f"{baseline}: expected (store_train, store_dev, store_test), got {len(job_stores)} items")

    rows: list[dict] = []
    with progress_bar(progress, transient=True) as bar:
        total = sum(len(job_seeds) for _, job_seeds, _ in jobs) * len(kinds) * epochs
        task_id = bar.add_task("structural probes (epochs)", total=total)
        for baseline, job_seeds, (train_store, dev_store, test_store) in jobs:
            # Load each split's vectors once (float16) and share them across kinds and seeds.
            train = as_word_vectors(train_store, sentences_train, layers, torch_device, f"{baseline} train")
            dev = as_word_vectors(dev_store, sentences_dev, layers, torch_device, f"{baseline} dev")
            test = as_word_vectors(test_store, sentences_test, layers, torch_device, f"{baseline} test")
            for kind in kinds:
                for seed in job_seeds:
                    bar.update(task_id, description=f"{TASK_NAMES[kind]} ({baseline}) seed {seed}")
                    done = {"epochs": 0}

                    def on_epoch(epoch: int, active: int, done=done) -> None:
                        done["epochs"] += 1
                        bar.advance(task_id)

                    probe = StructuralProbe(kind=kind, rank=rank, epochs=epochs, lr=lr, batch_size=batch_size,
                                            seed=seed, device=torch_device, punct=punct)
                    probe.fit(train, sentences_train, dev, sentences_dev, on_epoch=on_epoch)
                    bar.advance(task_id, epochs - done["epochs"])  # early stopping skips the rest
                    for split, vectors, sentences in (("dev", dev, sentences_dev), ("test", test, sentences_test)):
                        predictions = probe.predict(vectors, sentences)
                        scored = probe.score_predictions(predictions, sentences)
                        if collect is not None:
                            hits, totals = sentence_hits(kind, predictions, sentences, punct)
                            collect.setdefault((TASK_NAMES[kind], baseline, split), {})[seed] = (hits, totals)
                        for record in scored.to_dict("records"):
                            rows.append({**record, "model": model, "seed": seed, "baseline": baseline,
                                         "split": split})
            layer_ids = train.layers
            del train, dev, test
    for kind in kinds:
        for split, sentences in (("dev", sentences_dev), ("test", sentences_test)):
            rows.extend(_linear_chain_rows(kind, sentences, split, layer_ids, seeds, punct, model))
            if collect is not None:
                chain = linear_chain_distances if kind == "distance" else linear_chain_depths
                hits, totals = sentence_hits(kind, [chain(len(x)) for x in sentences], sentences, punct)
                collect.setdefault((TASK_NAMES[kind], "linear-chain", split), {})[seeds[0]] = (
                    np.repeat(hits, len(layer_ids), axis=1), totals)
    frame = pd.DataFrame(rows, columns=COLUMNS).astype({"layer": "Int64", "seed": "Int64", "value": "float64"})
    meta = {"model": model, "seeds": [int(s) for s in seeds], "kinds": list(kinds), "rank": rank, "epochs": epochs,
            "lr": lr, "batch_size": batch_size, "punct": punct, "layers": [int(l) for l in layer_ids],
            "sentences": {"train": len(sentences_train), "dev": len(sentences_dev), "test": len(sentences_test)}}
    return Result("structural", tables={"results": frame, "summary": summarize_structural(frame)}, meta=meta)


def summarize_structural(results: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over seeds per (model, task, baseline, split, layer, metric), with the layer that is
    best on dev flagged (``best_on_dev``), so a test number is never chosen on test."""
    keys = ["model", "task", "baseline", "split", "layer", "metric"]
    summary = (results.groupby(keys, dropna=False)["value"].agg(["mean", "std", "count"]).reset_index())
    dev = summary[summary["split"] == "dev"]
    best = dev.loc[dev.groupby(["model", "task", "baseline", "metric"], dropna=False)["mean"].idxmax(),
                   ["model", "task", "baseline", "metric", "layer"]]
    best = best.assign(best_on_dev=True)
    summary = summary.merge(best, on=["model", "task", "baseline", "metric", "layer"], how="left")
    summary["best_on_dev"] = summary["best_on_dev"].fillna(False).astype(bool)
    return summary
