"""Clark et al.'s head statistics on hand-made attention, checked against values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertology.attention.stats import STATISTICS, head_statistics, statistic_matrix
from bertology.data import Sentence
from bertology.errors import DataError


def _one_hot_rows(size: int, columns: list[int]) -> np.ndarray:
    out = np.zeros((size, size))
    out[np.arange(size), columns] = 1.0
    return out


@pytest.fixture
def crafted():
    """Two sentences, one layer, two heads, with attention simple enough to average by hand."""
    first = Sentence(words=("a", "."), id="s1")  # positions: 0 [CLS], 1 a, 2 ., 3 [SEP]
    second = Sentence(words=("x",), id="s2")  # positions: 0 [CLS], 1 x, 2 [SEP]
    att1 = np.stack([_one_hot_rows(4, [0, 0, 0, 0]), np.full((4, 4), 0.25)])[None]  # head 0: all to [CLS]; head 1 uniform
    att2 = np.stack([_one_hot_rows(3, [2, 2, 2]), np.eye(3)])[None]  # head 0: all to [SEP]; head 1: to itself
    return [att1.astype(np.float32), att2.astype(np.float32)], [first, second]


def _value(df, statistic, head):
    return statistic_matrix(df, statistic).loc[1, head]


def test_statistics_match_hand_computed_values(crafted):
    attentions, sentences = crafted
    result = head_statistics(attentions, sentences)
    df = result["statistics"]
    assert set(df["statistic"]) == set(STATISTICS)
    assert set(df["layer"]) == {1} and set(df["head"]) == {0, 1}
    assert set(df["head_label"]) == {"L1H0", "L1H1"}
    assert str(df["layer"].dtype) == "Int64" and str(df["head"].dtype) == "Int64"
    assert df.attrs == {}  # nothing that matters hides in attrs
    expected = {
        # head 0: sentence 1 everything -> [CLS]; sentence 2 everything -> [SEP]
        ("attn_cls", 0): (1 + 0) / 2,
        ("attn_sep", 0): (0 + 1) / 2,
        ("attn_punct", 0): 0.0,
        ("attn_self", 0): (1 / 4 + 1 / 3) / 2,  # [CLS] row attends to itself; [SEP] row in sentence 2
        ("attn_next", 0): (0 + 1 / 3) / 2,  # the word row of sentence 2 attends to [SEP], its next token
        ("attn_prev", 0): (1 / 4 + 0) / 2,  # row 1 of sentence 1 attends to [CLS], its previous token
        ("entropy", 0): 0.0,
        ("entropy_of_mean", 0): 0.0,
        ("entropy_from_cls", 0): 0.0,
        # head 1: sentence 1 uniform over 4 positions; sentence 2 attends to itself
        ("attn_cls", 1): (1 / 4 + 1 / 3) / 2,
        ("attn_sep", 1): (1 / 4 + 1 / 3) / 2,
        ("attn_punct", 1): (1 / 4 + 0) / 2,
        ("attn_self", 1): (1 / 4 + 1) / 2,
        ("attn_next", 1): (3 / 16 + 0) / 2,
        ("attn_prev", 1): (3 / 16 + 0) / 2,
        ("entropy", 1): (math.log(4) + 0) / 2,
        ("entropy_of_mean", 1): (math.log(4) + math.log(3)) / 2,  # sentence 2's average row is uniform
        ("entropy_from_cls", 1): (math.log(4) + 0) / 2,
        ("mean_distance", 1): (0.5 + 0) / 2,  # two words, uniform: expected distance 1/2
    }
    for (statistic, head), value in expected.items():
        assert _value(df, statistic, head) == pytest.approx(value), (statistic, head)
    # Head 0 never puts attention on a word, so its distance is undefined, not zero.
    row = df[(df["statistic"] == "mean_distance") & (df["head"] == 0)].iloc[0]
    assert np.isnan(row["value"]) and row["n_sentences"] == 0
    assert result.meta["uniform_entropy"] == pytest.approx((math.log(4) + math.log(3)) / 2)


def test_streaming_generator_equals_list_and_rows_are_renormalised(crafted):
    attentions, sentences = crafted
    from_list = head_statistics(attentions, sentences)["statistics"]
    # float16 storage leaves rows off by ~1e-3; scaling rows must not change the statistics
    streamed = head_statistics((a * 1.01 for a in attentions), iter(sentences))["statistics"]
    np.testing.assert_allclose(from_list["value"].to_numpy(), streamed["value"].to_numpy(), rtol=1e-6)


def test_custom_punctuation(crafted):
    attentions, sentences = crafted
    df = head_statistics(attentions, sentences, punctuation=("x",))["statistics"]
    assert _value(df, "attn_punct", 1) == pytest.approx((0 + 1 / 3) / 2)


def test_bad_input_raises_data_error(crafted):
    attentions, sentences = crafted
    with pytest.raises(DataError, match=r"sentence 1 \(s2\).*expected \[n_layers, n_heads, 3, 3\]"):
        head_statistics([attentions[0], np.ones((1, 2, 4, 4))], sentences)
    with pytest.raises(DataError, match="more sentences"):
        head_statistics(attentions[:1], sentences)
    with pytest.raises(DataError, match="no sentences"):
        head_statistics([], [])


def test_heatmaps_one_file_per_statistic(crafted, tmp_path):
    from bertology.attention.figures import plot_head_statistics

    attentions, sentences = crafted
    result = head_statistics(attentions, sentences)
    paths = plot_head_statistics(result, tmp_path, model_name="crafted")
    assert sorted(p.name for p in paths) == sorted(f"head_stat_{s}.png" for s in STATISTICS)
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_mode & 0o044 == 0o044  # world-readable, like every output
    assert not list(tmp_path.glob(".*tmp"))  # temporary files renamed away


def test_layer_numbers_follow_the_store(crafted):
    attentions, sentences = crafted
    df = head_statistics(attentions, sentences, layers=[4])["statistics"]
    assert set(df["layer"]) == {4} and set(df["head_label"]) == {"L4H0", "L4H1"}
    with pytest.raises(DataError, match="names 2 layers"):
        head_statistics(attentions, sentences, layers=[3, 4])


@pytest.fixture(scope="module")
def store_of_layers_3_and_6(tmp_path_factory):
    """A six-layer tiny BERT extracted with attention for layers 3 and 6 only."""
    from bertology.extraction import extract
    from bertology.models.tiny import tiny_encoder

    encoder = tiny_encoder("bert", layers=6)
    sentences = [Sentence(words=("the", "dog", "saw", "a", "cat", "."), id="a"),
                 Sentence(words=("she", "said", ",", "quietly", "."), id="b")]
    store = extract(encoder, sentences, tmp_path_factory.mktemp("l36") / "s.store", layers=[3, 6], attentions=True,
                    progress=False)
    return store, sentences


def test_store_input_keeps_its_layers(store_of_layers_3_and_6):
    store, sentences = store_of_layers_3_and_6
    assert store.attention_layers == [3, 6]
    result = head_statistics(store)  # sentences and layers come from the store
    table = result["statistics"]
    assert sorted(set(table["layer"])) == [3, 6]
    assert {"L3H0", "L6H3"} <= set(table["head_label"])
    assert result.meta["n_sentences"] == 2
    from_arrays = head_statistics(store.iter_attentions(), sentences, layers=store.attention_layers)["statistics"]
    np.testing.assert_allclose(table["value"].to_numpy(dtype=float), from_arrays["value"].to_numpy(dtype=float))


def test_heatmap_rows_are_the_layers_the_store_holds(store_of_layers_3_and_6):
    """Regression: rows were labelled 1, 2 by position for a store holding layers 3 and 6."""
    import matplotlib.pyplot as plt

    from bertology.attention.figures import plot_heatmap, relation_figure, statistic_figure
    from bertology.attention.parsing import heads_as_parsers

    store, sentences = store_of_layers_3_and_6
    result = head_statistics(store)
    matrix = statistic_matrix(result, "attn_cls")
    assert list(matrix.index) == [3, 6] and list(matrix.columns) == [0, 1, 2, 3]
    ax = plot_heatmap(matrix, "t", "weight")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["3", "6"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2", "3"]
    plt.close(ax.figure)
    figure = statistic_figure(result, "entropy")
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == ["3", "6"]
    assert "uniform attention" in figure.axes[0].get_title()
    plt.close(figure)

    trees = [Sentence(words=s.words, id=s.id, heads=h, deprels=("dep",) * len(s.words))
             for s, h in zip(sentences, [(2, 3, 0, 5, 3, 3), (2, 0, 2, 2, 2)])]
    parse = heads_as_parsers(store.iter_attentions(), trees, layers=store.attention_layers)
    figure = relation_figure(parse, "dep")
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == ["3", "6"]
    plt.close(figure)
