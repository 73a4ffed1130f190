"""The treebanks of several languages: which file is which language, how their sentences line up, how they
are split, and whether their tags are universal.

**Languages.** Treebanks are given as CoNLL-U files (``.conllu`` or ``.conllu.gz``) or folders holding them
(directly or one level down, as ``ud_pud/fr/fr_pud-ud-test.conllu.gz``). A file's language is the part of its
name before the first ``_`` when the name follows UD's ``<code>_<treebank>-ud-<split>`` pattern
(``fr_pud-ud-test.conllu.gz`` -> ``fr``), else its name without the suffix. Several files of one language
(a treebank's train, dev and test) are read as one list of sentences, in name order.

**Alignment.** Parallel treebanks (UD's PUD: the same 1,000 sentences in every language) keep one
``# sent_id`` per sentence across languages; :func:`shared_ids` is the set every language has.

**Splits.** :func:`split_ids` sends each sentence id to ``train``, ``dev`` or ``test`` by a seeded permutation of
every id seen, so a sentence and its translations always fall in the same split.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from bertology.data.corpus import read_conllu
from bertology.data.sentence import Sentence
from bertology.data.treebank import base_relation, is_conllu
from bertology.errors import DataError
from bertology.runtime import derive_seed

#: The 17 universal part-of-speech tags (UD v2).
UNIVERSAL_UPOS = frozenset({"ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON",
                            "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X"})
#: The 37 universal dependency relations (UD v2), without subtypes.
UNIVERSAL_RELATIONS = frozenset({
    "acl", "advcl", "advmod", "amod", "appos", "aux", "case", "cc", "ccomp", "clf", "compound", "conj", "cop",
    "csubj", "dep", "det", "discourse", "dislocated", "expl", "fixed", "flat", "goeswith", "iobj", "list", "mark",
    "nmod", "nsubj", "nummod", "obj", "obl", "orphan", "parataxis", "punct", "reparandum", "root", "vocative",
    "xcomp",
})
#: Shares of sentence ids in train, dev and test (the test share large enough for tight intervals).
SPLIT_SHARES = (0.5, 0.1, 0.4)
#: Fewest sentences a language needs: one in each split at least, and a few for a centroid.
MIN_SENTENCES = 10

_UD_NAME = re.compile(r"^([A-Za-z]{2,3}(?:-[A-Za-z0-9]+)?)_[^/]+$")


@dataclass
class LanguageTreebank:
    """One language: its code, the files read and their sentences (syntactic words, as in CoNLL-U)."""

    code: str
    paths: tuple[Path, ...]
    sentences: list[Sentence]

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.sentences]

    @property
    def n_words(self) -> int:
        return sum(len(s) for s in self.sentences)

    @property
    def where(self) -> str:
        return ", ".join(str(p) for p in self.paths)


def language_code(path: str | os.PathLike) -> str:
    """The language of a CoNLL-U file by its name (module doc): ``fr_pud-ud-test.conllu.gz`` -> ``fr``."""
    name = Path(path).name
    for suffix in (".conllu.gz", ".conllu"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    found = _UD_NAME.match(name)
    return found.group(1) if found else name


def treebank_files(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Every CoNLL-U file named by ``paths``: files as given, folders' files and their subfolders' files."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    for given in map(Path, paths):
        if not given.exists():
            raise DataError(f"{given}: file not found; expected CoNLL-U treebanks (files or a folder of them)")
        if given.is_file():
            if not is_conllu(given):
                raise DataError(f"{given}: not a CoNLL-U file; expected a name ending in .conllu or .conllu.gz")
            files.append(given)
            continue
        found = sorted(p for p in given.iterdir() if p.is_file() and is_conllu(p))
        found += sorted(p for sub in sorted(given.iterdir()) if sub.is_dir()
                        for p in sub.iterdir() if p.is_file() and is_conllu(p))
        if not found:
            raise DataError(f"{given}: no .conllu or .conllu.gz files in this folder or its subfolders; expected "
                            "one treebank per language (e.g. fr/fr_pud-ud-test.conllu.gz)")
        files += found
    return list(dict.fromkeys(files))


def read_treebanks(paths: Sequence[str | os.PathLike], max_sentences: int | None = None,
                   min_sentences: int = MIN_SENTENCES) -> dict[str, LanguageTreebank]:
    """``{code: LanguageTreebank}`` in code order, from files or folders (module doc); the first
    ``max_sentences`` sentences of each language when given. :class:`DataError` names a language with fewer
    than ``min_sentences`` sentences, and a run given fewer than two languages."""
    by_code: dict[str, list[Path]] = {}
    for path in treebank_files(paths):
        by_code.setdefault(language_code(path), []).append(path)
    if len(by_code) < 2:
        found = ", ".join(f"{code} ({', '.join(str(p) for p in ps)})" for code, ps in by_code.items())
        raise DataError(f"one language only: {found}; expected treebanks of two or more languages")
    languages = {}
    for code in sorted(by_code):
        files = tuple(sorted(by_code[code]))
        sentences = [s for f in files for s in read_conllu(f)]
        if max_sentences is not None:
            sentences = sentences[:max_sentences]
        if len(sentences) < min_sentences:
            raise DataError(f"{', '.join(map(str, files))}: {len(sentences)} sentence(s) of language {code!r}; "
                            f"expected at least {min_sentences} (its sentences are split into train, dev and test)")
        languages[code] = LanguageTreebank(code, files, sentences)
    return languages


def shared_ids(languages: dict[str, LanguageTreebank]) -> list[str]:
    """The sentence ids every language has, in the first language's order (duplicated ids left out)."""
    common: set[str] | None = None
    for treebank in languages.values():
        counts = Counter(treebank.ids)
        unique = {i for i, n in counts.items() if n == 1}
        common = unique if common is None else common & unique
    first = next(iter(languages.values()))
    return [i for i in first.ids if i in (common or set())]


