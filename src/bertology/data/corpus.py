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
import threading
import warnings
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Iterable, Iterator

from bertology.data.paths import PACKAGED_CORPORA, resolve_corpus
from bertology.data.sentence import Sentence
from bertology.data.treebank import tree_problem
from bertology.errors import BertologyWarning, DataError

FORMATS = ("conllu", "text", "senteval")


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


class _CheckedGzipFile(gzip.GzipFile):
    """A ``.gz`` being read, whose decoding failures (not gzip at all, cut short, damaged) are one
    :class:`DataError` naming the file instead of ``gzip.BadGzipFile``, ``EOFError`` (which the command line
    would print as a bare "Aborted.") or ``zlib.error``."""

    def __init__(self, path: Path):
        self.path = path
        super().__init__(path, "rb")

    def _checked(self, method, *args):
        try:
            return method(*args)
        except EOFError:
            raise DataError(f"{self.path}: truncated gzip file (it ends before its compressed data does); "
                            "expected a whole .gz file, download or copy it again") from None
        except (gzip.BadGzipFile, zlib.error) as error:
            with open(self.path, "rb") as raw:
                magic = raw.read(2)
            if magic != b"\x1f\x8b":
                raise DataError(f"{self.path}: not a gzip file (it does not start with the gzip signature); "
                                "expected gzip-compressed text, or rename it without .gz") from None
            raise DataError(f"{self.path}: damaged gzip file ({error}); expected a whole .gz file, download or "
                            "copy it again") from None

    def read(self, size=-1):
        return self._checked(super().read, size)

    def read1(self, size=-1):
        return self._checked(super().read1, size)

    def readline(self, size=-1):
        return self._checked(super().readline, size)

    def peek(self, n):
        return self._checked(super().peek, n)


def _open_binary(path: str | Path):
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    if path.is_dir():
        raise DataError(_directory_message(path))
    return _CheckedGzipFile(path) if path.suffix == ".gz" else open(path, "rb")


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


#: The CoNLL-U files read last, by path, size and modification time, and their sentences (immutable): the
#: report reads UD EWT's train, dev and test in several sections (its context, the probing tasks, the SentEval
#: task builds, the attention analysis); each is parsed once (issue 31). A file read with a warning is not kept.
_READ: OrderedDict[tuple, Corpus] = OrderedDict()
_READ_KEPT = 4
_READ_LOCK = threading.Lock()


def read_conllu(path: str | Path) -> list[Sentence]:
    """Read a CoNLL-U file (or ``.conllu.gz``) into sentences of syntactic words.

    A treebank shipped without its text (FORM ``_`` on every word, as UD's non-redistributable treebanks
    come) is refused; when only some forms are ``_`` (and the sentence's ``# text`` holds no ``_``) they are
    read as the word ``_`` and counted in one :class:`~bertology.errors.BertologyWarning` line.

    A file read again unchanged (same size and modification time) gives the sentences read before, in a new
    list.
    """
    path = Path(path)
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    except OSError:
        key = None  # the read below says what is wrong
    with _READ_LOCK:
        if key in _READ:
            _READ.move_to_end(key)
            return Corpus(_READ[key], path=path, format="conllu")
    corpus, warned = _read_conllu(path)
    if key is not None and not warned:
        with _READ_LOCK:
            _READ[key] = Corpus(corpus, path=path, format="conllu")
            while len(_READ) > _READ_KEPT:
                _READ.popitem(last=False)
    return corpus


def _read_conllu(path: Path) -> tuple[Corpus, bool]:
    """The file's sentences, and whether a warning was said about them."""
    sentences: list[Sentence] = []
    block: list[tuple[int, list[str]]] = []
    comments: dict[str, str] = {}
    start_line = 1
    missing_forms: list[int] = []  # lines of words whose FORM is "_" with no "_" in the sentence's text

    def flush() -> None:
        nonlocal block, comments
        if block:
            sentences.append(_conllu_sentence(path, block, comments, start_line, len(sentences)))
            if "_" not in comments.get("text", ""):
                missing_forms.extend(n for n, cols in block if cols[1] == "_" and _ASCII_INTEGER.fullmatch(cols[0]))
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
    _check_forms(path, sentences, missing_forms)
    return Corpus(sentences, path=path, format="conllu"), bool(missing_forms)


