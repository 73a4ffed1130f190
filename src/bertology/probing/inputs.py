"""The probes' inputs: each task's dataset at its capped sizes (:func:`build_datasets`), the sentence pools of
every source and split merged across tasks (:func:`merge_pools`), and their features, read from the shared
stores (:func:`_extract_pools`, :func:`_features_for`): one extraction per model and corpus, shared with the
other analyses. :func:`bertology.probing.experiment.run_probing` plans with them before any probe is fitted.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from bertology.data import external_folder, missing_data, packaged_treebank
from bertology.errors import BertologyWarning, DataError, MissingData
from bertology.extraction import corpus_hash
from bertology.extraction.shared import shared_store
from bertology.files import atomic_path, write_json
from bertology.probing.datasets import (
    SPLITS,
    EmptySplitError,
    ProbingDataset,
    build_dataset,
    features,
    keep_referenced,
    prefix_by_words,
    sentence_mean_vectors,
    senteval_dataset,
    senteval_sample_dataset,
)
from bertology.probing.tasks import SOURCES, STRUCTURAL, get_task, is_registered, senteval_names
from bertology.settings import cache_root
from bertology.store.store import file_sha256
from bertology.tasks.cache import built_tasks

#: Default sizes, in examples (words for UPOS/XPOS, arcs for deprel, spans for NER, sentences for
#: SentEval tasks); ``None`` = every example of the split. Dev and test are used whole, so a typical 95%
#: interval is +/- 0.5 points on UD EWT's 25k test words (and as narrow as the test set allows for the
#: SentEval tasks built from it: +/- 2.6 points on BShift's 1,290 test sentences); sentence tasks train on
#: every sentence. Token and arc training sets are capped because L-BFGS time and feature memory grow with
#: them (arcs are 3 x dim wide); the caps are far above where linear UPOS probes level off (about 93% on
#: MiniLM's best layer at 4,000 words, docs/benchmarks_probes.md).
DEFAULT_MAX_TRAIN = {"token": 20000, "edge": 10000, "span": None, "sentence": None}
DEFAULT_MAX_EVAL: dict[str, int | None] = {"token": None, "edge": None, "span": None, "sentence": None}
#: ``quick=True`` (``--quick``): small runs for smoke tests and demos. Their intervals are wide: tables
#: flag them as underpowered (:func:`bertology.probing.summary.meets_power_rule`).
QUICK_MAX_TRAIN = {"token": 4000, "edge": 4000, "span": 2000, "sentence": 1000}
QUICK_MAX_EVAL = {"token": 1000, "edge": 1000, "span": 500, "sentence": 300}


def _cap(level: str, value: int | Mapping | None, defaults: dict[str, int | None]) -> int | None:
    """The cap of ``level``: ``value`` (one number for every level, or per level, where a level left out keeps
    its default and None means every example), else the default."""
    if isinstance(value, Mapping):
        return value[level] if level in value else defaults[level]
    return defaults[level] if value is None else int(value)


def default_caps(quick: bool = False) -> tuple[dict, dict]:
    """``(max_train, max_eval)`` per level: :data:`DEFAULT_MAX_TRAIN`/``_EVAL`` or the quick ones."""
    return (QUICK_MAX_TRAIN, QUICK_MAX_EVAL) if quick else (DEFAULT_MAX_TRAIN, DEFAULT_MAX_EVAL)


def _source_folder(source: str, given: str | os.PathLike | None) -> Path:
    """A task source's folder: ``given``, else the packaged EWT for treebank tasks, else the external data
    set's folder (``$BERTOLOGY_DATA``), else :class:`~bertology.errors.MissingData`."""
    if given is not None:
        return Path(given)
    if source == "ud":
        return packaged_treebank()
    folder = external_folder(source)
    if folder is None:
        raise missing_data(source)
    return folder


def load_datasets(tasks: Sequence[str], treebank: str | os.PathLike | None = None,
                  wnut: str | os.PathLike | None = None, senteval_samples: str | os.PathLike | None = None,
                  max_train: int | None = None, max_eval: int | None = None, max_sentences: int | None = None,
                  cache_dir: str | os.PathLike | None = None, progress: bool = False, quick: bool = False,
                  absent: list | None = None, senteval_split: str = "pooled") -> list[ProbingDataset]:
    """The datasets of :func:`build_datasets`; the tasks left out are appended to ``absent`` when given."""
    datasets, left_out = build_datasets(tasks, treebank, wnut, senteval_samples, max_train, max_eval, max_sentences,
                                        cache_dir, progress, quick, senteval_split)
    if absent is not None:
        absent.extend(left_out)
    return datasets


