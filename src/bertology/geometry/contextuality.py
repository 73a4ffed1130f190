"""How contextual are the representations? Ethayarajh (2019), layer by layer, for a model and its twin.

Per layer ``l`` (0 = embeddings, as everywhere in bertology), from a word-pooled store:

* **self-similarity**: per word type, the mean cosine between its vectors in different contexts; then
  the unweighted mean over word types.
* **intra-sentence similarity**: per sentence, the mean cosine between each word vector and the sentence
  vector (the mean of its word vectors); then the mean over sampled sentences.
* **maximum explainable variance (MEV)**: per word type, the share of its occurrence vectors' variance
  along their first principal direction (:func:`~.measures.max_explainable_variance`); mean over types.
* **anisotropy baseline**: the mean cosine between random words from random sentences (one word from
  each sampled sentence, pairs of different sentences); and the MEV of those random words.

Adjusted values subtract the baseline: self- and intra-sentence similarity minus the anisotropy
baseline, MEV minus the random words' MEV, exactly as kawine/contextual's ``visualize.py`` does.

Choices, following kawine/contextual unless said otherwise (docs/knowledge.md lists them):

* word types are the corpus's words as written (kawine: BERT's word pieces), pooled from subwords by
  their mean; types made only of punctuation are left out (kawine: spaCy's ``is_punct``); a type needs
  ``min_count`` (5) occurrences;
* self-similarity uses every pair of a type's occurrences when there are at most ``max_pairs`` (1,000)
  pairs, else ``max_pairs`` distinct pairs drawn with the seed (kawine: 1,000 ordered pairs);
  ``max_pairs=None`` always uses every pair (computed exactly in O(n d));
* ``samples`` (1,000) sentences of two or more words are drawn with the seed for the intra-sentence
  similarity and the random words (kawine: 1,000 sentences, one-word sentences included; a one-word
  sentence's similarity to itself is 1 by definition, so it is left out here); the anisotropy baseline
  averages ``max_pairs`` random pairs of distinct sampled words, or all of them with ``max_pairs=None``
  (kawine: 1,000 pairs drawn with replacement, a word occasionally paired with itself);
* the samples are drawn once per seed and shared by every layer and by the model and its twin, so
  layers and encoders are compared on the same words.

The seed draws the samples and initialises the untrained twin, so the spread over seeds covers both.
"""

from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from bertology.errors import DataError
from bertology.geometry import measures
from bertology.geometry.stores import cached_store, prepare_run
from bertology.geometry.spec import ContextualitySpec
from bertology.models import Encoder
from bertology.plots import finish_layer_figure
from bertology.progress import progress_bar
from bertology.results import Result
from bertology.runtime import derive_seed
from bertology.settings import spec_of

MEASURES = ("self_similarity", "intra_sentence_similarity", "max_explainable_variance", "anisotropy")
BASELINE_OF = {"self_similarity": "anisotropy", "intra_sentence_similarity": "anisotropy",
               "max_explainable_variance": "random_words_explained_variance"}

#: kawine/contextual's released numbers for bert-base-cased (STS 2012-2016 sentences, word pieces):
#: layer -> value, from ``bert/embedding_space_stats.json`` (anisotropy = "mean cosine similarity
#: across words", intra-sentence = "... between sentence and words", the random words' MEV) and the
#: per-layer means over the 8,159 word types of ``bert/self_similarity.csv`` and
#: ``bert/variance_explained.csv`` (no MEV at layer 0 there).
KAWINE_BERT_BASE_CASED = {
    "anisotropy": [0.105, 0.168, 0.219, 0.245, 0.327, 0.377, 0.42, 0.398, 0.399, 0.484, 0.561, 0.675, 0.477],
    "intra_sentence_similarity": [0.435, 0.522, 0.57, 0.59, 0.642, 0.695, 0.726, 0.711, 0.72, 0.771, 0.82, 0.87,
                                  0.776],
    "self_similarity": [0.954, 0.921, 0.871, 0.823, 0.798, 0.781, 0.765, 0.744, 0.731, 0.754, 0.782, 0.839,
                        0.755],
    "max_explainable_variance": [None, 0.010, 0.015, 0.020, 0.023, 0.024, 0.025, 0.028, 0.029, 0.026, 0.023,
                                 0.026, 0.040],
    "random_words_explained_variance": [0.039, 0.025, 0.017, 0.012, 0.014, 0.012, 0.012, 0.01, 0.012, 0.015,
                                        0.022, 0.04, 0.009],
}


