"""Similarity to static embeddings: the two references by hand on a few vectors, the random-pair baseline,
and the command end to end on a tiny model."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from bertology.errors import DataError
from bertology.knowledge.static import plan_static, static_layer, strip_marker, u_shape

sys.path.insert(0, str(Path(__file__).parent))
from knowledge_models import save_tiny_encoder, write_toy_corpus  # noqa: E402


def _cos(a, b):
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_plan_keeps_frequent_non_punctuation_types_and_pairs_each_with_another_type():
    ids = np.array([7, 8, 7, 9, 8, 7, 9, 4, 4])
    tokens = ["a", "b", "a", ".", "b", "a", ".", "##x", "##x"]
    sample = plan_static(ids, tokens, seed=0, min_count=2)
    assert list(sample.type_ids) == [4, 7, 8] and sample.type_tokens == ["##x", "a", "b"]
    assert list(sample.rows) == [0, 1, 2, 4, 5, 7, 8]  # the two "." rows are punctuation
    assert (sample.other_type != sample.type_of_row).all()
    again = plan_static(ids, tokens, seed=0, min_count=2)
    assert (again.other_type == sample.other_type).all()
    assert strip_marker("##.") == "." and strip_marker("Ġthe") == "the" and strip_marker("##") == "##"


def test_both_similarities_and_their_baselines_by_hand():
    # token types A (rows 0, 1, 2) and B (rows 3, 4) in 2-D
    vectors = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [2.0, -1.0], [1.0, 1.0]])
    ids = np.array([5, 5, 5, 6, 6])
    sample = plan_static(ids, ["a", "a", "a", "b", "b"], seed=3, min_count=2)
    assert (sample.other_type == [1, 1, 1, 0, 0]).all()  # with two types the other one is forced
    embeddings = np.array([[1.0, 0.0], [0.0, 1.0]])  # input embeddings of A and B
    result = static_layer(vectors, embeddings, sample)
    a, b = vectors[:3], vectors[3:]
    own_a = np.mean([_cos(v, embeddings[0]) for v in a])
    own_b = np.mean([_cos(v, embeddings[1]) for v in b])
    assert result["input_embedding"][0] == pytest.approx((own_a + own_b) / 2)
    rand_a = np.mean([_cos(v, embeddings[1]) for v in a])
    rand_b = np.mean([_cos(v, embeddings[0]) for v in b])
    assert result["input_embedding"][1] == pytest.approx((rand_a + rand_b) / 2)
    # type average: leave-one-out mean of the other occurrences of the same type
    loo_a = np.mean([_cos(a[i], np.delete(a, i, axis=0).mean(axis=0)) for i in range(3)])
    loo_b = np.mean([_cos(b[i], np.delete(b, i, axis=0).mean(axis=0)) for i in range(2)])
    assert result["type_average"][0] == pytest.approx((loo_a + loo_b) / 2)
    other_a = np.mean([_cos(v, b.mean(axis=0)) for v in a])
    other_b = np.mean([_cos(v, a.mean(axis=0)) for v in b])
    assert result["type_average"][1] == pytest.approx((other_a + other_b) / 2)


def test_too_little_text_is_one_clear_error():
    with pytest.raises(DataError, match="fewer than two token types occur 5 times"):
        plan_static(np.array([1, 2, 3]), ["a", "b", "c"])


def test_u_shape_verdict():
    rows = [{"weights": "trained", "reference": "input_embedding", "layer": layer, "adjusted": v}
            for layer, v in enumerate([0.9, 0.5, 0.4, 0.6])]
    assert u_shape(pd.DataFrame(rows))["u_shape"] and u_shape(pd.DataFrame(rows))["minimum_layer"] == 2
    falling = [dict(r, adjusted=1 - 0.1 * r["layer"]) for r in rows]
    assert not u_shape(pd.DataFrame(falling))["u_shape"]


def test_command_end_to_end_on_a_tiny_model(tmp_path, monkeypatch):
    from bertology.cli import app
    from bertology.results import Result

    folder = save_tiny_encoder(tmp_path / "tiny-bert")
    corpus = write_toy_corpus(tmp_path / "toy.txt")
    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    run = CliRunner().invoke(app, ["knowledge", "static", "-m", str(folder), "-d", str(corpus), "-o", str(out),
                                   "--seeds", "2", "--layers", "0,2", "--device", "cpu", "--no-progress"])
    assert run.exit_code == 0, run.output
    result = Result.load(out)
    layers = result["layers"]
    assert str(layers["layer"].dtype) == "Int64" and set(layers["layer"]) == {0, 2}
    assert set(layers["reference"]) == {"input_embedding", "type_average"}
    assert set(layers["weights"]) == {"trained", "untrained"} and set(layers["seed"]) == {0, 1}
    assert np.allclose(layers["adjusted"], layers["value"] - layers["baseline"])
    # layer 0 is LayerNorm(input embedding + position + type): far closer to the token's own input
    # embedding than to another token's
    first = layers[(layers["layer"] == 0) & (layers["reference"] == "input_embedding")
                   & (layers["weights"] == "trained")]
    assert (first["value"] > first["baseline"] + 0.2).all()
    assert (out / "static_similarity.png").stat().st_size > 0
