"""Structural probes (Hewitt and Manning, NAACL 2019): is a parse tree embedded in a linear subspace?

Two probes, each a rank-k linear map ``B`` learned per layer:

* **distance probe**: ``||B(h_i - h_j)||^2`` should equal the tree distance ``d(i, j)`` (number of
  edges between words i and j). Loss: L1 over all word pairs, divided by ``n^2`` per sentence, then
  averaged over the sentences of a batch. Evaluated with **UUAS** (minimum spanning tree of the
  predicted distances vs the gold tree, punctuation left out) and **DSpr.** (Spearman correlation of each
  word's row of predicted vs gold distances, averaged per sentence length, then over lengths 5-50).
* **depth probe**: ``||B h_i||^2`` should equal the depth of word i (root = 0). Loss: L1 divided by
  ``n`` per sentence. Evaluated with **root accuracy** (the non-punctuation word of least predicted
  depth is the gold root) and **NSpr.** (per-sentence Spearman, same length averaging as DSpr.).

All layers train in one pass: the probe holds one ``B`` per layer and the layers are a batch dimension,
so a layer's gradient only ever touches its own ``B`` (identical to separate training), while the
word vectors are gathered once per batch. Early stopping, learning-rate decay and model selection on dev
loss are done per layer, as in the authors' code (Adam 1e-3, batch 20, LR x0.1 on each epoch without
dev improvement, stop after 5 epochs without improvement, keep the best-dev parameters).

Inputs are word vectors per layer, given as a :class:`bertology.store.Store` (``store.layer(l)`` is
``[total_words, dim]``, sentence i is ``store.offsets[i]:store.offsets[i+1]``), or an array
``[n_layers, total_words, dim]`` / a list of ``[total_words, dim]`` arrays with the words of the
sentences concatenated in order; gold trees come from :class:`bertology.data.Sentence`.
See docs/structural_probes.md for what differs from the paper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from scipy.sparse.csgraph import minimum_spanning_tree
from scipy.stats import rankdata
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from bertology.data import Sentence
from bertology.data.treebank import describe_sentence, tree_depths, tree_distances
from bertology.errors import DataError, StoreError
from bertology.probing.names import PRIMARY_METRIC
from bertology.progress import progress_bar
from bertology.results import Result
from bertology.runtime import derive_seed, resolve_device

__all__ = [
    "HM_PUNCT_XPOS",
    "KINDS",
    "METRICS",
    "TASK_NAMES",
    "StructuralProbe",
    "depth_spearman",
    "distance_spearman",
    "linear_chain_depths",
    "linear_chain_distances",
    "mst_edges",
    "punctuation_mask",
    "root_accuracy",
    "run_structural",
    "structural_metrics",
    "summarize_structural",
    "tree_depths",
    "tree_distances",
    "uuas",
]

KINDS = ("distance", "depth")
TASK_NAMES = {"distance": "structural-distance", "depth": "structural-depth"}
METRICS = {"distance": ("uuas", "dspr"), "depth": ("root_acc", "nspr")}
#: The punctuation XPOS tags that Hewitt and Manning's reporter.py leaves out of UUAS / root accuracy.
HM_PUNCT_XPOS = frozenset({"''", ",", ".", ":", "``", "-LRB-", "-RRB-"})
PUNCT_SCHEMES = ("upos", "xpos", "none")
#: Spearman correlations are averaged per sentence length, then over these lengths (inclusive).
SPEARMAN_MIN_LENGTH, SPEARMAN_MAX_LENGTH = 5, 50


# --------------------------------------------------------------------------------------------------
# Gold trees
# --------------------------------------------------------------------------------------------------

def _where(sentence: Sentence | None) -> str:
    return "tree" if sentence is None else describe_sentence(sentence)


def _gold(sentence: Sentence, kind: str) -> np.ndarray:
    if sentence.heads is None:
        raise DataError(f"{_where(sentence)}: no dependency heads; structural probes need a treebank (CoNLL-U)")
    if kind == "distance":
        return tree_distances(sentence.heads, where=_where(sentence))
    return tree_depths(sentence.heads, where=_where(sentence))


def punctuation_mask(sentence: Sentence, scheme: str = "upos") -> np.ndarray:
    """True for the words left out of UUAS trees and root prediction.

    ``"upos"`` (default): UPOS ``PUNCT``, UD's own tag-set independent class; on EWT it is the XPOS list
    of Hewitt and Manning plus HYPH and NFP marks, which PTB-WSJ did not have. ``"xpos"``: exactly their
    list ``'' , . : `` -LRB- -RRB-``. ``"none"``: keep every word.
    """
    n = len(sentence.words)
    if scheme == "none":
        return np.zeros(n, dtype=bool)
    if scheme == "upos":
        tags, wanted = sentence.upos, {"PUNCT"}
    elif scheme == "xpos":
        tags, wanted = sentence.xpos, HM_PUNCT_XPOS
    else:
        raise DataError(f"unknown punctuation scheme {scheme!r}; expected one of {', '.join(PUNCT_SCHEMES)}")
    if tags is None:
        raise DataError(f"{_where(sentence)}: no {scheme.upper()} tags, needed to leave out punctuation")
    return np.array([tag in wanted for tag in tags], dtype=bool)


# --------------------------------------------------------------------------------------------------
# Metrics (each takes one prediction per sentence; a leading layer axis is allowed and kept)
# --------------------------------------------------------------------------------------------------

def mst_edges(distances: np.ndarray, keep: np.ndarray | None = None) -> set[tuple[int, int]]:
    """Edges ``(i, j)`` with ``i < j`` of the minimum spanning tree over the kept words (sentence indices)."""
    distances = np.asarray(distances, dtype=np.float64)
    n = distances.shape[0]
    index = np.arange(n) if keep is None else np.flatnonzero(keep)
    if len(index) < 2:
        return set()
    sub = distances[np.ix_(index, index)]
    sub = (sub + sub.T) / 2
    # csgraph reads 0 as "no edge"; adding a constant to every edge leaves the MST unchanged.
    weights = np.triu(sub - sub.min() + 1.0, k=1)
    tree = minimum_spanning_tree(weights).tocoo()
    return {(int(min(index[a], index[b])), int(max(index[a], index[b]))) for a, b in zip(tree.row, tree.col)}


def _layered(prediction: np.ndarray, ndim: int) -> np.ndarray:
    prediction = np.asarray(prediction, dtype=np.float64)
    return prediction[None] if prediction.ndim == ndim else prediction


def _check_lengths(predictions: Sequence[np.ndarray], sentences: Sequence[Sentence], ndim: int) -> None:
    if len(predictions) != len(sentences):
        raise DataError(f"{len(predictions)} predictions for {len(sentences)} sentences; expected one per sentence")
    for prediction, sentence in zip(predictions, sentences):
        shape = np.shape(prediction)[-ndim:]
        if shape != (len(sentence),) * ndim:
            raise DataError(f"{_where(sentence)}: prediction of shape {shape} for {len(sentence)} words")


def uuas(pred_distances: Sequence[np.ndarray], sentences: Sequence[Sentence], punct: str = "upos"):
    """Undirected unlabelled attachment score of the predicted-distance MST, pooled over all edges.

    Gold edges are the MST of the gold tree distances over the non-punctuation words, as in the authors'
    code: the gold tree's own edges when punctuation words are leaves. Returns a float, or an array with
    one score per layer when predictions carry a leading layer axis.
    """
    _check_lengths(pred_distances, sentences, 2)
    correct, total = None, 0
    for prediction, sentence in zip(pred_distances, sentences):
        gold_distances = _gold(sentence, "distance")
        keep = ~punctuation_mask(sentence, punct)
        gold = mst_edges(gold_distances, keep)
        layers = _layered(prediction, 2)
        hits = np.array([len(gold & mst_edges(layer, keep)) for layer in layers])
        correct = hits if correct is None else correct + hits
        total += len(gold)
    scores = correct / total if total else np.full(len(correct), np.nan)
    return float(scores[0]) if np.ndim(pred_distances[0]) == 2 else scores


def _rowwise_spearman(predicted: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Spearman correlation along the last axis (average ranks for ties). Constant rows give 0."""
    rp = rankdata(predicted, axis=-1)
    rg = rankdata(gold, axis=-1)
    rp = rp - rp.mean(axis=-1, keepdims=True)
    rg = rg - rg.mean(axis=-1, keepdims=True)
    num = (rp * rg).sum(axis=-1)
    den = np.sqrt((rp * rp).sum(axis=-1) * (rg * rg).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def _length_averaged(per_length: dict[int, list[np.ndarray]]) -> np.ndarray | None:
    means = [np.mean(np.stack(values), axis=0) for n, values in sorted(per_length.items())
             if SPEARMAN_MIN_LENGTH <= n <= SPEARMAN_MAX_LENGTH]
    return np.mean(np.stack(means), axis=0) if means else None


def distance_spearman(pred_distances: Sequence[np.ndarray], sentences: Sequence[Sentence]):
    """DSpr.: per word, Spearman of its predicted vs gold distances to all words of the sentence
    (punctuation and the word itself included, as in the authors' code); averaged over the words of all
    sentences of each length, then over lengths 5-50. NaN when no sentence has 5-50 words."""
    _check_lengths(pred_distances, sentences, 2)
    per_length: dict[int, list[np.ndarray]] = {}
    for prediction, sentence in zip(pred_distances, sentences):
        n = len(sentence)
        if not SPEARMAN_MIN_LENGTH <= n <= SPEARMAN_MAX_LENGTH:
            continue
        rows = _rowwise_spearman(_layered(prediction, 2), _gold(sentence, "distance"))  # [L, n]
        per_length.setdefault(n, []).extend(rows.T)
    result = _length_averaged(per_length)
    if result is None:
        result = np.full(len(_layered(pred_distances[0], 2)), np.nan)
    return float(result[0]) if np.ndim(pred_distances[0]) == 2 else result


def depth_spearman(pred_depths: Sequence[np.ndarray], sentences: Sequence[Sentence]):
    """NSpr.: per sentence, Spearman of predicted vs gold depths (all words); averaged per length, then
    over lengths 5-50. NaN when no sentence has 5-50 words."""
    _check_lengths(pred_depths, sentences, 1)
    per_length: dict[int, list[np.ndarray]] = {}
    for prediction, sentence in zip(pred_depths, sentences):
        n = len(sentence)
        if not SPEARMAN_MIN_LENGTH <= n <= SPEARMAN_MAX_LENGTH:
            continue
        per_length.setdefault(n, []).append(_rowwise_spearman(_layered(prediction, 1), _gold(sentence, "depth")))
    result = _length_averaged(per_length)
    if result is None:
        result = np.full(len(_layered(pred_depths[0], 1)), np.nan)
    return float(result[0]) if np.ndim(pred_depths[0]) == 1 else result


def root_accuracy(pred_depths: Sequence[np.ndarray], sentences: Sequence[Sentence], punct: str = "upos"):
    """Share of sentences whose least-deep predicted non-punctuation word is the gold root."""
    _check_lengths(pred_depths, sentences, 1)
    hits = None
    for prediction, sentence in zip(pred_depths, sentences):
        root = int(np.flatnonzero(_gold(sentence, "depth") == 0)[0])
        layers = _layered(prediction, 1)
        punct_mask = punctuation_mask(sentence, punct)
        if not punct_mask.all():  # an all-punctuation sentence falls back to every word, as theirs does
            layers = np.where(punct_mask[None], np.inf, layers)
        sentence_hits = (layers.argmin(axis=-1) == root).astype(np.int64)
        hits = sentence_hits if hits is None else hits + sentence_hits
    scores = hits / len(sentences)
    return float(scores[0]) if np.ndim(pred_depths[0]) == 1 else scores


def sentence_hits(kind: str, predictions: Sequence[np.ndarray], sentences: Sequence[Sentence],
                  punct: str = "upos") -> tuple[np.ndarray, np.ndarray]:
    """Per sentence, the primary metric's hits and totals: ``(hits [n_sentences, n_layers], totals
    [n_sentences])``; UUAS (distance) = ``hits.sum(0) / totals.sum()`` (correct gold edges out of all),
    root accuracy (depth) the same with one root per sentence. For bootstrap intervals over sentences."""
    _check_kind(kind)
    hits, totals = [], []
    for prediction, sentence in zip(predictions, sentences):
        if kind == "distance":
            keep = ~punctuation_mask(sentence, punct)
            gold = mst_edges(_gold(sentence, "distance"), keep)
            hits.append([len(gold & mst_edges(layer, keep)) for layer in _layered(prediction, 2)])
            totals.append(len(gold))
        else:
            root = int(np.flatnonzero(_gold(sentence, "depth") == 0)[0])
            layers = _layered(prediction, 1)
            mask = punctuation_mask(sentence, punct)
            if not mask.all():
                layers = np.where(mask[None], np.inf, layers)
            hits.append((layers.argmin(axis=-1) == root).astype(np.int64).tolist())
            totals.append(1)
    return np.asarray(hits, dtype=np.float64), np.asarray(totals, dtype=np.float64)


def linear_chain_distances(n: int) -> np.ndarray:
    """The linear-chain baseline: each word attached to the next, so ``d(i, j) = |i - j|``."""
    positions = np.arange(n)
    return np.abs(positions[:, None] - positions[None, :]).astype(np.float64)


def linear_chain_depths(n: int) -> np.ndarray:
    """Depths of the same chain rooted at the first word: ``depth(i) = i``."""
    return np.arange(n, dtype=np.float64)


def structural_metrics(kind: str, predictions: Sequence[np.ndarray], sentences: Sequence[Sentence],
                       punct: str = "upos") -> dict[str, np.ndarray | float]:
    """Both metrics of a probe kind: ``{"uuas", "dspr"}`` or ``{"root_acc", "nspr"}``."""
    _check_kind(kind)
    if kind == "distance":
        return {"uuas": uuas(predictions, sentences, punct), "dspr": distance_spearman(predictions, sentences)}
    return {"root_acc": root_accuracy(predictions, sentences, punct), "nspr": depth_spearman(predictions, sentences)}


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise DataError(f"unknown structural probe kind {kind!r}; expected one of {', '.join(KINDS)}")


# --------------------------------------------------------------------------------------------------
# Word vectors
# --------------------------------------------------------------------------------------------------

@dataclass
class _Vectors:
    """Word vectors of all layers, ``[n_layers, total_words, dim]``, with sentence offsets."""

    data: torch.Tensor
    offsets: np.ndarray
    layers: list[int]


def _as_vectors(vectors, sentences: Sequence[Sentence], layers: Sequence[int] | None, device: torch.device,
                name: str) -> _Vectors:
    lengths = np.array([len(s) for s in sentences], dtype=np.int64)
    if len(sentences) == 0:
        raise DataError(f"{name}: no sentences")
    if hasattr(vectors, "layer") and hasattr(vectors, "offsets"):
        pool = getattr(vectors, "pool", None)
        if pool is not None and not str(pool).startswith("word-"):
            raise StoreError(
                f"{name}: the store was extracted with pool={pool!r}; structural probes need one vector per word "
                "(extract with pool='word-mean', 'word-first' or 'word-last')"
            )
        offsets = np.asarray(vectors.offsets, dtype=np.int64)
        counts = np.diff(offsets)
        if len(counts) != len(sentences):
            raise StoreError(f"{name}: the store holds {len(counts)} sentences, but {len(sentences)} were given")
        mismatch = np.flatnonzero(counts != lengths)
        if len(mismatch):
            i = int(mismatch[0])
            raise StoreError(
                f"{name}: sentence {i} ({sentences[i].id!r}) has {lengths[i]} words but the store has "
                f"{counts[i]} word vectors for it; was the store extracted from these sentences with a word pool?"
            )
        available = list(vectors.layers)
        chosen = available if layers is None else list(layers)
        missing = [l for l in chosen if l not in available]
        if missing:
            raise StoreError(f"{name}: layers {missing} not in the store (it has {available})")
        slabs = []
        for l in chosen:
            slab = np.asarray(vectors.layer(l))
            if slab.ndim != 2 or slab.shape[0] != offsets[-1]:
                raise StoreError(
                    f"{name}: layer {l} has shape {slab.shape}; expected [total_words={offsets[-1]}, dim] "
                    "(a word-pooled store)"
                )
            # float16 halves the memory of a full treebank; batches are cast back to float32.
            slabs.append(torch.from_numpy(slab.astype(np.float16, copy=False)).to(device))
        return _Vectors(torch.stack(slabs), offsets, chosen)

    if isinstance(vectors, (list, tuple)):
        vectors = np.stack([np.asarray(v) for v in vectors])
    if isinstance(vectors, np.ndarray):
        vectors = torch.from_numpy(vectors)
    if not isinstance(vectors, torch.Tensor) or vectors.ndim != 3:
        raise DataError(
            f"{name}: expected a word-pooled Store or word vectors of shape [n_layers, total_words, dim], "
            f"got {type(vectors).__name__} of shape {tuple(getattr(vectors, 'shape', ()))}"
        )
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    if vectors.shape[1] != offsets[-1]:
        raise DataError(
            f"{name}: {vectors.shape[1]} word vectors for {offsets[-1]} words in {len(sentences)} sentences"
        )
    all_layers = list(range(vectors.shape[0]))
    chosen = all_layers if layers is None else list(layers)
    if any(l not in all_layers for l in chosen):
        raise DataError(f"{name}: layers {chosen} out of range for {len(all_layers)} layers")
    data = vectors[chosen]
    dtype = torch.float32 if data.dtype == torch.float64 else data.dtype
    return _Vectors(data.to(device=device, dtype=dtype), offsets, chosen)


@dataclass
class _Labels:
    kind: str
    gold: list[np.ndarray]
    lengths: np.ndarray


def _labels(sentences: Sequence[Sentence], kind: str) -> _Labels:
    return _Labels(kind, [_gold(s, kind).astype(np.float32) for s in sentences],
                   np.array([len(s) for s in sentences], dtype=np.int64))


# --------------------------------------------------------------------------------------------------
# The probe
# --------------------------------------------------------------------------------------------------

#: The metric :meth:`StructuralProbe.score` returns, per probe kind.


class StructuralProbe(BaseEstimator):
    """Hewitt and Manning's distance or depth probe, one rank-``rank`` matrix per layer, all trained together.

    A scikit-learn estimator whose targets are trees: ``fit(X, sentences, X_dev, sentences_dev)`` trains on
    train and selects each layer's parameters by dev loss (early stopping); ``score(X, sentences)`` returns
    one float, the primary metric (UUAS for ``distance``, root accuracy for ``depth``) of the layer with
    the lowest dev loss (``best_layer_``); ``score_layers(X, sentences)`` returns every layer's metrics as
    a tidy DataFrame ``(task, layer, metric, value)``. ``X`` is a word-pooled Store, an array
    ``[n_layers, total_words, dim]`` or a list of ``[total_words, dim]`` arrays.

    ``seed`` sets each layer's initial ``B`` (``derive_seed(seed, "structural-init", layer)``, so a layer's
    probe is the same alone or beside others) and the batch order. ``device``: ``"auto"`` (cuda if
    available), ``"cpu"``, ``"cuda"``.
    """

    def __init__(self, kind: str = "distance", rank: int = 128, epochs: int = 40, lr: float = 1e-3,
                 batch_size: int = 20, patience: int = 4, lr_decay: float = 0.1, seed: int = 0,
                 device: str | torch.device | None = "auto", punct: str = "upos", eval_batch_size: int = 128):
        self.kind = kind
        self.rank = rank
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.patience = patience
        self.lr_decay = lr_decay
        self.seed = seed
        self.device = device
        self.punct = punct
        self.eval_batch_size = eval_batch_size

    # -- forward -----------------------------------------------------------------------------------

    def _project(self, vectors: _Vectors, layer_index: torch.Tensor, sentence_ids: np.ndarray,
                 weights: torch.Tensor):
        """Project the words of some sentences: returns ``[A, words, rank]`` and each word's (sentence, position)."""
        lengths = np.diff(vectors.offsets)[sentence_ids]
        starts = vectors.offsets[sentence_ids]
        word_rows = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths)])
        batch_of_word = np.repeat(np.arange(len(sentence_ids)), lengths)
        position = word_rows - np.repeat(starts, lengths)
        rows = torch.as_tensor(word_rows, device=weights.device)
        x = vectors.data[layer_index[:, None], rows[None, :]].to(torch.float32)  # [A, W, dim]
        return torch.bmm(x, weights), batch_of_word, position, lengths

    def _predict_batch(self, vectors: _Vectors, layer_index: torch.Tensor, sentence_ids: np.ndarray,
                       weights: torch.Tensor):
        projected, batch_of_word, position, lengths = self._project(vectors, layer_index, sentence_ids, weights)
        device = weights.device
        if self.kind == "depth":
            return (projected * projected).sum(-1), batch_of_word, position, lengths  # [A, W]
        # Scatter packed words into a padded [A, B, n_max, rank] block only for the pairwise step, so the
        # projection itself never multiplies padding.
        n_max = int(lengths.max())
        padded = projected.new_zeros(projected.shape[0], len(sentence_ids), n_max, projected.shape[-1])
        b = torch.as_tensor(batch_of_word, device=device)
        p = torch.as_tensor(position, device=device)
        padded[:, b, p] = projected
        gram = padded @ padded.transpose(-1, -2)
        sq = torch.diagonal(gram, dim1=-2, dim2=-1)
        # ||u - v||^2 via the Gram matrix avoids materialising [A, B, n, n, rank] differences.
        distances = (sq[..., :, None] + sq[..., None, :] - 2 * gram).clamp_min(0.0)
        return distances, batch_of_word, position, lengths  # [A, B, n_max, n_max]

    def _gold_batch(self, labels: _Labels, sentence_ids: np.ndarray, device: torch.device):
        if self.kind == "depth":
            return torch.as_tensor(np.concatenate([labels.gold[i] for i in sentence_ids]), device=device)
        n_max = int(labels.lengths[sentence_ids].max())
        gold = np.zeros((len(sentence_ids), n_max, n_max), dtype=np.float32)
        mask = np.zeros_like(gold)
        for b, i in enumerate(sentence_ids):
            n = labels.lengths[i]
            gold[b, :n, :n] = labels.gold[i]
            mask[b, :n, :n] = 1.0
        return torch.as_tensor(gold, device=device), torch.as_tensor(mask, device=device)

    def _batch_loss(self, vectors: _Vectors, labels: _Labels, layer_index: torch.Tensor,
                    sentence_ids: np.ndarray, weights: torch.Tensor) -> torch.Tensor:
        """Per-layer loss ``[A]``: L1 per sentence / n (depth) or n^2 (distance), averaged over sentences."""
        predicted, batch_of_word, _, lengths = self._predict_batch(vectors, layer_index, sentence_ids, weights)
        device = weights.device
        n = torch.as_tensor(lengths, device=device, dtype=torch.float32)
        if self.kind == "depth":
            gold = self._gold_batch(labels, sentence_ids, device)
            error = (predicted - gold).abs()  # [A, W]
            per_sentence = error.new_zeros(error.shape[0], len(sentence_ids))
            per_sentence.index_add_(1, torch.as_tensor(batch_of_word, device=device), error)
            return (per_sentence / n).mean(dim=1)
        gold, mask = self._gold_batch(labels, sentence_ids, device)
        per_sentence = ((predicted - gold).abs() * mask).sum(dim=(-1, -2))  # [A, B]
        return (per_sentence / n**2).mean(dim=1)

    # -- training ----------------------------------------------------------------------------------

    def fit(self, X, sentences: Sequence[Sentence], X_dev, sentences_dev: Sequence[Sentence],
            layers: Sequence[int] | None = None, on_epoch: Callable[[int, int], None] | None = None):
        """Train one probe per layer on (X, sentences); pick each layer's epoch by loss on the dev split.

        ``X``: word vectors ``[n_layers, total_words, dim]`` (a word-pooled Store, an array or a list of
        ``[total_words, dim]`` layers; the words of ``sentences`` concatenated in order); ``sentences``: the
        gold trees (CoNLL-U heads). ``X_dev``/``sentences_dev`` the same for the dev split. ``layers``: which
        layers of ``X`` (default all). ``on_epoch(epoch, active_layers)`` is called after every epoch (for
        progress bars). Returns ``self``; ``weights_`` ``[n_layers, dim, rank]``, ``layers_``,
        ``dev_loss_``, ``best_epoch_``, ``best_layer_``, ``history_``.
        """
        _check_kind(self.kind)
        if self.punct not in PUNCT_SCHEMES:
            raise DataError(f"unknown punctuation scheme {self.punct!r}; expected one of {', '.join(PUNCT_SCHEMES)}")
        if self.rank < 1 or self.epochs < 1 or self.batch_size < 1:
            raise DataError(
                f"rank, epochs and batch_size must be >= 1 (got {self.rank}, {self.epochs}, {self.batch_size})"
            )
        device = resolve_device(self.device)
        train = X if isinstance(X, _Vectors) else _as_vectors(X, sentences, layers, device, "train")
        dev = X_dev if isinstance(X_dev, _Vectors) else _as_vectors(X_dev, sentences_dev, layers, device, "dev")
        if train.layers != dev.layers or train.data.shape[-1] != dev.data.shape[-1]:
            raise DataError(
                f"train and dev word vectors differ: layers {train.layers} vs {dev.layers}, "
                f"dim {train.data.shape[-1]} vs {dev.data.shape[-1]}"
            )
        train_labels, dev_labels = _labels(sentences, self.kind), _labels(sentences_dev, self.kind)
        n_layers, dim = train.data.shape[0], train.data.shape[-1]

        # Uniform(-0.05, 0.05) as in the authors' probe.py, seeded per (seed, layer id) so a layer's probe
        # is the same whether it trains alone or beside other layers.
        params = [
            torch.nn.Parameter(
                torch.empty(dim, self.rank).uniform_(
                    -0.05, 0.05,
                    generator=torch.Generator().manual_seed(derive_seed(self.seed, "structural-init", int(layer)))
                ).to(device)
            )
            for layer in train.layers
        ]
        # One parameter group per layer: each layer gets its own learning-rate decay and its own stop.
        optimizer = torch.optim.Adam([{"params": [p], "lr": self.lr} for p in params])
        best_loss = np.full(n_layers, np.inf)
        plateau_best = np.full(n_layers, np.inf)
        best_epoch = np.full(n_layers, -1)
        best_weights = [p.detach().clone() for p in params]
        active = np.ones(n_layers, dtype=bool)
        rng = np.random.default_rng(self.seed)
        history = []

        for epoch in range(self.epochs):
            live = np.flatnonzero(active)
            layer_index = torch.as_tensor(live, device=device)
            order = rng.permutation(len(sentences))
            for start in range(0, len(order), self.batch_size):
                batch = order[start:start + self.batch_size]
                optimizer.zero_grad(set_to_none=True)
                weights = torch.stack([params[l] for l in live])
                # Layers are independent, so the summed loss gives each B exactly its own gradient.
                self._batch_loss(train, train_labels, layer_index, batch, weights).sum().backward()
                optimizer.step()  # stopped layers have no gradient and are skipped by Adam
            dev_loss = self._mean_loss(dev, dev_labels, layer_index, [params[l] for l in live])
            for slot, l in enumerate(live):
                loss = dev_loss[slot]
                # ReduceLROnPlateau(mode="min", factor=0.1, patience=0) as in the authors' regimen.py
                if loss < plateau_best[l] * (1 - 1e-4):
                    plateau_best[l] = loss
                else:
                    optimizer.param_groups[l]["lr"] *= self.lr_decay
                if loss < best_loss[l] - 1e-4:
                    best_loss[l], best_epoch[l] = loss, epoch
                    best_weights[l] = params[l].detach().clone()
                elif best_epoch[l] < epoch - self.patience:
                    active[l] = False
                history.append({"epoch": epoch, "layer": train.layers[l], "dev_loss": float(loss)})
            if on_epoch is not None:
                on_epoch(epoch, int(active.sum()))
            if not active.any():
                break

        self.weights_ = torch.stack(best_weights).detach()
        self.layers_ = list(train.layers)
        self.best_epoch_ = {layer: int(e) for layer, e in zip(self.layers_, best_epoch)}
        self.dev_loss_ = {layer: float(v) for layer, v in zip(self.layers_, best_loss)}
        self.history_ = pd.DataFrame(history)
        # Chosen on dev loss, never on a metric of the split being scored.
        self.best_layer_ = self.layers_[int(np.argmin(best_loss))]
        return self

    @torch.no_grad()
    def _mean_loss(self, vectors: _Vectors, labels: _Labels, layer_index: torch.Tensor,
                   params: list[torch.Tensor]) -> np.ndarray:
        weights = torch.stack([p.detach() for p in params])
        total = torch.zeros(len(params), device=weights.device)
        n_sentences = len(labels.lengths)
        for start in range(0, n_sentences, self.eval_batch_size):
            batch = np.arange(start, min(start + self.eval_batch_size, n_sentences))
            total += self._batch_loss(vectors, labels, layer_index, batch, weights) * len(batch)
        return (total / n_sentences).cpu().numpy()

    # -- inference ---------------------------------------------------------------------------------

    @torch.no_grad()
    def predict(self, X, sentences: Sequence[Sentence]) -> list[np.ndarray]:
        """Predicted squared distances ``[n_layers, n, n]`` or depths ``[n_layers, n]``, one array per sentence."""
        check_is_fitted(self, "weights_")
        weights = self.weights_
        vectors = X if isinstance(X, _Vectors) else _as_vectors(X, sentences, self.layers_, weights.device, "input")
        if vectors.layers != self.layers_:
            raise DataError(f"word vectors have layers {vectors.layers}; the probe was fitted on {self.layers_}")
        layer_index = torch.arange(len(self.layers_), device=weights.device)
        out: list[np.ndarray] = []
        n_sentences = len(vectors.offsets) - 1
        for start in range(0, n_sentences, self.eval_batch_size):
            batch = np.arange(start, min(start + self.eval_batch_size, n_sentences))
            predicted, batch_of_word, _, lengths = self._predict_batch(vectors, layer_index, batch, weights)
            predicted = predicted.float().cpu().numpy()
            if self.kind == "depth":
                bounds = np.concatenate([[0], np.cumsum(lengths)])
                out.extend(predicted[:, bounds[b]:bounds[b + 1]] for b in range(len(batch)))
            else:
                out.extend(predicted[:, b, :n, :n] for b, n in enumerate(lengths))
        return out

    def score_layers(self, X, sentences: Sequence[Sentence]) -> pd.DataFrame:
        """Evaluate every layer: tidy DataFrame with columns ``task, layer, metric, value`` (UUAS and root
        accuracy as fractions, DSpr./NSpr. as Spearman correlations)."""
        predictions = self.predict(X, sentences)
        metrics = structural_metrics(self.kind, predictions, sentences, self.punct)
        frame = pd.DataFrame(
            [{"task": TASK_NAMES[self.kind], "layer": layer, "metric": metric, "value": float(values[i])}
             for metric, values in metrics.items() for i, layer in enumerate(self.layers_)]
        )
        return frame.astype({"layer": "Int64"})

    def score(self, X, sentences: Sequence[Sentence]) -> float:
        """One float: UUAS (distance) or root accuracy (depth) of ``best_layer_``, the layer chosen on dev."""
        check_is_fitted(self, "weights_")
        if self.best_layer_ not in self.layers_:
            raise DataError(f"best layer {self.best_layer_} not among the fitted layers {self.layers_}")
        index = self.layers_.index(self.best_layer_)
        predictions = [p[index] for p in self.predict(X, sentences)]
        metric = PRIMARY_METRIC[self.kind]
        return float(structural_metrics(self.kind, predictions, sentences, self.punct)[metric])


