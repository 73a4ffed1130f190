"""Dependency treebanks: which file is which split, and the tree of a sentence. Used by tasks, probing and
attention alike, so every command accepts the same folders and measures trees the same way.

**Split files.** A CoNLL-U file (``.conllu`` or ``.conllu.gz``) belongs to split ``train``, ``dev`` or
``test`` when its name, without the suffix and in any case, ends in that word (``en_ewt-ud-train``,
``train``, ``wsj_dev``) or has it as a part set off by ``-``, ``_`` or ``.`` (``xx-ud-test-v2``). A
folder holds at most one file per split.

**Trees.** HEADs are CoNLL-U's: 1-based word indices, 0 for the root. Word indices in this module's
results are 0-based. A tree has exactly one root, no word is its own head and no HEADs form a cycle.

* The **depth** of a word is the number of arcs between it and the root: the root has depth 0 (Hewitt
  and Manning, 2019). The depth of a tree is the greatest depth of its words (a one-word sentence has
  depth 0). This is the one depth used everywhere (structural probes, the TreeDepth task).
* The **distance** between two words is the number of arcs on the path between them.
* The **base relation** of a DEPREL is its universal part, without the subtype (``nsubj:pass`` ->
  ``nsubj``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np

from bertology.data.sentence import Sentence
from bertology.errors import DataError

SPLITS = ("train", "dev", "test")
CONLLU_SUFFIXES = (".conllu", ".conllu.gz")
NAMING_RULE = ("a CoNLL-U file per split whose name ends in train, dev or test before .conllu[.gz] "
               "(e.g. en_ewt-ud-train.conllu.gz)")

_PART = {split: re.compile(rf"(?:^|[-_.]){split}(?:$|[-_.])") for split in SPLITS}


# ------------------------------------------------------------------------------------------- split files


def is_conllu(path: str | os.PathLike) -> bool:
    return Path(path).name.lower().endswith(CONLLU_SUFFIXES)


def split_of(path: str | os.PathLike) -> str | None:
    """``"train"``, ``"dev"`` or ``"test"`` for a CoNLL-U file named by the one naming rule (module doc);
    None for a file that names no split, names several, or is not CoNLL-U."""
    name = Path(path).name.lower()
    for suffix in CONLLU_SUFFIXES[::-1]:
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            break
    else:
        return None
    found = {split for split in SPLITS if stem.endswith(split) or _PART[split].search(stem)}
    return found.pop() if len(found) == 1 else None


def conllu_files(folder: str | os.PathLike) -> list[Path]:
    """The CoNLL-U files of a folder, sorted by name; an error if there are none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: not a folder" if folder.exists() else f"{folder}: file not found"
                        f"; expected a UD treebank folder with {NAMING_RULE}")
    found = sorted(p for p in folder.iterdir() if p.is_file() and is_conllu(p))
    if not found:
        raise DataError(f"{folder}: no .conllu or .conllu.gz files in this folder; expected a UD treebank "
                        f"with {NAMING_RULE}")
    return found


def find_splits(folder: str | os.PathLike, required: Sequence[str] = SPLITS) -> dict[str, Path]:
    """``{split: file}`` for every split a UD treebank folder holds (see the naming rule in the module doc).

    Raises :class:`DataError` when the folder is missing, a ``required`` split has no file, or a split
    has several files (the message lists them).
    """
    folder = Path(folder)
    if not folder.is_dir():
        conllu_files(folder)  # the one message for a missing folder or a file
    by_split: dict[str, list[Path]] = {}
    for path in sorted(folder.iterdir()):
        split = split_of(path) if path.is_file() else None
        if split is not None:
            by_split.setdefault(split, []).append(path)
    for split, paths in by_split.items():
        if len(paths) > 1:
            raise DataError(f"{folder}: several {split} files ({', '.join(p.name for p in paths)}); expected one")
    missing = [split for split in required if split not in by_split]
    if missing:
        found = ", ".join(f"{split}: {paths[0].name}" for split, paths in sorted(by_split.items())) or "none"
        raise DataError(f"{folder}: no {' or '.join(missing)} file; expected {NAMING_RULE}; "
                        f"needed: {', '.join(required)}; found: {found}")
    return {split: by_split[split][0] for split in SPLITS if split in by_split}


# ----------------------------------------------------------------------------------------------- trees


def base_relation(deprel: str) -> str:
    """The universal part of a relation: ``nsubj:pass`` -> ``nsubj``, ``nmod:poss`` -> ``nmod``."""
    return deprel.split(":", 1)[0]


def tree_problem(heads: Sequence[int]) -> tuple[int, str] | None:
    """What keeps ``heads`` (1-based, 0 = root) from being a tree: ``(0-based word, message)``, or None."""
    n = len(heads)
    if n == 0:
        return 0, "empty tree; expected at least one word"
    for i, head in enumerate(heads):
        if isinstance(head, bool) or not isinstance(head, (int, np.integer)) or not 0 <= head <= n:
            return i, f"HEAD values must be integers in 0..{n} (1-based, 0 = root), got {list(heads)}"
        if head == i + 1:
            return i, f"word {i + 1} is its own head (HEAD equals its ID)"
    roots = [i for i, head in enumerate(heads) if head == 0]
    if len(roots) != 1:
        which = f" (words {', '.join(str(r + 1) for r in roots)})" if roots else ""
        return (roots[1] if roots else 0), (f"expected exactly one word with HEAD 0 (the root), found "
                                            f"{len(roots)}{which}")
    state = [0] * n  # 0 = not seen, 1 = on the path being walked, 2 = reaches the root
    for start in range(n):
        path, node = [], start
        while node >= 0 and state[node] == 0:
            state[node] = 1
            path.append(node)
            node = heads[node] - 1
        if node >= 0 and state[node] == 1:
            cycle = path[path.index(node):] + [node]
            return node, f"HEAD values contain a cycle ({' -> '.join(str(i + 1) for i in cycle)}); expected a tree"
        for visited in path:
            state[visited] = 2
    return None