def is_punctuation(word: str) -> bool:
    """A word made only of Unicode punctuation (``.``, ``--``, ``"``); symbols such as ``$`` are words."""
    return bool(word) and all(unicodedata.category(ch).startswith("P") for ch in word)


@dataclass
class ContextualitySample:
    """What one seed looks at, in store rows (the word's position in the layer matrix).

    ``type_rows[type_offsets[t]:type_offsets[t+1]]`` are the occurrences of ``types[t]``;
    ``pair_a/pair_b/pair_type`` the sampled pairs of the types that have more than ``max_pairs`` pairs
    (``exact[t]`` marks the others, which use every pair); ``sentence_rows`` the rows of the sampled
    sentences back to back (sentence ``k`` is ``sentence_offsets[k]:sentence_offsets[k+1]``);
    ``random_rows`` one word of each sampled sentence and ``random_a/random_b`` the pairs of them used
    (``None``: all pairs).
    """

    seed: int
    types: list[str]
    type_rows: np.ndarray
    type_offsets: np.ndarray
    exact: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    pair_type: np.ndarray
    sentences: np.ndarray
    sentence_rows: np.ndarray
    sentence_offsets: np.ndarray
    random_rows: np.ndarray
    random_pairs: tuple[np.ndarray, np.ndarray] | None

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.type_offsets)


def plan_sample(sentence_words: Sequence[Sequence[str]], seed: int = 0, min_count: int = 5,
                max_pairs: int | None = 1000, samples: int = 1000) -> ContextualitySample:
    """Choose the word types, pairs, sentences and random words for one seed (see the module docstring).

    Raises :class:`DataError` when no word type occurs ``min_count`` times or no sentence has two words.
    """
    if min_count < 2:
        raise DataError(f"min_count {min_count}: a word type needs at least 2 occurrences to compare")
    if samples < 2:
        raise DataError(f"samples {samples}: the anisotropy baseline needs at least 2 sampled sentences")
    if max_pairs is not None and max_pairs < 1:
        raise DataError(f"max_pairs {max_pairs}: expected at least 1 (or None for every pair)")
    lengths = np.asarray([len(words) for words in sentence_words], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    occurrences: dict[str, list[int]] = {}
    row = 0
    for words in sentence_words:
        for word in words:
            if not is_punctuation(word):
                occurrences.setdefault(word, []).append(row)
            row += 1
    types = sorted(w for w, rows in occurrences.items() if len(rows) >= min_count)
    if not types:
        raise DataError(f"no word type occurs {min_count} times in the {len(sentence_words)} sentences; "
                        "give more text (max_sentences=, data=) or lower min_count=")
    rng = np.random.default_rng(derive_seed(seed, "contextuality"))
    type_rows = [np.asarray(occurrences[w], dtype=np.int64) for w in types]
    exact = np.ones(len(types), dtype=bool)
    pair_a, pair_b, pair_type = [], [], []
    for t, rows in enumerate(type_rows):
        pairs = measures.sample_pairs(len(rows), max_pairs, rng)
        if pairs is not None:
            exact[t] = False
            pair_a.append(rows[pairs[0]])
            pair_b.append(rows[pairs[1]])
            pair_type.append(np.full(len(pairs[0]), t, dtype=np.int64))
    eligible = np.flatnonzero(lengths >= 2)
    if len(eligible) < 2:
        raise DataError("fewer than two sentences of two or more words; give more text")
    chosen = np.sort(rng.choice(eligible, size=min(samples, len(eligible)), replace=False))
    sentence_rows = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in chosen])
    sentence_offsets = np.concatenate([[0], np.cumsum(lengths[chosen])]).astype(np.int64)
    random_rows = offsets[chosen] + rng.integers(0, lengths[chosen])
    random_pairs = measures.sample_pairs(len(random_rows), max_pairs, rng)
    empty = np.zeros(0, dtype=np.int64)
    return ContextualitySample(
        seed=seed, types=types, type_rows=np.concatenate(type_rows),
        type_offsets=np.concatenate([[0], np.cumsum([len(r) for r in type_rows])]).astype(np.int64),
        exact=exact, pair_a=np.concatenate(pair_a) if pair_a else empty,
        pair_b=np.concatenate(pair_b) if pair_b else empty,
        pair_type=np.concatenate(pair_type) if pair_type else empty,
        sentences=chosen, sentence_rows=sentence_rows, sentence_offsets=sentence_offsets,
        random_rows=random_rows, random_pairs=random_pairs,
    )


