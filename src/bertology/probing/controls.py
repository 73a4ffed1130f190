"""Baselines that stand beside every probing number: majority class and control tasks.

Control tasks follow Hewitt and Liang (2019): every word *type* gets a random label drawn from the task's
own label distribution, so the control task has the task's output space and marginal distribution but
can only be solved by memorising word identity. Selectivity = task accuracy - control accuracy.

Assignments are a pure function of ``(seed, type)`` (a keyed hash, not Python's salted ``hash``), so
they are identical across processes and independent of the order types are met.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Hashable, Iterable, Sequence

import numpy as np

from bertology.errors import DataError
from bertology.models.encoders import tokenizer_types


def majority_label(y_train: Sequence) -> object:
    """The most frequent training label (ties: the smallest label, so it is deterministic)."""
    counts = Counter(np.asarray(y_train).tolist())
    if not counts:
        raise DataError("y_train is empty; the majority baseline needs training labels")
    top = max(counts.values())
    return min(label for label, c in counts.items() if c == top)


def majority_accuracy(y_train: Sequence, y_eval: Sequence) -> float:
    """Accuracy of always predicting the most frequent *training* label on ``y_eval``."""
    label = majority_label(y_train)
    y_eval = np.asarray(y_eval)
    return float((y_eval == label).mean()) if len(y_eval) else float("nan")


def type_uniform(key: Hashable, seed: int) -> float:
    """A uniform number in [0, 1) that depends only on ``(seed, key)``."""
    digest = hashlib.blake2b(f"{int(seed)}\x1f{key!r}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def label_distribution(y_train: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """(labels sorted, their probabilities) as observed in the training labels."""
    labels, counts = np.unique(np.asarray(y_train), return_counts=True)
    if len(labels) == 0:
        raise DataError("y_train is empty; a control task needs the task's label distribution")
    return labels, counts / counts.sum()


class ControlTask:
    """Hewitt-and-Liang control labels for token-, edge- and span-level tasks.

    ``key`` is the word type (see :func:`type_key`: the exact or the lower-cased form); for edge probes
    we key on the dependent's type and for entity spans on the tuple of the span's types, so the control
    is always "a fixed random label per lexical item", learnable only by memorising it.
    """

    def __init__(self, y_train: Sequence, seed: int = 0):
        self.labels_, self.probs_ = label_distribution(y_train)
        self._cdf = np.cumsum(self.probs_)
        self._cdf[-1] = 1.0
        self.seed = seed

    def label(self, key: Hashable):
        u = type_uniform(key, self.seed)
        return self.labels_[int(np.searchsorted(self._cdf, u, side="right"))]

    def labels(self, keys: Iterable[Hashable]) -> np.ndarray:
        cache: dict = {}
        out = []
        for key in keys:
            if key not in cache:
                cache[key] = self.label(key)
            out.append(cache[key])
        return np.asarray(out, dtype=self.labels_.dtype)


class SentenceControlTask:
    """The bag-of-words sentence control (our earlier definition; off by default, see docs/probing.md).

    Mean-pooled word vectors decode it directly, so it scored above several SentEval tasks and made their
    selectivity negative everywhere: use it only to measure lexical memorisation, not as a control.

    Every word type gets a fixed random number ``u(type)`` in [0, 1); a sentence's score is the mean of
    ``u`` over its words; the score is cut into labels at the quantiles of the task's training label
    distribution (computed on the training sentences' scores). So the control keeps the task's label
    set and marginal distribution, is a deterministic function of the sentence's bag of word types, and
    is solvable only by memorising word identities, exactly what a mean-over-words representation can
    expose. It does not depend on word order or syntax.
    """

    def __init__(self, y_train: Sequence, train_sentences: Sequence[Sequence[str]], seed: int = 0,
                 types: str = "lower"):
        self.labels_, self.probs_ = label_distribution(y_train)
        self.seed = seed
        self.types = types
        scores = self.scores(train_sentences)
        # Thresholds at the cumulative label proportions: label k covers the k-th share of scores.
        self._cuts = np.quantile(scores, np.cumsum(self.probs_)[:-1]) if len(self.labels_) > 1 else np.array([])

    def scores(self, sentences: Sequence[Sequence[str]]) -> np.ndarray:
        cache: dict = {}

        def u(word: str) -> float:
            key = word_type(word, self.types)
            if key not in cache:
                cache[key] = type_uniform(key, self.seed)
            return cache[key]

        return np.asarray([np.mean([u(w) for w in words]) if len(words) else 0.5 for words in sentences])

    def labels(self, sentences: Sequence[Sequence[str]]) -> np.ndarray:
        order = np.searchsorted(self._cuts, self.scores(sentences), side="right")
        return self.labels_[order]


#: What counts as one word type: the exact form or the lower-cased one.
TYPE_DEFINITIONS = ("exact", "lower")


def word_type(word: str, types: str = "lower") -> str:
    """What counts as one word type for control tasks: the lower-cased form (``types="lower"``) or the
    form as written (``"exact"``)."""
    if types == "exact":
        return word
    if types == "lower":
        return word.lower()
    raise DataError(f"control types {types!r}; expected one of {', '.join(TYPE_DEFINITIONS)}")


def type_key(key, types: str = "lower"):
    """A lexical key (a word, or a tuple of words for spans) under a type definition; other keys as given."""
    if isinstance(key, str):
        return word_type(key, types)
    if isinstance(key, tuple):
        return tuple(type_key(k, types) for k in key)
    return key


def resolve_types(types: str, tokenizer=None) -> str:
    """``"auto"`` -> :func:`tokenizer_types` (``"lower"`` without a tokenizer); else checked and returned."""
    if types == "auto":
        return tokenizer_types(tokenizer) if tokenizer is not None else "lower"
    if types not in TYPE_DEFINITIONS:
        raise DataError(f"control types {types!r}; expected auto, {', '.join(TYPE_DEFINITIONS)}")
    return types


def store_word_types(store, types: str = "auto") -> str:
    """:func:`resolve_types` for a store: ``"auto"`` follows the tokenizer it was extracted with (recorded
    in its index as ``model.word_types``); a store written before that was recorded counts as uncased."""
    if types == "auto":
        return store.index.get("model", {}).get("word_types", "lower")
    return resolve_types(types)


def word_identity_predictions(train_keys: Sequence, y_train: Sequence, eval_keys: Sequence) -> np.ndarray:
    """The word-identity baseline: each evaluation example gets the most frequent training label of its
    lexical key (ties: the smallest label); keys unseen in training get the majority label."""
    fallback = majority_label(y_train)
    counts: dict = {}
    for key, label in zip(train_keys, np.asarray(y_train).tolist()):
        counts.setdefault(key, Counter())[label] += 1
    best = {}
    for key, counter in counts.items():
        top = max(counter.values())
        best[key] = min(label for label, c in counter.items() if c == top)
    return np.asarray([best.get(key, fallback) for key in eval_keys], dtype=object)


#: Sentence-level control tasks: ``none`` (default), ``first-word`` or ``bag-of-words``.
SENTENCE_CONTROLS = ("none", "first-word", "bag-of-words")


class FirstWordControlTask:
    """A sentence-level control that no bag of words decodes: the Hewitt-and-Liang control label of the
    sentence's *first* word type (labels drawn from the task's training distribution).

    Two sentences with the same bag of words but different first words get different labels, so no
    bag-of-words (or order-free mean) representation decodes it exactly, unlike :class:`SentenceControlTask`.
    In practice first words are few and frequent: its majority baseline is above the task's, and a probe on
    mean-pooled MiniLM vectors beats that majority by up to 11 points (docs/probing.md,
    ``benchmarks/results/sentence_controls_minilm_cpu.json``).
    """

    def __init__(self, y_train: Sequence, seed: int = 0, types: str = "lower"):
        self._control = ControlTask(y_train, seed=seed)
        self.types = types

    def labels(self, sentences: Sequence[Sequence[str]]) -> np.ndarray:
        return self._control.labels([word_type(words[0], self.types) if len(words) else "" for words in sentences])
