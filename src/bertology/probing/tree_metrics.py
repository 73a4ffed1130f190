"""The tree metrics of Hewitt and Manning's structural probes (NAACL 2019), their gold trees and the
linear-chain baseline.

* distance probes: **UUAS** (minimum spanning tree of the predicted distances vs the gold tree, punctuation
  left out) and **DSpr.** (Spearman correlation of each word's row of predicted vs gold distances, averaged
  per sentence length, then over lengths 5-50).
* depth probes: **root accuracy** (the non-punctuation word of least predicted depth is the gold root) and
  **NSpr.** (per-sentence Spearman, same length averaging as DSpr.).

Each metric takes one prediction per sentence; a leading layer axis is allowed and kept (then it returns
one score per layer). Gold trees come from :class:`bertology.data.Sentence` (CoNLL-U heads).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

from bertology.data import Sentence
from bertology.data.treebank import describe_sentence, tree_depths, tree_distances
from bertology.errors import DataError, SettingError
from bertology.probing.names import PUNCT_SCHEMES, STRUCTURAL_KINDS

KINDS = STRUCTURAL_KINDS
TASK_NAMES = {"distance": "structural-distance", "depth": "structural-depth"}
METRICS = {"distance": ("uuas", "dspr"), "depth": ("root_acc", "nspr")}
#: The punctuation XPOS tags that Hewitt and Manning's reporter.py leaves out of UUAS / root accuracy.
HM_PUNCT_XPOS = frozenset({"''", ",", ".", ":", "``", "-LRB-", "-RRB-"})
#: Spearman correlations are averaged per sentence length, then over these lengths (inclusive).
SPEARMAN_MIN_LENGTH, SPEARMAN_MAX_LENGTH = 5, 50


# --------------------------------------------------------------------------------------------------
# Gold trees
# --------------------------------------------------------------------------------------------------

def _where(sentence: Sentence | None) -> str:
    return "tree" if sentence is None else describe_sentence(sentence)


def gold_targets(sentence: Sentence, kind: str) -> np.ndarray:
    """The gold tree distances ``[n, n]`` (``kind="distance"``) or depths ``[n]`` (``"depth"``) of a sentence."""
    if sentence.heads is None:
        raise DataError(f"{_where(sentence)}: no dependency heads; structural probes need a treebank (CoNLL-U)")
    try:
        return _gold_of_heads(tuple(sentence.heads), kind)
    except DataError:  # not a tree: the same complaint, naming the sentence
        (tree_distances if kind == "distance" else tree_depths)(sentence.heads, where=_where(sentence))
        raise


@lru_cache(maxsize=1 << 16)
def _gold_of_heads(heads: tuple[int, ...], kind: str) -> np.ndarray:
    """:func:`gold_targets` per tree, kept (read-only): every seed, baseline, split and metric of a structural
    run reads the same sentences' trees again."""
    gold = tree_distances(heads) if kind == "distance" else tree_depths(heads)
    gold.flags.writeable = False
    return gold


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
        raise SettingError("punct", scheme, f"expected one of {', '.join(PUNCT_SCHEMES)}")
    if tags is None:
        raise DataError(f"{_where(sentence)}: no {scheme.upper()} tags, needed to leave out punctuation")
    return np.array([tag in wanted for tag in tags], dtype=bool)


# --------------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------------

def _prim_parents(distances: np.ndarray) -> np.ndarray:
    """Prim's minimum spanning tree of each symmetric ``[m, m]`` matrix of ``distances`` ``[L, m, m]``, all
    ``L`` at once: ``parent`` ``[L, m]``, the tree's edges being ``(parent[l, v], v)`` for ``v >= 1``.

    One pass per word over ``[L, m]`` arrays: scipy's ``minimum_spanning_tree`` took about a millisecond per
    matrix in input checks and sparse conversions, and the structural probes ask for one per sentence, layer,
    seed and baseline (in the report's probing, most of the structural probes' time). Where several trees
    tie, the first closest word in sentence order joins first; predicted distances do not tie in practice."""
    L, m, _ = distances.shape
    rows = np.arange(L)
    parent = np.zeros((L, m), dtype=np.int64)
    parent[:, 0] = -1
    outside = np.ones((L, m), dtype=bool)
    outside[:, 0] = False
    best = distances[:, 0, :].copy()
    best[:, 0] = np.inf
    for _ in range(m - 1):
        v = best.argmin(1)
        outside[rows, v] = False
        best[rows, v] = np.inf
        through = distances[rows, v, :]
        closer = outside & (through < best)
        best = np.where(closer, through, best)
        parent = np.where(closer, v[:, None], parent)
    return parent


