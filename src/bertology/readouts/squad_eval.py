"""The official SQuAD 2.0 evaluation semantics (``evaluate-v2.0.py``), as fractions.

* Normalisation: lowercase, drop every ASCII punctuation character, drop the words a/an/the, collapse
  whitespace (in that order, as the official script).
* Gold answers: the question's answer texts whose normalised form is not empty; when none is left (an
  unanswerable question), the only gold answer is the empty string.
* EM: 1 when the normalised prediction equals a normalised gold answer. F1: bag-of-tokens overlap of the
  normalised texts; when either side has no tokens, 1 if both have none, else 0. Each is the maximum over
  the gold answers.
* HasAns / NoAns: questions with / without answers in the data. On NoAns questions EM = F1 = the share
  of questions where the prediction normalises to nothing ("no answer" predicted), reported here as
  ``no_ans_accuracy``.

Differences from the script: scores are fractions in [0, 1] (the script prints percent), and a missing
prediction is an error naming the question (the script prints a warning and later fails).
"""

from __future__ import annotations

import collections
import re
import string
from typing import Mapping, Sequence

import pandas as pd

from bertology.data.squad import SquadQuestion
from bertology.errors import DataError

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, strip punctuation, drop a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def answer_tokens(text: str) -> list[str]:
    return normalize_answer(text).split() if text else []


def exact_match(gold: str, prediction: str) -> float:
    return float(normalize_answer(gold) == normalize_answer(prediction))


def f1_score(gold: str, prediction: str) -> float:
    gold_tokens, predicted_tokens = answer_tokens(gold), answer_tokens(prediction)
    if not gold_tokens or not predicted_tokens:
        return float(gold_tokens == predicted_tokens)
    same = sum((collections.Counter(gold_tokens) & collections.Counter(predicted_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def gold_answers(answers: Sequence[str]) -> list[str]:
    """The answers that count: non-empty after normalisation, or ``[""]`` when none is."""
    kept = [answer for answer in answers if normalize_answer(answer)]
    return kept or [""]


def question_scores(answers: Sequence[str], prediction: str) -> tuple[float, float]:
    """(EM, F1) of one prediction: the maximum over the gold answers."""
    golds = gold_answers(answers)
    return max(exact_match(g, prediction) for g in golds), max(f1_score(g, prediction) for g in golds)


def score_predictions(questions: Sequence[SquadQuestion], predictions: Mapping[str, str]) -> pd.DataFrame:
    """One row per question: ``id``, ``has_answer``, ``prediction``, ``exact``, ``f1``."""
    missing = [q.id for q in questions if q.id not in predictions]
    if missing:
        raise DataError(f"no prediction for {len(missing)} question(s), e.g. {', '.join(missing[:3])}; "
                        "expected one answer (or '' for no answer) per question id")
    rows = []
    for question in questions:
        prediction = predictions[question.id]
        exact, f1 = question_scores(question.answer_texts, prediction)
        rows.append({"id": question.id, "has_answer": bool(question.answers), "prediction": prediction,
                     "exact": exact, "f1": f1})
    return pd.DataFrame(rows, columns=["id", "has_answer", "prediction", "exact", "f1"])


def summarize_scores(scores: pd.DataFrame) -> dict[str, float]:
    """The official summary as fractions: ``exact``, ``f1``, ``has_ans_exact``, ``has_ans_f1``,
    ``no_ans_accuracy`` (NoAns EM = NoAns F1) and the question counts."""
    if scores.empty:
        raise DataError("no questions to score")
    has = scores[scores["has_answer"]]
    none = scores[~scores["has_answer"]]
    nan = float("nan")
    return {
        "exact": float(scores["exact"].mean()),
        "f1": float(scores["f1"].mean()),
        "has_ans_exact": float(has["exact"].mean()) if len(has) else nan,
        "has_ans_f1": float(has["f1"].mean()) if len(has) else nan,
        "no_ans_accuracy": float(none["exact"].mean()) if len(none) else nan,
        "total": int(len(scores)),
        "has_ans_total": int(len(has)),
        "no_ans_total": int(len(none)),
    }


def evaluate_squad(questions: Sequence[SquadQuestion], predictions: Mapping[str, str]) -> dict[str, float]:
    """Score ``predictions`` (question id -> answer text, ``""`` for no answer): :func:`summarize_scores`."""
    return summarize_scores(score_predictions(questions, predictions))
