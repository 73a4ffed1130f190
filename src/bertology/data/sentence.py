"""One sentence and its annotation: the leaf every reader, treebank helper and capability imports."""

from __future__ import annotations

from dataclasses import dataclass, field


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
