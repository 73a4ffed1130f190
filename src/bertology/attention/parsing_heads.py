"""Attention heads as dependency parsers (Clark et al. 2019, section 4.2): the analysis of single heads and
fixed-offset baselines, their scores beside Clark et al.'s Table 1, and the attachment score.

The attention-only probe (section 5) is :mod:`bertology.attention.parsing_probe`; the experiment end to end,
:func:`~bertology.attention.parsing.run_attention_analysis`, is :mod:`bertology.attention.parsing`.

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
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from bertology.attention.stats import _layer_numbers, _zip_checked, check_attention
from bertology.data import Sentence
from bertology.errors import DataError
from bertology.numbering import head_label
from bertology.progress import track
from bertology.results import tidy

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
