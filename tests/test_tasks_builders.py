"""Task builders on hand-written CoNLL-U with known answers (tests/data/tasks/known.conllu)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bertology.data import Sentence, read_conllu
from bertology.tasks.build import _prepare
from bertology.tasks.builders import (
    OBJECT_RELATIONS,
    SUBJECT_RELATIONS,
    BuildContext,
    build_bigram_shift,
    build_coordination_inversion,
    build_sentence_length,
    build_tree_depth,
    coordination,
    number_instance,
    tense_instance,
    top_sequence,
)
from bertology.data.treebank import Tree, tree_or_none
from bertology.errors import DataError

KNOWN = Path(__file__).parent / "data" / "tasks" / "known.conllu"


@pytest.fixture(scope="module")
def known() -> dict[str, Sentence]:
    return {s.id: s for s in read_conllu(KNOWN)}


def _context(tr: list[Sentence], va=(), te=(), seed: int = 0) -> BuildContext:
    ctx, _ = _prepare({"train": list(tr), "dev": list(va), "test": list(te)}, (1, 100), seed)
    return ctx


def test_tree_depth_known(known):
    # The one depth definition: arcs from the root (a root-only tree has depth 0).
    depths = {sid: Tree.of(s).depth for sid, s in known.items()}
    assert depths == {"known-1": 2, "known-2": 2, "known-3": 3, "known-4": 2, "known-5": 2, "known-6": 4,
                      "known-7": 2, "known-8": 2}


def test_builders_skip_cycles_and_two_roots():
    cyclic = Sentence(words=("a", "b", "c"), id="c", heads=(0, 3, 2), deprels=("root", "x", "x"))
    two_roots = Sentence(words=("a", "b"), id="r", heads=(0, 0), deprels=("root", "root"))
    assert tree_or_none(cyclic) is None and tree_or_none(two_roots) is None
    with pytest.raises(DataError, match="cycle"):
        Tree.of(cyclic)
    rejected = Counter()
    assert tense_instance(cyclic, rejected) is None
    assert any("not one root" in reason for reason in rejected)


def test_tense_known_and_skipped(known):
    rejected = Counter()
    labels = {sid: tense_instance(s, rejected) for sid, s in known.items()}
    got = {sid: (inst.label, inst.form) for sid, inst in labels.items() if inst is not None}
    assert got == {
        "known-1": ("PAST", "chased"), "known-2": ("PRES", "have"), "known-3": ("PAST", "sang"),
        "known-5": ("PRES", "reads"), "known-6": ("PAST", "slept"), "known-7": ("PAST", "was"),
        "known-8": ("PRES", "play"),
    }
    assert labels["known-4"] is None  # imperative: finite but tenseless
    assert any("no Tense" in reason for reason in rejected)


def test_subject_and_object_number_known(known):
    rejected = Counter()
    subj = number_instance(SUBJECT_RELATIONS, "subject")
    obj = number_instance(OBJECT_RELATIONS, "direct object")
    subjects = {sid: subj(s, rejected) for sid, s in known.items()}
    objects = {sid: obj(s, rejected) for sid, s in known.items()}
    assert {k: (v.label, v.form) for k, v in subjects.items() if v} == {
        "known-1": ("NN", "dog"), "known-2": ("NNS", "dogs"), "known-3": ("NN", "man"),
        "known-6": ("NN", "man"), "known-7": ("NN", "teacher"), "known-8": ("NNS", "children"),
    }
    assert subjects["known-5"] is None and rejected["subject is not a common noun (UPOS PRON)"] == 1
    assert subjects["known-4"] is None
    assert {k: (v.label, v.form) for k, v in objects.items() if v} == {
        "known-1": ("NNS", "cats"), "known-2": ("NN", "bone"), "known-4": ("NN", "book"),
        "known-5": ("NNS", "books"),
    }


def test_top_sequence_known(known):
    assert top_sequence(known["known-1"]) == "nsubj_VP_."
    assert top_sequence(known["known-2"]) == "nsubj_VP_."  # the aux after the subject is inside the VP
    assert top_sequence(known["known-3"]) == "nsubj_VP_cc_conj_."
    assert top_sequence(known["known-8"]) == "advmod_nsubj_VP_."
    assert top_sequence(known["known-7"]) is None  # a comma directly under the root


def test_coordination_known(known):
    parts = coordination(known["known-3"])
    assert parts == ([0, 1, 2], [3], [4, 5, 6], [7])
    assert all(coordination(known[sid]) is None for sid in known if sid != "known-3")


def test_coordination_inversion_output(known):
    s = known["known-3"]
    # Two copies: the 'equal clause length' group is cut in half, one O and one I.
    copies = [Sentence(words=s.words, id=f"c{i}", upos=s.upos, xpos=s.xpos, feats=s.feats, heads=s.heads,
                       deprels=s.deprels) for i in range(2)]
    ctx = _context(copies)
    # _prepare de-duplicates identical sentences, so hand the builder the copies directly.
    ctx.splits = {"train": copies, "dev": copies, "test": copies}
    out = build_coordination_inversion(ctx)
    texts = {(i.label, " ".join(i.words)) for i in out.instances["train"]}
    assert texts == {("O", "The man sang and the woman danced ."), ("I", "The woman danced and the man sang .")}


def test_sentence_length_bins_and_balance(known):
    out = build_sentence_length(_context(list(known.values())))
    labels = {" ".join(i.words): i.label for i in out.instances["train"]}
    # known-6 has 11 words (bin 1: 9-12); the others have 6-8 words (bin 0: 5-8); balanced to 1 + 1.
    assert sorted(labels.values()) == ["0", "1"]
    assert labels["The old man in the house near the river slept ."] == "1"


def _chain_sentence(length: int, depth: int, k: int) -> Sentence:
    # A chain of `depth` words from the root, the remaining words attached to the root.
    heads = [0] + [i for i in range(1, depth)] + [1] * (length - depth)
    words = tuple(f"w{k}x{i}" for i in range(length))
    return Sentence(words=words, id=f"s{length}-{depth}-{k}", heads=tuple(heads), deprels=("dep",) * length,
                    upos=("X",) * length)


def test_tree_depth_is_balanced_and_decorrelated_from_length():
    rng = np.random.default_rng(0)
    sentences = []
    k = 0
    for length in range(6, 12):
        for depth in range(2, 7):
            # Deeper trees are more common in longer sentences, as in real text.
            for _ in range(int(rng.integers(1, 4)) + (length - 6) * (depth - 2)):
                sentences.append(_chain_sentence(length, depth, k))
                k += 1
    ctx = _context(sentences)
    ctx.splits = {"train": sentences, "dev": sentences, "test": sentences}
    out = build_tree_depth(ctx)
    kept = out.instances["train"]
    assert kept
    cells = Counter((len(i.words), i.label) for i in kept)
    for length in {n for n, _ in cells}:
        per_depth = [cells[(length, d)] for d in out.label_order]
        assert len(set(per_depth)) == 1, (length, per_depth)  # every depth equally often at this length
    lengths = np.array([len(i.words) for i in kept])
    depths = np.array([int(i.label) for i in kept])
    assert abs(np.corrcoef(lengths, depths)[0, 1]) < 1e-9
    assert len(out.label_order) >= 3


def test_bigram_shift_swaps_one_inner_pair(known):
    sentences = list(known.values())
    ctx = _context(sentences)
    ctx.splits = {"train": sentences, "dev": sentences, "test": sentences}
    out = build_bigram_shift(ctx)
    originals = {s.id: s for s in sentences}
    labels = Counter(i.label for i in out.instances["train"])
    assert labels["I"] == labels["O"] == 4
    for inst in out.instances["train"]:
        source = originals[inst.source_id]
        diff = [j for j, (a, b) in enumerate(zip(inst.words, source.words)) if a != b]
        if inst.label == "O":
            assert diff == []
        else:
            assert len(diff) == 2 and diff[1] == diff[0] + 1 and diff[0] >= 1
            assert inst.words[diff[0]] == source.words[diff[1]]
            assert "PUNCT" not in (source.upos[diff[0]], source.upos[diff[1]])
