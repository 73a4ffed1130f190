"""Probing labels of your own: word vectors from a store, your labels, splits and the usual baselines.

::

    from bertology.extraction import extract
    from bertology.probing import features_from_store, probe_labels

    store = extract(encoder, sentences, "my-store")              # word-pooled (the default)
    labels = [my_label(word) for s in sentences for word in s.words]   # one per word, None = leave out
    result = probe_labels(store, labels, seeds=(0, 1, 2), untrained=twin_store)
    result["table2"]                                              # per layer: accuracy and its baselines

The result has the shape of :func:`~bertology.probing.run_probing`'s: tables ``results`` (tidy),
``summary``, ``table2`` and ``datasets``; accuracies are fractions.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from bertology.errors import DataError, StoreError
from bertology.numbering import parse_layers
from bertology.probing.controls import ControlTask, majority_label, store_word_types, word_type
from bertology.probing.datasets import SPLITS
from bertology.probing.experiment import (
    Scores,
    _baseline_rows,
    _intervals,
    _selectivity,
    _tables,
    fit_and_score,
    fit_and_score_group,
    mdl_scores,
    training_fits,
    used_train,
    with_point,
)
from bertology.probing.probes import LayerwiseProbe, as_layer_tensor, grid_of
from bertology.probing.spec import ProbeLabelsSpec
from bertology.progress import progress_bar
from bertology.results import Result
from bertology.runtime import derive_seed, resolve_device
from bertology.settings import spec_of
from bertology.store import Store

#: Shares of train, dev and test when no splits are given.
DEFAULT_SPLIT = (0.8, 0.1, 0.1)


def _open(store):
    if isinstance(store, (str, os.PathLike)):
        return Store.open(store)
    return store


def _is_store(value) -> bool:
    return hasattr(value, "layer") and hasattr(value, "offsets") and hasattr(value, "layers")


def features_from_store(store, layers=None) -> np.ndarray:
    """Word vectors of ``layers`` from a word-pooled store: float32 ``[n_layers, n_words, dim]``.

    ``store``: a :class:`~bertology.store.Store` or its folder. Rows are the words of all sentences in
    order (sentence ``i`` is ``store.offsets[i]:store.offsets[i + 1]``). ``layers``: ``None`` (every layer
    the store holds), a list, or a spec such as ``"0,3,6"``, ``"L3"``, ``"last"`` (layer ``l`` is
    ``hidden_states[l]``, 0 = embeddings). Memory: ``n_layers * n_words * dim * 4`` bytes.
    """
    store = _open(store)
    pool = str(getattr(store, "pool", "word-mean"))
    if not pool.startswith("word-"):
        raise StoreError(f"{getattr(store, 'path', 'store')}: pool={pool!r}; probing words needs a word pool "
                         "(extract with pool='word-mean', 'word-first' or 'word-last')")
    return np.stack([np.asarray(store.layer(layer), dtype=np.float32) for layer in _store_layers(store, layers)])


def _store_layers(store, layers) -> list[int]:
    available = list(store.layers)
    chosen = parse_layers(layers, max(available)) if layers is not None else None
    chosen = available if chosen is None else chosen
    missing = [layer for layer in chosen if layer not in available]
    if missing:
        raise StoreError(f"layers {missing} are not in the store; it holds {available}")
    return chosen


def _split_assignment(splits, n: int, groups: np.ndarray, split_seed: int) -> np.ndarray:
    """``[n]`` array of "train"/"dev"/"test"."""
    if splits is None:
        # Whole sentences go to one split, so no sentence is half in train and half in test.
        unique = np.unique(groups)
        order = np.random.default_rng(derive_seed(split_seed, "probe-labels-split")).permutation(len(unique))
        cut_train = int(round(DEFAULT_SPLIT[0] * len(unique)))
        cut_dev = cut_train + max(1, int(round(DEFAULT_SPLIT[1] * len(unique))))
        names = np.empty(len(unique), dtype=object)
        names[order[:cut_train]], names[order[cut_train:cut_dev]], names[order[cut_dev:]] = "train", "dev", "test"
        return names[np.searchsorted(unique, groups)]
    if isinstance(splits, Mapping):
        out = np.full(n, None, dtype=object)
        for name, index in splits.items():
            if name not in SPLITS:
                raise DataError(f"splits: unknown split {name!r}; expected train, dev and test")
            out[np.asarray(index, dtype=np.int64)] = name
        return out
    out = np.asarray(list(splits), dtype=object)
    if out.shape != (n,):
        raise DataError(f"splits: {len(out)} entries for {n} examples; expected one of train/dev/test per example")
    bad = sorted({str(v) for v in out if v not in SPLITS and v is not None})
    if bad:
        raise DataError(f"splits: unknown values {bad}; expected train, dev or test")
    return out


def probe_labels(
    features,
    labels: Sequence,
    splits=None,
    spec: ProbeLabelsSpec | None = None,
    *,
    untrained=None,
    control_keys: Sequence | None = None,
    task: str = "labels",
    model: str | None = None,
    device: str | None = "auto",
    progress: bool = False,
    **settings,
) -> Result:
    """Probe every layer for ``labels`` with the majority, control and untrained-twin baselines.

    ``features``: a word-pooled Store (or its folder), or an array ``[n_layers, n, dim]`` / ``[n, dim]``.
    ``labels``: ``[n]`` labels of any hashable type, one per word (per row); ``None`` leaves a word out.
    ``splits``: ``None`` (80/10/10 by sentence for a store, by row for an array, drawn from
    ``derive_seed(split_seed, "probe-labels-split")``), a ``[n]`` sequence of ``"train"/"dev"/"test"``, or
    ``{"train": indices, "dev": indices, "test": indices}``. Dev chooses each layer's L2; test is only scored.
    ``untrained``: the untrained twin's features for the same words (a Store or array): baseline
    ``untrained``. ``control``: Hewitt-and-Liang control labels keyed on ``control_keys`` (default: the
    store's word forms under ``control_types``: ``"auto"`` follows the tokenizer the store was extracted
    with, lower-cased for an uncased one, exact forms otherwise; or ``"lower"``/``"exact"``; an array
    without ``control_keys`` gets no control baseline; given keys are used as they are).
    Seed ``s`` draws its training rows (``train_sampling="bootstrap"``, the default: a resample with
    replacement of ``train_fraction`` of them, ``derive_seed(s, "train-subset", task)``; ``"all"``: every row,
    or a random ``train_fraction`` subset), initialises the probes and draws the control labels. Every
    accuracy gets a 95% interval (``ci_low``/``ci_high`` in ``summary`` and ``table2``) from the bootstrap over
    evaluation rows (:mod:`bertology.probing.summary`). With bootstrap seeds, each probe is also fitted once on
    every training row (the point fit: rows without a seed), which gives the number; the interval is centred on
    it and holds the seeds' training variation as well as the test-set sampling.

    ``mdl``: also each layer's online codelength (Voita and Titov 2020; :mod:`bertology.probing.mdl`) over
    ``mdl_timestamps``, for the task, its control task and the twin, on the first seed: rows of the ``train``
    split with metrics ``codelength``, ``uniform_codelength`` (bits) and ``compression``.

    Returns a :class:`~bertology.results.Result` with the tables of :func:`run_probing` (``results``,
    ``summary``, ``table2``, ``datasets``); accuracies are fractions.

    The settings (layers, seeds, control, control_types, probe, l2, hidden, train_fraction, train_sampling, mdl,
    mdl_timestamps, n_boot, split_seed, probe_options) are ``spec``
    (:class:`~bertology.probing.spec.ProbeLabelsSpec`), or its fields as keywords, checked once.
    """
    spec = spec_of(ProbeLabelsSpec, spec, settings, "probe_labels")
    seeds, layers, control, control_types = list(spec.seeds), spec.layers, spec.control, spec.control_types
    probe, hidden, probe_options = spec.probe, spec.hidden, spec.probe_options
    l2 = spec.l2
    train_fraction, train_sampling = spec.train_fraction, spec.train_sampling
    n_boot, split_seed = spec.n_boot, spec.split_seed
    mdl, mdl_timestamps = spec.mdl, spec.mdl_timestamps
    features = _open(features)
    types_used = "given keys" if control_keys is not None else None
    if _is_store(features):
        store = features
        layer_ids = _store_layers(store, layers)
        X = features_from_store(store, layer_ids)
        groups = np.repeat(np.arange(len(store.offsets) - 1), np.diff(store.offsets))
        if control_keys is None and control:
            types_used = store_word_types(store, control_types)
            control_keys = [word_type(w, types_used) for i in range(store.n_sentences) for w in store.words(i)]
        model = model or (getattr(store, "index", None) or {}).get("model", {}).get("name")
    else:
        X = as_layer_tensor(features, "features")
        layer_ids = list(range(X.shape[0])) if layers is None else [int(l) for l in parse_layers(layers)]
        if len(layer_ids) != X.shape[0]:
            raise DataError(f"layers {layer_ids}: {len(layer_ids)} names for {X.shape[0]} layers of features")
        groups = np.arange(X.shape[1])
    n = X.shape[1]
    labels = np.asarray(list(labels), dtype=object)
    if labels.shape != (n,):
        raise DataError(f"labels: {len(labels)} labels for {n} words; expected one per word (None leaves one out)")
    if control_keys is not None and len(control_keys) != n:
        raise DataError(f"control_keys: {len(control_keys)} keys for {n} words; expected one per word")
    assignment = _split_assignment(splits, n, groups, split_seed)
    labelled = np.array([v is not None and not (isinstance(v, float) and np.isnan(v)) for v in labels])
    index = {s: np.flatnonzero((assignment == s) & labelled) for s in SPLITS}
    for split, rows in index.items():
        if len(rows) == 0:
            raise DataError(f"no labelled {split} examples; give splits with train, dev and test")
    twin = None
    if untrained is not None:
        untrained = _open(untrained)
        twin = features_from_store(untrained, layer_ids) if _is_store(untrained) else as_layer_tensor(untrained,
                                                                                                        "untrained")
        if twin.shape != X.shape:
            raise DataError(f"untrained features have shape {twin.shape}; expected {X.shape} (the same words)")
    model = model or "features"
    y = {s: labels[index[s]] for s in SPLITS}
    Xs = {s: X[:, index[s]] for s in SPLITS}
    probe_kwargs = {"l2": l2, "hidden": hidden, "device": resolve_device(device), **(probe_options or {})}
    rows: list[dict] = []
    correct: dict = {}
    label = majority_label(y["train"])
    rows += _baseline_rows(model, task, "majority", "majority", layer_ids, seeds,
                           {s: [label] * len(y[s]) for s in ("dev", "test")}, y, correct)
    with_control = control and control_keys is not None
    y_controls = {}
    if with_control:
        keys = {s: [control_keys[i] for i in index[s]] for s in SPLITS}
        for seed in seeds:
            assigner = ControlTask(y["train"], seed=seed)
            y_controls[seed] = {s: assigner.labels(keys[s]) for s in SPLITS}
    Xu = {s: twin[:, index[s]] for s in SPLITS} if twin is not None else None
    fits = {seed: training_fits(seed, seeds, task, y["train"], train_fraction, train_sampling) for seed in seeds}
    done: dict[tuple, Scores] = {}  # (seed, fit number, baseline) -> scores
    with progress_bar(progress, transient=True) as bar:
        job = bar.add_task(f"probing {task}", total=(len(seeds) + with_point(train_sampling))
                           * (1 + with_control + (twin is not None)))
        if LayerwiseProbe(kind=probe, **probe_kwargs)._exact():
            # The fits on the same features solved together (fit_and_score_group): each its own optimum.
            encoder, untrained = [], []
            for seed in dict.fromkeys(seeds):
                for i, fit in enumerate(fits[seed]):
                    encoder.append(((seed, i, "none"), seed, y, fit.index, "none"))
                    if with_control:
                        encoder.append(((seed, i, "control"), seed, y_controls[seed], fit.index, "control"))
                    if Xu is not None:
                        untrained.append(((seed, i, "untrained"), seed, y, fit.index, "untrained"))
            for features_of, jobs in ((Xs, encoder), (Xu, untrained)):
                if jobs:
                    scored = fit_and_score_group(probe, probe_kwargs, features_of, [j[1:] for j in jobs], layer_ids,
                                                 model, task)
                    done.update((j[0], scores) for j, scores in zip(jobs, scored))
                    bar.advance(job, len(jobs))

        def scored(seed, i, fit, labels, features_of, baseline):
            if (seed, i, baseline) not in done:
                done[seed, i, baseline] = fit_and_score(probe, probe_kwargs, seed, features_of, labels, fit.index,
                                                        layer_ids, model, task, baseline, scalar_mix=False)
                bar.advance(job)
            return done[seed, i, baseline]

        for seed in seeds:
            y_control = y_controls.get(seed)
            for i, fit in enumerate(fits[seed]):
                task_scores = fit.scores(scored(seed, i, fit, y, Xs, "none"))
                fitted = [task_scores]
                if with_control:
                    control_scores = fit.scores(scored(seed, i, fit, y_control, Xs, "control"))
                    control_scores.rows += _selectivity(task_scores.rows, control_scores.rows)
                    fitted.append(control_scores)
                if Xu is not None:
                    fitted.append(fit.scores(scored(seed, i, fit, y, Xu, "untrained")))
                for scores in fitted:
                    rows += scores.rows
                    Scores(hits=correct).add(Scores(hits=scores.hits))
            if mdl and seed == seeds[0]:
                code = {"layers": layer_ids, "model": model, "task": task, "seed": seed, "probe": probe,
                        "timestamps": mdl_timestamps, "l2": l2, "device": probe_kwargs["device"]}
                rows += mdl_scores(Xs, y, baseline="none", **code).rows
                if with_control:
                    rows += mdl_scores(Xs, y_control, baseline="control", **code).rows
                if twin is not None:
                    rows += mdl_scores(Xu, y, baseline="untrained", **code).rows
    frame = pd.DataFrame(rows)
    used = used_train(len(index["train"]), train_fraction)
    sizes = pd.DataFrame([{"task": task, "level": "token", "source": "given",
                           **{s: len(index[s]) for s in SPLITS}, "train_used": used, "unit": "words",
                           "notes": [] if with_control else ["no control task: no control_keys"],
                           "n_train": used, "n_dev": len(index["dev"]), "n_test": len(index["test"]), "status": "ok"}])
    meta = {"model": model, "task": task, "seeds": seeds, "layers": [int(l) for l in layer_ids],
            "train_fraction": train_fraction, "train_sampling": train_sampling,
            "mdl": list(mdl_timestamps) if mdl else None, "probe": probe, "l2": [float(v) for v in np.atleast_1d(grid_of(l2, probe, probe_options))],
            "control": bool(with_control), "control_types": types_used if with_control else None, "untrained": twin is not None, "split_seed": split_seed,
            "splits_given": splits is not None}
    intervals = pd.DataFrame(_intervals(model, task, layer_ids, correct, n_boot))
    return Result("probing", tables=_tables(frame, sizes, intervals), meta=meta)
