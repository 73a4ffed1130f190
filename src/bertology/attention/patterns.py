"""Kovaleva et al. (2019) self-attention pattern types: vertical, diagonal, vertical+diagonal, block, heterogeneous.

"Revealing the Dark Secrets of BERT" sorts every head's token-level attention map into five types and reports
the share of each type per layer. They hand-labelled about 400 maps and trained a small CNN. We do the same
with a labelled set kept in ``resources/attention_patterns`` (see docs/attention_patterns.md for the labelling
protocol). The parts, one module each:

* :mod:`~bertology.attention.pattern_maps`: token-level maps (:func:`token_attention_maps`) and the 32x32 images;
* :mod:`~bertology.attention.pattern_features`: interpretable features of a map;
* :mod:`~bertology.attention.pattern_classifiers`: the rule, feature and CNN classifiers (:data:`PATTERN_TYPES`);
* :mod:`~bertology.attention.pattern_resources`: the shipped labelled set, CNN and evaluation;
* :mod:`~bertology.attention.pattern_synthetic`: synthetic maps to train the CNN on the rare block type;
* :func:`bertology.attention.figures.plot_pattern_proportions`: the stacked-bar figure.

This module is the analysis: :func:`pattern_types` classifies maps, :func:`pattern_proportions` counts shares,
and :func:`pattern_analysis` is the experiment end to end (an encoder, its untrained twin, texts -> a Result).

Numbering (:mod:`bertology.numbering`): ``layer`` is the hidden_states layer (1..L; its attention is
``attentions[layer - 1]``), ``head`` counts from 0, ``head_label`` is ``L4H5``. Shares are fractions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from bertology.attention.choices import CLASSIFIERS
from bertology.attention.pattern_classifiers import (
    PATTERN_TYPES,
    CNNPatternClassifier,
    FeaturePatternClassifier,
    RulePatternClassifier,
)
from bertology.attention.pattern_features import attention_features
from bertology.attention.pattern_maps import (
    MAP_SIZE,
    AttentionSample,
    as_attention_sample,
    resize_map,
    token_attention_maps,
)
from bertology.attention.pattern_resources import load_pattern_classifier
from bertology.attention.stats import _layer_numbers
from bertology.data import read_corpus
from bertology.data.glue import read_glue
from bertology.errors import DataError
from bertology.numbering import head_label
from bertology.progress import track
from bertology.results import Result, tidy

# Classifier names :func:`pattern_types` accepts: CLASSIFIERS, from bertology.attention.choices
# (a light module, so the command line checks ``--classifier`` without sklearn).


def _classifier(classifier):
    if not isinstance(classifier, str):
        return classifier
    if classifier == "cnn":
        return load_pattern_classifier()
    if classifier == "rules":
        return RulePatternClassifier()
    raise DataError(f"unknown classifier {classifier!r}; expected one of {', '.join(CLASSIFIERS)}")


def pattern_types(
    maps: Iterable[AttentionSample | np.ndarray],
    *,
    classifier: str | CNNPatternClassifier | RulePatternClassifier | FeaturePatternClassifier = "cnn",
    layers: Sequence[int] | None = None,
    progress: bool = False,
    total: int | None = None,
) -> pd.DataFrame:
    """Classify every head of every input into a Kovaleva pattern type.

    ``maps`` yields :class:`AttentionSample` (e.g. from :func:`token_attention_maps`) or plain arrays
    ``[n_layers, n_heads, n, n]``. ``layers`` names the layers those arrays hold (default 1..L; a store of
    some layers passes its ``attention_layers``). ``classifier`` is ``"cnn"`` (shipped), ``"rules"``, or a
    fitted classifier. Returns a tidy table, one row per (sentence, layer, head):
    ``sentence, layer, head, head_label, type`` (``type`` categorical over :data:`PATTERN_TYPES`).
    """
    classifier = _classifier(classifier)
    rows = []
    numbers: list[int] | None = None
    for index, item in enumerate(track(maps, "classifying attention maps", total=total, enabled=progress)):
        sample = as_attention_sample(item, index)
        n_layers, n_heads = sample.attentions.shape[:2]
        if numbers is None or len(numbers) != n_layers:
            numbers = _layer_numbers(layers, n_layers)
        if isinstance(classifier, CNNPatternClassifier):
            labels = classifier.predict_images(resize_map(sample.attentions).reshape(-1, MAP_SIZE, MAP_SIZE))
        else:
            labels = classifier.predict_features(attention_features(sample))
        sentence = sample.sentence_id if sample.sentence_id is not None else str(index)
        labels = np.asarray(labels).reshape(n_layers, n_heads)
        for position, layer in enumerate(numbers):
            for head in range(n_heads):
                rows.append((sentence, layer, head, head_label(layer, head), labels[position, head]))
    if not rows:
        raise DataError("no attention maps to classify")
    frame = pd.DataFrame(rows, columns=["sentence", "layer", "head", "head_label", "type"])
    frame["type"] = pd.Categorical(frame["type"], categories=list(PATTERN_TYPES))
    return tidy(frame)


def type_proportions(types: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Share of each pattern type within each group of ``by`` (tidy: ``*by, type, count, proportion``)."""
    missing = [c for c in (*by, "type") if c not in types.columns]
    if missing:
        raise DataError(f"pattern table lacks column(s) {missing}; expected the output of pattern_types")
    kinds = pd.Categorical(types["type"].astype(str), categories=list(PATTERN_TYPES))
    frame = types.assign(type=kinds)
    if by:
        counts = frame.groupby([*by, "type"], observed=False, sort=False).size().rename("count").reset_index()
        counts = counts.sort_values([*by, "type"], kind="stable")
        totals = counts.groupby(list(by), sort=False)["count"].transform("sum")
    else:
        counts = frame.groupby("type", observed=False).size().rename("count").reset_index()
        totals = counts["count"].sum()
    counts["proportion"] = counts["count"] / np.maximum(totals, 1)
    return tidy(counts)


