"""Attention heads as dependency parsers (Clark et al. 2019, sections 4.2 and 5).

Input is word-level attention per sentence, ``[n_layers, n_heads, n+2, n+2]`` with index 0 = [CLS],
1..n = words, n+1 = [SEP] (see :mod:`bertology.attention.stats`), next to gold trees from
:class:`bertology.data.Sentence` (``heads`` 1-based, 0 = root).

Directions, following Clark et al.'s released ``Syntax_Analysis.ipynb``:

* ``dep->head``: the word that word *i* attends to most (argmax over row *i*) is predicted as *i*'s head.
* ``head->dep``: the word that attends most to word *i* (argmax over column *i*, i.e. the transposed
  map) is predicted as *i*'s head: the head attends to its dependent more than any other word does.

In both, the special tokens and the word itself are left out of the argmax, so every prediction is a
word.

Numbering (:mod:`bertology.numbering`), in every table: ``layer`` is the hidden_states layer (1..L; its
attention is ``attentions[layer - 1]``), ``head`` counts from 0, ``head_label`` is ``L8H10``. Clark et
al. print heads as "layer-head", both from 1 ("8-11"); :data:`CLARK_TABLE1` stores the paper's heads
converted to our numbering (``paper_layer=8, paper_head=10, paper_head_label="L8H10"``).
Accuracies and UAS are fractions in [0, 1].
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence
import tempfile

import numpy as np
import pandas as pd

from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
import torch

from bertology.attention.stats import _layer_numbers, _zip_checked, check_attention, head_statistics
from bertology.data import Sentence, packaged_treebank, read_conllu
from bertology.data.treebank import find_splits
from bertology.errors import DataError
from bertology.numbering import head_label
from bertology.progress import track
from bertology.results import Result, tidy
from bertology.extraction import extract
from bertology.models import as_encoder
from bertology.runtime import resolve_device

DIRECTIONS: tuple[str, str] = ("dep->head", "head->dep")
ALL_RELATIONS = "all"
#: Offsets of the fixed-offset baseline: always attend to the word k positions away.
DEFAULT_OFFSETS: tuple[int, ...] = tuple(k for k in range(-5, 6) if k != 0)
#: Clark et al.'s special case for possessives: "John 's" -- the possessor is scored by what its
#: clitic predicts (the possessive marker sits between the possessor and the possessed noun).
POSSESSIVE_RELATIONS = frozenset({"nmod:poss", "poss"})
POSSESSIVE_MARKERS = frozenset({"'s", "s'", "'", "\u2019s", "\u2019"})

#: Clark et al. used Stanford Dependencies (PTB-SD); EWT is annotated in Universal Dependencies.
#: Only relations whose UD counterpart attaches the same two words are mapped. Left out on purpose:
#: prep/pobj (UD makes the noun the head of the preposition, ``case``), possessive (UD ``case``
#: also covers prepositions), cc (UD attaches it to the following conjunct), neg (UD ``advmod``).
STANFORD_TO_UD: dict[str, str] = {
    "det": "det",
    "dobj": "obj",
    "nsubj": "nsubj",
    "nsubjpass": "nsubj:pass",
    "amod": "amod",
    "advmod": "advmod",
    "aux": "aux",
    "auxpass": "aux:pass",
    "poss": "nmod:poss",
    "nn": "compound",
    "num": "nummod",
    "ccomp": "ccomp",
    "xcomp": "xcomp",
    "mark": "mark",
    "prt": "compound:prt",
    "cop": "cop",
    "conj": "conj",
    "advcl": "advcl",
    "appos": "appos",
    "rcmod": "acl:relcl",
}

#: Clark et al. (2019), Table 1, for bert-base-uncased on the WSJ dev set (PTB-SD): per relation the
#: best head, its accuracy, the best fixed-offset baseline (accuracy, offset) and the direction.
#: Values as printed by the cell "This produces the scores in Table 1" of the authors' released
#: notebook (github.com/clarkkev/attention-analysis, Syntax_Analysis.ipynb); det (94.3 % at "8-11")
#: and dobj (86.8 % at "8-10") also appear in the paper's text and figure 5. The paper prints heads as
#: "layer-head", both from 1; here they are in OUR numbering (layer = hidden_states layer, head from
#: 0), so the paper's "8-11" is ``paper_layer=8, paper_head=10`` (label ``L8H10``). Accuracies are
#: fractions. Counts are Clark's WSJ counts, not ours.
CLARK_TABLE1 = pd.DataFrame(
    [
        # relation, paper layer, paper head (from 0), accuracy, baseline accuracy, offset, direction, count
        ("det", 8, 10, 0.943, 0.517, 1, "dep->head", 3337),
        ("dobj", 8, 9, 0.868, 0.400, -2, "dep->head", 1591),
        ("nsubj", 8, 1, 0.585, 0.455, 1, "dep->head", 2804),
        ("amod", 4, 9, 0.756, 0.683, 1, "dep->head", 2505),
        ("nn", 4, 9, 0.704, 0.702, 1, "dep->head", 3192),
        ("advmod", 7, 5, 0.488, 0.402, 1, "dep->head", 1241),
        ("aux", 4, 9, 0.811, 0.715, 1, "dep->head", 1237),
        ("poss", 7, 5, 0.805, 0.477, 1, "dep->head", 708),
        ("auxpass", 4, 9, 0.941, 0.825, 1, "dep->head", 286),
        ("ccomp", 8, 0, 0.488, 0.124, -2, "dep->head", 557),
        ("mark", 8, 1, 0.507, 0.145, 2, "dep->head", 420),
        ("prt", 6, 6, 0.991, 0.914, -1, "dep->head", 116),
        ("prep", 7, 3, 0.667, 0.618, -1, "dep->head", 3760),
        ("pobj", 9, 5, 0.763, 0.346, -2, "head->dep", 3720),
    ],
    columns=["paper_relation", "paper_layer", "paper_head", "paper_accuracy", "paper_baseline_accuracy",
             "paper_baseline_offset", "paper_direction", "paper_count"],
)
CLARK_TABLE1.insert(3, "paper_head_label", [head_label(layer, head) for layer, head in
                                            zip(CLARK_TABLE1["paper_layer"], CLARK_TABLE1["paper_head"])])


# --------------------------------------------------------------------------- predictions


def head_predictions(attention: np.ndarray, n_words: int) -> np.ndarray:
    """Predicted heads (1-based word indices) of every word, for every head and both directions.

    Returns ``int [2, n_layers, n_heads, n]``: index 0 of the first axis is ``dep->head``, 1 is
    ``head->dep``. The special tokens and the word itself never win the argmax.
    """
    a = check_attention(attention, n_words, "sentence")[..., 1 : n_words + 1, 1 : n_words + 1].copy()
    if n_words == 1:
        # A one-word sentence has no other word to point to; the prediction is "nothing" (0 = root).
        return np.zeros((2, *a.shape[:2], 1), dtype=np.int64)
    diag = np.arange(n_words)
    a[..., diag, diag] = -np.inf
    dep_to_head = a.argmax(-1)
    head_to_dep = a.argmax(-2)
    return np.stack([dep_to_head, head_to_dep]) + 1


def offset_predictions(n_words: int, offset: int) -> np.ndarray:
    """The fixed-offset baseline: word i's head is word i+offset (-1 when that falls outside)."""
    predicted = np.arange(1, n_words + 1) + offset
    return np.where((predicted >= 1) & (predicted <= n_words), predicted, -1)


