"""SQuAD 2.0: the reader and its bad-input errors, the split by article, the official scorer's rules
(hand-worked), windows with a stride, and argmax span decoding."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from bertology.data.squad import article_order, read_squad, split_by_article
from bertology.errors import DataError
from bertology.readouts.qa import best_span, decode_spans, encode_windows, question_answerable, score_spans
from bertology.readouts.squad_eval import (
    evaluate_squad, exact_match, f1_score, normalize_answer, question_scores, score_predictions, summarize_scores,
)


def _write(path: Path, payload) -> Path:
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


def _squad(questions, context="Normandy is a region in France. The Normans lived there.", title="Normans"):
    return {"version": "v2.0", "data": [{"title": title, "paragraphs": [{"context": context, "qas": questions}]}]}


def _qa(qid, answers=(), impossible=None):
    answers = [{"text": t, "answer_start": s} for t, s in answers]
    return {"id": qid, "question": "Where?", "answers": answers,
            "is_impossible": (not answers) if impossible is None else impossible}


# -- reader -------------------------------------------------------------------------------------------

def test_reader_keeps_questions_answers_and_offsets(tmp_path):
    path = _write(tmp_path / "s.json", _squad([_qa("q1", [("France", 24)]), _qa("q2")]))
    first, second = read_squad(path)
    assert (first.id, first.answer_texts, first.answers[0].end, first.is_impossible) == ("q1", ["France"], 30, False)
    assert first.context[first.answers[0].start:first.answers[0].end] == "France"
    assert second.is_impossible and second.answers == ()


def test_reader_reads_gzip(tmp_path):
    path = tmp_path / "s.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(_squad([_qa("q1", [("France", 24)])]), handle)
    assert [q.id for q in read_squad(path)] == ["q1"]


def test_squad_1_1_without_is_impossible_is_refused_naming_the_question(tmp_path):
    question = _qa("q-old", [("France", 24)])
    del question["is_impossible"]
    payload = _squad([question])
    payload["version"] = "1.1"
    with pytest.raises(DataError, match="version is '1.1'"):
        read_squad(_write(tmp_path / "v11.json", payload))
    del payload["version"]
    with pytest.raises(DataError, match=r"question q-old has no 'is_impossible'.*SQuAD 1\.1"):
        read_squad(_write(tmp_path / "noversion.json", payload))


def test_missing_answers_is_refused(tmp_path):
    question = _qa("q-noans")
    del question["answers"]
    with pytest.raises(DataError, match="question q-noans has no 'answers'"):
        read_squad(_write(tmp_path / "s.json", _squad([question])))


def test_answer_span_that_does_not_match_its_context_names_the_question(tmp_path):
    with pytest.raises(DataError, match=r"question q-bad answer 0: 'France' at character 20 does not match"):
        read_squad(_write(tmp_path / "s.json", _squad([_qa("q-bad", [("France", 20)])])))


def test_inconsistent_is_impossible_is_refused(tmp_path):
    with pytest.raises(DataError, match="q-x is_impossible but has 1 answers"):
        read_squad(_write(tmp_path / "a.json", _squad([_qa("q-x", [("France", 24)], impossible=True)])))
    with pytest.raises(DataError, match="q-y is answerable .* but has no answers"):
        read_squad(_write(tmp_path / "b.json", _squad([_qa("q-y", impossible=False)])))


def test_not_json_names_the_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"version": "v2.0",\n "data": [', encoding="utf-8")
    with pytest.raises(DataError, match=r"broken.json: not valid JSON \(line 2"):
        read_squad(path)


@pytest.mark.integration
def test_shared_subset_and_its_fixed_split(shared_data):
    questions = read_squad(shared_data / "squad_v2" / "dev-v2.0.json.gz")
    assert len(questions) == 6078
    assert sum(q.is_impossible for q in questions) == 3168
    train, test = split_by_article(questions)
    train_titles, test_titles = {q.title for q in train}, {q.title for q in test}
    assert not train_titles & test_titles
    assert len(train) + len(test) == len(questions)
    # the split docs/readouts.md documents
    assert test_titles == {"1973_oil_crisis", "French_and_Indian_War", "Packet_switching", "Warsaw"}
    assert (len(train), len(test)) == (4562, 1516)


def test_split_does_not_depend_on_file_order(tmp_path):
    articles = [{"title": f"T{i}", "paragraphs": [{"context": "Paris is big.", "qas": [_qa(f"q{i}")]}]} for i in range(8)]
    first = read_squad(_write(tmp_path / "a.json", {"version": "v2.0", "data": articles}))
    second = read_squad(_write(tmp_path / "b.json", {"version": "v2.0", "data": articles[::-1]}))
    split_a, split_b = split_by_article(first), split_by_article(second)
    assert {q.id for q in split_a[1]} == {q.id for q in split_b[1]}
    assert len({q.title for q in split_a[1]}) == 2  # ceil(0.25 * 8)
    assert {q.title for q in split_a[1]} == set(article_order([f"T{i}" for i in range(8)])[:2])


# -- the official scorer -------------------------------------------------------------------------------

def test_normalisation_follows_the_official_order():
    assert normalize_answer("The  Quick, brown-fox!") == "quick brownfox"  # punctuation goes before articles
    assert normalize_answer("an apple a day") == "apple day"
    assert normalize_answer("Theatre") == "theatre"  # articles only as whole words
    assert normalize_answer("A.") == ""


def test_exact_match_and_bag_of_tokens_f1():
    assert exact_match("the Eiffel Tower", "Eiffel tower.") == 1.0
    assert f1_score("Denver Broncos", "the Broncos") == pytest.approx(2 / 3)  # P 1, R 1/2
    assert f1_score("red red blue", "red blue blue") == pytest.approx(2 / 3)  # counts clip: 2 shared of 3
    assert f1_score("Paris", "London") == 0.0


def test_maximum_over_gold_answers():
    exact, f1 = question_scores(["Normandy", "in Normandy, France"], "France")
    assert exact == 0.0 and f1 == pytest.approx(0.5)  # P 1, R 1/3 against the second answer


def test_empty_gold_rules():
    assert question_scores([], "") == (1.0, 1.0)  # unanswerable, "no answer" predicted
    assert question_scores([], "France") == (0.0, 0.0)
    assert question_scores([], "the") == (1.0, 1.0)  # normalises to nothing: counts as no answer
    assert question_scores(["the"], "") == (1.0, 1.0)  # a gold that normalises to nothing becomes ""
    assert question_scores(["the", "Paris"], "") == (0.0, 0.0)  # ... but only when no other gold is left
    assert f1_score("", "Paris") == 0.0 and f1_score("Paris", "") == 0.0


def test_summary_with_has_ans_and_no_ans_breakdown(tmp_path):
    payload = _squad([_qa("a1", [("France", 24)]), _qa("a2", [("a region in France", 12)]), _qa("n1"), _qa("n2")])
    questions = read_squad(_write(tmp_path / "s.json", payload))
    predictions = {"a1": "france", "a2": "France", "n1": "", "n2": "Normans"}
    summary = evaluate_squad(questions, predictions)
    # a2: gold "region in france" (3 tokens) vs "france": P 1, R 1/3 -> F1 1/2
    assert summary["exact"] == pytest.approx((1 + 0 + 1 + 0) / 4)
    assert summary["f1"] == pytest.approx((1 + 0.5 + 1 + 0) / 4)
    assert summary["has_ans_exact"] == pytest.approx(0.5)
    assert summary["has_ans_f1"] == pytest.approx((1 + 0.5) / 2)
    assert summary["no_ans_accuracy"] == pytest.approx(0.5)
    assert (summary["total"], summary["has_ans_total"], summary["no_ans_total"]) == (4, 2, 2)
    with pytest.raises(DataError, match="no prediction for 1 question.*n2"):
        score_predictions(questions, {k: v for k, v in predictions.items() if k != "n2"})
    assert summarize_scores(score_predictions(questions, predictions)) == summary


# -- windows and decoding ------------------------------------------------------------------------------

LONG_CONTEXT = " ".join(["the quick brown fox jumps over the lazy dog ."] * 12) + " cats chase mice ."


def _long(tmp_path):
    answer_start = LONG_CONTEXT.index("cats")
    payload = _squad([_qa("far", [("cats", answer_start)]), _qa("none")], context=LONG_CONTEXT)
    return read_squad(_write(tmp_path / "long.json", payload))


def test_long_contexts_are_covered_by_strided_windows_and_counted(tmp_path, tiny_bert):
    questions = _long(tmp_path)
    windows = encode_windows(tiny_bert.tokenizer, questions, max_length=48, stride=16)
    per_question = np.bincount(windows.question_index)
    assert per_question[0] > 2 and per_question[0] == per_question[1]
    assert windows.stats["long_contexts"] == 2 and windows.stats["answers_in_no_window"] == 0
    assert max(windows.lengths) <= 48
    # consecutive windows of a question overlap by `stride` context tokens
    first, second = windows.offsets[0], windows.offsets[1]
    context_a = [tuple(o) for o in first if o[0] >= 0]
    context_b = [tuple(o) for o in second if o[0] >= 0]
    assert context_a[-16:] == context_b[:16]
    for w in range(len(windows)):
        question = windows.questions[int(windows.question_index[w])]
        s, e = windows.start_positions[w], windows.end_positions[w]
        if s == 0:
            assert e == 0  # [CLS]: unanswerable, or the answer is not in this window
            continue
        offsets = windows.offsets[w]
        assert question.context[offsets[s, 0]:offsets[e, 1]] == "cats"
    held = [w for w in range(len(windows)) if windows.start_positions[w] > 0]
    assert held and all(windows.question_index[w] == 0 for w in held)
    assert len(held) < per_question[0]  # the early windows do not hold the answer: label [CLS]


def test_stride_must_leave_context_room(tmp_path, tiny_bert):
    with pytest.raises(DataError, match=r"stride 44: expected 0 <= stride < \d+ \(the context room of a 48-token window"):
        encode_windows(tiny_bert.tokenizer, _long(tmp_path), max_length=48, stride=44)


def test_best_span_keeps_start_before_end_and_the_length_limit():
    start = np.array([0, 9, 0, 0, 5, 0])
    end = np.array([0, 0, 8, 0, 0, 0])
    context = np.array([False, True, True, True, True, True])
    assert best_span(start, end, context)[:2] == (1, 2)
    # the best start lies after the best end: the span must not be reversed
    start2 = np.array([0, 0, 0, 0, 9, 1])
    end2 = np.array([0, 8, 0, 0, 0, 2])
    s, e, score = best_span(start2, end2, context)
    assert s <= e and (s, e) == (4, 5) and score == 11
    # with at most 2 tokens, (1, 4) is out of reach
    start3 = np.array([0, 9, 0, 0, 0, 0])
    end3 = np.array([0, 0, 1, 0, 9, 1])
    assert best_span(start3, end3, context, max_answer_length=2)[:2] == (1, 2)
    assert best_span(start3, end3, np.zeros(6, dtype=bool))[0] == -1


def _gold_logits(windows, abstain: float = 0.0):
    """Per-window logits 6 at the labelled start/end (which is [CLS] where the answer is not in the
    window), plus ``abstain`` on [CLS]."""
    starts, ends = [], []
    for w in range(len(windows)):
        n = len(windows.input_ids[w])
        start, end = np.zeros(n), np.zeros(n)
        start[0] = end[0] = abstain
        start[windows.start_positions[w]] += 6
        end[windows.end_positions[w]] += 6
        starts.append(start)
        ends.append(end)
    return starts, ends


def test_decoding_picks_the_best_window_and_the_no_answer_score(tmp_path, tiny_bert):
    questions = _long(tmp_path)
    windows = encode_windows(tiny_bert.tokenizer, questions, max_length=48, stride=16)
    starts, ends = _gold_logits(windows)
    decoded = decode_spans(windows, starts, ends)
    assert decoded.answers == {"far": "cats", "none": ""}
    # the no-answer score is the lowest over a question's windows: one window with a span beats it
    assert decoded.null_score["far"] == 0.0 and decoded.span_score["far"] == 12.0
    assert evaluate_squad(questions, decoded.answers)["exact"] == 1.0
    assert decode_spans(windows, starts, ends, null_margin=-13).answers["far"] == ""
    assert question_answerable(windows, [0.9 if w == 0 else 0.1 for w in range(len(windows))]) == \
        {"far": True, "none": False}


def test_forced_f1_scores_the_span_an_abstaining_model_found(tmp_path, tiny_bert):
    """A model that always abstains gets the NoAns share and HasAns F1 0; the forced F1 still shows that
    its best span on the answerable question was right (and the no-answer question does not count)."""
    questions = _long(tmp_path)
    windows = encode_windows(tiny_bert.tokenizer, questions, max_length=48, stride=16)
    starts, ends = _gold_logits(windows, abstain=20)  # [CLS] above any span: always abstain
    scores = score_spans(windows, starts, ends)
    assert scores["has_ans_f1"] == 0.0 and scores["no_ans_accuracy"] == 1.0 and scores["f1"] == 0.5
    assert scores["has_ans_f1_forced"] == 1.0
    wrong = [np.roll(start, 1) for start in starts]  # every span one token late: F1 0 on "cats"
    assert score_spans(windows, wrong, [np.roll(end, 1) for end in ends])["has_ans_f1_forced"] == 0.0


@pytest.mark.integration
def test_minilm_windows_reproduce_the_gold_answers(shared_data, minilm):
    questions = [q for q in read_squad(shared_data / "squad_v2" / "dev-v2.0.json.gz") if q.title == "Normans"]
    windows = encode_windows(minilm.tokenizer, questions)
    assert windows.max_length == 384 and windows.stride == 128
    starts, ends = [], []
    for w in range(len(windows)):
        n = len(windows.input_ids[w])
        start, end = np.zeros(n), np.zeros(n)
        start[windows.start_positions[w]] = end[windows.end_positions[w]] = 10
        starts.append(start)
        ends.append(end)
    summary = evaluate_squad(questions, decode_spans(windows, starts, ends).answers)
    assert summary["no_ans_accuracy"] == 1.0
    assert summary["has_ans_exact"] > 0.99  # tokenisation can only lose a character at a span's edge