def pattern_proportions(types: pd.DataFrame) -> Result:
    """Share of each pattern type, per layer and overall, from a :func:`pattern_types` table.

    Returns a :class:`~bertology.results.Result` named ``pattern_proportions`` with tables ``by_layer``
    (``layer, type, count, proportion``; shares sum to 1 in each layer) and ``overall`` (``type, count,
    proportion``). A ``model`` column in ``types`` is kept: then the shares are per model.
    """
    group = ["model"] if "model" in types.columns else []
    return Result("pattern_proportions", {"by_layer": type_proportions(types, [*group, "layer"]),
                                          "overall": type_proportions(types, group)})


def compare_pattern_proportions(tables: dict[str, pd.DataFrame]) -> Result:
    """:func:`pattern_proportions` for several models (``{name: pattern_types(...)}``): the same two tables,
    each with a ``model`` column first, so shifts (e.g. untrained vs trained) read off."""
    if len(tables) < 1:
        raise DataError("no pattern tables to compare")
    types = pd.concat([table.assign(model=name) for name, table in tables.items()], ignore_index=True)
    types["model"] = pd.Categorical(types["model"], categories=list(tables))  # keep the given order
    result = pattern_proportions(types)
    for frame in result.tables.values():
        frame["model"] = frame["model"].astype(str)
    return result


def pattern_analysis(
    encoder,
    texts: Sequence[str | tuple[str, str]],
    *,
    ids: Sequence[str] | None = None,
    untrained_seeds: Sequence[int] = (0,),
    classifier: str = "cnn",
    layers: Sequence[int] | None = None,
    max_length: int = 128,
    batch_size: int = 16,
    source: str | None = None,
    progress: bool = False,
) -> Result:
    """Kovaleva et al.'s pattern types of ``encoder`` (and of its untrained twins) on ``texts``.

    ``texts`` are sentences or ``(a, b)`` pairs; ``untrained_seeds`` the seeds of the untrained twins to
    compare with (``()`` for none); ``layers`` the transformer layers to classify (default all).
    The encoder's attention implementation is left as it was.

    Returns a :class:`~bertology.results.Result` named ``attention_patterns`` with tables ``types``
    (``model, sentence, layer, head, head_label, type``: one row per map), ``by_layer`` and ``overall``
    (shares per model, see :func:`pattern_proportions`); ``meta`` holds each model's name, fingerprint
    and untrained seed, the classifier, the source and the number of texts.
    """
    texts = list(texts)
    if not texts:
        raise DataError("no texts to classify; expected at least one sentence or pair")
    chosen = None if layers is None else sorted({int(layer) for layer in layers})
    models = [encoder] + [encoder.untrained(seed) for seed in untrained_seeds]
    tables = {}
    for model in models:
        maps = token_attention_maps(model, texts, ids=ids, max_length=max_length, batch_size=batch_size)
        if chosen is not None:
            maps = (_select_layers(sample, chosen) for sample in maps)
        tables[model.name] = pattern_types(maps, classifier=classifier, layers=chosen, progress=progress,
                                           total=len(texts))
    proportions = compare_pattern_proportions(tables)
    types = pd.concat([table.assign(model=name) for name, table in tables.items()], ignore_index=True)
    types = types[["model"] + [c for c in types.columns if c != "model"]]
    meta = {
        "models": [{"name": m.name, "fingerprint": m.fingerprint, "untrained_seed": m.untrained_seed} for m in models],
        "classifier": classifier if isinstance(classifier, str) else type(classifier).__name__,
        "source": source, "n_texts": len(texts), "layers": chosen, "max_length": max_length,
    }
    return Result("attention_patterns", {"types": types, **proportions.tables}, meta=meta)


def _select_layers(sample: AttentionSample, layers: Sequence[int]) -> AttentionSample:
    n_layers = sample.attentions.shape[0]
    bad = [layer for layer in layers if not 1 <= layer <= n_layers]
    if bad:
        raise DataError(f"layers {bad}: this model has transformer layers 1-{n_layers}")
    sample.attentions = sample.attentions[[layer - 1 for layer in layers]]
    return sample


def pattern_inputs(data: str | Path = "ewt-dev", glue: str | None = None,
                   max_sentences: int | None = 200) -> tuple[list, list[str], str]:
    """Texts to classify, their ids and a description of the source: ``(texts, ids, source)``.

    ``glue`` (a GLUE task name) takes its dev set (rte/mrpc give ``(a, b)`` pairs, encoded as
    ``[CLS] A [SEP] B [SEP]``); otherwise ``data`` is a packaged corpus (``ewt-train``, ``ewt-dev``, ``ewt-test``) or a corpus file
    (.conllu/.txt/.tsv). At most ``max_sentences`` inputs are kept.
    """
    if glue:
        examples = read_glue(glue, "dev")[:max_sentences]
        texts = [(e.text_a, e.text_b) if e.text_b else e.text_a for e in examples]
        return texts, [e.id for e in examples], f"GLUE {glue} dev"
    data = str(data)
    sentences = read_corpus(data)[:max_sentences]  # a file, or a packaged corpus by name (ewt-dev, ...)
    return [" ".join(s.words) for s in sentences], [s.id for s in sentences], data
