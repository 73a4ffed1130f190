"""Ethayarajh's contextuality measures: each equals a hand computation on a few vectors; the command runs
end to end on a tiny model and refuses bad input in one line."""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from bertology.errors import DataError, UsageError
from bertology.geometry import measures
from bertology.geometry.contextuality import is_punctuation, measure_layer, plan_sample

sys.path.insert(0, str(Path(__file__).parent))
from knowledge_models import save_tiny_encoder, write_toy_corpus  # noqa: E402

SQRT_HALF = math.sqrt(0.5)


def test_self_similarity_is_the_mean_cosine_over_every_pair():
    vectors = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    # cos(v0, v1) = 0, cos(v0, v2) = cos(v1, v2) = 1/sqrt(2)
    assert measures.self_similarity(vectors) == pytest.approx(2 * SQRT_HALF / 3, abs=1e-12)
    only_first_pair = (np.array([0]), np.array([1]))
    assert measures.self_similarity(vectors, only_first_pair) == pytest.approx(0.0, abs=1e-12)


def test_exact_all_pairs_formula_equals_the_pairwise_loop():
    vectors = np.random.default_rng(3).normal(size=(9, 5))
    units = measures.unit_rows(vectors)
    loop = np.mean([units[i] @ units[j] for i, j in itertools.combinations(range(9), 2)])
    assert measures.self_similarity(vectors) == pytest.approx(loop, abs=1e-12)


def test_sampled_pairs_are_distinct_ordered_and_seeded():
    assert measures.sample_pairs(10, 45, np.random.default_rng(0)) is None  # every pair fits
    assert measures.sample_pairs(10, None, np.random.default_rng(0)) is None
    a, b = measures.sample_pairs(50, 200, np.random.default_rng(1))
    assert len(a) == 200 and (a < b).all() and (b < 50).all() and (a >= 0).all()
    assert len(set(zip(a.tolist(), b.tolist()))) == 200
    again = measures.sample_pairs(50, 200, np.random.default_rng(1))
    assert (again[0] == a).all() and (again[1] == b).all()


def test_intra_sentence_similarity_is_each_word_against_the_sentence_mean():
    vectors = np.array([[1.0, 0.0], [0.0, 1.0],  # mean (0.5, 0.5): both at 45 degrees
                        [2.0, 0.0], [4.0, 0.0], [1.0, 0.0]])  # all along the mean
    values = measures.intra_sentence_similarity(vectors, np.array([0, 2, 5]))
    assert values == pytest.approx([SQRT_HALF, 1.0], abs=1e-12)


def test_max_explainable_variance_is_kawines_uncentred_first_direction():
    # X^T X = diag(12, 2): the first direction is (1, 0), along which every vector projects to 2, so it
    # explains none of the variance (all of it is in the second column). Centred PCA would say 1.0.
    vectors = np.array([[2.0, 1.0], [2.0, -1.0], [2.0, 0.0]])
    assert measures.max_explainable_variance(vectors) == pytest.approx(0.0, abs=1e-12)
    # On a line through the origin the first direction explains everything.
    assert measures.max_explainable_variance(np.array([[1.0, 2.0], [3.0, 6.0], [-1.0, -2.0]])) == \
        pytest.approx(1.0, abs=1e-12)
    # var of projections on (1,0) = var(1, 3) = 1; total = var(1,3) + var(0,0) = 1
    assert measures.random_words_explained_variance(np.array([[1.0, 0.0], [3.0, 0.0]])) == pytest.approx(1.0)


def test_max_explainable_variance_matches_truncated_svd_and_the_grouped_version():
    from sklearn.decomposition import TruncatedSVD

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(80, 6)) + 2.0
    sizes = [5, 5, 7, 2, 12, 9, 40]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    grouped = measures.max_explainable_variance_grouped(vectors, offsets)
    for k, (a, b) in enumerate(zip(offsets[:-1], offsets[1:])):
        single = measures.max_explainable_variance(vectors[a:b])
        assert grouped[k] == pytest.approx(single, abs=1e-10)
        if b - a > 6:
            svd = TruncatedSVD(n_components=3, algorithm="arpack").fit(vectors[a:b])
            assert single == pytest.approx(svd.explained_variance_ratio_[0], abs=1e-8)


