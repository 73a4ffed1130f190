"""The probing experiment: every layer of a model (and of its untrained twins) on every task, with baselines.

``run_probing`` returns a :class:`~bertology.results.Result` named ``probing`` with four tables:

* ``results``: tidy, one row per model x task x probe x component x layer x seed x baseline x split x
  metric (columns :data:`COLUMNS`);
* ``summary``: mean, std and number of seeds per cell (:func:`~bertology.probing.report.summarize`);
* ``table2``: the numbers behind the Table 2 layout (:func:`~bertology.probing.report.table2_frame`);
* ``datasets``: each task's level, source and the examples per split (``train_used`` after the
  per-seed ``train_fraction``), with notes.

Baselines (``baseline`` column):

* ``"none"``: the probe on the encoder's features (the number itself);
* ``"untrained"``: the same probe on the untrained twin ``encoder.untrained(seed)``;
* ``"control"``: the probe trained on Hewitt-and-Liang control labels over the encoder's features
  (metric ``accuracy``), and ``metric="selectivity"`` = task accuracy - control accuracy;
* ``"majority"``: always the most frequent training label (repeated for every layer and seed, so it
  lines up with the curves; its spread is truthfully 0).

Metrics: ``accuracy`` (dev and test; a fraction in [0, 1]), ``l2`` (the L2 strength each layer chose on
dev). The scalar mix has ``component="scalar-mix"``: its ``accuracy`` rows have ``layer`` <NA>, its
``mix_weight`` rows one row per layer. ``layer`` and ``seed`` are nullable integers; layer ``l`` is
``hidden_states[l]`` (0 = embeddings).
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
from bertology.numbering import parse_layers
from bertology.probing.controls import majority_accuracy
from bertology.probing.datasets import (
    SPLITS,
    ProbingDataset,
    build_dataset,
    features,
    keep_referenced,
    prefix_by_words,
    senteval_dataset,
    senteval_sample_dataset,
    sentence_mean_vectors,
)
from bertology.probing.probes import DEFAULT_L2, PROBE_KINDS, LayerwiseProbe, ScalarMixProbe
from bertology.probing.tasks import GROUPS, SOURCES, STRUCTURAL, get_task, is_registered, task_names
from bertology.progress import progress_bar
from bertology.results import Result
from bertology.runtime import derive_seed, resolve_device

COLUMNS = ["model", "task", "probe", "component", "layer", "seed", "metric", "value", "baseline", "split"]
#: The ``component`` of scalar-mix rows (rows of one layer have <NA>).
SCALAR_MIX = "scalar-mix"

#: Default caps, in examples (words for UPOS/XPOS, arcs for deprel, spans for NER, sentences for
#: SentEval tasks). They keep ``bertology probe`` to a few minutes on 2 CPU cores; raise them for
#: paper-sized runs. Sentence tasks are capped lower: each example costs a whole sentence to encode.
DEFAULT_MAX_TRAIN = {"token": 4000, "edge": 4000, "span": 2000, "sentence": 1000}
DEFAULT_MAX_EVAL = {"token": 1000, "edge": 1000, "span": 500, "sentence": 300}


def senteval_names() -> tuple[str, ...]:
    from bertology.tasks import TASK_NAMES

    return TASK_NAMES


def resolve_tasks(tasks: str | Iterable[str]) -> list[str]:
    """Expand ``"senteval"`` (the ten SentEval tasks) and ``"ud"`` (upos, xpos, deprel); accept registered
    task names (:mod:`bertology.probing.tasks`), ``structural``, Table 2 names (``BShift``) and
    comma-separated strings. Order is kept, duplicates dropped."""
    from bertology.tasks import resolve_task_name

    items = tasks.split(",") if isinstance(tasks, str) else [t for item in tasks for t in str(item).split(",")]
    out: list[str] = []
    for item in (t.strip() for t in items):
        if not item:
            continue
        key = item.lower()
        if key == "senteval":
            expanded = list(senteval_names())
        elif key in GROUPS:
            expanded = list(GROUPS[key])
        elif is_registered(key) or key == STRUCTURAL:
            expanded = [key]
        else:
            try:
                expanded = [resolve_task_name(item)]
            except DataError:
                raise DataError(
                    f"unknown task {item!r}; expected {', '.join(task_names())}, {STRUCTURAL}, ud (upos, xpos, "
                    f"deprel), senteval (all ten) or a SentEval task ({', '.join(senteval_names())})"
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


def _source_folder(source: str, given: str | os.PathLike | None) -> Path:
    if given is not None:
        return Path(given)
    from bertology.data import shared_data_dir

    return shared_data_dir() / SOURCES[source].default_folder


def load_datasets(tasks: Sequence[str], treebank: str | os.PathLike | None = None,
                  wnut: str | os.PathLike | None = None, senteval_samples: str | os.PathLike | None = None,
                  max_train: int | None = None, max_eval: int | None = None, max_sentences: int | None = None,
                  cache_dir: str | os.PathLike | None = None, progress: bool = False) -> list[ProbingDataset]:
    """Every task among ``tasks`` (resolved names) as a :class:`ProbingDataset`.

    Registered tasks are built by their builders on the sentences of their source (``treebank`` for
    ``ud``, ``wnut`` for ``wnut17``), capped per level (:data:`DEFAULT_MAX_TRAIN`/``_EVAL`` unless
    ``max_train``/``max_eval``); ``structural`` takes the treebank sentences holding the token caps'
    words. Each pool is then cut to the sentences some example uses. SentEval tasks are built from the
    treebank by :mod:`bertology.tasks` (cached), or fall back to the shipped samples.
    """
    from bertology.data import shared_data_dir

    datasets: list[ProbingDataset] = []
    registered = [t for t in tasks if is_registered(t)]
    sources = list(dict.fromkeys([get_task(t).source for t in registered] + (["ud"] if STRUCTURAL in tasks else [])))
    for source in sources:
        folder = _source_folder(source, treebank if source == "ud" else wnut if source == "wnut17" else None)
        pools = SOURCES[source].load(folder, max_sentences)
        members = []
        for name in tasks:
            if name == STRUCTURAL and source == "ud":
                cap_train, cap_eval = _cap("token", max_train, DEFAULT_MAX_TRAIN), _cap("token", max_eval, DEFAULT_MAX_EVAL)
                splits = {split: prefix_by_words(pools[split], cap_train if split == "train" else cap_eval)
                          for split in SPLITS}
                members.append(ProbingDataset(STRUCTURAL, "structural", "ud", pools, splits,
                                              ["trained on every treebank sentence the other tasks extract"]))
            elif is_registered(name) and get_task(name).source == source:
                task = get_task(name)
                members.append(build_dataset(name, task.level, source, task.builder, pools,
                                             _cap(task.level, max_train, DEFAULT_MAX_TRAIN),
                                             _cap(task.level, max_eval, DEFAULT_MAX_EVAL), task.notes))
        keep_referenced(members)
        datasets += members
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
            folder = Path(senteval_samples) if senteval_samples is not None else shared_data_dir() / "senteval_probing"
            dataset = senteval_sample_dataset(task, folder, mt, me)
            if len(set(dataset.splits["train"].labels.tolist())) < 2:
                continue  # e.g. the sentence_length sample holds one label: nothing to probe
            datasets.append(dataset)
    order = {name: i for i, name in enumerate(tasks)}
    return sorted(datasets, key=lambda d: order.get(d.name, len(order)))


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
    from bertology.extraction import corpus_hash, extract

    stores = {}
    layer_key = "all" if layers is None else "-".join(map(str, layers))
    for source, by_split in pools.items():
        for split, sentences in by_split.items():
            path = cache / "stores" / f"{source}-{split}-{encoder.fingerprint}-{corpus_hash(sentences)}-L{layer_key}"
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


def _rows(model, task, probe, layers, seed, metric, values, baseline, split, component=None) -> list[dict]:
    return [{"model": model, "task": task, "probe": probe, "component": component, "layer": layer, "seed": seed,
             "metric": metric, "value": float(v), "baseline": baseline, "split": split}
            for layer, v in zip(layers, values)]


def check_probe_settings(probe: str, seeds: Iterable[int], train_fraction: float) -> list[int]:
    """The settings every probing experiment shares, checked; returns the seeds as a list."""
    if probe not in PROBE_KINDS:
        raise DataError(f"probe {probe!r}; expected one of {', '.join(PROBE_KINDS)}")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise DataError("seeds is empty; give at least one seed (three or more for a spread)")
    if not 0 < train_fraction <= 1:
        raise DataError(f"train_fraction {train_fraction}; expected a number in (0, 1]")
    return seeds


def _fit_and_score(kind, probe_kwargs, seed, X, y, train_index, layers, model, task, baseline,
                   scalar_mix: bool) -> list[dict]:
    """Fit every layer's probe (and optionally the scalar mix) on train[train_index]; score dev and test."""
    rows: list[dict] = []
    Xtr, ytr = X["train"][:, train_index], y["train"][train_index]
    probe = LayerwiseProbe(kind=kind, seed=seed, **probe_kwargs).fit(Xtr, ytr, X["dev"], y["dev"])
    for split in ("dev", "test"):
        rows += _rows(model, task, kind, layers, seed, "accuracy", probe.score_layers(X[split], y[split]),
                      baseline, split)
    rows += _rows(model, task, kind, layers, seed, "l2", probe.best_l2_, baseline, "dev")
    if scalar_mix:
        mix = ScalarMixProbe(kind=kind, seed=seed, **probe_kwargs).fit(Xtr, ytr, X["dev"], y["dev"])
        for split in ("dev", "test"):
            rows += _rows(model, task, kind, [pd.NA], seed, "accuracy", [mix.score(X[split], y[split])],
                          baseline, split, component=SCALAR_MIX)
        rows += _rows(model, task, kind, layers, seed, "mix_weight", mix.layer_weights_, baseline, "dev",
                      component=SCALAR_MIX)
    return rows