def build_datasets(tasks: Sequence[str], treebank: str | os.PathLike | None = None,
                   wnut: str | os.PathLike | None = None, senteval_samples: str | os.PathLike | None = None,
                   max_train: int | None = None, max_eval: int | None = None, max_sentences: int | None = None,
                   cache_dir: str | os.PathLike | None = None, progress: bool = False, quick: bool = False,
                   senteval_split: str = "pooled") -> tuple[list[ProbingDataset], list[tuple[str, str]]]:
    """``(datasets, absent)``: every task among ``tasks`` (resolved names) that can be built, as a
    :class:`ProbingDataset`, and ``(task, reason)`` for each one that cannot.

    Registered tasks are built by their builders on the sentences of their source (``treebank`` for
    ``ud``, ``wnut`` for ``wnut17``), capped per level (:data:`DEFAULT_MAX_TRAIN`/``_EVAL``, or the
    ``quick`` caps, unless ``max_train``/``max_eval``); ``structural`` takes the treebank sentences
    holding the token caps' words. Each pool is then cut to the sentences some example uses. SentEval
    tasks are built from the treebank by :mod:`bertology.tasks` (cached by content), by default
    (``senteval_split="pooled"``) from all its sentences re-split 50/10/40, for test sets large enough for
    the power rule, or (``"treebank"``) from its own train/dev/test files (docs/probing.md, "Intervals and
    the power rule"). A task the treebank
    cannot support is left out, never substituted: it is one of ``absent``. The shipped SentEval samples
    are used only when ``senteval_samples`` names their folder.
    """
    train_caps, eval_caps = default_caps(quick)
    absent: list[tuple[str, str]] = []
    datasets: list[ProbingDataset] = []
    registered = [t for t in tasks if is_registered(t)]
    sources = list(dict.fromkeys([get_task(t).source for t in registered] + (["ud"] if STRUCTURAL in tasks else [])))
    for source in sources:
        try:
            folder = _source_folder(source, treebank if source == "ud" else wnut if source == "wnut17" else None)
        except MissingData as error:  # its data is not at hand: its tasks are absent, the others still run
            absent.extend((t, str(error)) for t in registered if get_task(t).source == source)
            continue
        pools = SOURCES[source].load(folder, max_sentences)
        members = []
        for name in tasks:
            if name == STRUCTURAL and source == "ud":
                cap_train, cap_eval = _cap("token", max_train, train_caps), _cap("token", max_eval, eval_caps)
                splits = {split: prefix_by_words(pools[split], cap_train if split == "train" else cap_eval)
                          for split in SPLITS}
                members.append(ProbingDataset(STRUCTURAL, "structural", "ud", pools, splits,
                                              ["trained on every treebank sentence the other tasks extract"]))
            elif is_registered(name) and get_task(name).source == source:
                task = get_task(name)
                try:
                    members.append(build_dataset(name, task.level, source, task.builder, pools,
                                                 _cap(task.level, max_train, train_caps),
                                                 _cap(task.level, max_eval, eval_caps), task.notes))
                except EmptySplitError as error:
                    absent.append((name, str(error)))
        if members:
            keep_referenced(members)
        datasets += members
    sentence_tasks = [t for t in tasks if t in senteval_names()]
    if sentence_tasks:
        mt, me = _cap("sentence", max_train, train_caps), _cap("sentence", max_eval, eval_caps)
        if max_sentences is not None:  # at most that many sentences per split, as for the treebank's own tasks
            mt, me = (min(c, max_sentences) if c is not None else max_sentences for c in (mt, me))
        if senteval_samples is not None:
            built, skipped, split_sources = {}, {}, {}
        else:
            built, skipped, split_sources = built_tasks(sentence_tasks, Path(treebank) if treebank is not None else None,
                                             cache_root(cache_dir), progress, senteval_split)
        for task in sentence_tasks:
            try:
                if senteval_samples is not None:
                    dataset = senteval_sample_dataset(task, Path(senteval_samples), mt, me)
                elif task in built:
                    dataset = senteval_dataset(task, built[task], mt, me,
                                               notes=[f"built from the treebank ({split_sources[task]}) by bertology.tasks"])
                else:
                    source = Path(treebank).name if treebank else "no treebank"
                    absent.append((task, f"cannot be built from {source}: {skipped.get(task, 'not built')}"))
                    continue
            except DataError as error:
                absent.append((task, str(error)))
                continue
            if len(set(dataset.splits["train"].labels.tolist())) < 2:
                absent.append((task, "its training split holds a single label: nothing to probe"))
                continue
            datasets.append(dataset)
    order = {name: i for i, name in enumerate(tasks)}
    return sorted(datasets, key=lambda d: order.get(d.name, len(order))), absent


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