def test_the_three_mev_definitions_by_hand():
    # X = [[2, 1], [2, -1], [2, 0]]: X^T X = diag(12, 2), singular values^2 12 and 2.
    vectors = np.array([[2.0, 1.0], [2.0, -1.0], [2.0, 0.0]])
    assert measures.MEV_DEFINITIONS == ("released", "paper", "centred_pca")
    # released (TruncatedSVD ratio): every vector projects to 2 on v1 = (1, 0): no variance explained
    assert measures.max_explainable_variance(vectors, "released") == pytest.approx(0.0, abs=1e-12)
    # paper: s1^2 / sum s^2 = 12 / 14
    assert measures.max_explainable_variance(vectors, "paper") == pytest.approx(12 / 14)
    # centred PCA: centred X = [[0, 1], [0, -1], [0, 0]] lies on one line: 1
    assert measures.max_explainable_variance(vectors, "centred_pca") == pytest.approx(1.0)
    # X = [[1, 1], [3, 0], [0, 2]]: X^T X = [[10, 1], [1, 5]], eigenvalues (15 +- sqrt(29)) / 2
    vectors = np.array([[1.0, 1.0], [3.0, 0.0], [0.0, 2.0]])
    top = (15 + math.sqrt(29)) / 2
    assert measures.max_explainable_variance(vectors, "paper") == pytest.approx(top / 15)
    # centred: [[-1/3, 0], [5/3, -1], [-4/3, 1]]; C^T C = [[42/9, -3], [-3, 2]], top eigenvalue by the quadratic formula
    trace, det = 42 / 9 + 2, 42 / 9 * 2 - 9
    centred_top = (trace + math.sqrt(trace**2 - 4 * det)) / 2
    assert measures.max_explainable_variance(vectors, "centred_pca") == pytest.approx(centred_top / trace)
    # released: v1 = the top eigenvector of X^T X; var(X v1) over var(col 0) + var(col 1) = 14/9 + 2/3
    v1 = np.array([1.0, top - 10.0])
    v1 /= np.linalg.norm(v1)
    projections = vectors @ v1
    assert measures.max_explainable_variance(vectors, "released") == pytest.approx(projections.var() / (14 / 9 + 2 / 3))
    with pytest.raises(ValueError, match="MEV definition 'pca'"):
        measures.max_explainable_variance(vectors, "pca")


@pytest.mark.parametrize("definition", ["released", "paper", "centred_pca"])
def test_grouped_mev_equals_one_group_at_a_time_for_every_definition(definition):
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(30, 4)) + 1.0
    offsets = np.array([0, 1, 4, 9, 30])
    grouped = measures.max_explainable_variance_grouped(vectors, offsets, definition)
    assert math.isnan(grouped[0])
    for k in range(1, 4):
        single = measures.max_explainable_variance(vectors[offsets[k]:offsets[k + 1]], definition)
        assert grouped[k] == pytest.approx(single, abs=1e-10)
    assert measures.random_words_explained_variance(vectors, definition) == \
        pytest.approx(measures.max_explainable_variance(vectors, definition))


def test_anisotropy_is_the_mean_cosine_of_the_pairs():
    units = measures.unit_rows(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
    assert measures.mean_pair_cosine(units, (np.array([0, 0]), np.array([1, 2]))) == pytest.approx(SQRT_HALF / 2)


def test_punctuation_types_are_left_out_but_symbols_stay():
    assert is_punctuation(".") and is_punctuation("--") and is_punctuation("?!")
    assert not is_punctuation("$") and not is_punctuation("a.") and not is_punctuation("")


def _toy():
    words = [("a", "b", "."), ("a", "c", "."), ("b", "a"), ("c", "c", "a")]
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(sum(map(len, words)), 4))
    return words, vectors