def check_tree(heads: Sequence[int], where: str = "tree") -> None:
    """Raise :class:`DataError` ``"<where>: <what is wrong>"`` unless ``heads`` form a tree."""
    problem = tree_problem(heads)
    if problem is not None:
        raise DataError(f"{where}: {problem[1]}")


def _arcs_on_path(heads: Sequence[int], where: str) -> np.ndarray:
    """``E[i, c] = 1`` when the arc from word ``c`` to its head lies on the path from word ``i`` to the root.

    Rows embed the tree so that ``||E_i||^2`` is the depth of ``i`` and ``||E_i - E_j||^2`` the distance
    between ``i`` and ``j``; depths and distances both come from this one matrix.
    """
    heads = list(heads)
    check_tree(heads, where)
    parent = np.asarray(heads, dtype=np.int64) - 1  # root -> -1
    n = len(parent)
    on_path = np.zeros((n, n), dtype=np.int64)
    rows = np.arange(n)
    current = rows.copy()
    for _ in range(n):  # a tree reaches its root in fewer than n steps
        alive = current >= 0
        if not alive.any():
            break
        has_arc = alive & (parent[np.maximum(current, 0)] >= 0)
        on_path[rows[has_arc], current[has_arc]] = 1
        current = np.where(alive, parent[np.maximum(current, 0)], -1)
    return on_path


def tree_depths(heads: Sequence[int], *, where: str = "tree") -> np.ndarray:
    """``[n]`` depth of every word (arcs to the root; the root has depth 0) from 1-based heads (0 = root)."""
    return _arcs_on_path(heads, where).sum(axis=1)


def tree_distances(heads: Sequence[int], *, where: str = "tree") -> np.ndarray:
    """``[n, n]`` distances (arcs on the path between two words) from 1-based heads (0 = root)."""
    on_path = _arcs_on_path(heads, where)
    depth = on_path.sum(axis=1)
    return depth[:, None] + depth[None, :] - 2 * (on_path @ on_path.T)


def describe_sentence(sentence: Sentence) -> str:
    """``sentence 'id', line 12``: how errors name a sentence."""
    line = f", line {sentence.source_line}" if sentence.source_line is not None else ""
    return f"sentence {sentence.id!r}{line}"


@dataclass(frozen=True, eq=False)
class Tree:
    """A checked dependency tree over ``n`` words (see the module doc for depth, distance, base relation).

    ``heads`` are CoNLL-U's (1-based, 0 = root); every index this class returns is 0-based.
    Constructing a tree from heads that are not a tree raises :class:`DataError` naming ``where``.
    """

    heads: tuple[int, ...]
    relations: tuple[str, ...] | None = None
    where: str = field(default="tree", repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", tuple(int(h) for h in self.heads))
        check_tree(self.heads, self.where)
        if self.relations is not None:
            object.__setattr__(self, "relations", tuple(self.relations))
            if len(self.relations) != len(self.heads):
                raise DataError(f"{self.where}: {len(self.relations)} relations for {len(self.heads)} words")

    @classmethod
    def of(cls, sentence: Sentence) -> "Tree":
        """The tree of a sentence read from CoNLL-U; :class:`DataError` naming it when it has none."""
        if sentence.heads is None:
            raise DataError(f"{describe_sentence(sentence)}: no dependency heads; expected a CoNLL-U treebank "
                            "with HEAD and DEPREL columns")
        return cls(sentence.heads, sentence.deprels, where=describe_sentence(sentence))

    def __len__(self) -> int:
        return len(self.heads)

    @property
    def root(self) -> int:
        return self.heads.index(0)

    def parent(self, word: int) -> int | None:
        """The head of ``word`` (0-based), None for the root."""
        head = self.heads[word]
        return head - 1 if head else None

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        """The dependents of every word, in surface order."""
        kids: list[list[int]] = [[] for _ in self.heads]
        for word, head in enumerate(self.heads):
            if head:
                kids[head - 1].append(word)
        return tuple(tuple(k) for k in kids)

    @cached_property
    def depths(self) -> np.ndarray:
        """``[n]`` arcs from each word to the root (root = 0)."""
        return tree_depths(self.heads, where=self.where)

    @property
    def depth(self) -> int:
        """The greatest word depth (a one-word tree has depth 0)."""
        return int(self.depths.max())

    @cached_property
    def distances(self) -> np.ndarray:
        """``[n, n]`` arcs on the path between every two words."""
        return tree_distances(self.heads, where=self.where)

    def distance(self, a: int, b: int) -> int:
        return int(self.distances[a, b])

    def relation(self, word: int) -> str:
        if self.relations is None:
            raise DataError(f"{self.where}: no DEPREL column")
        return self.relations[word]

    def base_relation(self, word: int) -> str:
        return base_relation(self.relation(word))

    def subtree(self, word: int) -> list[int]:
        """Sorted indices of ``word`` and all its descendants."""
        stack, out = [word], []
        while stack:
            current = stack.pop()
            out.append(current)
            stack.extend(self.children[current])
        return sorted(out)


def tree_or_none(sentence: Sentence) -> Tree | None:
    """The sentence's tree, or None when it has no heads or they are not a tree (for code that skips
    such sentences and counts them, like the task builders)."""
    if sentence.heads is None or any(h < 0 for h in sentence.heads) or tree_problem(sentence.heads) is not None:
        return None
    return Tree(sentence.heads, sentence.deprels, where=describe_sentence(sentence))
