"""SQuAD 2.0 as span extraction: question + context windows with a stride, labels, argmax span decoding.

Windows follow Hugging Face's question-answering examples: ``[CLS] question [SEP] context [SEP]`` of at
most ``max_length`` tokens (default 384); a context that does not fit is cut into several windows that
overlap by ``stride`` tokens (default 128), and every window of it is kept. Training labels are token
positions in the window: the first and last token of the (first) gold answer when the whole answer lies
inside the window's context, else position 0 ([CLS]) - so an unanswerable question, or a window that does
not hold the answer, points at [CLS]. Questions are cut to ``max_question_tokens`` (64, at most half the
window) tokens first; ``stride`` must leave context room beside the longest question.

Decoding (:func:`decode_spans`): in each window, the span (s, e) over context tokens with s <= e and
e - s + 1 <= ``max_answer_length`` that maximises start_logit[s] + end_logit[e]; the question's answer is
the best span over its windows, unless the no-answer score start_logit[0] + end_logit[0] (its lowest
over the windows, as Hugging Face) is higher, in which case the answer is "" (no answer).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from bertology.data.squad import SquadQuestion
from bertology.errors import DataError
from bertology.models.batching import pad_batch
from bertology.readouts.spec import SQUAD_PRESETS
from bertology.readouts.squad_eval import evaluate_squad, question_scores

#: Window length and overlap in tokens: the spec's defaults (the seed's).
MAX_LENGTH, STRIDE = SQUAD_PRESETS["max_length"][0], SQUAD_PRESETS["stride"][0]
MAX_QUESTION_TOKENS = 64
MAX_ANSWER_LENGTH = 30


@dataclass
class QAWindows:
    """Model inputs for ``questions``: one entry per window, in question order.

    ``offsets[w]`` is ``[tokens, 2]`` character offsets into the context for context tokens and -1 for the
    question and special tokens. ``stats`` counts questions, windows, long contexts (more than one
    window) and answers that no window holds whole.
    """

    questions: list[SquadQuestion]
    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    question_index: np.ndarray
    start_positions: np.ndarray
    end_positions: np.ndarray
    offsets: list[np.ndarray]
    max_length: int
    stride: int
    stats: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(ids) for ids in self.input_ids), dtype=np.int64, count=len(self.input_ids))

    @property
    def answerable(self) -> np.ndarray:
        """Window-level label of the classification framing: the window holds the answer."""
        return (self.start_positions > 0).astype(np.int64)

    def window_ids(self) -> list[str]:
        ids, counts = [], {}
        for index in self.question_index:
            qid = self.questions[int(index)].id
            counts[qid] = counts.get(qid, -1) + 1
            ids.append(f"{qid}#{counts[qid]}")
        return ids

    def content_hash(self) -> str:
        """Hash of every window's token ids and labels: what activations computed from them depend on."""
        digest = hashlib.sha256()
        digest.update(f"{self.max_length}/{self.stride}".encode())
        for w, ids in enumerate(self.input_ids):
            digest.update(np.asarray(ids, dtype=np.int64).tobytes())
            if self.token_type_ids is not None:
                digest.update(np.asarray(self.token_type_ids[w], dtype=np.int8).tobytes())
            digest.update(f"|{self.question_index[w]}|{self.start_positions[w]}|{self.end_positions[w]}|".encode())
        return digest.hexdigest()[:16]

    def select(self, keep: np.ndarray) -> "QAWindows":
        """The windows where ``keep`` is true, and only the questions that still have one (in order).

        Used for SQuAD 1.1-style training: the windows of a long context that do not hold the answer are
        dropped, so every training label is a span. ``stats`` keeps the original counts and adds
        ``kept_windows``/``dropped_windows``.
        """
        keep = np.asarray(keep, dtype=bool)
        if keep.shape != (len(self),):
            raise DataError(f"window selection of shape {keep.shape}: expected ({len(self)},)")
        if not keep.any():
            raise DataError("no SQuAD windows left after the selection")
        kept_questions = np.unique(self.question_index[keep])
        renumber = np.full(len(self.questions), -1, dtype=np.int64)
        renumber[kept_questions] = np.arange(len(kept_questions))
        chosen = np.flatnonzero(keep)
        stats = {**self.stats, "kept_windows": int(keep.sum()), "dropped_windows": int((~keep).sum()),
                 "kept_questions": int(len(kept_questions))}
        return QAWindows(
            questions=[self.questions[int(q)] for q in kept_questions],
            input_ids=[self.input_ids[w] for w in chosen],
            token_type_ids=None if self.token_type_ids is None else [self.token_type_ids[w] for w in chosen],
            question_index=renumber[self.question_index[chosen]], start_positions=self.start_positions[chosen],
            end_positions=self.end_positions[chosen], offsets=[self.offsets[w] for w in chosen],
            max_length=self.max_length, stride=self.stride, stats=stats,
        )

    def batch(self, indices: Sequence[int], pad_id: int) -> dict:
        """Padded model inputs for the windows ``indices`` (plus ``start_positions``/``end_positions``)."""
        types = [self.token_type_ids[i] for i in indices] if self.token_type_ids is not None else None
        batch = pad_batch([self.input_ids[i] for i in indices], pad_id, types)
        batch["start_positions"] = torch.as_tensor(self.start_positions[list(indices)])
        batch["end_positions"] = torch.as_tensor(self.end_positions[list(indices)])
        return batch


