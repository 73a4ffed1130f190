"""The probing experiment: every layer of a model (and of its untrained twins) on every task, with baselines.

``run_probing`` returns one tidy DataFrame (columns :data:`COLUMNS`), one row per
model x task x probe x layer x seed x baseline x split x metric:

* ``baseline="none"``: the probe on the encoder's features (the number itself);
* ``"untrained"``: the same probe on the untrained twin ``load_encoder(name, untrained_seed=seed)``;
* ``"control"``: the probe trained on Hewitt-and-Liang control labels over the encoder's features
  (metric ``accuracy``), and ``metric="selectivity"`` = task accuracy - control accuracy;
* ``"majority"``: always the most frequent training label (repeated for every layer and seed, so it
  lines up with the curves; its spread is truthfully 0).

Metrics: ``accuracy`` (dev and test), ``l2`` (the L2 strength each layer chose on dev), and for the
scalar mix (``probe="<kind>+mix"``, ``layer`` = NA) ``accuracy`` plus ``mix_weight`` per layer.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from bertology.errors import DataError
from bertology.probing.controls import majority_accuracy
from bertology.probing.datasets import (
    NER_TASKS,
    SPLITS,
    UD_TASKS,
    ProbingDataset,
    features,
    sentence_mean_vectors,
    load_ud_pools,
    senteval_dataset,
    senteval_sample_dataset,
    ud_dataset,
    wnut_dataset,
)
from bertology.probing.probes import DEFAULT_L2, PROBE_KINDS, LayerwiseProbe, ScalarMixProbe

COLUMNS = ["model", "task", "probe", "layer", "seed", "metric", "value", "baseline", "split"]

#: Default caps, in examples (words for UPOS/XPOS, arcs for deprel, spans for NER, sentences for
#: SentEval tasks). They keep ``bertology probe`` to a few minutes on 2 CPU cores; raise them for
#: paper-sized runs. Sentence tasks are capped lower: each example costs a whole sentence to encode.
DEFAULT_MAX_TRAIN = {"token": 4000, "edge": 4000, "span": 2000, "sentence": 1000}
DEFAULT_MAX_EVAL = {"token": 1000, "edge": 1000, "span": 500, "sentence": 300}


def senteval_names() -> tuple[str, ...]:
    from bertology.tasks import TASK_NAMES

    return TASK_NAMES


def resolve_tasks(tasks: str | Iterable[str]) -> list[str]:
    """Expand ``"senteval"`` (the ten SentEval tasks), ``"ud"`` (upos, xpos, deprel); accept Table 2 names
    (``BShift``) and comma-separated strings. Order is kept, duplicates dropped."""
    from bertology.tasks import resolve_task_name

    items = tasks.split(",") if isinstance(tasks, str) else [t for item in tasks for t in str(item).split(",")]
    out: list[str] = []
    for item in (t.strip() for t in items):
        if not item:
            continue
        key = item.lower()
        if key == "senteval":
            expanded = list(senteval_names())
        elif key == "ud":
            expanded = list(UD_TASKS)
        elif key in UD_TASKS or key in NER_TASKS or key == "structural":
            expanded = [key]
        else:
            try:
                expanded = [resolve_task_name(item)]
            except DataError:
                raise DataError(
                    f"unknown task {item!r}; expected upos, xpos, deprel, ner, structural, senteval (all ten) "
                    f"or a SentEval task ({', '.join(senteval_names())})"
                ) from None
        out += [t for t in expanded if t not in out]
    if not out:
        raise DataError("no tasks given; expected e.g. --tasks senteval or --tasks upos,xpos,deprel")
    return out


def _cap(level: str, value: int | None, defaults: dict[str, int]) -> int:
    return defaults[level] if value is None else int(value)


def _cache_root(cache_dir: str | os.PathLike | None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    return Path(os.environ.get("BERTOLOGY_CACHE", Path.home() / ".cache" / "bertology"))


def _build_senteval(names: list[str], treebank: Path | None, cache: Path, progress: bool) -> dict[str, list]:
    """SentEval tasks built from the treebank by bertology.tasks (cached), or the shipped samples."""
    from bertology.data import read_senteval
    from bertology.tasks import SENTEVAL_FILES, build_tasks

    if treebank is None:
        return {}
    key = hashlib.sha256(str(Path(treebank).resolve()).encode()).hexdigest()[:12]
    out_dir = cache / f"senteval-tasks-{key}"
    manifest = out_dir / "manifest.json"
    built = json.loads(manifest.read_text())["tasks"] if manifest.is_file() else {}
    missing = [n for n in names if n not in built or not (out_dir / SENTEVAL_FILES[n]).is_file()]
    if missing:
        build_tasks(treebank, out_dir, tasks=missing, progress=progress)
        built = json.loads(manifest.read_text())["tasks"]
    return {n: read_senteval(out_dir / SENTEVAL_FILES[n]) for n in names if n in built}


def load_datasets(tasks: Sequence[str], treebank: str | os.PathLike | None = None,
                  wnut: str | os.PathLike | None = None, senteval_samples: str | os.PathLike | None = None,
                  max_train: int | None = None, max_eval: int | None = None, max_sentences: int | None = None,
                  cache_dir: str | os.PathLike | None = None, progress: bool = False) -> list[ProbingDataset]:
    """The classification tasks among ``tasks`` (``structural`` is handled by run_probing)."""
    from bertology.data import shared_data_dir

    def shared(sub: str) -> Path:
        return shared_data_dir() / sub

    datasets: list[ProbingDataset] = []
    ud_tasks = [t for t in tasks if t in UD_TASKS or t == "structural"]
    if ud_tasks:
        tb = Path(treebank) if treebank is not None else shared("ud_english_ewt")
        pools = load_ud_pools(tb, _cap("token", max_train, DEFAULT_MAX_TRAIN),
                              _cap("token", max_eval, DEFAULT_MAX_EVAL), max_sentences)
        for task in ud_tasks:
            level = "edge" if task == "deprel" else "token"
            if task == "structural":
                datasets.append(ProbingDataset("structural", "structural", "ud", pools, {}))
                continue
            datasets.append(ud_dataset(task, pools, _cap(level, max_train, DEFAULT_MAX_TRAIN),
                                       _cap(level, max_eval, DEFAULT_MAX_EVAL)))
    if "ner" in tasks:
        folder = Path(wnut) if wnut is not None else shared("wnut17")
        datasets.append(wnut_dataset(folder, _cap("span", max_train, DEFAULT_MAX_TRAIN),
                                     _cap("span", max_eval, DEFAULT_MAX_EVAL), max_sentences))
    sentence_tasks = [t for t in tasks if t in senteval_names()]
    if sentence_tasks:
        mt, me = _cap("sentence", max_train, DEFAULT_MAX_TRAIN), _cap("sentence", max_eval, DEFAULT_MAX_EVAL)
        built = _build_senteval(sentence_tasks, Path(treebank) if treebank is not None else None,
                                _cache_root(cache_dir), progress)
        for task in sentence_tasks:
            if task in built:
                datasets.append(senteval_dataset(task, built[task], mt, me,
                                                 notes=["built from the treebank by bertology.tasks"]))
                continue
            folder = Path(senteval_samples) if senteval_samples is not None else shared("senteval_probing")
            dataset = senteval_sample_dataset(task, folder, mt, me)
            if len(set(dataset.splits["train"].labels.tolist())) < 2:
                continue  # e.g. the sentence_length sample holds one label: nothing to probe
            datasets.append(dataset)
    return datasets


def merge_pools(datasets: Sequence[ProbingDataset]) -> dict[str, dict[str, list]]:
    """One de-duplicated sentence pool per (source, split), shared by the tasks that read it; remaps refs."""
    merged: dict[str, dict[str, list]] = {}
    for source in dict.fromkeys(d.source for d in datasets):
        merged[source] = {}
        members = [d for d in datasets if d.source == source]
        for split in SPLITS:
            index: dict[tuple, int] = {}
            pool: list = []
            for dataset in members:
                mapping = np.empty(len(dataset.pools[split]), dtype=np.int64)
                for i, sentence in enumerate(dataset.pools[split]):
                    key = sentence.words
                    if key not in index:
                        index[key] = len(pool)
                        pool.append(sentence)
                    mapping[i] = index[key]
                if split in dataset.splits and len(dataset.splits[split]):
                    dataset.splits[split].refs = dataset.splits[split].refs.copy()
                    dataset.splits[split].refs[:, 0] = mapping[dataset.splits[split].refs[:, 0]]
            merged[source][split] = pool
        for dataset in members:
            dataset.pools = merged[source]
    return merged


def _extract_pools(encoder, pools: dict[str, dict[str, list]], layers, cache: Path, progress: bool, device):
    """Extract (or reuse, keyed by the model fingerprint and the words) one store per source and split."""
    from bertology.extraction import extract
    from bertology.extraction import corpus_hash

    stores = {}
    layer_key = "all" if layers is None else "-".join(map(str, layers))
    for source, by_split in pools.items():
        for split, sentences in by_split.items():
            path = cache / "stores" / f"{source}-{split}-{encoder.fingerprint}-{corpus_hash(sentences)}-L{layer_key}"
            path.parent.mkdir(parents=True, exist_ok=True)
            stores[source, split] = extract(encoder, sentences, path, layers=layers, pool="word-mean",
                                            dtype="float16", progress=progress, device=device)
    return stores


def _features_for(datasets: Sequence[ProbingDataset], stores, layers: Sequence[int]) -> dict:
    """``{(task, split): X [n_layers, n, dim]}``, reading each store one layer at a time."""
    out = {}
    for dataset in datasets:
        if dataset.level == "structural":
            continue
        for split in SPLITS:
            refs = dataset.splits[split].refs
            store = stores[dataset.source, split]
            dim = store.dim * (3 if dataset.level == "edge" else 1)
            out[dataset.name, split] = np.empty((len(layers), len(refs), dim), dtype=np.float32)
    for (source, split), store in stores.items():
        members = [d for d in datasets if d.source == source and d.level != "structural"]
        if not members:
            continue
        for li, layer in enumerate(layers):
            vectors = store.layer(layer)
            means = (sentence_mean_vectors(vectors, store.offsets)
                     if any(d.level == "sentence" for d in members) else None)
            for dataset in members:
                out[dataset.name, split][li] = features(dataset.level, vectors, store.offsets,
                                                        dataset.splits[split].refs, sentence_means=means)
    return out


def _rows(model, task, probe, layers, seed, metric, values, baseline, split) -> list[dict]:
    return [{"model": model, "task": task, "probe": probe, "layer": layer, "seed": seed, "metric": metric,
             "value": float(v), "baseline": baseline, "split": split} for layer, v in zip(layers, values)]


def _fit_and_score(kind, probe_kwargs, seed, X, y, train_index, layers, model, task, baseline,
                   scalar_mix: bool) -> list[dict]:
    """Fit every layer's probe (and optionally the scalar mix) on train[train_index]; score dev and test."""
    rows: list[dict] = []
    Xtr, ytr = X["train"][:, train_index], y["train"][train_index]
    probe = LayerwiseProbe(kind=kind, seed=seed, **probe_kwargs).fit(Xtr, ytr, X["dev"], y["dev"])
    for split in ("dev", "test"):
        rows += _rows(model, task, kind, layers, seed, "accuracy", probe.score(X[split], y[split]), baseline, split)
    rows += _rows(model, task, kind, layers, seed, "l2", probe.best_l2_, baseline, "dev")
    if scalar_mix:
        mix = ScalarMixProbe(kind=kind, seed=seed, **probe_kwargs).fit(Xtr, ytr, X["dev"], y["dev"])
        for split in ("dev", "test"):
            rows += _rows(model, task, f"{kind}+mix", [pd.NA], seed, "accuracy", [mix.score(X[split], y[split])],
                          baseline, split)
        rows += _rows(model, task, f"{kind}+mix", layers, seed, "mix_weight", mix.layer_weights_, baseline, "dev")
    return rows


