"""The one treebank module: split discovery by one naming rule, and the tree type (depth, distance, base relation)."""

import numpy as np
import pytest

from bertology.data import Sentence, read_conllu
from bertology.data.treebank import (
    Tree, base_relation, find_splits, split_of, tree_depths, tree_distances, tree_or_none, tree_problem,
)
from bertology.errors import DataError
from bertology.tasks.build import load_splits

CONLLU = ("# sent_id = a\n1\tDogs\tdog\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n"
          "2\tbark\tbark\tVERB\tVBP\t_\t0\troot\t_\t_\n3\t.\t.\tPUNCT\t.\t_\t2\tpunct\t_\t_\n\n")


@pytest.mark.parametrize("name, split", [
    ("en_ewt-ud-train.conllu.gz", "train"), ("xx-ud-dev.conllu", "dev"), ("xx-ud-test.conllu", "test"),
    ("train.conllu", "train"), ("wsj.dev.conllu", "dev"), ("wsj_test.conllu", "test"),
    ("XX-UD-TRAIN.CONLLU", "train"), ("xx-test-v2.conllu", "test"), ("mytrain.conllu", "train"),
    ("xx-ud-train.txt", None), ("notes.conllu", None), ("dev-test.conllu", None), ("trainee.conllu", None),
])
def test_one_naming_rule(name, split):
    assert split_of(name) == split


FOLDERS = {
    "ud": ("xx-ud-train.conllu", "xx-ud-dev.conllu", "xx-ud-test.conllu.gz"),
    "bare": ("train.conllu", "dev.conllu", "test.conllu"),
    "dotted": ("wsj.train.conllu", "wsj.dev.conllu", "wsj.test.conllu"),
}


def _folder(tmp_path, names):
    import gzip

    folder = tmp_path / "tb"
    folder.mkdir()
    for name in names:
        if name.endswith(".gz"):
            with gzip.open(folder / name, "wt", encoding="utf-8") as handle:
                handle.write(CONLLU)
        else:
            (folder / name).write_text(CONLLU, encoding="utf-8")
    return folder


@pytest.mark.parametrize("kind", sorted(FOLDERS))
def test_the_same_folders_are_accepted_by_tasks_probing_and_attention(tmp_path, kind):
    from bertology.attention.parsing import run_attention_analysis  # noqa: F401 (uses find_splits)
    from bertology.probing.datasets import load_ud_pools

    folder = _folder(tmp_path, FOLDERS[kind])
    splits = find_splits(folder)
    assert {split: path.name for split, path in splits.items()} == dict(zip(("train", "dev", "test"), FOLDERS[kind]))
    by_split, _, source = load_splits(folder)  # tasks
    assert source == "treebank train/dev/test files" and all(len(by_split[s]) == 1 for s in ("train", "dev", "test"))
    pools = load_ud_pools(folder)  # probing
    assert set(pools) == {"train", "dev", "test"}


def test_missing_and_doubled_splits_are_named(tmp_path):
    folder = _folder(tmp_path, ("xx-ud-dev.conllu",))
    with pytest.raises(DataError, match="no train or test file"):
        find_splits(folder)
    assert set(find_splits(folder, required=("dev",))) == {"dev"}
    (folder / "yy-ud-dev.conllu").write_text(CONLLU)
    with pytest.raises(DataError, match="several dev files"):
        find_splits(folder, required=("dev",))
    with pytest.raises(DataError, match="file not found"):
        find_splits(tmp_path / "nowhere")


# "The cat sat on the mat": The->cat, cat->sat (root), on->mat, the->mat, mat->sat
CAT_HEADS = (2, 3, 0, 6, 6, 3)


def test_tree_depth_distance_and_base_relation():
    tree = Tree(CAT_HEADS, ("det", "nsubj:pass", "root", "case", "det", "obl:tmod"))
    assert tree.root == 2 and tree.parent(2) is None and tree.parent(0) == 1
    assert tree.depths.tolist() == [2, 1, 0, 2, 2, 1]  # arcs to the root
    assert tree.depth == 2
    assert tree.distance(0, 3) == 4 and tree.distance(3, 4) == 2 and tree.distance(2, 2) == 0
    assert tree.children[2] == (1, 5) and tree.subtree(5) == [3, 4, 5]
    assert tree.base_relation(1) == "nsubj" and tree.base_relation(5) == "obl" and base_relation("root") == "root"
    np.testing.assert_array_equal(tree.distances, tree_distances(CAT_HEADS))
    assert Tree((0,)).depth == 0  # a one-word tree: depth 0, one definition everywhere


def test_depth_is_the_same_for_tasks_and_structural_probes(tmp_path):
    from bertology.probing.tree_metrics import tree_depths as structural_depths
    from bertology.tasks.builders import BUILDERS  # noqa: F401

    assert structural_depths is tree_depths
    path = tmp_path / "a.conllu"
    path.write_text(CONLLU)
    sentence = read_conllu(path)[0]
    assert Tree.of(sentence).depth == int(tree_depths(sentence.heads).max()) == 1


@pytest.mark.parametrize("heads, message", [
    ((2, 1, 0), "cycle \\(1 -> 2 -> 1\\)"),
    ((0, 0, 2), "exactly one word with HEAD 0.*found 2"),
    ((2, 2, 0), "own head"),
    ((4, 0, 2), "0..3"),
    ((2, 1), "found 0"),
])
def test_malformed_trees(heads, message):
    assert tree_problem(heads) is not None
    with pytest.raises(DataError, match=message):
        Tree(heads, where="s1")
    assert tree_or_none(Sentence(words=tuple("abcd"[: len(heads)]), id="x", heads=heads)) is None


def test_tree_of_a_sentence_without_heads_names_it():
    with pytest.raises(DataError, match=r"'doc-7', line 12: no dependency heads"):
        Tree.of(Sentence(words=("a", "b"), id="doc-7", source_line=12))