def check_alignment(languages: dict[str, LanguageTreebank], minimum: int = 2) -> list[str]:
    """The shared sentence ids (:func:`shared_ids`), or :class:`DataError` in one line when fewer than
    ``minimum`` ids are shared by every language (sentence retrieval needs translations to find)."""
    ids = shared_ids(languages)
    if len(ids) < minimum:
        examples = "; ".join(f"{code}: {t.ids[0]!r}" for code, t in list(languages.items())[:3])
        raise DataError(f"the treebanks share {len(ids)} sentence id(s) ({examples}, ...); parallel sentence "
                        f"retrieval needs at least {minimum} sentences with the same # sent_id in every language "
                        "(a parallel treebank such as UD's PUD)")
    return ids


def split_ids(ids: Sequence[str], seed: int = 0, shares: tuple[float, float, float] = SPLIT_SHARES
              ) -> dict[str, str]:
    """``{sentence id: "train" | "dev" | "test"}``: a seeded permutation of the sorted ids cut by ``shares``.
    Every split gets at least one id when there are three or more."""
    unique = sorted(set(ids))
    order = np.random.default_rng(derive_seed(seed, "languages-split")).permutation(len(unique))
    n = len(unique)
    n_train = max(1, int(round(shares[0] * n)))
    n_dev = max(1, int(round(shares[1] * n)))
    n_train = min(n_train, max(1, n - n_dev - 1))
    split = {}
    for rank, index in enumerate(order):
        split[unique[index]] = "train" if rank < n_train else "dev" if rank < n_train + n_dev else "test"
    return split


def tag_problem(treebank: LanguageTreebank, column: str = "upos") -> str | None:
    """Why the ``column`` (``upos`` or ``deprel``) of a treebank is not UD's universal tag set, naming the
    file, the line of the sentence and the tag; None when every tag is universal."""
    if column not in ("upos", "deprel"):
        raise ValueError(f"column {column!r}; expected 'upos' or 'deprel'")
    allowed = UNIVERSAL_UPOS if column == "upos" else UNIVERSAL_RELATIONS
    for sentence in treebank.sentences:
        tags = sentence.upos if column == "upos" else sentence.deprels
        if tags is None:
            return f"{treebank.where}: sentence {sentence.id!r} has no {column.upper()} column"
        for position, tag in enumerate(tags):
            if tag in ("_", ""):
                continue
            value = tag if column == "upos" else base_relation(tag)
            if value not in allowed:
                line = f", line {sentence.source_line}" if sentence.source_line is not None else ""
                what = "universal part-of-speech tag" if column == "upos" else "universal relation"
                return (f"{_file_of(treebank, sentence)}: sentence {sentence.id!r}{line}, word {position + 1}: "
                        f"{column.upper()} {tag!r} is not a {what}; expected one of {', '.join(sorted(allowed))}")
    return None


def _file_of(treebank: LanguageTreebank, sentence: Sentence) -> str:
    return str(treebank.paths[0]) if len(treebank.paths) == 1 else treebank.where