def _check_forms(path: Path, sentences: list[Sentence], missing: list[int]) -> None:
    if not missing:
        return
    total = sum(len(s) for s in sentences)
    if len(missing) == total:
        raise DataError(f"{path}: all {total:,} word forms are '_' (column FORM): the treebank ships without its "
                        "text, as UD's non-redistributable treebanks do; expected the words themselves: restore "
                        "them as the treebank's README says, then read the restored file")
    warnings.warn(f"{path}: {len(missing):,} of {total:,} word forms are '_' (column FORM; first at line "
                  f"{missing[0]}) with no '_' in the sentence's text; they are read as the word '_'",
                  BertologyWarning, stacklevel=4)


def _conllu_sentence(
    path: Path, block: list[tuple[int, list[str]]], comments: dict[str, str], start: int, index: int
) -> Sentence:
    words, lemmas, upos, xpos, feats, heads, deprels = [], [], [], [], [], [], []
    head_lines = []
    for line_no, cols in block:
        token_id = cols[0]
        if "-" in token_id or "." in token_id:
            # Multiword range (its syntactic words follow) or empty node (enhanced graphs only).
            lo, sep, hi = token_id.replace(".", "-").partition("-")
            if not (_ASCII_INTEGER.fullmatch(lo) and _ASCII_INTEGER.fullmatch(hi)):
                raise DataError(f"{path}:{line_no}: malformed token ID {token_id!r}; expected N, N-M or N.M")
            continue
        if not _ASCII_INTEGER.fullmatch(token_id):  # str.isdigit() also takes "²", which int() refuses
            raise DataError(f"{path}:{line_no}: token ID {token_id!r} is not an integer; expected N, N-M or N.M "
                            "(digits 0-9)")
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
            heads.append(None)
        elif _SIGNED_INTEGER.fullmatch(head):
            heads.append(int(head))
        else:
            raise DataError(f"{path}:{line_no}: HEAD {head!r} is not an integer; expected 0 (the root) or the "
                            "ID of a word of the sentence")
        head_lines.append(line_no)
        deprels.append(cols[7])
    if not words:
        raise DataError(f"{path}:{start}: sentence has no words")
    for line_no, head in zip(head_lines, heads):
        if head is not None and not 0 <= head <= len(words):
            raise DataError(f"{path}:{line_no}: HEAD {head} out of range; expected 0..{len(words)} (0 = the root, "
                            f"else a word of this sentence of {len(words)} words)")
    has_tree = all(h is not None for h in heads)
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


#: SentEval's split codes and the library's names for them: the reader translates, so nothing past it says tr/va/te.
SENTEVAL_SPLITS = {"tr": "train", "va": "dev", "te": "test"}


def read_senteval(path: str | Path) -> Corpus:
    """SentEval probing format: ``split<TAB>label<TAB>sentence`` (split is tr, va or te, read as ``Sentence.split``
    train, dev or test). Blank lines are skipped and counted."""
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
        if split not in SENTEVAL_SPLITS:
            raise DataError(f"{path}:{line_no}: split {split!r} is not one of tr, va, te")
        if not label.strip():
            raise DataError(f"{path}:{line_no}: empty label in column 2; expected a label")
        if label != label.strip():
            raise DataError(f"{path}:{line_no}: label {label!r} has spaces around it (it would be another "
                            "label than its trimmed self); expected the label alone in column 2")
        words = text.split()
        if not words:
            raise DataError(f"{path}:{line_no}: empty sentence in column 3")
        sentences.append(
            Sentence(
                words=tuple(words), id=f"{path.name}:{line_no}", text=text, label=label,
                split=SENTEVAL_SPLITS[split],
                source_line=line_no,
            )
        )
    _check_not_empty(path, sentences, skipped)
    return Corpus(sentences, path=path, format="senteval", blank_lines_skipped=skipped)


_ASCII_INTEGER = re.compile(r"[0-9]+")
_SIGNED_INTEGER = re.compile(r"[-+]?[0-9]+")
_SUFFIX_FORMATS = {".conllu": "conllu", ".txt": "text", ".tsv": "senteval"}
_READERS = {"conllu": read_conllu, "text": read_text, "senteval": read_senteval}
#: What a line of each structured format looks like, loosely (the reader then checks each line strictly):
#: SentEval starts with a split code and a tab; a CoNLL-U word line with a token id (N, N-M or N.M), and
#: has at least 6 tab-separated columns.
_SENTEVAL_LINE = re.compile(r"^(?:tr|va|te)\t")
_CONLLU_LINE = re.compile(r"^[0-9]+(?:[-.][0-9]+)?\t(?:[^\t]*\t){5}")
#: How many non-blank lines :func:`detect_format` looks at.
DETECT_LINES = 200
_FORMAT_NAMES = {"conllu": "CoNLL-U", "senteval": "SentEval (split<TAB>label<TAB>sentence)",
                 "text": "plain text (one sentence a line)"}