def test_one_layer_by_hand_on_a_toy_corpus():
    words, vectors = _toy()
    sample = plan_sample(words, seed=0, min_count=2, max_pairs=None, samples=10)
    assert sample.types == ["a", "b", "c"]  # "." is punctuation
    rows = {"a": [0, 3, 7, 10], "b": [1, 6], "c": [4, 8, 9]}
    result = measure_layer(vectors, sample)
    for t, word in enumerate(sample.types):
        units = measures.unit_rows(vectors[rows[word]])
        hand = np.mean([units[i] @ units[j] for i, j in itertools.combinations(range(len(units)), 2)])
        assert result.self_similarity[t] == pytest.approx(hand, abs=1e-6)
        assert result.max_explainable_variance[t] == pytest.approx(
            measures.max_explainable_variance(vectors[rows[word]]), abs=1e-10)
    # every sentence has two or more words, so all four are sampled
    starts = [0, 3, 6, 8, 11]
    hand_intra = []
    for a, b in zip(starts[:-1], starts[1:]):
        mean = vectors[a:b].mean(axis=0)
        hand_intra.append(np.mean([v @ mean / np.linalg.norm(v) / np.linalg.norm(mean) for v in vectors[a:b]]))
    assert result.intra_sentence_similarity == pytest.approx(hand_intra, abs=1e-10)
    picked = measures.unit_rows(vectors[sample.random_rows])
    hand_random = np.mean([picked[i] @ picked[j] for i, j in itertools.combinations(range(4), 2)])
    assert result.anisotropy == pytest.approx(hand_random, abs=1e-10)
    # each random word comes from its own sentence
    assert [int(np.searchsorted(starts, r, side="right") - 1) for r in sample.random_rows] == [0, 1, 2, 3]
    summary = result.summary()
    assert summary["self_similarity"][0] == pytest.approx(np.mean(result.self_similarity))
    assert summary["self_similarity"][1] == pytest.approx(hand_random)


def test_capped_pairs_use_the_sampled_pairs():
    words = [("w", "x")] * 30
    vectors = np.random.default_rng(2).normal(size=(60, 3))
    sample = plan_sample(words, seed=4, min_count=5, max_pairs=20, samples=10)
    assert not sample.exact.any() and len(sample.pair_a) == 40
    result = measure_layer(vectors, sample)
    units = measures.unit_rows(vectors)
    for t in range(2):
        mine = sample.pair_type == t
        hand = np.mean([units[a] @ units[b] for a, b in zip(sample.pair_a[mine], sample.pair_b[mine])])
        assert result.self_similarity[t] == pytest.approx(hand, abs=1e-6)
    other = plan_sample(words, seed=5, min_count=5, max_pairs=20, samples=10)
    assert not np.array_equal(other.pair_a, sample.pair_a) or not np.array_equal(other.pair_b, sample.pair_b)
    assert len(sample.sentences) == 10 and len(sample.random_rows) == 10


def test_no_frequent_word_is_one_clear_error():
    with pytest.raises(DataError, match="no word type occurs 5 times"):
        plan_sample([("a", "b"), ("c", "d")], min_count=5)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("tiny") / "tiny-bert")


@pytest.fixture(scope="module")
def toy_corpus(tmp_path_factory):
    return write_toy_corpus(tmp_path_factory.mktemp("corpus") / "toy.txt")


