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

from typing import Sequence

import numpy as np
from scipy.sparse.csgraph import minimum_spanning_tree
from scipy.stats import rankdata

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
        raise SettingError("punct", scheme, f"expected one of {', '.join(PUNCT_SCHEMES)}")
    if tags is None:
        raise DataError(f"{_where(sentence)}: no {scheme.upper()} tags, needed to leave out punctuation")
    return np.array([tag in wanted for tag in tags], dtype=bool)


# --------------------------------------------------------------------------------------------------
# Metrics
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
        gold_distances = gold_targets(sentence, "distance")
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
            keep = ~punctuation_mask(sentence, punct)
            gold = mst_edges(gold_targets(sentence, "distance"), keep)
            hits.append([len(gold & mst_edges(layer, keep)) for layer in _layered(prediction, 2)])
            totals.append(len(gold))
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
