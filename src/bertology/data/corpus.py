"""Corpus readers: CoNLL-U treebanks, plain text (one sentence per line) and SentEval-style TSV.

Every reader returns a list of :class:`Sentence`. Bad input raises :class:`DataError`, whose message
names the file, the line and what was expected, so the CLI can print it and exit 1.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from bertology.errors import DataError


@dataclass(frozen=True)
class Sentence:
    """One sentence as a sequence of words, with whatever annotation its source carried.

    ``heads`` are 1-based indices into ``words`` (0 = root), as in CoNLL-U. Multiword-token ranges
    (``1-2``) are resolved to their syntactic words; empty nodes (``8.1``) are dropped.
    """

    words: tuple[str, ...]
    id: str
    text: str | None = None
    lemmas: tuple[str, ...] | None = None
    upos: tuple[str, ...] | None = None
    xpos: tuple[str, ...] | None = None
    feats: tuple[dict[str, str], ...] | None = None
    heads: tuple[int, ...] | None = None
    deprels: tuple[str, ...] | None = None
    label: str | None = None
    split: str | None = None
    source_line: int | None = None
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __len__(self) -> int:
        return len(self.words)


def open_text(path: str | Path) -> io.TextIOBase:
    """Open a text file (``.gz`` transparently) as strict UTF-8."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    if path.is_dir():
        raise DataError(f"{path}: is a directory, expected a file")
    raw = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="strict", newline=None)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with open_text(path) as handle:
        line_no = 0
        try:
            for line_no, line in enumerate(handle, start=1):
                yield line_no, line.rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise DataError(
                f"{path}:{line_no + 1}: not valid UTF-8 (byte {exc.object[exc.start:exc.start + 1]!r}); "
                "expected a UTF-8 text file"
            ) from None


def _check_not_empty(path: Path, sentences: list[Sentence]) -> list[Sentence]:
    if not sentences:
        raise DataError(f"{path}: no sentences found; expected at least one")
    return sentences


def read_conllu(path: str | Path) -> list[Sentence]:
    """Read a CoNLL-U file (or ``.conllu.gz``) into sentences of syntactic words."""
    path = Path(path)
    sentences: list[Sentence] = []
    block: list[tuple[int, list[str]]] = []
    comments: dict[str, str] = {}
    start_line = 1

    def flush() -> None:
        nonlocal block, comments
        if block:
            sentences.append(_conllu_sentence(path, block, comments, start_line, len(sentences)))
        block, comments = [], {}

    for line_no, line in _lines(path):
        if not line.strip():
            flush()
            start_line = line_no + 1
            continue
        if line.startswith("#"):
            if not block:
                key, _, value = line[1:].partition("=")
                comments[key.strip()] = value.strip()
            continue
        columns = line.split("\t")
        if len(columns) != 10:
            raise DataError(
                f"{path}:{line_no}: expected 10 tab-separated CoNLL-U columns, found {len(columns)}"
            )
        if not block:
            start_line = line_no
        block.append((line_no, columns))
    flush()
    return _check_not_empty(path, sentences)


