"""Corpus readers: CoNLL-U treebanks, plain text (one sentence per line) and SentEval files.

Every reader returns a :class:`Corpus`: a list of :class:`Sentence` that also says which format was
read and how many blank lines were skipped. Bad input raises :class:`DataError`, whose message names
the file, the line and what was expected, so the CLI can print it and exit 1. :func:`read_corpus` picks
the format by suffix and, for ``.txt``, by content: a ``.txt`` whose lines are
``split<TAB>label<TAB>sentence`` (SentEval, and what ``bertology tasks build`` writes) is read as
SentEval, not as one sentence per line.
"""

from __future__ import annotations

import gzip
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from bertology.data.treebank import tree_problem
from bertology.errors import DataError

FORMATS = ("conllu", "text", "senteval")


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


class Corpus(list):
    """The sentences read from one file (a plain ``list`` of :class:`Sentence`), plus what reading noticed:
    ``path``, ``format`` (``conllu``, ``text`` or ``senteval``) and ``blank_lines_skipped`` (blank lines
    between sentences of a ``.txt``; a trailing newline is not counted)."""

    def __init__(self, sentences: Iterable[Sentence] = (), *, path: Path | None = None, format: str | None = None,
                 blank_lines_skipped: int = 0) -> None:
        super().__init__(sentences)
        self.path = path
        self.format = format
        self.blank_lines_skipped = blank_lines_skipped

    def notes(self) -> list[str]:
        """Things a user should hear about, one line each (the CLI prints them)."""
        if self.blank_lines_skipped:
            return [f"{self.path}: skipped {self.blank_lines_skipped} blank line(s)"]
        return []


def _open_binary(path: str | Path):
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    if path.is_dir():
        raise DataError(f"{path}: is a directory, expected a file")
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def open_text(path: str | Path) -> io.TextIOBase:
    """Open a text file (``.gz`` transparently) as strict UTF-8. Use :func:`numbered_lines` where a
    decoding error must name its line."""
    return io.TextIOWrapper(_open_binary(path), encoding="utf-8", errors="strict", newline=None)


def numbered_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(line number from 1, line without its newline)`` of a UTF-8 text file (``.gz`` transparently).

    Each line is decoded on its own, so a byte that is not UTF-8 is reported on its own line (a
    decoder reading blocks would report the line where the block began). A leading BOM is dropped.
    """
    path = Path(path)
    with _open_binary(path) as raw:
        for line_no, data in enumerate(raw, start=1):
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(
                    f"{path}:{line_no}: not valid UTF-8 (byte {data[exc.start:exc.start + 1]!r} at byte "
                    f"{exc.start + 1} of the line); expected a UTF-8 text file"
                ) from None
            if line_no == 1:
                text = text.removeprefix("\ufeff")
            yield line_no, text.rstrip("\r\n")


def _check_not_empty(path: Path, sentences: list[Sentence], skipped: int = 0) -> None:
    if not sentences:
        blank = f" ({skipped} blank line(s) skipped)" if skipped else ""
        raise DataError(f"{path}: no sentences found{blank}; expected at least one")


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

    for line_no, line in numbered_lines(path):
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
    _check_not_empty(path, sentences)
    return Corpus(sentences, path=path, format="conllu")


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
    if has_tree:
        problem = tree_problem(heads)
        if problem is not None:
            word, message = problem
            word_lines = [line_no for line_no, cols in block if cols[0].isdigit()]
            raise DataError(f"{path}:{word_lines[word]}: {message} in the sentence starting at line {start}")
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


def read_text(path: str | Path) -> Corpus:
    """One sentence per line, words split on whitespace. Blank lines (between paragraphs, at the end) are
    skipped and counted in ``Corpus.blank_lines_skipped``; sentence ids keep the line number."""
    path = Path(path)
    sentences = []
    skipped = 0
    for line_no, line in numbered_lines(path):
        words = line.split()
        if not words:
            skipped += 1
            continue
        sentences.append(
            Sentence(words=tuple(words), id=f"{path.name}:{line_no}", text=line.strip(), source_line=line_no)
        )
    _check_not_empty(path, sentences, skipped)
    return Corpus(sentences, path=path, format="text", blank_lines_skipped=skipped)


def read_senteval(path: str | Path) -> Corpus:
    """SentEval probing format: ``split<TAB>label<TAB>sentence`` (split is tr, va or te). Blank lines are
    skipped and counted."""
    path = Path(path)
    sentences = []
    skipped = 0
    for line_no, line in numbered_lines(path):
        if not line.strip():
            skipped += 1
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
    _check_not_empty(path, sentences, skipped)
    return Corpus(sentences, path=path, format="senteval", blank_lines_skipped=skipped)


_SUFFIX_FORMATS = {".conllu": "conllu", ".txt": "text", ".tsv": "senteval"}
_READERS = {"conllu": read_conllu, "text": read_text, "senteval": read_senteval}
_SENTEVAL_LINE = re.compile(r"^(?:tr|va|te)\t[^\t]+\t.*\S")
_CONLLU_LINE = re.compile(r"^\d+(?:[-.]\d+)?\t(?:[^\t]*\t){8}[^\t]*$")


def detect_format(path: str | Path) -> str:
    """``conllu``, ``text`` or ``senteval`` for a corpus file: by suffix (``.gz`` allowed on top), and for
    ``.txt`` by content too. A ``.txt`` whose first line is ``tr|va|te<TAB>label<TAB>sentence`` is
    SentEval; one whose first line after ``#`` comments is a 10-column CoNLL-U word line is CoNLL-U;
    anything else is one sentence per line. The reader then checks every line of the chosen format."""
    path = Path(path)
    suffix = Path(path.stem).suffix if path.suffix == ".gz" else path.suffix
    kind = _SUFFIX_FORMATS.get(suffix.lower())
    if kind is None:
        raise DataError(
            f"{path}: unsupported file type {suffix or '(none)'!r}; expected one of "
            + ", ".join(sorted(_SUFFIX_FORMATS)) + " (optionally .gz)"
        )
    if kind != "text":
        return kind
    lines = numbered_lines(path)
    try:
        first = next((line for _, line in lines if line.strip()), "")
        if _SENTEVAL_LINE.match(first):
            return "senteval"
        while first.startswith("#"):
            first = next((line for _, line in lines if line.strip()), "")
        return "conllu" if _CONLLU_LINE.match(first) else "text"
    finally:
        lines.close()


def read_corpus(path: str | Path) -> Corpus:
    """Read any supported corpus file; the format comes from :func:`detect_format` (suffix and content)."""
    return _READERS[detect_format(path)](path)


def sentences_from_strings(texts: Iterable[str]) -> list[Sentence]:
    """Raw sentences given in code; words split on whitespace."""
    if isinstance(texts, str):
        raise DataError("expected a list of sentences, got one string; wrap it in a list: [text]")
    out = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise DataError(f"sentence {i}: expected a string or a Sentence, got {type(text).__name__}")
        words = text.split()
        if not words:
            raise DataError(f"sentence {i}: empty sentence")
        out.append(Sentence(words=tuple(words), id=f"input:{i}", text=text))
    return out