def run_probing(
    model: str = "minilm",
    tasks: str | Sequence[str] = ("upos",),
    treebank: str | os.PathLike | None = None,
    seeds: Sequence[int] = (0, 1, 2),
    layers: str | Sequence[int] | None = None,
    probe: str = "linear",
    *,
    l2: float | Sequence[float] = DEFAULT_L2,
    hidden: int = 128,
    max_train: int | None = None,
    max_eval: int | None = None,
    max_sentences: int | None = None,
    train_fraction: float = 0.9,
    untrained: bool = True,
    control: bool | str = True,
    scalar_mix: bool = True,
    wnut: str | os.PathLike | None = None,
    senteval_samples: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    device: str | None = "auto",
    structural_kwargs: dict | None = None,
    progress: bool = True,
    twin_per_seed: bool = True,
    probe_options: dict | None = None,
) -> Result:
    """Probe every layer of ``model`` on ``tasks`` over ``seeds``; return the :class:`Result` of the module doc.

    ``model``: an alias, folder or hub id, or an :class:`~bertology.models.Encoder`. ``layers``: ``None``
    (all), a list of layers or a spec such as ``"0,3,6"``, ``"1-4"``, ``"L3"``, ``"last"`` (layer ``l`` is
    ``hidden_states[l]``, 0 = embeddings). ``device``: ``"auto"`` (cuda if available), ``"cpu"``, ``"cuda"``.

    Seeds: seed ``s`` initialises the probes, draws the seed's random ``train_fraction`` of the (capped)
    training examples (``derive_seed(s, "train-subset", task)``), draws the control labels and is the
    untrained twin's seed, so the spread over seeds covers data sampling, optimisation and the twin's
    initialisation. With ``twin_per_seed=False`` one untrained twin (the first seed's) serves every seed,
    as the Convexity report's single untrained BERT (faster).

    Representations are extracted once per encoder into ``cache_dir`` (keyed by model fingerprint and
    input words), so a rerun reuses them. ``treebank`` is a UD folder (train/dev/test); it also feeds
    the SentEval task builder. ``control="token"`` runs control tasks only for word, arc and span tasks
    (Hewitt and Liang's definition), not for sentence-level ones; ``probe_options`` go to every probe
    (e.g. ``max_iter``). Accuracies are fractions.
    """
    from bertology.models import Encoder, load_encoder

    seeds = check_probe_settings(probe, seeds, train_fraction)
    if control not in (True, False, "token"):
        raise DataError(f"control={control!r}; expected True, False or 'token'")
    run_device = resolve_device(device)
    task_names_ = resolve_tasks(tasks)
    if treebank is None and any(t in senteval_names() for t in task_names_):
        from bertology.data import shared_data_dir

        treebank = shared_data_dir() / "ud_english_ewt"
    cache = _cache_root(cache_dir)
    datasets = load_datasets(task_names_, treebank, wnut, senteval_samples, max_train, max_eval, max_sentences,
                             cache, progress)
    pools = merge_pools(datasets)
    classify = [d for d in datasets if d.level != "structural"]

    if isinstance(model, Encoder):
        encoder, model = model, model.name
    else:
        encoder = load_encoder(model, device=str(run_device))
    layers = parse_layers(layers, encoder.num_layers)
    stores = _extract_pools(encoder, pools, layers, cache, progress, str(run_device))
    store_layers = list(next(iter(stores.values())).layers)
    layer_ids = store_layers if layers is None else list(layers)
    trained_X = _features_for(datasets, stores, layer_ids)
    labels = {d.name: {s: d.splits[s].labels for s in SPLITS} for d in classify}
    probe_kwargs = {"l2": l2, "hidden": hidden, "device": run_device, **(probe_options or {})}

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
    twin_X, twin_of_features = None, None
    with progress_bar(progress, transient=True) as bar:
        job = bar.add_task("probing", total=n_fits)
        for seed in seeds:
            if untrained and classify:
                twin_seed = seed if twin_per_seed else seeds[0]
                if twin_seed not in twin_stores:
                    twin = encoder.untrained(twin_seed)
                    twin_stores[twin_seed] = _extract_pools(twin, pools, layers, cache, progress, str(run_device))
                if twin_of_features != twin_seed:
                    # Features of the twin of *this* seed: a repeated seed must not reuse the last twin's.
                    twin_X, twin_of_features = _features_for(datasets, twin_stores[twin_seed], layer_ids), twin_seed
            for dataset in classify:
                name, y = dataset.name, labels[dataset.name]
                n_train = len(y["train"])
                rng = np.random.default_rng(derive_seed(seed, "train-subset", name))
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
        if untrained and seeds[0] not in twin_stores:
            twin_stores[seeds[0]] = _extract_pools(encoder.untrained(seeds[0]), pools, layers, cache, progress,
                                                   str(run_device))
        structural = _structural(model, pools["ud"], stores, twin_stores if untrained else {}, seeds, layers,
                                 run_device, structural_kwargs, progress)
        frame = pd.concat([frame, structural], ignore_index=True) if len(frame) else structural
    return _result(frame, datasets, encoder, model, task_names_, seeds, layer_ids, train_fraction, {
        "probe": probe, "l2": [float(v) for v in np.atleast_1d(l2)], "hidden": hidden, "max_train": max_train,
        "max_eval": max_eval, "max_sentences": max_sentences, "untrained": untrained, "control": control,
        "scalar_mix": scalar_mix, "twin_per_seed": twin_per_seed, "treebank": None if treebank is None else str(treebank),
        "device": str(run_device), "probe_options": probe_options or {},
    })