# --------------------------------------------------------------------------------------------------
# Whole experiment
# --------------------------------------------------------------------------------------------------

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
                   store_test, sentences_test: Sequence[Sentence], *, seeds: Sequence[int] = (0, 1, 2),
                   rank: int = 128, kinds: Sequence[str] = KINDS, layers: Sequence[int] | None = None,
                   untrained: tuple | Mapping[int, tuple] | None = None, epochs: int = 40, lr: float = 1e-3, batch_size: int = 20,
                   punct: str = "upos", device: str | None = "auto", model: str | None = None,
                   progress: bool = True, collect: dict | None = None) -> Result:
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
    """
    for kind in kinds:
        _check_kind(kind)
    if punct not in PUNCT_SCHEMES:
        raise DataError(f"unknown punctuation scheme {punct!r}; expected one of {', '.join(PUNCT_SCHEMES)}")
    if not seeds:
        raise DataError("seeds is empty; give at least one seed (three or more for a spread)")
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
            train = _as_vectors(train_store, sentences_train, layers, torch_device, f"{baseline} train")
            dev = _as_vectors(dev_store, sentences_dev, layers, torch_device, f"{baseline} dev")
            test = _as_vectors(test_store, sentences_test, layers, torch_device, f"{baseline} test")
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
                        scored = probe.score_layers(vectors, sentences)
                        if collect is not None:
                            hits, totals = sentence_hits(kind, probe.predict(vectors, sentences), sentences, punct)
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