@dataclass
class LayerMeasures:
    """The measures of one layer for one sample: per type, per sentence and the baselines."""

    self_similarity: np.ndarray  # [types]
    max_explainable_variance: np.ndarray  # [types]
    intra_sentence_similarity: np.ndarray  # [sampled sentences]
    anisotropy: float
    random_words_explained_variance: float

    def summary(self) -> dict[str, tuple[float, float]]:
        """measure -> (value, baseline); the anisotropy has no baseline of its own."""
        random_cosine, random_mev = self.anisotropy, self.random_words_explained_variance
        return {
            "self_similarity": (float(np.nanmean(self.self_similarity)), random_cosine),
            "intra_sentence_similarity": (float(np.mean(self.intra_sentence_similarity)), random_cosine),
            "max_explainable_variance": (float(np.nanmean(self.max_explainable_variance)), random_mev),
            "anisotropy": (random_cosine, float("nan")),
        }


def type_explainable_variance(vectors: np.ndarray, sample: ContextualitySample) -> np.ndarray:
    """MEV of each word type of ``sample`` (it depends on the types, not on the sampled pairs)."""
    return measures.max_explainable_variance_grouped(vectors[sample.type_rows], sample.type_offsets)


def measure_layer(vectors: np.ndarray, sample: ContextualitySample, mev: np.ndarray | None = None
                  ) -> LayerMeasures:
    """Every measure of one layer's word vectors ``[rows, dim]`` for ``sample`` (``mev``: the types' MEV
    when already computed for another sample of the same types)."""
    units = measures.unit_rows(vectors[sample.type_rows])
    local = np.full(len(vectors), -1, dtype=np.int64)  # global row -> its position in units (types only)
    local[sample.type_rows] = np.arange(len(sample.type_rows))
    counts = sample.counts
    starts = sample.type_offsets[:-1]
    sums = np.add.reduceat(units, starts, axis=0)
    squares = np.add.reduceat(np.einsum("ij,ij->i", units, units), starts)
    self_sim = (np.einsum("ij,ij->i", sums, sums) - squares) / (counts * (counts - 1))
    if len(sample.pair_type):
        compact = units.astype(np.float32)  # halves the memory traffic of gathering many pairs
        cosines = np.einsum("ij,ij->i", compact[local[sample.pair_a]], compact[local[sample.pair_b]])
        sampled = np.bincount(sample.pair_type, weights=cosines, minlength=len(counts)) \
            / np.maximum(np.bincount(sample.pair_type, minlength=len(counts)), 1)
        self_sim = np.where(sample.exact, self_sim, sampled)
    if mev is None:
        mev = type_explainable_variance(vectors, sample)
    intra = measures.intra_sentence_similarity(vectors[sample.sentence_rows], sample.sentence_offsets)
    random_vectors = vectors[sample.random_rows]
    anisotropy = measures.mean_pair_cosine(measures.unit_rows(random_vectors), sample.random_pairs)
    return LayerMeasures(self_sim, mev, intra, anisotropy, measures.random_words_explained_variance(random_vectors))


def _layer_rows(encoder_kind: str, seed: int, layer: int, result: LayerMeasures) -> list[dict]:
    rows = []
    for measure, (value, baseline) in result.summary().items():
        rows.append({"weights": encoder_kind, "seed": seed, "layer": layer, "measure": measure, "value": value,
                     "baseline": baseline, "adjusted": value - baseline if measure != "anisotropy" else np.nan,
                     "baseline_measure": BASELINE_OF.get(measure)})
    return rows


def _type_rows(encoder_kind: str, seed: int, layer: int, sample: ContextualitySample,
               result: LayerMeasures) -> pd.DataFrame:
    return pd.DataFrame({"weights": encoder_kind, "seed": seed, "layer": layer, "word": sample.types,
                         "occurrences": sample.counts, "self_similarity": result.self_similarity,
                         "max_explainable_variance": result.max_explainable_variance})