def _result(frame, datasets, encoder, model, tasks, seeds, layers, train_fraction, settings) -> Result:
    sizes = []
    for d in datasets:
        counts = {s: len(d.splits[s]) for s in SPLITS}
        used = counts["train"] if d.level == "structural" else max(2, int(round(train_fraction * counts["train"])))
        sizes.append({"task": d.name, "level": d.level, "source": d.source, **counts, "train_used": used,
                      "unit": UNITS[d.level], "notes": list(d.notes)})
    meta = {"model": model, "fingerprint": encoder.fingerprint, "tasks": list(tasks), "seeds": list(seeds),
            "layers": [int(l) for l in layers], "train_fraction": train_fraction, **settings}
    return Result("probing", tables=_tables(frame, pd.DataFrame(sizes)), meta=meta)


#: What one example of each level is.
UNITS = {"token": "words", "edge": "arcs", "span": "spans", "sentence": "sentences", "structural": "sentences"}


def _tables(frame: pd.DataFrame, sizes: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The four tables of a probing result from the tidy rows and the dataset sizes."""
    from bertology.probing.report import summarize, table2_frame

    frame = frame.reindex(columns=COLUMNS).astype({"value": "float64"})
    return {"results": frame, "summary": summarize(frame), "table2": table2_frame(frame), "datasets": sizes}


def _selectivity(task_rows: list[dict], control_rows: list[dict]) -> list[dict]:
    control = {(r["probe"], r["layer"], r["split"]): r["value"] for r in control_rows if r["metric"] == "accuracy"}
    out = []
    for r in task_rows:
        key = (r["probe"], r["layer"], r["split"])
        if r["metric"] == "accuracy" and r["component"] is None and key in control:
            out.append({**r, "metric": "selectivity", "value": r["value"] - control[key], "baseline": "control"})
    return out


def _structural(model, pool, stores, twin_stores, seeds, layers, device, kwargs, progress) -> pd.DataFrame:
    """Hewitt-and-Manning structural probes (:func:`~bertology.probing.structural.run_structural`) on the
    treebank pool, beside the first seed's untrained twin."""
    from bertology.probing.structural import run_structural

    twin = twin_stores.get(seeds[0])
    frame = run_structural(
        stores["ud", "train"], pool["train"], stores["ud", "dev"], pool["dev"], stores["ud", "test"], pool["test"],
        seeds=seeds, layers=layers, model=model, progress=progress, device=device,
        untrained=(twin["ud", "train"], twin["ud", "dev"], twin["ud", "test"]) if twin else None,
        **(kwargs or {}),
    )["results"].copy()
    frame["probe"] = "structural"
    frame["component"] = None
    return frame[COLUMNS]