def _cut_questions(tokenizer, texts: list[str], max_tokens: int) -> list[str]:
    encoded = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    cut = []
    for text, offsets in zip(texts, encoded["offset_mapping"]):
        cut.append(text[: offsets[max_tokens - 1][1]] if len(offsets) > max_tokens else text)
    return cut


def encode_windows(tokenizer, questions: Sequence[SquadQuestion], max_length: int = MAX_LENGTH,
                   stride: int = STRIDE, max_question_tokens: int = MAX_QUESTION_TOKENS) -> QAWindows:
    """Tokenise ``questions`` into windows with labels (see the module's docstring)."""
    questions = list(questions)
    if not questions:
        raise DataError("no SQuAD questions to encode")
    if not getattr(tokenizer, "is_fast", False):
        raise DataError("SQuAD windows need a fast tokenizer (character offsets)")
    special = tokenizer.num_special_tokens_to_add(pair=True)
    max_question_tokens = min(max_question_tokens, max_length // 2)
    if max_length < special + 16:
        raise DataError(f"max_length {max_length}: too short for a question and a context; expected at least {special + 16}")
    texts = _cut_questions(tokenizer, [q.question.lstrip() for q in questions], max_question_tokens)
    longest_question = max(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])
    room = max_length - longest_question - special
    if not 0 <= stride < room:
        raise DataError(f"stride {stride}: expected 0 <= stride < {room} (the context room of a {max_length}-token "
                        f"window next to the longest question, {longest_question} tokens)")
    encoded = tokenizer(texts, [q.context for q in questions], truncation="only_second", max_length=max_length,
                        stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True, padding=False)
    mapping = np.asarray(encoded["overflow_to_sample_mapping"], dtype=np.int64)
    n = len(mapping)
    starts = np.zeros(n, dtype=np.int64)
    ends = np.zeros(n, dtype=np.int64)
    offsets: list[np.ndarray] = []
    windows_per_question = np.bincount(mapping, minlength=len(questions))
    held = np.zeros(len(questions), dtype=bool)
    for w in range(n):
        sequence = encoded.sequence_ids(w)
        raw = np.asarray(encoded["offset_mapping"][w], dtype=np.int64).reshape(-1, 2)
        in_context = np.asarray([s == 1 for s in sequence])
        window_offsets = np.where(in_context[:, None], raw, -1)
        offsets.append(window_offsets)
        question = questions[int(mapping[w])]
        if not question.answers:
            continue
        answer = question.answers[0]
        context_positions = np.flatnonzero(in_context)
        if not len(context_positions):
            continue
        first, last = context_positions[0], context_positions[-1]
        if not (raw[first, 0] <= answer.start and raw[last, 1] >= answer.end):
            continue  # the answer is not (wholly) in this window: the label stays [CLS]
        start = first
        while start <= last and raw[start, 0] <= answer.start:
            start += 1
        end = last
        while end >= first and raw[end, 1] >= answer.end:
            end -= 1
        starts[w], ends[w] = start - 1, end + 1
        held[int(mapping[w])] = True
    answerable = np.asarray([bool(q.answers) for q in questions])
    stats = {
        "questions": len(questions),
        "windows": n,
        "answerable_questions": int(answerable.sum()),
        "long_contexts": int((windows_per_question > 1).sum()),
        "answers_in_no_window": int((answerable & ~held).sum()),
        "max_length": max_length,
        "stride": stride,
    }
    return QAWindows(
        questions=questions,
        input_ids=[list(ids) for ids in encoded["input_ids"]],
        token_type_ids=[list(t) for t in encoded["token_type_ids"]] if "token_type_ids" in encoded else None,
        question_index=mapping, start_positions=starts, end_positions=ends, offsets=offsets,
        max_length=max_length, stride=stride, stats=stats,
    )


def best_span(start_logits: np.ndarray, end_logits: np.ndarray, context: np.ndarray,
              max_answer_length: int = MAX_ANSWER_LENGTH) -> tuple[int, int, float]:
    """(start, end, score) of the best span over ``context`` positions (a boolean mask): start <= end,
    at most ``max_answer_length`` tokens; (-1, -1, -inf) when the window has no context."""
    positions = np.flatnonzero(context)
    if not len(positions):
        return -1, -1, -np.inf
    s = np.asarray(start_logits, dtype=np.float64)[positions]
    e = np.asarray(end_logits, dtype=np.float64)[positions]
    scores = s[:, None] + e[None, :]
    gap = positions[None, :] - positions[:, None]
    scores = np.where((gap >= 0) & (gap < max_answer_length), scores, -np.inf)
    flat = int(np.argmax(scores))
    i, j = divmod(flat, len(positions))
    return int(positions[i]), int(positions[j]), float(scores[i, j])


