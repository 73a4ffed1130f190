"""``run_languages``: what an encoder knows about which language it reads, and how its English knowledge transfers.

Over treebanks of several languages (:mod:`bertology.languages.treebanks`), per layer (0 = embeddings), for the
model and its untrained twin (one twin, ``encoder.untrained(seeds[0])``, serves every probe seed, as in the
report):

* **language identity** (Libovický et al. 2019; Wu and Dredze 2019): a linear probe (``LayerwiseProbe``) on
  sentence vectors predicting the language; the language centroids, their pairwise distances and a 2-D
  projection of the centroids and of a sample of sentences;
* **parallel sentence retrieval**: for every ordered pair of languages, whether a sentence's nearest
  neighbour (cosine) among all of the other language's aligned sentences is its translation (accuracy @1),
  with and without subtracting each language's centroid (Libovický et al.'s centering);
* **zero-shot transfer** (Pires et al. 2019; Wu and Dredze 2019): UPOS (and dependency-label) probes trained
  on English (the packaged UD English EWT unless ``english`` names another UD folder) and tested on each
  language, beside the same probe trained and tested within the language, with majority and twin baselines
  and the transfer ratio (zero-shot / in-language accuracy);
* **the tokenizer per language** (:mod:`bertology.languages.tokenization`);
* **SentEval-style tasks** built from each language's treebank by :mod:`bertology.tasks` where its annotation
  allows; the others are listed as absent with the builder's reason (never filled from English).

Sentence vectors are the mean of the sentence's word vectors (each word the mean of its subwords), as the
probing runner's sentence tasks; Libovický et al. mean-pool subword tokens.

Splits: every sentence id goes to train, dev or test (50/10/40, seeded by ``split_seed``), the same for every
language, so a sentence and its translations share a split. Probes train on a seed's random
``train_fraction`` of the (capped) training examples, choose their L2 strength on dev and are scored on test;
zero-shot probes choose on the English dev split, never on the target language. Retrieval candidates are
all of a language's aligned sentences; queries are the test-split sentences; the best layer is chosen on
the queries of the other splits. Intervals: the 95% percentile interval of the bootstrap over test examples
pooled over seeds (:func:`bertology.probing.summary.bootstrap_intervals`).

Every table says which network a row measures in a ``baseline`` column, in probing's words: ``none`` (the
model itself), ``untrained`` (its twin) or ``majority`` (the majority class, no network).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
import hashlib
import json

import numpy as np
import pandas as pd

from bertology.data import Sentence, packaged_treebank, read_conllu
from bertology.data.treebank import find_splits
from bertology.errors import DataError
from bertology.languages import measures
from bertology.languages.spec import TRANSFER_TASK_NAMES, LanguagesSpec
from bertology.languages.summary import (CENTERED, IN_LANGUAGE, MAJORITY, MODEL, RAW, SEED_WORDS, SOURCE, TWIN, ZERO_SHOT,
                                          retrieval_summary, summary_table, transfer_ratios)
from bertology.languages.tokenization import COLUMNS as TOKENIZER_COLUMNS
from bertology.languages.tokenization import tokenizer_row
from bertology.languages.treebanks import (SPLIT_SHARES, LanguageTreebank, check_alignment, read_treebanks,
                                           split_ids, tag_problem)
from bertology.numbering import parse_layers
from bertology.progress import progress_bar
from bertology.results import Result
from bertology.runtime import derive_seed, resolve_device
from bertology.extraction.shared import shared_store
from bertology.settings import cache_root
from bertology.models import as_encoder
from bertology.probing import datasets
from bertology.probing.datasets import features, sentence_mean_vectors
from bertology.probing.probes import LayerwiseProbe
from bertology.store.store import file_sha256
from bertology.tasks.build import build_tasks
from bertology.tasks.catalog import TABLE2_COLUMNS, TASK_NAMES

#: The probe tasks that transfer: name -> (probe level, builder name in bertology.probing.datasets, column).
TRANSFER_TASKS = {"upos": ("token", "upos_examples", "upos"), "deprel": ("edge", "deprel_examples", "deprel")}
assert tuple(TRANSFER_TASKS) == TRANSFER_TASK_NAMES  # the spec checks the names, lightly


def _extract(encoder, sentences: Sequence[Sentence], cache: Path, progress: bool, device: str | None):
    """Every layer, word-mean pooled, from the cache's shared stores (one extraction per model and corpus). The
    unknown-token guard is off: a monolingual tokenizer reading other scripts is part of what is measured (the
    tokenizer table)."""
    return shared_store(encoder, list(sentences), cache, pool="word-mean", dtype="float16", progress=progress,
                        device=device, max_unknown_fraction=None)


def _train_subset(seed: int, purpose: str, n: int, fraction: float) -> np.ndarray:
    """The training examples seed ``seed`` uses: all, or a seeded random ``fraction`` of them."""
    if fraction >= 1:
        return np.arange(n)
    rng = np.random.default_rng(derive_seed(seed, "train-subset", purpose))
    return np.sort(rng.permutation(n)[: max(2, int(round(fraction * n)))])


def _examples(task: str, sentences: Sequence[Sentence], positions: Sequence[int], cap: int | None
              ) -> tuple[np.ndarray, np.ndarray]:
    """``(refs into the whole language, labels)`` of ``task`` on ``sentences`` (whose indices in the language
    are ``positions``), the first ``cap`` examples."""
    level, builder, _ = TRANSFER_TASKS[task]
    refs, labels = getattr(datasets, builder)(sentences)
    width = 2 if level == "token" else 3
    refs = np.asarray(refs, dtype=np.int64).reshape(-1, width)
    labels = np.asarray(labels, dtype=object)
    if len(refs):
        refs[:, 0] = np.asarray(positions, dtype=np.int64)[refs[:, 0]]
    if cap is not None:
        refs, labels = refs[:cap], labels[:cap]
    return refs, labels


def _shuffled_positions(n: int, purpose: str) -> np.ndarray:
    return np.random.default_rng(derive_seed(0, "languages-order", purpose)).permutation(n)


class _Features:
    """Per layer, from one store: every sentence's mean vector and the features of some example sets."""

    def __init__(self, store, layers: Sequence[int], example_sets: dict[tuple, tuple[str, np.ndarray]]):
        self.means = np.empty((len(layers), store.n_sentences, store.dim), dtype=np.float32)
        self.X = {key: np.empty((len(layers), len(refs), store.dim * (3 if level == "edge" else 1)), np.float32)
                  for key, (level, refs) in example_sets.items()}
        for li, layer in enumerate(layers):
            vectors = store.layer(layer)
            self.means[li] = sentence_mean_vectors(vectors, store.offsets)
            for key, (level, refs) in example_sets.items():
                if len(refs):
                    self.X[key][li] = features(level, vectors, store.offsets, refs)


