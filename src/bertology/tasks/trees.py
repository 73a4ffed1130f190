"""Small helpers over dependency trees given as CoNLL-U heads (1-based, 0 = root)."""

from __future__ import annotations

from bertology.data import Sentence


def root_index(sentence: Sentence) -> int | None:
    """0-based index of the single root word, or None when the sentence has no tree or several roots."""
    heads = sentence.heads
    if heads is None:
        return None
    roots = [i for i, head in enumerate(heads) if head == 0]
    return roots[0] if len(roots) == 1 else None


def children(sentence: Sentence) -> list[list[int]]:
    """0-based dependents of every word, in surface order."""
    out: list[list[int]] = [[] for _ in sentence.words]
    for i, head in enumerate(sentence.heads or ()):
        if head > 0:
            out[head - 1].append(i)
    return out


def word_depths(sentence: Sentence) -> list[int] | None:
    """Depth of every word (root = 1). None when the heads do not form a tree (a cycle, no root)."""
    heads = sentence.heads
    if heads is None or root_index(sentence) is None:
        return None
    depths = [0] * len(heads)
    for start in range(len(heads)):
        path = []
        node = start
        while node >= 0 and depths[node] == 0:
            if len(path) > len(heads):
                return None  # a cycle: a well-formed tree reaches the root in < n steps
            path.append(node)
            node = heads[node] - 1
        base = 0 if node < 0 else depths[node]
        for offset, visited in enumerate(reversed(path), start=1):
            depths[visited] = base + offset
    return depths


def tree_depth(sentence: Sentence) -> int | None:
    """Words on the longest root-to-leaf path (a one-word sentence has depth 1)."""
    depths = word_depths(sentence)
    return max(depths) if depths else None


def subtree(sentence: Sentence, node: int, kids: list[list[int]] | None = None) -> list[int]:
    """Sorted 0-based indices of ``node`` and all its descendants."""
    kids = kids if kids is not None else children(sentence)
    stack, out = [node], []
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(kids[current])
    return sorted(out)


def is_contiguous(indices: list[int]) -> bool:
    return bool(indices) and indices[-1] - indices[0] + 1 == len(indices)


def base_deprel(deprel: str) -> str:
    """Universal part of a relation: ``nsubj:pass`` -> ``nsubj``."""
    return deprel.split(":", 1)[0]