@dataclass
class SpanPredictions:
    """Per-question decoding: ``answers`` (id -> text, "" for no answer), ``spans`` (id -> the best span's
    text whatever the no-answer score says) and the scores behind them."""

    answers: dict[str, str]
    span_score: dict[str, float]
    null_score: dict[str, float]
    spans: dict[str, str] = field(default_factory=dict)


def decode_spans(windows: QAWindows, start_logits: Sequence[np.ndarray], end_logits: Sequence[np.ndarray],
                 max_answer_length: int = MAX_ANSWER_LENGTH, null_margin: float = 0.0) -> SpanPredictions:
    """Answers from per-window logits (each ``[window tokens]``, in window order).

    A question gets "" when its no-answer score exceeds its best span score by more than ``null_margin``.
    """
    if len(start_logits) != len(windows) or len(end_logits) != len(windows):
        raise DataError(f"{len(start_logits)} start / {len(end_logits)} end logit rows for {len(windows)} windows")
    best: dict[int, tuple[float, int, int, int]] = {}
    null: dict[int, float] = {}
    for w in range(len(windows)):
        q = int(windows.question_index[w])
        start, end = np.asarray(start_logits[w]), np.asarray(end_logits[w])
        context = windows.offsets[w][:, 0] >= 0
        s, e, score = best_span(start, end, context[: len(start)], max_answer_length)
        null_score = float(start[0] + end[0])
        null[q] = min(null.get(q, np.inf), null_score)
        if s >= 0 and score > best.get(q, (-np.inf,))[0]:
            best[q] = (score, w, s, e)
    answers, span_scores, null_scores, spans = {}, {}, {}, {}
    for q, question in enumerate(windows.questions):
        if q not in null:
            raise DataError(f"question {question.id} has no window")
        score, text = -np.inf, ""
        if q in best:
            score, w, s, e = best[q]
            offsets = windows.offsets[w]
            text = question.context[offsets[s, 0]: offsets[e, 1]]
        answers[question.id] = "" if null[q] > score + null_margin else text
        spans[question.id] = text
        span_scores[question.id], null_scores[question.id] = score, null[q]
    return SpanPredictions(answers, span_scores, null_scores, spans)


def score_spans(windows: QAWindows, start_logits: Sequence[np.ndarray], end_logits: Sequence[np.ndarray],
                max_answer_length: int = MAX_ANSWER_LENGTH) -> dict[str, float]:
    """The official SQuAD 2.0 scores (fractions) of per-window logits, plus ``has_ans_f1_forced``: F1 on the
    answerable questions when the best span is always given. The official scores mix two skills, finding
    the span and deciding to answer; on small training sets a model that always abstains scores the NoAns
    share, and the forced F1 shows whether it learned to find spans at all."""
    predictions = decode_spans(windows, start_logits, end_logits, max_answer_length)
    metrics = evaluate_squad(windows.questions, predictions.answers)
    answerable = [question for question in windows.questions if question.answers]
    forced = evaluate_squad(answerable, predictions.spans) if answerable else {"f1": float("nan")}
    return {**metrics, "has_ans_f1_forced": forced["f1"]}


def question_answerable(windows: QAWindows, answerable_probability: Sequence[float]) -> dict[str, bool]:
    """The classification framing at question level: answerable when any window says so (p > 0.5)."""
    best = np.zeros(len(windows.questions))
    for w, p in enumerate(answerable_probability):
        q = int(windows.question_index[w])
        best[q] = max(best[q], float(p))
    return {question.id: bool(best[q] > 0.5) for q, question in enumerate(windows.questions)}


def choose_null_margin(windows: QAWindows, start_logits: Sequence[np.ndarray], end_logits: Sequence[np.ndarray],
                       max_answer_length: int = MAX_ANSWER_LENGTH) -> float:
    """The no-answer margin (see :func:`decode_spans`) that maximises F1 on ``windows``' questions.

    The official script's ``best_f1`` sweep: questions sorted by ``null score - best span score``,
    answering those up to each cut in turn. Call it on **held-out training** questions and decode the
    evaluation questions with the result; choosing it on the evaluation questions would select on them.
    Ties go to the cut that answers fewer questions.
    """
    predictions = decode_spans(windows, start_logits, end_logits, max_answer_length)
    gaps, gain = [], []
    baseline = 0.0
    for question in windows.questions:
        answered = question_scores(question.answer_texts, predictions.spans[question.id])[1]
        abstained = question_scores(question.answer_texts, "")[1]
        baseline += abstained
        gap = predictions.null_score[question.id] - predictions.span_score[question.id]
        if np.isfinite(gap):
            gaps.append(gap)
            gain.append(answered - abstained)
    if not gaps:
        return 0.0
    order = np.argsort(gaps, kind="stable")
    sorted_gaps = np.asarray(gaps)[order]
    totals = baseline + np.cumsum(np.asarray(gain)[order])
    best = int(np.argmax(totals))
    if totals[best] <= baseline:
        return float(sorted_gaps[0] - 1.0)  # answering nothing is best
    return float(sorted_gaps[best])