def _correct(predictions: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.asarray(np.asarray(predictions, dtype=object) == np.asarray(y, dtype=object)[None], dtype=bool)


def _majority(labels: np.ndarray):
    values, counts = np.unique(np.asarray(labels, dtype=str), return_counts=True)
    return values[counts.argmax()]


@dataclass(frozen=True)
class _Run:
    """What every step of one run shares besides the model: the spec, the layers, the probes' keywords, where
    stores are cached and the rows and bootstrap hits collected so far."""

    spec: LanguagesSpec
    layers: list[int]
    probe_kwargs: dict
    cache: Path
    progress: bool
    device: str
    rows: list
    hits: dict


def run_languages(
    model="minilm",
    treebanks: str | os.PathLike | Sequence[str | os.PathLike] = (),
    spec: LanguagesSpec | None = None,
    *,
    english: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    device: str | None = "auto",
    progress: bool = True,
    **settings,
) -> Result:
    """Run every measure of the module doc on ``treebanks`` (CoNLL-U files or folders; see
    :func:`~bertology.languages.treebanks.read_treebanks`) and return a :class:`Result` named ``languages``.

    ``model``: alias, folder, hub id or :class:`~bertology.models.Encoder`. ``spec``: the settings
    (:class:`~bertology.languages.spec.LanguagesSpec`: seeds, layers, tasks, sizes, baselines), or its fields as
    keywords (``settings``), checked once. ``english``: the UD folder the transfer probes train on (default: the
    packaged EWT). A measure that cannot run on the input (retrieval on treebanks without shared sentence ids, a
    probe on a treebank whose tags are not universal) is left out with the reason in the ``absent`` table and
    ``meta["absent"]``; the others run. Accuracies are fractions.
    """
    spec = LanguagesSpec.of(spec, **settings)
    tasks, seeds = list(spec.tasks), list(spec.seeds)
    max_train, max_dev, train_fraction = spec.max_train, spec.max_dev, spec.train_fraction
    run_device = resolve_device(device)
    languages = read_treebanks([treebanks] if isinstance(treebanks, (str, os.PathLike)) else list(treebanks),
                               max_sentences=spec.max_sentences)
    absent: list[dict] = []
    try:
        aligned_ids = check_alignment(languages)
    except DataError as error:
        aligned_ids = None
        absent.append({"measure": "retrieval", "language": None, "reason": str(error)})
    split = split_ids([i for t in languages.values() for i in t.ids], seed=spec.split_seed)
    usable = {task: [] for task in tasks}
    for task in tasks:
        column = TRANSFER_TASKS[task][2]
        for code, treebank in languages.items():
            problem = tag_problem(treebank, column)
            if problem is None:
                usable[task].append(code)
            else:
                absent.append({"measure": task, "language": code, "reason": problem})

    encoder = as_encoder(model, device=str(run_device))
    model_name = encoder.name
    layer_ids = parse_layers(spec.layers, encoder.num_layers)
    layer_ids = list(range(encoder.num_layers + 1)) if layer_ids is None else list(layer_ids)
    cache = cache_root(cache_dir)
    english_data = _english(english, tasks, max_train, max_dev) if tasks else {}
    encoders = [(MODEL, encoder)] + ([(TWIN, encoder.untrained(seeds[0]))] if spec.untrained else [])
    probe_kwargs = {"device": run_device, **spec.probe_options}

    tables: dict[str, list] = {k: [] for k in ("identity", "retrieval", "centroids", "projection", "transfer")}
    hits: dict[tuple, dict[int, np.ndarray]] = {}
    run = _Run(spec, layer_ids, probe_kwargs, cache, progress, str(run_device), tables["transfer"], hits)
    retrieval_hits: dict[tuple, np.ndarray] = {}
    with progress_bar(progress, transient=True) as bar:
        job = bar.add_task("languages", total=len(encoders) * (len(languages) + 2))
        for kind, current in encoders:
            bar.update(job, description=f"languages ({SEED_WORDS[kind]}): English probes")
            english_probes = _fit_english(current, english_data, layer_ids, seeds, train_fraction, probe_kwargs,
                                          cache, progress, str(run_device), tables["transfer"], kind)
            bar.advance(job)
            means: dict[str, np.ndarray] = {}
            for code, treebank in languages.items():
                bar.update(job, description=f"languages ({SEED_WORDS[kind]}): {code}")
                means[code] = _language_pass(run, current, kind, code, treebank, split,
                                             [t for t in tasks if code in usable[t]], english_probes, english_data)
                bar.advance(job)
            bar.update(job, description=f"languages ({SEED_WORDS[kind]}): identity, centroids, retrieval")
            _identity(kind, languages, means, split, layer_ids, seeds, train_fraction, probe_kwargs,
                      tables["identity"], hits)
            _geometry(kind, languages, means, layer_ids, spec.projection_sentences, tables)
            if aligned_ids is not None:
                _retrieval(kind, languages, means, aligned_ids, split, layer_ids, tables["retrieval"], retrieval_hits)
            bar.advance(job)
            del means

    result_tables = {
        "languages": _languages_table(languages, split, aligned_ids),
        "tokenizer": pd.DataFrame([tokenizer_row(encoder.tokenizer, t.sentences, encoder.max_length, code)
                                   for code, t in languages.items()], columns=TOKENIZER_COLUMNS),
        "identity": pd.DataFrame(tables["identity"], columns=["baseline", "layer", "seed", "split", "accuracy"]),
        "centroids": pd.DataFrame(tables["centroids"]),
        "projection": pd.DataFrame(tables["projection"]),
    }
    n_boot = spec.n_boot
    result_tables["identity_summary"] = summary_table(result_tables["identity"], ["baseline"], hits, ("identity",), n_boot)
    if aligned_ids is not None:
        frame = pd.DataFrame(tables["retrieval"])
        result_tables["retrieval"] = frame
        result_tables["retrieval_summary"] = retrieval_summary(frame, retrieval_hits, n_boot)
    if tasks:
        frame = pd.DataFrame(tables["transfer"], columns=["task", "language", "baseline", "setting", "layer", "seed",
                                                          "split", "accuracy"])
        result_tables["transfer"] = frame
        summary = summary_table(frame, ["task", "language", "baseline", "setting"], hits, ("transfer",), n_boot)
        result_tables["transfer_summary"] = summary
        result_tables["transfer_ratio"], result_tables["transfer_best"] = transfer_ratios(summary, hits, n_boot)
    if spec.senteval:
        result_tables["tasks"] = senteval_tasks(languages, cache)
    result_tables["absent"] = pd.DataFrame(absent, columns=["measure", "language", "reason"])
    meta = {
        "model": model_name, "fingerprint": encoder.fingerprint, "languages": list(languages),
        "treebanks": {code: [str(p) for p in t.paths] for code, t in languages.items()},
        "seeds": seeds, "layers": layer_ids, "tasks": tasks, "max_sentences": spec.max_sentences,
        "max_train": max_train, "max_dev": max_dev, "train_fraction": train_fraction, "untrained": spec.untrained,
        "twin_seed": seeds[0] if spec.untrained else None, "split_seed": spec.split_seed,
        "split_shares": list(SPLIT_SHARES), "aligned_sentences": None if aligned_ids is None else len(aligned_ids),
        "english": str(english_data.get("path")) if english_data else None,
        "english_sizes": {k: int(len(v)) for k, v in english_data.get("labels", {}).items()} if english_data else {},
        "projection_sentences": spec.projection_sentences, "n_boot": n_boot, "device": str(run_device),
        "probe": "linear (LayerwiseProbe: L2 chosen on dev per layer)", "probe_options": dict(spec.probe_options),
        "sentence_vector": "mean of the sentence's word vectors (each word the mean of its subwords)",
        "interval": "95% percentile interval of the bootstrap over test examples pooled over seeds",
        "absent": [f"{row['measure']}{' (' + row['language'] + ')' if row['language'] else ''}: {row['reason']}"
                   for row in absent],
    }
    return Result("languages", tables=result_tables, meta=meta)


# ------------------------------------------------------------------------------------------ English source


def _english(english, tasks: Sequence[str], max_train: int | None, max_dev: int | None) -> dict:
    """The English training and dev sentences and examples of every task (shuffled with a fixed seed, capped)."""
    folder = Path(english) if english is not None else packaged_treebank()
    files = find_splits(folder, required=("train", "dev"))
    data: dict = {"path": folder, "sentences": {}, "refs": {}, "labels": {}}
    for split, cap in (("train", max_train), ("dev", max_dev)):
        sentences = read_conllu(files[split])
        order = _shuffled_positions(len(sentences), f"english-{split}")
        sentences = [sentences[i] for i in order]
        if cap is not None:  # sentences enough for the largest task's cap (tasks share one extraction)
            words = np.cumsum([len(s) for s in sentences])
            sentences = sentences[: int(np.searchsorted(words, cap)) + 1]
        data["sentences"][split] = sentences
        for task in tasks:
            refs, labels = _examples(task, sentences, range(len(sentences)), cap)
            if not len(refs):
                raise DataError(f"{files[split]}: no {task} examples; expected a UD treebank with universal tags")
            data["refs"][task, split], data["labels"][f"{task}-{split}"] = refs, labels
    return data


def _fit_english(encoder, english: dict, layers, seeds, train_fraction, probe_kwargs, cache, progress, device,
                 rows: list, kind: str) -> dict:
    """``{(task, seed): probe}`` trained on English and chosen on the English dev split (rows: their dev
    accuracy, for the zero-shot layer choice)."""
    if not english:
        return {}
    probes = {}
    tasks = sorted({task for task, _ in english["refs"]})
    stores = {split: _extract(encoder, english["sentences"][split], cache, progress, device)
              for split in ("train", "dev")}
    X = {}
    for split, store in stores.items():
        sets = {(task,): (TRANSFER_TASKS[task][0], english["refs"][task, split]) for task in tasks}
        X[split] = _Features(store, layers, sets).X
    for task in tasks:
        y_train, y_dev = english["labels"][f"{task}-train"], english["labels"][f"{task}-dev"]
        for seed in seeds:
            index = _train_subset(seed, f"english-{task}", len(y_train), train_fraction)
            probe = LayerwiseProbe(seed=seed, **probe_kwargs).fit(X["train"][(task,)][:, index], y_train[index],
                                                                   X["dev"][(task,)], y_dev)
            probes[task, seed] = probe
            dev = _correct(probe.predict(X["dev"][(task,)]), y_dev).mean(axis=1)
            rows += [(task, SOURCE, kind, ZERO_SHOT, layer, seed, "dev", float(v)) for layer, v in zip(layers, dev)]
        if kind == MODEL:
            majority = _majority(y_train)
            rows += [(task, SOURCE, MAJORITY, ZERO_SHOT, layer, seed, "dev", float(np.mean(y_dev == majority)))
                     for seed in seeds for layer in layers]
    return probes


# ------------------------------------------------------------------------------------------ one language


def _language_pass(run: _Run, encoder, kind, code, treebank: LanguageTreebank, split, tasks, english_probes,
                   english) -> np.ndarray:
    """Extract one language, fit its in-language probes, score the English probes on it; return its sentence
    means ``[n_layers, n_sentences, dim]``."""
    layers, seeds, rows, hits = run.layers, run.spec.seeds, run.rows, run.hits
    max_train, max_dev, train_fraction, probe_kwargs = (run.spec.max_train, run.spec.max_dev, run.spec.train_fraction,
                                                        run.probe_kwargs)
    store = _extract(encoder, treebank.sentences, run.cache, run.progress, run.device)
    positions = {s: [] for s in ("train", "dev", "test")}
    for index in _shuffled_positions(len(treebank.sentences), f"language-{code}"):
        positions[split[treebank.sentences[index].id]].append(int(index))
    sets, labels = {}, {}
    for task in tasks:
        for part, cap in (("train", max_train), ("dev", max_dev), ("test", None)):
            chosen = positions[part]
            refs, y = _examples(task, [treebank.sentences[i] for i in chosen], chosen, cap)
            sets[task, part] = (TRANSFER_TASKS[task][0], refs)
            labels[task, part] = y
    features = _Features(store, layers, sets)
    for task in tasks:
        X = {part: features.X[task, part] for part in ("train", "dev", "test")}
        y = {part: labels[task, part] for part in ("train", "dev", "test")}
        if min(len(v) for v in y.values()) == 0 or len(set(y["train"].tolist())) < 2:
            continue  # too few examples in a split: no in-language probe (its rows are simply missing)
        for seed in seeds:
            index = _train_subset(seed, f"{code}-{task}", len(y["train"]), train_fraction)
            probe = LayerwiseProbe(seed=seed, **probe_kwargs).fit(X["train"][:, index], y["train"][index], X["dev"],
                                                                   y["dev"])
            for part in ("dev", "test"):
                correct = _correct(probe.predict(X[part]), y[part])
                rows += [(task, code, kind, IN_LANGUAGE, layer, seed, part, float(v))
                         for layer, v in zip(layers, correct.mean(axis=1))]
                if part == "test":
                    hits.setdefault(("transfer", task, code, kind, IN_LANGUAGE), {})[seed] = correct
            if (task, seed) in english_probes:
                correct = _correct(english_probes[task, seed].predict(X["test"]), y["test"])
                rows += [(task, code, kind, ZERO_SHOT, layer, seed, "test", float(v))
                         for layer, v in zip(layers, correct.mean(axis=1))]
                hits.setdefault(("transfer", task, code, kind, ZERO_SHOT), {})[seed] = correct
        if kind == MODEL:
            baselines = [(IN_LANGUAGE, _majority(y["train"]))]
            if english:
                baselines.append((ZERO_SHOT, _majority(english["labels"][f"{task}-train"])))
            for setting, label in baselines:
                correct = np.asarray(y["test"] == label, dtype=bool)
                rows += [(task, code, MAJORITY, setting, layer, seed, "test", float(correct.mean()))
                         for seed in seeds for layer in layers]
                hits[("transfer", task, code, MAJORITY, setting)] = {seeds[0]: np.repeat(correct[None], len(layers), 0)}
    return features.means


# ------------------------------------------------------------------------------------------ identity, geometry


def _stack(languages, means, split, part: str | None):
    X, y = [], []
    for code, treebank in languages.items():
        keep = [i for i, s in enumerate(treebank.sentences) if part is None or split[s.id] == part]
        X.append(means[code][:, keep])
        y += [code] * len(keep)
    return np.concatenate(X, axis=1), np.asarray(y, dtype=object)


def _identity(kind, languages, means, split, layers, seeds, train_fraction, probe_kwargs, rows, hits) -> None:
    """The language-identity probe per layer (and, once, the majority baseline)."""
    X = {}
    y = {}
    for part in ("train", "dev", "test"):
        X[part], y[part] = _stack(languages, means, split, part)
    for seed in seeds:
        index = _train_subset(seed, "identity", len(y["train"]), train_fraction)
        probe = LayerwiseProbe(seed=seed, **probe_kwargs).fit(X["train"][:, index], y["train"][index], X["dev"],
                                                               y["dev"])
        for part in ("dev", "test"):
            correct = _correct(probe.predict(X[part]), y[part])
            rows += [(kind, layer, seed, part, float(v)) for layer, v in zip(layers, correct.mean(axis=1))]
            if part == "test":
                hits.setdefault(("identity", kind), {})[seed] = correct
    if kind == MODEL:
        label = _majority(y["train"])
        for part in ("dev", "test"):
            correct = np.asarray(y[part] == label, dtype=bool)
            rows += [(MAJORITY, layer, seed, part, float(correct.mean())) for seed in seeds for layer in layers]
            if part == "test":
                hits[("identity", MAJORITY)] = {seeds[0]: np.repeat(correct[None], len(layers), 0)}


def _geometry(kind, languages, means, layers, sample_size: int, tables) -> None:
    """Centroids, their distances and the 2-D projection of centroids and a sample of sentences, per layer."""
    rng = np.random.default_rng(derive_seed(0, "languages-projection"))
    sample = {code: np.sort(rng.permutation(len(t.sentences))[:sample_size]) for code, t in languages.items()}
    for li, layer in enumerate(layers):
        vectors, labels = _stack(languages, {c: m[li:li + 1] for c, m in means.items()}, None, None)
        codes, centre = measures.centroids(vectors[0], labels)
        for row in measures.centroid_distances(codes, centre):
            tables["centroids"].append({"baseline": kind, "layer": layer, **row})
        sampled = np.concatenate([means[code][li, sample[code]] for code in codes])
        sampled_labels = [code for code in codes for _ in sample[code]]
        points, centre_points, explained = measures.project_2d(sampled, centre)
        for (x, y_), code in zip(points, sampled_labels):
            tables["projection"].append({"baseline": kind, "layer": layer, "language": code, "kind": "sentence",
                                         "x": float(x), "y": float(y_), "explained_1": float(explained[0]),
                                         "explained_2": float(explained[1])})
        for (x, y_), code in zip(centre_points, codes):
            tables["projection"].append({"baseline": kind, "layer": layer, "language": code, "kind": "centroid",
                                         "x": float(x), "y": float(y_), "explained_1": float(explained[0]),
                                         "explained_2": float(explained[1])})


def _retrieval(kind, languages, means, ids, split, layers, rows, collected) -> None:
    """Accuracy @1 of every ordered language pair per layer, raw and centred: queries of the test split
    (``accuracy``) and of the others (``selection_accuracy``, which chooses the best layer)."""
    index = {code: {s.id: i for i, s in enumerate(t.sentences)} for code, t in languages.items()}
    aligned = {code: np.asarray([index[code][i] for i in ids]) for code in languages}
    is_test = np.asarray([split[i] == "test" for i in ids])
    targets = np.arange(len(ids))
    codes = list(languages)
    for li, layer in enumerate(layers):
        for centering in (RAW, CENTERED):
            vectors = {}
            for code in codes:
                rows_ = means[code][li, aligned[code]].astype(np.float64)
                vectors[code] = rows_ - rows_.mean(axis=0) if centering == CENTERED else rows_
            pair_hits = []
            for a in codes:
                for b in codes:
                    if a == b:
                        continue
                    found = measures.retrieval_hits(vectors[a], vectors[b], targets)
                    pair_hits.append(found)
                    rows.append({"baseline": kind, "centering": centering, "layer": layer, "query_language": a,
                                 "target_language": b, "accuracy": float(found[is_test].mean()) if is_test.any()
                                 else np.nan, "selection_accuracy": float(found[~is_test].mean()) if (~is_test).any()
                                 else np.nan, "n_test": int(is_test.sum())})
            collected[kind, centering, layer] = np.stack(pair_hits)[:, is_test]


def _languages_table(languages: dict[str, LanguageTreebank], split, aligned) -> pd.DataFrame:
    rows = []
    for code, treebank in languages.items():
        counts = {part: sum(split[s.id] == part for s in treebank.sentences) for part in ("train", "dev", "test")}
        rows.append({"language": code, "files": "; ".join(str(p) for p in treebank.paths),
                     "sentences": len(treebank.sentences), "words": treebank.n_words,
                     "aligned": 0 if aligned is None else len(aligned), **counts})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------ SentEval tasks


def senteval_tasks(languages: dict[str, LanguageTreebank], cache: Path) -> pd.DataFrame:
    """The ten SentEval tasks built from each language's files (all their sentences, re-split 50/10/40 as
    ``bertology tasks build --split pooled``), cached by the files' content: one row per language and task,
    ``status`` built (with the sizes per split) or absent (with the builder's reason)."""
    rows = []
    for code, treebank in languages.items():
        digest = hashlib.sha256("".join(file_sha256(p) for p in treebank.paths).encode()).hexdigest()[:16]
        out = cache / f"senteval-tasks-{digest}-pooled"
        report = build_tasks(list(treebank.paths), out, split="pooled")
        manifest = json.loads(report.manifest_path.read_text(encoding="utf-8"))
        for task in TASK_NAMES:
            entry = manifest["tasks"].get(task)
            if entry is not None:
                sizes = entry["totals"]
                rows.append({"language": code, "task": TABLE2_COLUMNS[task], "status": "built",
                             "train": sizes["train"], "dev": sizes["dev"], "test": sizes["test"], "reason": ""})
            else:
                rows.append({"language": code, "task": TABLE2_COLUMNS[task], "status": "absent", "train": 0,
                             "dev": 0, "test": 0, "reason": manifest["skipped"].get(task, "not built")})
    return pd.DataFrame(rows)