def scoring_positions(sentence: Sentence, possessive_rule: bool) -> np.ndarray:
    """Whose prediction scores each word: itself, or (Clark's poss rule) the possessive clitic after it."""
    n = len(sentence)
    source = np.arange(n)
    if possessive_rule:
        for i, (deprel, head) in enumerate(zip(sentence.deprels, sentence.heads)):
            if deprel in POSSESSIVE_RELATIONS and i + 1 < n and sentence.words[i + 1] in POSSESSIVE_MARKERS:
                source[i] = i + 1
    return source


def _check_tree(sentence: Sentence, index: int) -> None:
    if sentence.heads is None or sentence.deprels is None:
        raise DataError(
            f"sentence {index} ({sentence.id}): no dependency tree; heads as parsers needs a CoNLL-U treebank "
            "with HEAD and DEPREL columns"
        )


# --------------------------------------------------------------------------- single heads


def heads_as_parsers(
    attentions: Iterable[np.ndarray],
    sentences: Iterable[Sentence],
    possessive_rule: bool = True,
    progress: bool = False,
    total: int | None = None,
    layers: Sequence[int] | None = None,
) -> pd.DataFrame:
    """Accuracy of every head, in both directions, at every dependency relation.

    A word counts as correct for a head when the head's prediction (see :func:`head_predictions`)
    is the word's gold head. Relation ``"all"`` pools every word (punctuation and root included, as
    Clark et al. did; root words can never be predicted). Returns a tidy table: ``relation, direction,
    layer, head, head_label, correct, count, accuracy`` (accuracy a fraction). ``layers`` names the
    layers the arrays hold (default 1..L; pass ``store.attention_layers`` for a store of some layers).
    """
    correct: dict[str, np.ndarray] = {}
    counts: dict[str, int] = defaultdict(int)
    shape: tuple[int, int] | None = None
    pairs = _zip_checked(attentions, sentences)
    for index, (attention, sentence) in enumerate(track(pairs, "heads as parsers", total=total, enabled=progress)):
        _check_tree(sentence, index)
        attention = np.asarray(attention)
        if shape is None:
            shape = attention.shape[:2]
        elif attention.shape[:2] != shape:
            raise DataError(f"sentence {index} ({sentence.id}): {attention.shape[:2]} layers x heads; expected {shape}")
        try:
            predictions = head_predictions(attention, len(sentence))
        except DataError as exc:
            raise DataError(f"sentence {index} ({sentence.id}): {exc}") from None
        predictions = predictions[..., scoring_positions(sentence, possessive_rule)]
        hits = predictions == np.asarray(sentence.heads)  # [2, L, H, n]
        for relation in dict.fromkeys(sentence.deprels):  # first appearance: the same row order every run
            mask = np.fromiter((d == relation for d in sentence.deprels), bool, len(sentence))
            if relation not in correct:
                correct[relation] = np.zeros((2, *shape), dtype=np.int64)
            correct[relation] += hits[..., mask].sum(-1)
            counts[relation] += int(mask.sum())
        correct.setdefault(ALL_RELATIONS, np.zeros((2, *shape), dtype=np.int64))
        correct[ALL_RELATIONS] += hits.sum(-1)
        counts[ALL_RELATIONS] += len(sentence)
    if shape is None:
        raise DataError("no sentences given; expected at least one attention array")
    frames = []
    layer_index, head_index = np.meshgrid(_layer_numbers(layers, shape[0]), np.arange(shape[1]), indexing="ij")
    labels = [head_label(layer, head) for layer, head in zip(layer_index.ravel(), head_index.ravel())]
    for relation, matrix in correct.items():
        for d, direction in enumerate(DIRECTIONS):
            frames.append(pd.DataFrame({
                "relation": relation,
                "direction": direction,
                "layer": layer_index.ravel(),
                "head": head_index.ravel(),
                "head_label": labels,
                "correct": matrix[d].ravel(),
                "count": counts[relation],
            }))
    df = pd.concat(frames, ignore_index=True)
    df["accuracy"] = df["correct"] / df["count"]
    return tidy(df)