def test_command_end_to_end_on_a_tiny_model(tiny_folder, toy_corpus, tmp_path, monkeypatch):
    from bertology.cli import app
    from bertology.results import Result

    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    run = CliRunner().invoke(app, ["geometry", "contextuality", "-m", str(tiny_folder), "-d", str(toy_corpus),
                                   "-o", str(out), "--seeds", "2", "--samples", "12", "--max-pairs", "0",
                                   "--device", "cpu", "--no-progress"])
    assert run.exit_code == 0, run.output
    result = Result.load(out)
    layers = result["layers"]
    assert str(layers["layer"].dtype) == "Int64" and set(layers["layer"]) == {0, 1, 2}
    assert set(layers["weights"]) == {"trained", "untrained"} and set(layers["seed"]) == {0, 1}
    assert set(layers["measure"]) == {"self_similarity", "intra_sentence_similarity",
                                      "max_explainable_variance", "anisotropy"}
    adjusted = layers.dropna(subset=["adjusted"])
    assert np.allclose(adjusted["adjusted"], adjusted["value"] - adjusted["baseline"])
    # with every pair used, the trained model's self-similarity does not depend on the seed
    self_sim = layers[(layers["measure"] == "self_similarity") & (layers["weights"] == "trained")]
    assert self_sim.groupby("layer")["value"].nunique().max() == 1
    assert (out / "contextuality.png").stat().st_size > 0
    assert set(pd.read_csv(out / "summary.csv")["seeds"]) == {2}


def test_command_rejects_bad_values_in_one_line(tiny_folder, toy_corpus, tmp_path):
    from bertology.cli.geometry import max_pairs_value

    with pytest.raises(UsageError, match="--max-pairs"):
        max_pairs_value(-1)
    from bertology.geometry import contextuality

    with pytest.raises(UsageError, match="^layers '7'"):
        contextuality(str(tiny_folder), toy_corpus, layers="7", untrained=False, device="cpu",
                      cache_dir=tmp_path)


def _summary(twin: bool) -> pd.DataFrame:
    """A hand-made summary (as :func:`summarize` gives it): layers 0 and 1, the model and, if asked, its twin."""
    from bertology.geometry.contextuality import MEASURES

    rows = []
    for weights, offset in (("trained", 0.0), ("untrained", 0.5)) if twin else (("trained", 0.0),):
        for layer in (0, 1):
            for k, measure in enumerate(MEASURES):
                value = offset + layer / 10 + k / 100
                rows.append({"weights": weights, "layer": layer, "measure": measure, "value": value,
                             "adjusted": value - 0.05})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("twin", [True, False])
def test_the_reference_table_is_long_with_a_weights_column_and_the_twin_is_set_beside_for_display(twin):
    """One row per layer and weights (the glossary's way to set the model beside its twin), kawine's numbers of
    the layer on each; the report's display still shows the twin in its own column, NaN/dash without one."""
    from bertology.geometry.contextuality import KAWINE_BERT_BASE_CASED, reference_table, twin_beside
    from bertology.report.knowledge import contextuality_table

    summary = _summary(twin)
    table = reference_table(summary)
    assert not [c for c in table.columns if c.startswith("untrained_")]
    assert list(table["weights"]) == (["trained", "untrained"] * 2 if twin else ["trained"] * 2)
    model = table[table["weights"] == "trained"]
    assert list(model["self_similarity"]) == pytest.approx([0.0, 0.1])
    assert list(model["self_similarity_adjusted"]) == pytest.approx([-0.05, 0.05])
    assert list(model["kawine_anisotropy"]) == KAWINE_BERT_BASE_CASED["anisotropy"][:2]
    beside = twin_beside(table, "anisotropy")
    assert list(beside.index) == list(model.index)
    if twin:
        assert list(beside) == pytest.approx([0.53, 0.63])
        assert list(table[table["weights"] == "untrained"]["kawine_anisotropy"]) == list(model["kawine_anisotropy"])
    else:
        assert beside.isna().all()
    shown = contextuality_table(summary)
    assert list(shown["layer"]) == [0, 1]
    assert list(shown["twin anisotropy"]) == (["0.530", "0.630"] if twin else [shown["twin anisotropy"][0]] * 2)
    assert list(shown["twin"]) == (["0.450", "0.550"] if twin else [shown["twin"][0]] * 2)