def _symmetric_kept(distances: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The kept words' distances ``[..., m, m]``, made symmetric (a probe's prediction need not be)."""
    sub = np.asarray(distances, dtype=np.float64)[..., index[:, None], index[None, :]]
    return (sub + np.swapaxes(sub, -1, -2)) / 2


def mst_edges(distances: np.ndarray, keep: np.ndarray | None = None) -> set[tuple[int, int]]:
    """Edges ``(i, j)`` with ``i < j`` of the minimum spanning tree over the kept words (sentence indices)."""
    distances = np.asarray(distances, dtype=np.float64)
    n = distances.shape[0]
    index = np.arange(n) if keep is None else np.flatnonzero(keep)
    if len(index) < 2:
        return set()
    parent = _prim_parents(_symmetric_kept(distances, index)[None])[0]
    return {(int(min(index[p], index[v])), int(max(index[p], index[v]))) for v, p in enumerate(parent) if v}


@lru_cache(maxsize=1 << 16)
def _gold_tree(heads: tuple[int, ...], keep: tuple[bool, ...]) -> tuple[np.ndarray, np.ndarray, int]:
    """The gold MST of a sentence over its kept words (:func:`uuas`): ``(index, adjacency, edges)``, the kept
    words' sentence indices, a symmetric ``[m, m]`` boolean matrix of the gold edges among them, and their
    number. Kept per (heads, kept words): every probe seed, baseline and layer is scored against the same."""
    index = np.flatnonzero(np.asarray(keep, dtype=bool))
    adjacency = np.zeros((len(index), len(index)), dtype=bool)
    if len(index) < 2:
        return index, adjacency, 0
    position = {int(word): k for k, word in enumerate(index)}
    edges = mst_edges(_gold_of_heads(heads, "distance"), np.asarray(keep, dtype=bool))
    for i, j in edges:
        adjacency[position[i], position[j]] = adjacency[position[j], position[i]] = True
    return index, adjacency, len(edges)


def _uuas_hits(prediction: np.ndarray, sentence: Sentence, punct: str) -> tuple[np.ndarray, int]:
    """Per layer, how many gold edges the predicted-distance MST finds in one sentence, and the gold edges."""
    if sentence.heads is None:
        raise DataError(f"{_where(sentence)}: no dependency heads; structural probes need a treebank (CoNLL-U)")
    keep = tuple((~punctuation_mask(sentence, punct)).tolist())
    try:
        index, adjacency, total = _gold_tree(tuple(sentence.heads), keep)
    except DataError:  # not a tree: the same complaint, naming the sentence
        gold_targets(sentence, "distance")
        raise
    layers = _layered(prediction, 2)
    if total == 0:
        return np.zeros(len(layers), dtype=np.int64), 0
    parent = _prim_parents(_symmetric_kept(layers, index))
    child = np.arange(1, len(index))
    return adjacency[parent[:, 1:], child].sum(-1), total


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
        hits, edges = _uuas_hits(prediction, sentence, punct)
        correct = hits if correct is None else correct + hits
        total += edges
    scores = correct / total if total else np.full(len(correct), np.nan)
    return float(scores[0]) if np.ndim(pred_distances[0]) == 2 else scores


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1 along the last axis, ties given their average rank: ``scipy.stats.rankdata(values,
    axis=-1)`` to the bit, without its per-call overhead (a structural run ranks every sentence's rows for
    every layer, seed and baseline)."""
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[-1]
    order = np.argsort(values, axis=-1, kind="stable")
    ordered = np.take_along_axis(values, order, -1)
    position = np.broadcast_to(np.arange(n), values.shape)
    starts = np.ones(values.shape, dtype=bool)
    starts[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    ends = np.ones(values.shape, dtype=bool)
    ends[..., :-1] = starts[..., 1:]
    first = np.maximum.accumulate(np.where(starts, position, 0), axis=-1)
    last = np.flip(np.minimum.accumulate(np.flip(np.where(ends, position, n - 1), -1), axis=-1), -1)
    ranks = np.empty(values.shape, dtype=np.float64)
    np.put_along_axis(ranks, order, (first + last) / 2 + 1, -1)
    return ranks


def _rowwise_spearman(predicted: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Spearman correlation along the last axis (average ranks for ties). Constant rows give 0."""
    rp = _average_ranks(predicted)
    rg = _average_ranks(gold)
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
        rows = _rowwise_spearman(_layered(prediction, 2), gold_targets(sentence, "distance"))  # [L, n]
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
        per_length.setdefault(n, []).append(_rowwise_spearman(_layered(prediction, 1), gold_targets(sentence, "depth")))
    result = _length_averaged(per_length)
    if result is None:
        result = np.full(len(_layered(pred_depths[0], 1)), np.nan)
    return float(result[0]) if np.ndim(pred_depths[0]) == 1 else result


def root_accuracy(pred_depths: Sequence[np.ndarray], sentences: Sequence[Sentence], punct: str = "upos"):
    """Share of sentences whose least-deep predicted non-punctuation word is the gold root."""
    _check_lengths(pred_depths, sentences, 1)
    hits = None
    for prediction, sentence in zip(pred_depths, sentences):
        root = int(np.flatnonzero(gold_targets(sentence, "depth") == 0)[0])
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
    check_probe_kind(kind)
    hits, totals = [], []
    for prediction, sentence in zip(predictions, sentences):
        if kind == "distance":
            found, edges = _uuas_hits(prediction, sentence, punct)
            hits.append(found.tolist())
            totals.append(edges)
        else:
            root = int(np.flatnonzero(gold_targets(sentence, "depth") == 0)[0])
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
    check_probe_kind(kind)
    if kind == "distance":
        return {"uuas": uuas(predictions, sentences, punct), "dspr": distance_spearman(predictions, sentences)}
    return {"root_acc": root_accuracy(predictions, sentences, punct), "nspr": depth_spearman(predictions, sentences)}


def check_probe_kind(kind: str) -> None:
    """A :class:`~bertology.errors.SettingError` unless ``kind`` is one of :data:`KINDS`."""
    if kind not in KINDS:
        raise SettingError("kind", kind, f"expected one of {', '.join(KINDS)}")


def check_punct_scheme(punct: str) -> None:
    """A :class:`~bertology.errors.SettingError` unless ``punct`` is one of :data:`PUNCT_SCHEMES`."""
    if punct not in PUNCT_SCHEMES:
        raise SettingError("punct", punct, f"expected one of {', '.join(PUNCT_SCHEMES)}")
