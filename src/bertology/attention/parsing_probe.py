"""Clark et al.'s attention-only probe (2019, section 5) as a scikit-learn estimator: ``AttentionOnlyProbe().fit(X,
y)`` with ``X`` the word-level attention arrays of the sentences ``y`` (or their :class:`ProbeBatches`), ``predict``,
``score`` (UAS), ``NotFittedError`` before ``fit``.

:func:`probe_batches` builds the features of a set of sentences once (length-sorted padded batches), so several
seeds share one copy; any of the estimator's methods takes them in place of the attention arrays.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from bertology.attention.parsing_heads import _check_tree, attachment_score
from bertology.attention.stats import _zip_checked, check_attention
from bertology.data import Sentence
from bertology.errors import DataError
from bertology.progress import track


def probe_features(attention: np.ndarray, n_words: int, dtype=np.float32) -> np.ndarray:
    """Features of every (dependent, candidate head) pair for the attention-only probe.

    Returns ``[n, n+1, 2 * n_layers * n_heads]`` (``dtype``, float32 by default): row i-1 is word i as dependent, column j
    is candidate head j (0 = ROOT, represented by [CLS] as in Clark's code, 1..n = words). The
    features are the attention from the dependent to the candidate for every head, then the
    attention from the candidate to the dependent.
    """
    a = check_attention(attention, n_words, "sentence")
    n_layers, n_heads = a.shape[:2]
    block = a[..., : n_words + 1, : n_words + 1].reshape(n_layers * n_heads, n_words + 1, n_words + 1)
    forward = block[:, 1:, :]  # dependent (rows 1..n) -> candidate (0..n)
    backward = block.transpose(0, 2, 1)[:, 1:, :]  # candidate -> dependent
    return np.concatenate([forward, backward], axis=0).transpose(1, 2, 0).astype(dtype)


@contextmanager
def _single_thread():
    """The probe runs thousands of small tensor ops, where intra-op threads cost more than they
    give (5x slower with two threads on a busy two-core machine); restore the setting afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclass
class ProbeBatches:
    """Length-sorted, padded probe features of a set of sentences (:func:`probe_batches`):
    built once and passed to ``fit``/``predict``/``score`` in place of the attention arrays, so several
    seeds share one copy (building them costs as much as training one seed)."""

    batches: list
    n_features: int
    sentences: list
    with_trees: bool


def probe_batches(attentions: Iterable[np.ndarray], sentences: Iterable[Sentence], need_tree: bool = True, *,
                  batch_pairs: int = 8192, max_float32_bytes: int = 256 << 20) -> ProbeBatches:
    """The probe's features of ``sentences`` (their word-level ``attentions``), built once: length-sorted batches
    of at most ``batch_pairs`` (dependent, candidate) pairs, each padded to its longest sentence (the probe is
    tiny, 2 x heads weights), float32 up to ``max_float32_bytes`` and float16 beyond; gold trees checked when
    ``need_tree`` (``fit`` and ``score`` need them). The estimator's own ``batch_pairs`` and
    ``max_float32_bytes`` are these, for attention arrays given to it directly."""
    sentences = list(sentences)
    items = []
    n_features = None
    for index, (attention, sentence) in enumerate(_zip_checked(attentions, sentences)):
        if need_tree:
            _check_tree(sentence, index)
        try:
            features = probe_features(attention, len(sentence), np.float16)  # compact until padded
        except DataError as exc:
            raise DataError(f"sentence {index} ({sentence.id}): {exc}") from None
        if n_features is None:
            n_features = features.shape[-1]
        elif features.shape[-1] != n_features:
            raise DataError(f"sentence {index} ({sentence.id}): {features.shape[-1] // 2} heads; expected {n_features // 2}")
        heads = np.asarray(sentence.heads) if sentence.heads is not None else None
        items.append((index, features, heads))
    if not items:
        raise DataError("no sentences given; expected at least one attention array")
    # Length-sorted batches of at most ``batch_pairs`` (dependent, candidate) pairs: little padding,
    # and a bounded cost per optimiser step.
    items.sort(key=lambda item: item[1].shape[0])
    chunks, current = [], []
    for item in items:
        n = item[1].shape[0]
        if current and (len(current) + 1) * n * (n + 1) > batch_pairs:
            chunks.append(current)
            current = []
        current.append(item)
    chunks.append(current)
    # float32 is ~3x faster on CPU than converting float16 every step; float16 halves the memory.
    padded_bytes = 4 * n_features * sum(len(c) * c[-1][1].shape[0] * (c[-1][1].shape[0] + 1) for c in chunks)
    dtype = torch.float32 if padded_bytes <= max_float32_bytes else torch.float16
    batches = []
    for chunk in chunks:
        longest = max(item[1].shape[0] for item in chunk)
        x = torch.zeros((len(chunk), longest, longest + 1, n_features), dtype=dtype)
        valid = torch.zeros((len(chunk), longest, longest + 1), dtype=torch.bool)
        target = torch.full((len(chunk), longest), -100, dtype=torch.long)
        for b, (_, features, heads) in enumerate(chunk):
            n = features.shape[0]
            x[b, :n, : n + 1] = torch.from_numpy(features).to(dtype)
            valid[b, :n, : n + 1] = True
            valid[b, torch.arange(n), torch.arange(n) + 1] = False  # a word is not its own head
            if heads is not None:
                target[b, :n] = torch.from_numpy(heads)
        batches.append(([item[0] for item in chunk], x, valid, target))
    return ProbeBatches(batches, n_features, sentences, need_tree)


class AttentionOnlyProbe(BaseEstimator):
    """Clark et al.'s "Attn-Only" probe: p(head j | word i) ∝ exp(Σ_k w_k α^k_ij + u_k α^k_ji).

    One weight per head and direction, shared by every word; a softmax over the candidate heads of
    each word (the other words and ROOT, whose attention is the [CLS] token's); trained with
    cross-entropy on gold trees. Prediction is the argmax per word (no tree constraint), scored
    as UAS. The attention-and-GloVe variant of the paper is not implemented.

    ``fit``/``predict``/``score`` take an iterable of word-level attention arrays and the matching
    sentences; the features of the training set are kept in memory (sorted into length buckets,
    float32 up to ``max_float32_bytes`` and float16 beyond), so cap the number of training
    sentences for big models. Pass a :class:`ProbeBatches` from :func:`probe_batches` instead of the attention
    arrays to reuse the features across seeds.
    """

    def __init__(self, epochs: int = 20, batch_pairs: int = 8192, learning_rate: float = 0.2,
                 weight_decay: float = 0.0, seed: int = 0, min_steps: int = 300,
                 max_float32_bytes: int = 256 << 20, progress: bool = False):
        self.epochs = epochs
        self.min_steps = min_steps
        self.batch_pairs = batch_pairs
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.seed = seed
        self.max_float32_bytes = max_float32_bytes
        self.progress = progress

    def prepare(self, attentions: Iterable[np.ndarray], sentences: Iterable[Sentence],
                need_tree: bool = True) -> ProbeBatches:
        """:func:`probe_batches` with this probe's ``batch_pairs`` and ``max_float32_bytes`` (kept for scripts
        written before the function; the estimator itself needs no preparation step)."""
        return probe_batches(attentions, sentences, need_tree, batch_pairs=self.batch_pairs,
                             max_float32_bytes=self.max_float32_bytes)

    def _prepared(self, attentions, sentences, need_tree: bool) -> ProbeBatches:
        if isinstance(attentions, ProbeBatches):
            if need_tree and not attentions.with_trees:
                raise DataError("these probe batches were prepared with need_tree=False; fitting needs gold trees")
            return attentions
        return probe_batches(attentions, sentences, need_tree, batch_pairs=self.batch_pairs,
                             max_float32_bytes=self.max_float32_bytes)

    def _scores(self, x, valid):
        scores = x.float() @ self.weights_
        return scores.masked_fill(~valid, -torch.inf)

    def fit(self, attentions: Iterable[np.ndarray] | ProbeBatches,
            sentences: Iterable[Sentence] | None = None) -> "AttentionOnlyProbe":
        with _single_thread():
            return self._fit(attentions, sentences)

    def _fit(self, attentions, sentences) -> "AttentionOnlyProbe":
        prepared = self._prepared(attentions, sentences, need_tree=True)
        batches, n_features = prepared.batches, prepared.n_features
        generator = torch.Generator().manual_seed(self.seed)
        self.weights_ = torch.zeros(n_features, requires_grad=True)
        optimizer = torch.optim.Adam([self.weights_], lr=self.learning_rate, weight_decay=self.weight_decay)
        self.loss_curve_ = []
        # Small training sets give few batches per epoch; Adam needs a few hundred steps to converge.
        n_epochs = max(self.epochs, -(-self.min_steps // len(batches)))
        self.n_epochs_ = n_epochs
        for _ in track(range(n_epochs), "attention-only probe", total=n_epochs, enabled=self.progress):
            total, words = 0.0, 0
            for b in torch.randperm(len(batches), generator=generator).tolist():
                _, x, valid, target = batches[b]
                scores = self._scores(x, valid)
                loss = torch.nn.functional.cross_entropy(
                    scores.reshape(-1, scores.shape[-1]), target.reshape(-1), ignore_index=-100, reduction="sum"
                )
                n_words = int((target != -100).sum())
                optimizer.zero_grad()
                (loss / n_words).backward()
                optimizer.step()
                total += float(loss.detach())
                words += n_words
            self.loss_curve_.append(total / words)
        self.weights_ = self.weights_.detach()
        self.n_heads_ = n_features // 2
        return self

    def predict(self, attentions: Iterable[np.ndarray] | ProbeBatches,
                sentences: Iterable[Sentence] | None = None) -> list[np.ndarray]:
        """Predicted head (0 = root, 1..n) of every word, one array per sentence, in input order."""
        self._check_fitted()
        prepared = self._prepared(attentions, sentences, need_tree=False)
        batches, n_features = prepared.batches, prepared.n_features
        if n_features != self.weights_.shape[0]:
            raise DataError(f"attention has {n_features // 2} heads; the probe was fitted on {self.n_heads_}")
        out: dict[int, np.ndarray] = {}
        with torch.no_grad(), _single_thread():
            for indices, x, valid, _ in batches:
                predicted = self._scores(x, valid).argmax(-1)
                lengths = valid.any(-1).sum(-1)
                for b, index in enumerate(indices):
                    out[index] = predicted[b, : int(lengths[b])].numpy()
        return [out[i] for i in range(len(out))]

    def score(self, attentions: Iterable[np.ndarray] | ProbeBatches, sentences: Iterable[Sentence] | None = None,
              ignore_relations: Iterable[str] = ()) -> float:
        """Unlabelled attachment score over every word (``ignore_relations=("punct",)`` leaves some out)."""
        prepared = self._prepared(attentions, sentences, need_tree=True)
        return attachment_score(self.predict(prepared), prepared.sentences, ignore_relations)

    def _check_fitted(self) -> None:
        if not hasattr(self, "weights_"):
            raise NotFittedError("this AttentionOnlyProbe is not fitted yet; call fit() first")

    @property
    def head_weights_(self) -> np.ndarray:
        """``[2, n_heads]`` learned weights: row 0 dependent->candidate (w), row 1 candidate->dependent (u);
        heads in layer order, then head order (flat index ``position * n_heads + head``)."""
        self._check_fitted()
        return self.weights_.numpy().reshape(2, -1)