def _conllu_sentence(
    path: Path, block: list[tuple[int, list[str]]], comments: dict[str, str], start: int, index: int
) -> Sentence:
    words, lemmas, upos, xpos, feats, heads, deprels = [], [], [], [], [], [], []
    for line_no, cols in block:
        token_id = cols[0]
        if "-" in token_id or "." in token_id:
            # Multiword range (its syntactic words follow) or empty node (enhanced graphs only).
            lo, sep, hi = token_id.replace(".", "-").partition("-")
            if not (lo.isdigit() and hi.isdigit()):
                raise DataError(f"{path}:{line_no}: malformed token ID {token_id!r}; expected N, N-M or N.M")
            continue
        if not token_id.isdigit():
            raise DataError(f"{path}:{line_no}: token ID {token_id!r} is not an integer")
        if int(token_id) != len(words) + 1:
            raise DataError(
                f"{path}:{line_no}: token ID {token_id} out of sequence; expected {len(words) + 1}"
            )
        form = cols[1]
        if form == "" or form.isspace():
            raise DataError(f"{path}:{line_no}: empty word form in column FORM")
        words.append(form)
        lemmas.append(cols[2])
        upos.append(cols[3])
        xpos.append(cols[4])
        feats.append(_parse_feats(path, line_no, cols[5]))
        head = cols[6]
        if head == "_":
            heads.append(-1)
        elif head.isdigit():
            heads.append(int(head))
        else:
            raise DataError(f"{path}:{line_no}: HEAD {head!r} is not an integer")
        deprels.append(cols[7])
    if not words:
        raise DataError(f"{path}:{start}: sentence has no words")
    has_tree = all(h >= 0 for h in heads)
    if has_tree and any(h > len(words) for h in heads):
        raise DataError(f"{path}:{start}: a HEAD points past the end of the sentence ({len(words)} words)")
    return Sentence(
        words=tuple(words),
        id=comments.get("sent_id", f"{path.name}#{index}"),
        text=comments.get("text"),
        lemmas=tuple(lemmas),
        upos=tuple(upos),
        xpos=tuple(xpos),
        feats=tuple(feats),
        heads=tuple(heads) if has_tree else None,
        deprels=tuple(deprels) if has_tree else None,
        source_line=start,
    )


def _parse_feats(path: Path, line_no: int, value: str) -> dict[str, str]:
    if value in ("_", ""):
        return {}
    out = {}
    for item in value.split("|"):
        key, sep, val = item.partition("=")
        if not sep:
            raise DataError(f"{path}:{line_no}: malformed FEATS item {item!r}; expected Name=Value")
        out[key] = val
    return out


def read_text(path: str | Path) -> list[Sentence]:
    """One sentence per line, words split on whitespace. Blank lines are errors (an empty sentence)."""
    path = Path(path)
    sentences = []
    for line_no, line in _lines(path):
        words = line.split()
        if not words:
            raise DataError(f"{path}:{line_no}: empty sentence; expected one sentence per line")
        sentences.append(
            Sentence(words=tuple(words), id=f"{path.name}:{line_no}", text=line.strip(), source_line=line_no)
        )
    return _check_not_empty(path, sentences)


def read_senteval(path: str | Path) -> list[Sentence]:
    """SentEval probing format: ``split<TAB>label<TAB>sentence`` (split is tr, va or te)."""
    path = Path(path)
    sentences = []
    for line_no, line in _lines(path):
        if not line.strip():
            continue
        columns = line.split("\t")
        if len(columns) != 3:
            raise DataError(
                f"{path}:{line_no}: expected 3 tab-separated columns (split, label, sentence), "
                f"found {len(columns)}"
            )
        split, label, text = columns
        if split not in ("tr", "va", "te"):
            raise DataError(f"{path}:{line_no}: split {split!r} is not one of tr, va, te")
        words = text.split()
        if not words:
            raise DataError(f"{path}:{line_no}: empty sentence in column 3")
        sentences.append(
            Sentence(
                words=tuple(words), id=f"{path.name}:{line_no}", text=text, label=label, split=split,
                source_line=line_no,
            )
        )
    return _check_not_empty(path, sentences)


_READERS = {".conllu": read_conllu, ".txt": read_text, ".tsv": read_senteval}


def read_corpus(path: str | Path) -> list[Sentence]:
    """Read any supported corpus file, chosen by suffix (``.gz`` allowed on top)."""
    path = Path(path)
    suffix = Path(path.stem).suffix if path.suffix == ".gz" else path.suffix
    reader = _READERS.get(suffix)
    if reader is None:
        raise DataError(
            f"{path}: unsupported file type {suffix or '(none)'!r}; expected one of "
            + ", ".join(sorted(_READERS))
        )
    return reader(path)


def sentences_from_strings(texts: Iterable[str]) -> list[Sentence]:
    """Raw sentences given in code; words split on whitespace."""
    out = []
    for i, text in enumerate(texts):
        words = text.split()
        if not words:
            raise DataError(f"sentence {i}: empty sentence")
        out.append(Sentence(words=tuple(words), id=f"input:{i}", text=text))
    return out