def offset_baselines(
    sentences: Iterable[Sentence],
    offsets: Sequence[int] = DEFAULT_OFFSETS,
    possessive_rule: bool = True,
) -> pd.DataFrame:
    """Accuracy per relation of "the head is the word ``offset`` positions away", for each offset.

    Predictions falling outside the sentence count as wrong (Clark et al. clamped them to the
    sentence edge instead). Columns: ``relation, offset, correct, count, accuracy``.
    """
    correct: dict[tuple[str, int], int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    for index, sentence in enumerate(sentences):
        _check_tree(sentence, index)
        gold = np.asarray(sentence.heads)
        source = scoring_positions(sentence, possessive_rule)
        deprels = np.asarray(sentence.deprels)
        for relation in dict.fromkeys(sentence.deprels):  # first appearance: the same row order every run
            counts[relation] += int((deprels == relation).sum())
        counts[ALL_RELATIONS] += len(sentence)
        for offset in offsets:
            hits = offset_predictions(len(sentence), offset)[source] == gold
            for relation in dict.fromkeys(sentence.deprels):  # first appearance: the same row order every run
                correct[relation, offset] += int(hits[deprels == relation].sum())
            correct[ALL_RELATIONS, offset] += int(hits.sum())
    if not counts:
        raise DataError("no sentences given; expected at least one sentence with a dependency tree")
    rows = [(r, k, correct[r, k], counts[r]) for r in counts for k in offsets]
    df = pd.DataFrame(rows, columns=["relation", "offset", "correct", "count"])
    df["accuracy"] = df["correct"] / df["count"]
    return df


def best_heads_table(
    parse: pd.DataFrame,
    baselines: pd.DataFrame,
    min_count: int = 100,
    exclude: Iterable[str] = ("punct", "root"),
    held_out_parse: pd.DataFrame | None = None,
    held_out_baselines: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Clark's Table 1: per relation, the best head and direction beside the best fixed offset.

    Heads and offsets are chosen on ``parse``/``baselines``. When held-out tables (another split) are
    given, the chosen head and offset are also scored there (``held_out_*`` columns): selection and
    evaluation on the same data, as in Clark's table, is optimistic.
    Rows are relations with at least ``min_count`` words, ``"all"`` first, then by count. Columns:
    ``relation, count, direction, layer, head, head_label, accuracy, baseline_offset, baseline_accuracy``
    (+ ``held_out_count, held_out_accuracy, held_out_baseline_accuracy``); accuracies are fractions.
    """
    exclude = set(exclude)
    rows = []
    for relation, group in parse.groupby("relation", sort=False):
        count = int(group["count"].iloc[0])
        if relation in exclude or (relation != ALL_RELATIONS and count < min_count):
            continue
        best = group.sort_values(["accuracy", "direction", "layer", "head"], ascending=[False, True, True, True]).iloc[0]
        base = baselines[baselines["relation"] == relation]
        if base.empty:
            raise DataError(f"relation {relation!r} has head accuracies but no baseline; were both computed on the same sentences?")
        base_best = base.sort_values(["accuracy", "offset"], ascending=[False, True]).iloc[0]
        row = {
            "relation": relation,
            "count": count,
            "direction": best["direction"],
            "layer": int(best["layer"]),
            "head": int(best["head"]),
            "head_label": head_label(best["layer"], best["head"]),
            "accuracy": float(best["accuracy"]),
            "baseline_offset": int(base_best["offset"]),
            "baseline_accuracy": float(base_best["accuracy"]),
        }
        if held_out_parse is not None:
            match = held_out_parse[
                (held_out_parse["relation"] == relation)
                & (held_out_parse["direction"] == best["direction"])
                & (held_out_parse["layer"] == best["layer"])
                & (held_out_parse["head"] == best["head"])
            ]
            row["held_out_count"] = int(match["count"].iloc[0]) if not match.empty else 0
            row["held_out_accuracy"] = float(match["accuracy"].iloc[0]) if not match.empty else np.nan
        if held_out_baselines is not None:
            match = held_out_baselines[
                (held_out_baselines["relation"] == relation) & (held_out_baselines["offset"] == base_best["offset"])
            ]
            row["held_out_baseline_accuracy"] = float(match["accuracy"].iloc[0]) if not match.empty else np.nan
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table["_all"] = table["relation"] != ALL_RELATIONS
    table = table.sort_values(["_all", "count", "relation"], ascending=[True, False, True]).drop(columns="_all")
    return tidy(table)


def compare_with_clark(table: pd.DataFrame) -> pd.DataFrame:
    """Our best-heads table beside Clark et al.'s published Table 1, via :data:`STANFORD_TO_UD`.

    One row per relation of :data:`CLARK_TABLE1`: the paper's columns (``paper_relation``,
    ``paper_layer``, ``paper_head``, ``paper_head_label`` in our numbering, ``paper_direction``,
    ``paper_accuracy``, ``paper_baseline_accuracy``, ``paper_baseline_offset``, ``paper_count``), the UD
    ``relation`` it maps to, then ours with the names of :func:`best_heads_table` (``layer, head,
    head_label, direction, accuracy, baseline_accuracy, baseline_offset, count`` and the ``held_out_*``
    columns when present). All accuracies are fractions. Clark's relations without a same-attachment
    UD counterpart (prep, pobj) keep empty "ours" columns so the gap is visible rather than dropped.
    """
    clark = CLARK_TABLE1.copy()
    clark.insert(1, "relation", clark["paper_relation"].map(STANFORD_TO_UD))
    keep = ["relation", "layer", "head", "head_label", "direction", "accuracy", "baseline_accuracy",
            "baseline_offset", "count"]
    keep += [c for c in ("held_out_accuracy", "held_out_baseline_accuracy") if c in table.columns]
    ours = table[keep] if not table.empty else pd.DataFrame(columns=keep)
    merged = clark.merge(ours, on="relation", how="left")
    for column in ("baseline_offset", "count"):
        merged[column] = pd.array(merged[column], dtype="Int64")
    return tidy(merged)


# --------------------------------------------------------------------------- attention-only probe


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


def attachment_score(predictions: Sequence[np.ndarray], sentences: Sequence[Sentence],
                     ignore_relations: Iterable[str] = ()) -> float:
    """UAS: the share of words whose predicted head is the gold head, skipping ``ignore_relations``."""
    ignore = set(ignore_relations)
    correct = total = 0
    for predicted, sentence in zip(predictions, sentences):
        keep = np.fromiter((d not in ignore for d in sentence.deprels), bool, len(sentence))
        correct += int((np.asarray(predicted) == np.asarray(sentence.heads))[keep].sum())
        total += int(keep.sum())
    if total == 0:
        raise DataError("no words left to score")
    return correct / total


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
    """Length-sorted, padded probe features of a set of sentences (:meth:`AttentionOnlyProbe.prepare`):
    built once and passed to ``fit``/``predict``/``score`` in place of the attention arrays, so several
    seeds share one copy (building them costs as much as training one seed)."""

    batches: list
    n_features: int
    sentences: list
    with_trees: bool


class AttentionOnlyProbe(BaseEstimator):
    """Clark et al.'s "Attn-Only" probe: p(head j | word i) ∝ exp(Σ_k w_k α^k_ij + u_k α^k_ji).

    One weight per head and direction, shared by every word; a softmax over the candidate heads of
    each word (the other words and ROOT, whose attention is the [CLS] token's); trained with
    cross-entropy on gold trees. Prediction is the argmax per word (no tree constraint), scored
    as UAS. The attention-and-GloVe variant of the paper is not implemented.

    ``fit``/``predict``/``score`` take an iterable of word-level attention arrays and the matching
    sentences; the features of the training set are kept in memory (sorted into length buckets,
    float32 up to ``max_float32_bytes`` and float16 beyond), so cap the number of training
    sentences for big models. Pass a :class:`ProbeBatches` from :meth:`prepare` instead of the attention
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
        """The features of ``sentences`` batched as ``fit``/``predict`` use them (trees checked when
        ``need_tree``, as ``fit`` and ``score`` need)."""
        sentences = list(sentences)
        batches, n_features = self._batches(attentions, sentences, need_tree)
        return ProbeBatches(batches, n_features, sentences, need_tree)

    def _prepared(self, attentions, sentences, need_tree: bool) -> ProbeBatches:
        if isinstance(attentions, ProbeBatches):
            if need_tree and not attentions.with_trees:
                raise DataError("these probe batches were prepared with need_tree=False; fitting needs gold trees")
            return attentions
        return self.prepare(attentions, sentences, need_tree)

    # The probe is tiny (2 x heads weights); batches are padded to the longest sentence in them.
    def _batches(self, attentions, sentences, need_tree: bool):
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
            if current and (len(current) + 1) * n * (n + 1) > self.batch_pairs:
                chunks.append(current)
                current = []
            current.append(item)
        chunks.append(current)
        # float32 is ~3x faster on CPU than converting float16 every step; float16 halves the memory.
        padded_bytes = 4 * n_features * sum(len(c) * c[-1][1].shape[0] * (c[-1][1].shape[0] + 1) for c in chunks)
        dtype = torch.float32 if padded_bytes <= self.max_float32_bytes else torch.float16
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
        return batches, n_features

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


# --------------------------------------------------------------------------- experiment


def _extract_split(encoder, sentences, work_dir: Path, name: str, layers, progress: bool):
    return extract(encoder, sentences, work_dir / f"{name}.store", layers=layers, attentions=True, progress=progress)


def _head_uas(parse: pd.DataFrame, direction: str, layer: int, head: int, ignore_punct: bool) -> float:
    rows = parse[(parse["direction"] == direction) & (parse["layer"] == layer) & (parse["head"] == head)]
    everything = rows[rows["relation"] == ALL_RELATIONS].iloc[0]
    correct, count = int(everything["correct"]), int(everything["count"])
    if ignore_punct:
        punct = rows[rows["relation"] == "punct"]
        if not punct.empty:
            correct -= int(punct["correct"].iloc[0])
            count -= int(punct["count"].iloc[0])
    return correct / count


def _offset_uas(baselines: pd.DataFrame, offset: int, ignore_punct: bool) -> float:
    rows = baselines[baselines["offset"] == offset].set_index("relation")
    correct, count = int(rows.loc[ALL_RELATIONS, "correct"]), int(rows.loc[ALL_RELATIONS, "count"])
    if ignore_punct and "punct" in rows.index:
        correct -= int(rows.loc["punct", "correct"])
        count -= int(rows.loc["punct", "count"])
    return correct / count


def run_attention_analysis(
    model="minilm",
    treebank: str | Path | None = None,
    max_sentences: int | None = None,
    max_train_sentences: int | None = 2000,
    probe_seeds: Sequence[int] = (0, 1, 2),
    probe_epochs: int = 20,
    statistics: bool = True,
    control: bool = False,
    min_count: int = 100,
    work_dir: str | Path | None = None,
    progress: bool = True,
    layers: Sequence[int] | None = None,
    control_seed: int = 0,
    device: str | None = None,
) -> Result:
    """Clark et al.'s attention analysis of ``model`` on a UD treebank, end to end.

    ``model`` is an alias/path/hub id (loaded on ``device``, see :func:`bertology.runtime.resolve_device`)
    or an :class:`~bertology.models.Encoder`, used as it is (its attention implementation is left as it
    was). ``treebank`` is a UD folder (default: the packaged UD English EWT). Heads and offsets
    are selected on dev and also scored on test (held out); the attention-only probe is trained on train
    (capped at ``max_train_sentences``; dev when the folder has no train file) and scored on test, once
    per seed in ``probe_seeds``, beside the best single head and the best offset (both selected on the
    training split). ``max_sentences`` caps dev and test. ``layers`` (transformer layers, default all)
    limits the heads looked at. ``control=True`` repeats everything on the untrained twin (``control_seed``).

    Returns a :class:`~bertology.results.Result` named ``attention_parse`` with tables (each with a
    ``model`` column; accuracies and UAS are fractions):

    * ``statistics``: head statistics on dev (see :func:`~bertology.attention.stats.head_statistics`);
    * ``heads``: every relation x direction x head, dev and test (``split``);
    * ``baselines``: fixed offsets, dev and test;
    * ``best_heads``: Table 1 (selected on dev, ``held_out_*`` scored on test);
    * ``clark``: beside Clark's published Table 1 (:func:`compare_with_clark`);
    * ``probe``: one row per method and seed: ``method, seed`` (``<NA>`` for the baselines), the chosen
      ``layer, head, head_label, direction`` (best single head), ``offset`` (best fixed offset),
      ``epochs`` (probe), ``uas, uas_no_punct, train_split, n_train, test_split, n_test``;
    * ``probe_summary``: :func:`probe_summary` of ``probe``.

    ``meta`` holds the models (name, fingerprint, untrained seed), the treebank files, the settings and
    ``uniform_entropy`` (of the dev sentences).
    """
    encoder = as_encoder(model, device=resolve_device(device))
    splits = find_splits(treebank if treebank is not None else packaged_treebank(),
                         required=("dev", "test"))
    data = {split: read_conllu(path) for split, path in splits.items()}
    for split in ("dev", "test"):
        if max_sentences is not None:
            data[split] = data[split][:max_sentences]
    train_split = "train" if "train" in data else "dev"
    train = data[train_split]
    if train_split == "train" and max_train_sentences is not None:
        train = train[:max_train_sentences]
    extract_layers = None if layers is None else sorted({int(layer) for layer in layers})
    encoders = [encoder] + ([encoder.untrained(control_seed)] if control else [])

    results: dict[str, list[pd.DataFrame]] = defaultdict(list)
    uniform_entropy = None
    with tempfile.TemporaryDirectory(dir=work_dir, prefix="bertology-attention-") as tmp:
        for k, enc in enumerate(encoders):
            label = enc.name
            stores = {
                "dev": _extract_split(enc, data["dev"], Path(tmp), f"{k}-dev", extract_layers, progress),
                "test": _extract_split(enc, data["test"], Path(tmp), f"{k}-test", extract_layers, progress),
            }
            stores["train"] = (stores["dev"] if train_split == "dev"
                               else _extract_split(enc, train, Path(tmp), f"{k}-train", extract_layers, progress))
            sentences = {"dev": data["dev"], "test": data["test"], "train": train}

            if statistics:
                stats = head_statistics(stores["dev"].iter_attentions(), sentences["dev"], progress=progress,
                                        total=len(sentences["dev"]), layers=stores["dev"].attention_layers)
                uniform_entropy = stats.meta["uniform_entropy"]
                results["statistics"].append(stats["statistics"].assign(model=label))

            parse, base = {}, {}
            for split in ("train", "dev", "test"):
                if split == "train" and train_split == "dev":
                    continue
                parse[split] = heads_as_parsers(stores[split].iter_attentions(), sentences[split],
                                                progress=progress, total=len(sentences[split]),
                                                layers=stores[split].attention_layers)
                base[split] = offset_baselines(sentences[split])
            if train_split == "dev":
                parse["train"], base["train"] = parse["dev"], base["dev"]
            for split in ("dev", "test"):
                results["heads"].append(parse[split].assign(model=label, split=split))
                results["baselines"].append(base[split].assign(model=label, split=split))
            best = best_heads_table(parse["dev"], base["dev"], min_count=min_count,
                                    held_out_parse=parse["test"], held_out_baselines=base["test"])
            results["best_heads"].append(best.assign(model=label, selected_on="dev", held_out="test"))
            # Clark's rarer relations may fall under min_count on a small slice; compare them anyway.
            every_relation = best_heads_table(parse["dev"], base["dev"], min_count=0,
                                              held_out_parse=parse["test"], held_out_baselines=base["test"])
            results["clark"].append(compare_with_clark(every_relation).assign(model=label))
            results["probe"].append(_probe_rows(parse, base, stores, sentences, probe_seeds, probe_epochs).assign(
                model=label, train_split=train_split, n_train=len(train), test_split="test",
                n_test=len(sentences["test"])))
    tables = {name: _model_first(pd.concat(frames, ignore_index=True)) for name, frames in results.items()}
    tables["probe_summary"] = probe_summary(tables["probe"])
    meta = {
        "models": [{"name": enc.name, "fingerprint": enc.fingerprint, "untrained_seed": enc.untrained_seed}
                   for enc in encoders],
        "treebank": {split: str(path) for split, path in splits.items()},
        "n_sentences": {"dev": len(data["dev"]), "test": len(data["test"]), "train": len(train)},
        "train_split": train_split, "layers": extract_layers, "probe_seeds": list(probe_seeds),
        "probe_epochs": probe_epochs, "min_count": min_count, "uniform_entropy": uniform_entropy,
    }
    return Result("attention_parse", tables, meta=meta)


def _model_first(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[["model"] + [c for c in frame.columns if c != "model"]]


#: Columns of the probe table, in order; a method fills the ones that describe it and leaves the rest empty.
PROBE_COLUMNS = ["method", "seed", "layer", "head", "head_label", "direction", "offset", "epochs", "uas",
                 "uas_no_punct"]


def _probe_rows(parse, base, stores, sentences, probe_seeds, probe_epochs) -> pd.DataFrame:
    """The attention-only probe per seed beside its two baselines, all selected on train, scored on test."""
    head_row = best_heads_table(parse["train"], base["train"], min_count=0)
    head_row = head_row[head_row["relation"] == ALL_RELATIONS].iloc[0]
    layer, head, direction, offset = int(head_row["layer"]), int(head_row["head"]), head_row["direction"], \
        int(head_row["baseline_offset"])
    rows = [
        {"method": "best single head", "layer": layer, "head": head, "head_label": head_label(layer, head),
         "direction": direction,
         "uas": _head_uas(parse["test"], direction, layer, head, False),
         "uas_no_punct": _head_uas(parse["test"], direction, layer, head, True)},
        {"method": "best fixed offset", "offset": offset,
         "uas": _offset_uas(base["test"], offset, False), "uas_no_punct": _offset_uas(base["test"], offset, True)},
    ]
    if probe_seeds:
        batching = AttentionOnlyProbe(epochs=probe_epochs)
        train = batching.prepare(stores["train"].iter_attentions(), sentences["train"])
        test = batching.prepare(stores["test"].iter_attentions(), sentences["test"], need_tree=False)
    for seed in probe_seeds:
        probe = AttentionOnlyProbe(epochs=probe_epochs, seed=seed).fit(train)
        predictions = probe.predict(test)
        rows.append({"method": "attention-only probe", "seed": seed, "epochs": probe_epochs,
                     "uas": attachment_score(predictions, sentences["test"]),
                     "uas_no_punct": attachment_score(predictions, sentences["test"], ("punct",))})
    frame = pd.DataFrame(rows).reindex(columns=PROBE_COLUMNS)
    for column in ("offset", "epochs"):
        frame[column] = pd.array(frame[column], dtype="Int64")
    return tidy(frame)


def probe_summary(probe: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds of each method's UAS (fractions; the baselines have one row,
    no seed), with the columns that describe each method (head, offset, epochs)."""
    keys = [c for c in ("model", "method") if c in probe.columns]
    described = [c for c in ("layer", "head", "head_label", "direction", "offset", "epochs") if c in probe.columns]
    grouped = probe.groupby(keys, sort=False, dropna=False)
    summary = grouped.agg(uas=("uas", "mean"), uas_std=("uas", "std"), uas_no_punct=("uas_no_punct", "mean"),
                          n_seeds=("seed", "count"), **{c: (c, "first") for c in described}).reset_index()
    return tidy(summary)