def store_contextuality(store, samples: Sequence[ContextualitySample], layers: Sequence[int] | None = None,
                        encoder_kind: str = "trained", type_seed: int | None = None, progress: bool = False,
                        ) -> tuple[list[dict], list[pd.DataFrame]]:
    """Every measure for every layer of ``store`` and every sample, reading each layer once.

    Returns the per-layer rows and, for the sample of ``type_seed``, the per-type tables.
    """
    layers = list(store.layers if layers is None else layers)
    rows: list[dict] = []
    types: list[pd.DataFrame] = []
    # Many small products and eigenproblems: one BLAS thread avoids oversubscription on shared cores
    # (measured: 3-4x faster than two threads under load).
    with progress_bar(progress) as bar, threadpool_limits(1):
        task = bar.add_task(f"contextuality ({encoder_kind})", total=len(layers))
        for layer in layers:
            vectors = store.layer(layer)
            shared_mev: dict[tuple[str, ...], np.ndarray] = {}
            for sample in samples:
                key = tuple(sample.types)
                if key not in shared_mev:
                    shared_mev[key] = type_explainable_variance(vectors, sample)
                result = measure_layer(vectors, sample, shared_mev[key])
                rows += _layer_rows(encoder_kind, sample.seed, layer, result)
                if sample.seed == type_seed:
                    types.append(_type_rows(encoder_kind, sample.seed, layer, sample, result))
            bar.advance(task)
    return rows, types


def summarize(layers: pd.DataFrame) -> pd.DataFrame:
    """Mean and spread over seeds per weights (trained/untrained), layer and measure."""
    grouped = layers.groupby(["weights", "layer", "measure"], sort=True)
    out = grouped.agg(value=("value", "mean"), value_std=("value", "std"), baseline=("baseline", "mean"),
                      adjusted=("adjusted", "mean"), adjusted_std=("adjusted", "std"),
                      seeds=("seed", "nunique")).reset_index()
    order = {m: i for i, m in enumerate(MEASURES)}
    return out.sort_values(["weights", "measure", "layer"], key=lambda c: c.map(order) if c.name == "measure"
                           else c).reset_index(drop=True)


def contextuality(model: str | os.PathLike | Encoder = "minilm", data: str | os.PathLike | None = None,
                  spec: ContextualitySpec | None = None, *, sentences=None, device: str | None = "auto",
                  cache_dir: str | os.PathLike | None = None, progress: bool = False, **settings) -> Result:
    """Ethayarajh's measures for every layer of ``model`` (and its untrained twins, one per seed).

    ``data``: a corpus file (default the packaged UD English EWT dev), or ``sentences`` given directly.
    ``spec``: the settings (:class:`~bertology.geometry.spec.ContextualitySpec`: seeds, layers, untrained,
    min_count, max_pairs, samples, max_sentences), or its fields as keywords, checked once.
    Tables: ``layers`` (weights, seed, layer, measure, value, baseline, adjusted), ``summary`` (mean and
    std over seeds) and ``types`` (per word type and layer, first seed). Cosines and variance shares are
    plain numbers in [-1, 1] and [0, 1].
    """
    spec = spec_of(ContextualitySpec, spec, settings, "contextuality")
    seeds, layers, untrained, max_sentences = spec.seeds, spec.layers, spec.untrained, spec.max_sentences
    min_count, max_pairs, samples = spec.min_count, spec.max_pairs, spec.samples
    run = prepare_run(model, data, sentences, seeds=seeds, layers=layers, max_sentences=max_sentences, device=device)
    seeds, sentences, input_path, run_device, encoder, chosen = (run.seeds, run.sentences, run.input_path, run.device,
                                                                 run.encoder, run.layers)
    words = [s.words for s in sentences]
    plans = [plan_sample(words, seed, min_count, max_pairs, samples) for seed in seeds]
    store = cached_store(encoder, sentences, pool="word-mean", cache_dir=cache_dir, input_path=input_path,
                         device=run_device, progress=progress)
    rows, types = store_contextuality(store, plans, chosen, "trained", seeds[0], progress)
    if untrained:
        for plan in plans:
            twin = encoder.untrained(plan.seed).to(run_device)
            twin_store = cached_store(twin, sentences, pool="word-mean", cache_dir=cache_dir,
                                      input_path=input_path, device=run_device, progress=progress)
            twin_rows, twin_types = store_contextuality(twin_store, [plan], chosen, "untrained", seeds[0], progress)
            rows += twin_rows
            types += twin_types
    layer_table = pd.DataFrame(rows)
    meta = {
        "model": encoder.describe(),
        "data": str(input_path) if input_path else None,
        "sentences": len(sentences),
        "words": int(sum(len(w) for w in words)),
        "word_types": {str(p.seed): len(p.types) for p in plans},
        "sampled_sentences": {str(p.seed): len(p.sentences) for p in plans},
        "seeds": list(seeds),
        "settings": {"min_count": min_count, "max_pairs": max_pairs, "samples": samples, "pool": "word-mean",
                     "punctuation": "word types made only of Unicode punctuation are left out",
                     "untrained": untrained},
        "numbering": "layer l = hidden_states[l]; 0 = embeddings",
        "reference": {"bert-base-cased (kawine/contextual)": KAWINE_BERT_BASE_CASED},
    }
    return Result("contextuality", tables={"layers": layer_table, "summary": summarize(layer_table),
                                           "types": pd.concat(types, ignore_index=True)}, meta=meta)


