"""WNUT-17 Emerging and Rare Entities (Derczynski et al., 2017): ``word<TAB>BIO-tag`` CoNLL files.

Tags are stored per word in ``Sentence.extra["ner"]`` (a tuple of strings such as ``B-person``, ``I-person``,
``O``), aligned with ``Sentence.words``. Sentences are separated by whitespace-only lines (in
``wnut17train.conll`` many separators are a single TAB).
"""

from __future__ import annotations

import re
from pathlib import Path

from bertology.data.corpus import numbered_lines
from bertology.data.sentence import Sentence
from bertology.errors import DataError

#: The six WNUT-17 entity types.
WNUT17_TYPES = ("corporation", "creative-work", "group", "location", "person", "product")
#: The file names in the shared data folder, by split.
WNUT17_FILES = {"train": "wnut17train.conll", "dev": "emerging.dev.conll", "test": "emerging.test.annotated"}

_TAG = re.compile(r"^(?:O|[BI]-[A-Za-z][A-Za-z_-]*)$")


def read_wnut17(path: str | Path, types: tuple[str, ...] | None = WNUT17_TYPES) -> list[Sentence]:
    """Read a WNUT-17 file into sentences whose ``extra["ner"]`` holds the BIO tags.

    ``types`` restricts entity types (default: the six WNUT-17 types; ``None`` accepts any), so a file
    of another tag set fails loudly instead of silently.
    """
    path = Path(path)
    sentences: list[Sentence] = []
    words: list[str] = []
    tags: list[str] = []
    start = 0

    def flush() -> None:
        if words:
            sentences.append(Sentence(
                words=tuple(words), id=f"{path.name}#{len(sentences)}", text=" ".join(words),
                source_line=start, extra={"ner": tuple(tags)},
            ))
        words.clear()
        tags.clear()

    for line_no, line in numbered_lines(path):
        if not line.strip():
            flush()
            continue
        columns = line.split("\t")
        if len(columns) != 2:
            raise DataError(
                f"{path}:{line_no}: expected 2 tab-separated columns (word, BIO tag), found {len(columns)}"
            )
        word, tag = columns[0], columns[1].strip()
        if not word or word.isspace():
            raise DataError(f"{path}:{line_no}: empty word in column 1")
        if not _TAG.match(tag):
            raise DataError(f"{path}:{line_no}: tag {tag!r} is not a BIO tag; expected O, B-TYPE or I-TYPE")
        if types is not None and tag != "O" and tag[2:] not in types:
            raise DataError(
                f"{path}:{line_no}: unknown entity type {tag[2:]!r}; expected one of {', '.join(types)}"
            )
        if not words:
            start = line_no
        words.append(word)
        tags.append(tag)
    flush()
    if not sentences:
        raise DataError(f"{path}: no sentences found; expected word<TAB>tag lines")
    return sentences


def entity_spans(sentence: Sentence) -> list[tuple[int, int, str]]:
    """Entities as ``(start, end_exclusive, type)`` word spans, read from ``extra["ner"]``.

    Follows conlleval: an ``I-X`` that does not continue an entity of type X starts a new entity.
    """
    tags = sentence.extra.get("ner")
    if tags is None:
        raise DataError(f"sentence {sentence.id}: no NER tags (extra['ner']); read it with read_wnut17")
    if len(tags) != len(sentence.words):
        raise DataError(
            f"sentence {sentence.id}: {len(tags)} NER tags for {len(sentence.words)} words; expected one per word"
        )
    spans: list[tuple[int, int, str]] = []
    begin, kind = None, None
    for i, tag in enumerate(tags):
        prefix, _, tag_type = tag.partition("-")
        continues = prefix == "I" and kind == tag_type
        if begin is not None and not continues:
            spans.append((begin, i, kind))
            begin, kind = None, None
        if prefix == "B" or (prefix == "I" and not continues):
            begin, kind = i, tag_type
    if begin is not None:
        spans.append((begin, len(tags), kind))
    return spans