def _packaged_names() -> str:
    return ", ".join(PACKAGED_CORPORA)


def _directory_message(path: Path) -> str:
    """What to say when a folder is given where a corpus file is expected: which corpus files it holds."""
    def is_corpus(p: Path) -> bool:
        suffix = Path(p.stem).suffix if p.suffix == ".gz" else p.suffix
        return p.is_file() and suffix.lower() in _SUFFIX_FORMATS

    try:
        found = sorted(p.name for p in path.iterdir() if is_corpus(p))
    except OSError:
        found = []
    expected = "expected a corpus file (" + ", ".join(sorted(_SUFFIX_FORMATS)) + ", optionally .gz)"
    if not found:
        return f"{path}: is a directory and holds no corpus files; {expected}"
    shown = ", ".join(found[:8]) + (f" and {len(found) - 8} more" if len(found) > 8 else "")
    return f"{path}: is a directory, not a file; {expected}; it holds {shown}: give one of them"


def _line_shape(line: str) -> str | None:
    """``senteval``, ``conllu`` or ``text`` for one non-blank line; None for a ``#`` comment."""
    if line.startswith("#"):
        return None
    if _SENTEVAL_LINE.match(line):
        return "senteval"
    if _CONLLU_LINE.match(line):
        return "conllu"
    return "text"


def detect_format(path: str | Path) -> str:
    """``conllu``, ``text`` or ``senteval`` for a corpus file (or a packaged corpus name): by suffix
    (``.gz`` allowed on top), and for ``.txt`` by content too.

    A ``.txt`` is read by what most of its first :data:`DETECT_LINES` non-blank lines look like (``#``
    comments aside): ``tr|va|te<TAB>...`` lines make it SentEval, lines starting with a token id and
    holding 6 or more tab-separated columns make it CoNLL-U, anything else is one sentence per line. The
    reader then checks every line of the chosen format and names the first one that breaks it; a plain
    text file with some lines of another format is refused here, naming the first of them.
    """
    path = resolve_corpus(path)
    if path.is_dir():
        raise DataError(_directory_message(path))
    suffix = Path(path.stem).suffix if path.suffix == ".gz" else path.suffix
    kind = _SUFFIX_FORMATS.get(suffix.lower())
    if kind is None:
        if not path.exists():
            raise DataError(f"{path}: file not found; expected a corpus file ("
                            + ", ".join(sorted(_SUFFIX_FORMATS)) + f", optionally .gz) or a packaged corpus "
                            f"({_packaged_names()})")
        raise DataError(
            f"{path}: unsupported file type {suffix or '(none)'!r}; expected one of "
            + ", ".join(sorted(_SUFFIX_FORMATS)) + f" (optionally .gz), or a packaged corpus ({_packaged_names()})"
        )
    if kind != "text":
        return kind
    shapes: dict[str, list[int]] = {"senteval": [], "conllu": [], "text": []}
    seen = 0
    lines = numbered_lines(path)
    try:
        for line_no, line in lines:
            if not line.strip():
                continue
            shape = _line_shape(line)
            if shape is not None:
                shapes[shape].append(line_no)
            seen += 1
            if seen >= DETECT_LINES:
                break
    finally:
        lines.close()
    if not any(shapes.values()):
        return "text"
    kind = max(("senteval", "conllu", "text"), key=lambda k: len(shapes[k]))  # ties: the structured formats
    if kind == "text":
        others = [(shapes[k][0], k) for k in ("senteval", "conllu") if shapes[k]]
        if others:
            line_no, other = min(others)
            counted = sum(map(len, shapes.values()))
            raise DataError(
                f"{path}:{line_no}: looks like a {_FORMAT_NAMES[other]} line, but {len(shapes['text'])} of the "
                f"first {counted} lines are {_FORMAT_NAMES['text']}; expected one format in the whole file"
            )
    return kind


def read_corpus(path: str | Path) -> Corpus:
    """Read any supported corpus file, or a packaged corpus by name (``ewt-dev``...); the format comes
    from :func:`detect_format` (suffix and content)."""
    path = resolve_corpus(path)
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