def run_probing(
    model: str = "minilm",
    tasks: str | Sequence[str] = ("upos",),
    treebank: str | os.PathLike | None = None,
    seeds: Sequence[int] = (0, 1, 2),
    layers: Sequence[int] | None = None,
    probe: str = "linear",
    *,
    l2: float | Sequence[float] = DEFAULT_L2,
    hidden: int = 128,
    max_train: int | None = None,
    max_eval: int | None = None,
    max_sentences: int | None = None,
    train_fraction: float = 0.9,
    untrained: bool = True,
    control: bool = True,
    scalar_mix: bool = True,
    wnut: str | os.PathLike | None = None,
    senteval_samples: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    device: str | None = "cpu",
    structural_kwargs: dict | None = None,
    progress: bool = True,
    twin_per_seed: bool = True,
    probe_options: dict | None = None,
) -> pd.DataFrame:
    """Probe every layer of ``model`` on ``tasks`` over ``seeds``; return the tidy results (see module doc).

    Each seed trains on its own random ``train_fraction`` of the (capped) training examples, initialises
    the probe from the seed, draws its own control labels and uses its own untrained twin, so the spread
    over seeds covers data sampling, optimisation and the twin's initialisation. Representations are
    extracted once per encoder into ``cache_dir`` (keyed by model fingerprint and input words), so a rerun
    reuses them. ``treebank`` is a UD folder (train/dev/test); it also feeds the SentEval task builder.
    ``control="token"`` runs control tasks only for word, arc and span tasks (Hewitt and Liang's
    definition), not for sentence-level ones; ``probe_options`` go to every probe (e.g. ``max_iter``).
    ``model`` may also be an :class:`~bertology.models.Encoder`. With ``twin_per_seed=False`` one untrained
    twin (seed 0) serves every probe seed, as the Convexity report's single untrained BERT (faster).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from bertology.models import load_encoder

    if probe not in PROBE_KINDS:
        raise DataError(f"probe {probe!r}; expected one of {', '.join(PROBE_KINDS)}")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise DataError("seeds is empty; give at least one seed (three or more for a spread)")
    if not 0 < train_fraction <= 1:
        raise DataError(f"train_fraction {train_fraction}; expected a number in (0, 1]")
    task_names = resolve_tasks(tasks)
    if treebank is None and any(t in senteval_names() for t in task_names):
        from bertology.data import shared_data_dir

        treebank = shared_data_dir() / "ud_english_ewt"
    cache = _cache_root(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    datasets = load_datasets(task_names, treebank, wnut, senteval_samples, max_train, max_eval, max_sentences,
                             cache, progress)
    pools = merge_pools(datasets)
    classify = [d for d in datasets if d.level != "structural"]

    from bertology.models import Encoder

    if isinstance(model, Encoder):
        encoder, model = model, model.name
    else:
        encoder = load_encoder(model, device=device if device not in (None, "cpu") else None)
    stores = _extract_pools(encoder, pools, layers, cache, progress, device)
    store_layers = list(next(iter(stores.values())).layers)
    layer_ids = store_layers if layers is None else list(layers)
    trained_X = _features_for(datasets, stores, layer_ids)
    labels = {d.name: {s: d.splits[s].labels for s in SPLITS} for d in classify}
    probe_kwargs = {"l2": l2, "hidden": hidden, "device": device, **(probe_options or {})}
    if control not in (True, False, "token"):
        raise DataError(f"control={control!r}; expected True, False or 'token'")

    def wants_control(dataset) -> bool:
        return control is True or (control == "token" and dataset.level != "sentence")

    rows: list[dict] = []
    for dataset in classify:
        y = labels[dataset.name]
        for split in ("dev", "test"):
            value = majority_accuracy(y["train"], y[split])
            for seed in seeds:
                rows += _rows(model, dataset.name, "majority", layer_ids, seed, "accuracy",
                              [value] * len(layer_ids), "majority", split)

    n_fits = len(seeds) * sum(1 + int(wants_control(d)) + int(untrained) for d in classify)
    twin_stores: dict[int, dict] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not progress, transient=True) as bar:
        job = bar.add_task("probing", total=n_fits)
        for seed in seeds:
            twin_X = None
            if untrained:
                twin_seed = seed if twin_per_seed else seeds[0]
                if twin_seed not in twin_stores:
                    twin = encoder.untrained(twin_seed)
                    twin_stores[twin_seed] = _extract_pools(twin, pools, layers, cache, progress, device)
                    twin_features = _features_for(datasets, twin_stores[twin_seed], layer_ids)
                twin_X = twin_features
            for dataset in classify:
                name, y = dataset.name, labels[dataset.name]
                n_train = len(y["train"])
                rng = np.random.default_rng([seed, 1])
                train_index = np.sort(rng.permutation(n_train)[: max(2, int(round(train_fraction * n_train)))])
                X = {s: trained_X[name, s] for s in SPLITS}
                bar.update(job, description=f"{name} seed {seed}: encoder")
                task_rows = _fit_and_score(probe, probe_kwargs, seed, X, y, train_index, layer_ids, model, name,
                                           "none", scalar_mix)
                rows += task_rows
                bar.advance(job)
                if wants_control(dataset):
                    bar.update(job, description=f"{name} seed {seed}: control task")
                    y_control = dataset.control_labels(seed)
                    control_rows = _fit_and_score(probe, probe_kwargs, seed, X, y_control, train_index, layer_ids,
                                                  model, name, "control", scalar_mix=False)
                    rows += control_rows
                    rows += _selectivity(task_rows, control_rows)
                    bar.advance(job)
                if untrained:
                    bar.update(job, description=f"{name} seed {seed}: untrained twin")
                    Xu = {s: twin_X[name, s] for s in SPLITS}
                    rows += _fit_and_score(probe, probe_kwargs, seed, Xu, y, train_index, layer_ids, model, name,
                                           "untrained", scalar_mix)
                    bar.advance(job)
            del twin_X
    frame = pd.DataFrame(rows, columns=COLUMNS)
    if any(d.level == "structural" for d in datasets):
        frame = pd.concat([frame, _structural(model, pools["ud"], stores, twin_stores, seeds, layers,
                                              device, structural_kwargs, progress)], ignore_index=True)
    frame = frame.astype({"layer": "Int64", "seed": "int64", "value": "float64"})
    frame.attrs["datasets"] = {d.name: {"level": d.level, "source": d.source, "notes": d.notes,
                                        **({s: len(d.splits[s]) for s in SPLITS} if d.splits else {})}
                               for d in datasets}
    return frame


def _selectivity(task_rows: list[dict], control_rows: list[dict]) -> list[dict]:
    control = {(r["probe"], r["layer"], r["split"]): r["value"] for r in control_rows if r["metric"] == "accuracy"}
    out = []
    for r in task_rows:
        key = (r["probe"], r["layer"], r["split"])
        if r["metric"] == "accuracy" and key in control:
            out.append({**r, "metric": "selectivity", "value": r["value"] - control[key], "baseline": "control"})
    return out


def _structural(model, pool, stores, twin_stores, seeds, layers, device, kwargs, progress) -> pd.DataFrame:
    """Hewitt-and-Manning structural probes via the structural engineer's ``run_structural``."""
    from bertology.probing.structural import run_structural

    twin = twin_stores.get(seeds[0])
    frame = run_structural(
        stores["ud", "train"], pool["train"], stores["ud", "dev"], pool["dev"], stores["ud", "test"], pool["test"],
        seeds=seeds, layers=layers, model=model, progress=progress, device=device,
        untrained=(twin["ud", "train"], twin["ud", "dev"], twin["ud", "test"]) if twin else None,
        **(kwargs or {}),
    )
    frame = frame.copy()
    frame["probe"] = "structural"
    return frame[COLUMNS]
