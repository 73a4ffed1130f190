"""SQuAD 2.0: reading the official v2.0 JSON, checking it, and a fixed split by article.

The JSON is the official layout: ``{"version": "v2.0", "data": [{"title", "paragraphs": [{"context",
"qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}`` (``.gz`` read
transparently). Every question must carry ``is_impossible`` and ``answers`` (SQuAD 1.1 has no
``is_impossible``: it is refused, naming the question), an answerable question needs at least one answer,
an unanswerable one none, and every ``answer_start`` span must match its context character for character.

Without a path, ``$BERTOLOGY_DATA/squad_v2/dev-v2.0.json.gz`` is read, else the Hugging Face copy
``rajpurkar/squad_v2`` (its validation split, through ``datasets``: cache, or hub when online), else one line
says how to provide it. This project's data file (``squad_v2/dev-v2.0.json.gz``) is a 6,078-question subset of the official dev
set (16 articles). :func:`split_by_article` divides it into train and test articles, so no article
(and no paragraph) is in both; scores on that split are **not comparable** to official SQuAD 2.0 numbers.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from bertology.data.corpus import open_text
from bertology.data.paths import EXTERNAL, external_folder, load_hub_split, missing_data
from bertology.errors import DataError, SettingError

#: Share of articles that :func:`split_by_article` puts in the test split.
TEST_ARTICLE_SHARE = 0.25


@dataclass(frozen=True)
class SquadAnswer:
    text: str
    start: int  # character offset in the context

    @property
    def end(self) -> int:
        """One past the last character."""
        return self.start + len(self.text)


@dataclass(frozen=True)
class SquadQuestion:
    """One SQuAD 2.0 question with its context. ``answers`` is empty exactly when it is unanswerable."""

    id: str
    title: str
    paragraph: int  # index of the paragraph within its article
    context: str
    question: str
    answers: tuple[SquadAnswer, ...]
    is_impossible: bool

    @property
    def answer_texts(self) -> list[str]:
        return [answer.text for answer in self.answers]


SQUAD_FILE = "dev-v2.0.json.gz"


def squad_path() -> Path:
    """The SQuAD 2.0 file of the data folder (``$BERTOLOGY_DATA/squad_v2/dev-v2.0.json.gz``);
    :class:`~bertology.errors.MissingData` when there is none."""
    folder = external_folder("squad_v2")
    if folder is None:
        raise missing_data("squad_v2", SQUAD_FILE)
    return folder / SQUAD_FILE


def hub_payload() -> dict:
    """The Hugging Face copy (``rajpurkar/squad_v2``, validation split) in the official v2.0 JSON layout,
    so it is checked like a file: paragraphs are the runs of one context within an article."""
    rows = load_hub_split("squad_v2", None, "validation", "validation split")
    articles: dict[str, list[dict]] = {}
    for row in rows:
        paragraphs = articles.setdefault(row["title"], [])
        if not paragraphs or paragraphs[-1]["context"] != row["context"]:
            paragraphs.append({"context": row["context"], "qas": []})
        texts, starts = row["answers"]["text"], row["answers"]["answer_start"]
        paragraphs[-1]["qas"].append({
            "id": row["id"], "question": row["question"], "is_impossible": not texts,
            "answers": [{"text": t, "answer_start": int(a)} for t, a in zip(texts, starts)]})
    return {"version": "v2.0", "data": [{"title": t, "paragraphs": p} for t, p in articles.items()]}


def _load_json(path: Path):
    if not path.exists():
        raise DataError(f"{path}: file not found; expected SQuAD v2.0 JSON")
    if path.is_dir():
        raise DataError(f"{path}: is a directory; expected a SQuAD v2.0 JSON file")
    try:
        with open_text(path) as handle:  # a damaged or cut-short .gz is one line naming the file
            return json.load(handle)
    except json.JSONDecodeError as error:
        raise DataError(f"{path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None
    except (UnicodeDecodeError, OSError, EOFError) as error:
        raise DataError(f"{path}: unreadable ({error}); expected UTF-8 SQuAD v2.0 JSON, optionally gzipped") from None


def _require(mapping, key: str, kind, where: str, path: Path):
    if not isinstance(mapping, dict) or key not in mapping:
        hint = " (this looks like SQuAD 1.1; v2.0 marks every question with is_impossible)" \
            if key == "is_impossible" else ""
        raise DataError(f"{path}: {where} has no {key!r}; expected SQuAD v2.0 JSON{hint}")
    value = mapping[key]
    if not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DataError(f"{path}: {where}: {key!r} is {type(value).__name__}; expected {expected}")
    return value


def read_squad(path: str | Path | None = None) -> list[SquadQuestion]:
    """Every question of a SQuAD v2.0 file, in file order (default: the data folder's dev subset, else the
    Hugging Face copy; module doc).

    Raises :class:`DataError` naming the file and the question id for anything that is not v2.0 or whose
    answer span does not match its context.
    """
    if path is None and external_folder("squad_v2") is None:
        path, payload = Path(f"{EXTERNAL['squad_v2'].hub_id} (validation)"), hub_payload()
    else:
        path = Path(path) if path is not None else squad_path()
        payload = _load_json(path)
    version = payload.get("version") if isinstance(payload, dict) else None
    if version is not None and str(version) not in ("v2.0", "2.0"):
        raise DataError(f"{path}: version is {version!r}; expected SQuAD 'v2.0'")
    articles = _require(payload, "data", list, "the top level", path)
    questions: list[SquadQuestion] = []
    seen: set[str] = set()
    for a, article in enumerate(articles):
        title = _require(article, "title", str, f"article {a}", path)
        paragraphs = _require(article, "paragraphs", list, f"article {title!r}", path)
        for p, paragraph in enumerate(paragraphs):
            where = f"article {title!r} paragraph {p}"
            context = _require(paragraph, "context", str, where, path)
            for q, qa in enumerate(_require(paragraph, "qas", list, where, path)):
                qid = _require(qa, "id", str, f"{where} question {q}", path)
                here = f"question {qid}"
                if qid in seen:
                    raise DataError(f"{path}: {here} appears twice; question ids must be unique")
                seen.add(qid)
                text = _require(qa, "question", str, here, path)
                impossible = _require(qa, "is_impossible", bool, here, path)
                raw_answers = _require(qa, "answers", list, here, path)
                answers = []
                for k, answer in enumerate(raw_answers):
                    answer_text = _require(answer, "text", str, f"{here} answer {k}", path)
                    start = _require(answer, "answer_start", int, f"{here} answer {k}", path)
                    if context[start:start + len(answer_text)] != answer_text:
                        found = context[start:start + len(answer_text)]
                        raise DataError(f"{path}: {here} answer {k}: {answer_text!r} at character {start} does not "
                                        f"match its context there ({found!r})")
                    answers.append(SquadAnswer(answer_text, start))
                if impossible and answers:
                    raise DataError(f"{path}: {here} is_impossible but has {len(answers)} answers; expected none")
                if not impossible and not answers:
                    raise DataError(f"{path}: {here} is answerable (is_impossible false) but has no answers")
                questions.append(SquadQuestion(qid, title, p, context, text, tuple(answers), impossible))
    if not questions:
        raise DataError(f"{path}: no questions found; expected SQuAD v2.0 articles with paragraphs and qas")
    return questions


def article_order(titles: Sequence[str]) -> list[str]:
    """Titles sorted by the SHA-256 of their text: a fixed order that does not depend on the file's."""
    return sorted(set(titles), key=lambda title: hashlib.sha256(title.encode("utf-8")).hexdigest())


def split_by_article(questions: Sequence[SquadQuestion], share: float = TEST_ARTICLE_SHARE
                     ) -> tuple[list[SquadQuestion], list[SquadQuestion]]:
    """(train, test): the first ``ceil(share * articles)`` articles in :func:`article_order` are test (the
    readouts split their training articles again the same way: (train, dev)).

    The rule is fixed and independent of file order, so the same file always splits the same way and no
    article is in both. On the shared 16-article file it gives 4 test articles (docs/readouts.md).
    """
    if not 0 < share < 1:
        raise SettingError("share", share, "expected a fraction of the articles strictly between 0 and 1",
                           shown=str(share))
    titles = article_order([q.title for q in questions])
    if len(titles) < 2:
        raise DataError(f"{len(titles)} article(s): a split by article needs at least 2")
    n_held = min(len(titles) - 1, max(1, math.ceil(share * len(titles))))
    held_titles = set(titles[:n_held])
    return ([q for q in questions if q.title not in held_titles], [q for q in questions if q.title in held_titles])