class SentenceMeans:
    """Every sentence's mean word vector per layer, kept in place of a word-level store for a pool that only
    sentence tasks read (the SentEval tasks): ``[n_layers, n_sentences, dim]`` float32 in one ``.npy``
    (about 20x smaller than the words). It answers what :func:`_features_for` asks of a store: ``layers``,
    ``dim``, ``offsets`` (one row per sentence) and ``layer(l)``; the features are the same numbers."""

    def __init__(self, path: Path):
        self.path = Path(path)
        meta = json.loads(self.path.with_suffix(".json").read_text())
        recorded = meta.get("sha256")  # caches written before the checksum are read as they are
        if recorded is not None and file_sha256(self.path) != recorded:
            raise ValueError(f"SHA-256 differs from the one in {self.path.with_suffix('.json').name}")
        self.means = np.load(self.path, mmap_mode="r")
        self.layers = [int(l) for l in meta["layers"]]
        self.offsets = np.arange(self.means.shape[1] + 1, dtype=np.int64)

    @property
    def dim(self) -> int:
        return int(self.means.shape[2])

    def layer(self, layer: int) -> np.ndarray:
        return np.asarray(self.means[self.layers.index(int(layer))])

    @classmethod
    def from_store(cls, store, path: Path) -> "SentenceMeans":
        """Write the sentence means of a word-level store (atomically: the ``.npy`` appears last)."""
        means = np.stack([sentence_mean_vectors(store.layer(layer), store.offsets) for layer in store.layers])
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as handle:
                np.save(handle, means)
            write_json(path.with_suffix(".json"), {"layers": list(store.layers), "from_store": store.path.name,
                                                   "sha256": file_sha256(tmp)})
        return cls(path)


def _extract_pools(encoder, pools: dict[str, dict[str, list]], layers, cache: Path, progress: bool, device,
                   sentence_only: Iterable[str] = ()):
    """The vectors of every source's split, from the cache's shared stores (keyed by the model fingerprint, the
    settings and the words: one extraction per model and corpus, shared with the other analyses).

    Pools of a source in ``sentence_only`` keep their sentence means (:class:`SentenceMeans`, about 20x smaller
    than the words), read again on a rerun instead of the words."""
    stores = {}
    layer_key = "all" if layers is None else "-".join(map(str, layers))
    sentence_only = set(sentence_only)
    for source, by_split in pools.items():
        for split, sentences in by_split.items():
            means_path = cache / "stores" / (f"{source}-{split}-{encoder.fingerprint}-{corpus_hash(sentences)}"
                                             f"-L{layer_key}-sentence-means.npy")
            if source in sentence_only and means_path.is_file():
                try:
                    stores[source, split] = SentenceMeans(means_path)
                except (OSError, ValueError, KeyError) as error:  # unreadable, changed or without its layers
                    reason = (str(error).splitlines() or [type(error).__name__])[0]
                    warnings.warn(f"{means_path}: damaged ({reason}); recomputing it", BertologyWarning, stacklevel=2)
                    means_path.unlink(missing_ok=True)
                else:
                    continue
            store = shared_store(encoder, sentences, cache, layers=layers, pool="word-mean", dtype="float16",
                                 progress=progress, device=device)
            stores[source, split] = SentenceMeans.from_store(store, means_path) if source in sentence_only else store
    return stores


def sentence_only_sources(datasets: Sequence[ProbingDataset]) -> set[str]:
    """The sources whose every task is sentence-level: their pools need only sentence means."""
    sources = {d.source for d in datasets}
    return {s for s in sources if all(d.level == "sentence" for d in datasets if d.source == s)}


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
