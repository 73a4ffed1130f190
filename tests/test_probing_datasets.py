"""Examples, labels and features of token, edge, span and sentence tasks."""

import gzip

import numpy as np
import pytest

from bertology.data import Sentence
from bertology.data.treebank import base_relation, find_splits
from bertology.errors import DataError
from bertology.probing.datasets import (
    as_examples,
    build_dataset,
    cap_sentences,
    features,
    keep_referenced,
    load_ud_pools,
)
from bertology.probing.experiment import resolve_tasks
from bertology.probing.inputs import merge_pools
from bertology.probing.tasks import get_task

CONLLU = """# sent_id = a
# text = The dog barks .
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tdog\tdog\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tbarks\tbark\tVERB\tVBZ\t_\t0\troot\t_\t_
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = b
1\tHis\this\tPRON\tPRP$\t_\t2\tnmod:poss\t_\t_
2\tcat\tcat\tNOUN\tNN\t_\t0\troot\t_\t_

"""


@pytest.fixture
def treebank(tmp_path):
    for split in ("train", "dev", "test"):
        with gzip.open(tmp_path / f"xx-ud-{split}.conllu.gz", "wt") as handle:
            handle.write(CONLLU)
    return tmp_path


def test_ud_examples_tokens_and_edges(treebank):
    from bertology.data import read_conllu

    sentences = read_conllu(find_splits(treebank)["train"])
    upos = as_examples(get_task("upos").builder(sentences), "token", sentences, "upos", "train")
    assert list(upos.labels) == ["DET", "NOUN", "VERB", "PUNCT", "PRON", "NOUN"]
    # Control keys keep the form as written; the type definition (exact or lower-cased) applies at use.
    assert upos.control_keys[0] == "The"
    edges = as_examples(get_task("deprel").builder(sentences), "edge", sentences, "deprel", "train")
    assert edges.control_keys[0] == "The"  # the dependent's form
    # Root arcs are left out; subtypes are stripped.
    assert list(edges.labels) == ["det", "nsubj", "punct", "nmod"]
    np.testing.assert_array_equal(edges.refs[0], [0, 0, 1])  # "The" -> head "dog"
    np.testing.assert_array_equal(edges.refs[3], [1, 0, 1])
    assert base_relation("nmod:poss") == "nmod"


def test_missing_treebank_split_is_a_data_error(tmp_path):
    (tmp_path / "xx-ud-train.conllu").write_text(CONLLU)
    with pytest.raises(DataError, match="dev"):
        find_splits(tmp_path)


def test_features_gather_and_pool_word_vectors():
    # Two sentences of 3 and 2 words; word vector = its global row number.
    vectors = np.arange(5, dtype=np.float32)[:, None].repeat(2, axis=1)
    offsets = np.array([0, 3, 5])
    token = features("token", vectors, offsets, np.array([[1, 1, 0]]))
    np.testing.assert_array_equal(token, [[4, 4]])
    edge = features("edge", vectors, offsets, np.array([[0, 0, 2]]))
    np.testing.assert_array_equal(edge, [[0, 0, 2, 2, 0, 0]])  # [dep; head; dep*head]
    span = features("span", vectors, offsets, np.array([[0, 1, 3]]))
    np.testing.assert_allclose(span, [[1.5, 1.5]])
    sentence = features("sentence", vectors, offsets, np.array([[0], [1]]))
    np.testing.assert_allclose(sentence, [[1, 1], [3.5, 3.5]])


def test_cap_sentences_keeps_whole_sentences():
    sentences = [Sentence(words=("a",) * n, id=str(n)) for n in (3, 4, 5)]
    assert len(cap_sentences(sentences, [3, 4, 5], 5)) == 2
    assert len(cap_sentences(sentences, [3, 4, 5], None)) == 3


def test_resolve_tasks():
    assert resolve_tasks("ud") == ["upos", "xpos", "deprel"]
    assert resolve_tasks("BShift,upos,bigram_shift") == ["bigram_shift", "upos"]
    assert len(resolve_tasks(["senteval"])) == 10
    with pytest.raises(DataError, match="unknown task"):
        resolve_tasks("parsing")


def _dataset(name, pools, max_train=None, max_eval=None):
    task = get_task(name)
    return build_dataset(name, task.level, task.source, task.builder, pools, max_train, max_eval)


def test_merge_pools_deduplicates_and_remaps(treebank):
    pools = load_ud_pools(treebank)
    a, b = _dataset("upos", pools), _dataset("deprel", pools)
    merged = merge_pools([a, b])
    assert len(merged["ud"]["train"]) == 2
    for dataset in (a, b):
        for refs in (dataset.splits["train"].refs,):
            assert refs[:, 0].max() < 2
    gold = {"The": "DET", "dog": "NOUN", "barks": "VERB", ".": "PUNCT", "His": "PRON", "cat": "NOUN"}
    for (i, j), label in zip(a.splits["train"].refs, a.splits["train"].labels):
        assert gold[merged["ud"]["train"][i].words[j]] == label


def test_pools_keep_only_the_sentences_examples_use(treebank):
    pools = load_ud_pools(treebank)
    # Three examples: all from sentence 0 ("The dog barks ."), so sentence 1 is dropped from every split.
    upos = _dataset("upos", pools, max_train=3, max_eval=3)
    keep_referenced([upos])
    for split in ("train", "dev", "test"):
        assert [s.words for s in upos.pools[split]] == [("The", "dog", "barks", ".")]
        assert upos.splits[split].refs[:, 0].tolist() == [0, 0, 0]


@pytest.mark.parametrize("built, message", [
    (([(0, 9)], ["X"]), "word index outside"),
    (([(5, 0)], ["X"]), "sentence index outside"),
    (([(0, 0)], ["X", "Y"]), "1 examples but 2 labels"),
    ("nonsense", "expected \\(refs, labels\\)"),
])
def test_a_builder_that_returns_bad_examples_is_named(treebank, built, message):
    sentences = load_ud_pools(treebank)["train"]
    with pytest.raises(DataError, match=f"task 'mine'.*{message}"):
        as_examples(built, "token", sentences, "mine", "train")


def test_sentence_means_in_blocks_equal_one_float64_copy_bit_for_bit(monkeypatch):
    """Summing whole sentences a block of rows at a time gives the very numbers of one float64 copy of every row,
    across block edges and for a sentence longer than a block."""
    from bertology.probing import datasets as module

    rng = np.random.default_rng(0)
    lengths = np.concatenate([rng.integers(1, 30, 300), [70], rng.integers(1, 30, 50)])
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    vectors = rng.normal(size=(offsets[-1], 16)).astype(np.float32)
    expected = (np.add.reduceat(vectors.astype(np.float64), offsets[:-1], axis=0) / lengths[:, None]).astype(np.float32)
    for block in (1, 7, 64, 10**6):
        monkeypatch.setattr(module, "MEAN_BLOCK_ROWS", block)
        assert np.array_equal(module.sentence_mean_vectors(vectors, offsets), expected), block