def reference_table(summary: pd.DataFrame, layers: Sequence[int] | None = None) -> pd.DataFrame:
    """Ours beside kawine's bert-base-cased, one row per layer and ``weights`` (``trained``: the model;
    ``untrained``: its twin, when the run has one): raw and adjusted self-similarity, intra-sentence
    similarity, MEV and the anisotropy baseline, means over seeds; the ``kawine_*`` columns hold the released
    raw numbers of that layer (the same on both rows). :func:`twin_beside` sets a twin's column beside the
    model's rows for a display."""
    ref = KAWINE_BERT_BASE_CASED
    out = []
    trained_layers = summary.loc[summary["weights"] == "trained", "layer"].unique()
    all_layers = sorted(trained_layers) if layers is None else list(layers)
    for layer in all_layers:
        for kind in ("trained", "untrained"):
            part = summary[(summary["weights"] == kind) & (summary["layer"] == layer)]
            if kind == "untrained" and part.empty:
                continue  # no twin in this run (or not at this layer)
            row = {"layer": int(layer), "weights": kind}
            for measure in MEASURES:
                mine = part[part["measure"] == measure]
                row[measure] = float(mine["value"].iloc[0]) if len(mine) else np.nan
                if measure != "anisotropy":
                    row[f"{measure}_adjusted"] = float(mine["adjusted"].iloc[0]) if len(mine) else np.nan
            for measure, values in ref.items():
                value = values[layer] if layer < len(values) else None
                row[f"kawine_{measure}"] = np.nan if value is None else value
            out.append(row)
    return pd.DataFrame(out)


def twin_beside(table: pd.DataFrame, column: str) -> pd.Series:
    """The twin's ``column`` of a :func:`reference_table`, aligned with the model's (``trained``) rows; NaN
    where the run has no twin."""
    twin = table[table["weights"] == "untrained"].set_index("layer")[column]
    return table.loc[table["weights"] == "trained", "layer"].map(twin).astype(float)


def plot_contextuality(summary: pd.DataFrame, path: str | os.PathLike, title: str = "") -> Path:
    """Four panels per layer: adjusted self-similarity, adjusted intra-sentence similarity, adjusted MEV
    and the anisotropy baseline; the model (solid) vs its untrained twin (dashed), error bars = std over
    seeds."""
    matplotlib.use("Agg")  # on a machine with a display too: the figure goes to a file
    panels = [("self_similarity", "adjusted", "self-similarity (adjusted)"),
              ("intra_sentence_similarity", "adjusted", "intra-sentence similarity (adjusted)"),
              ("max_explainable_variance", "adjusted", "max. explainable variance (adjusted)"),
              ("anisotropy", "value", "anisotropy: random-pair cosine")]
    figure, axes = plt.subplots(1, 4, figsize=(15, 3.4))
    for axis, (measure, column, label) in zip(axes, panels):
        for kind, style in (("trained", "-o"), ("untrained", "--s")):
            part = summary[(summary["weights"] == kind) & (summary["measure"] == measure)].sort_values("layer")
            if part.empty:
                continue
            spread = part[f"{column}_std"] if f"{column}_std" in part else part["value_std"]
            axis.errorbar(part["layer"].astype(int), part[column], yerr=spread.fillna(0), fmt=style, ms=4,
                          capsize=2, label="model" if kind == "trained" else "untrained twin")
        axis.set_title(label, fontsize=9)
    return finish_layer_figure(figure, axes, path, title, legend_size=8)
