"""Wallace et al.'s decoding probe (bertology.knowledge.numeracy): out-of-fold predictions, the layer chosen on
dev, the split gap within hundreds, its stratified bootstrap, and the command."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from bertology.errors import SettingError
from bertology.knowledge.numeracy import (NumeracySpec, _gap_strata, bootstrap_gap, mean_predictions, numeracy,
                                          numeracy_table, out_of_fold, split_gap)


def test_the_split_gap_is_the_mean_over_hundreds_of_split_minus_whole_error():
    values = np.array([150, 160, 170, 250, 260, 350, 360, 50])
    split = np.array([False, True, True, False, True, True, True, False])
    errors = np.array([[10.0, 30.0, -50.0, 5.0, -25.0, 99.0, 1.0, 7.0]])
    strata = _gap_strata(values, split)
    assert len(strata) == 2, "300-399 holds no whole number and 0-99 is below the compared range"
    by_hand = ((30 + 50) / 2 - 10 + (25 - 5)) / 2
    assert split_gap(errors, strata)[0] == pytest.approx(by_hand)
    boot = bootstrap_gap(errors, strata, 500, np.random.default_rng(0))
    assert boot.shape == (1, 500)
    # Resampling within each kind and hundred: every resample lies between the extreme per-stratum gaps.
    assert boot.min() >= (30 - 10 + 25 - 5) / 2 - 1e-9 and boot.max() <= (50 - 10 + 25 - 5) / 2 + 1e-9


def test_out_of_fold_decoding_recovers_a_planted_value_and_never_sees_the_number():
    rng = np.random.default_rng(0)
    y = np.arange(300, dtype=np.float64)
    informative = np.stack([y / 300 + 0.01 * rng.normal(size=300), rng.normal(size=300)], axis=1)
    noise = rng.normal(size=(300, 2))
    X = np.stack([noise, informative]).astype(np.float32)
    predictions = out_of_fold(X, y, folds=5, seed=0)
    rmse = np.sqrt(((predictions - y) ** 2).mean(-1))
    baseline = np.sqrt(((mean_predictions(y, 5, 0) - y) ** 2).mean())
    assert rmse[1] < 10 < baseline * 0.9 < rmse[0] < baseline * 1.1, (rmse, baseline)
    # A duplicated number would be predicted from itself if the folds leaked: the noise layer stays at baseline.


@pytest.fixture(scope="module")
def number_model(tmp_path_factory):
    """A tiny random BERT whose WordPiece vocabulary holds the digits, their continuations and the numbers up to
    120 whole, so that numbers from 100 up come both whole and split (as in BERT's vocabulary), saved as a folder."""
    from transformers import BertConfig, BertModel, BertTokenizer

    folder = tmp_path_factory.mktemp("numbers") / "number-bert"
    folder.mkdir()
    vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [str(n) for n in range(121)]
             + [f"##{d}" for d in range(10)] + [str(n) for n in range(200, 300, 10)])
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(vocab=str(folder / "vocab.txt"), do_lower_case=True)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    import torch

    torch.manual_seed(0)
    BertModel(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_tokenizer_without_digits_is_refused_in_one_line(tiny_dir, tmp_path):
    from bertology.errors import ModelError

    with pytest.raises(ModelError, match="unknown token"):
        numeracy(str(tiny_dir), NumeracySpec(top=199, folds=3, n_boot=100), device="cpu", cache_dir=tmp_path)


def test_numeracy_on_a_tiny_model_chooses_on_dev_and_its_gap_is_its_own_predictions(number_model, tmp_path):
    result = numeracy(str(number_model), NumeracySpec(top=299, folds=3, n_boot=200), device="cpu", cache_dir=tmp_path)
    layers, numbers = result["layers"], result["numbers"]
    assert set(layers["weights"]) == {"trained", "untrained"}
    trained = layers[layers["weights"] == "trained"]
    assert trained["chosen"].sum() == 1
    assert trained.loc[trained["chosen"], "layer"].item() == trained.loc[trained["dev_rmse"].idxmin(), "layer"]
    assert len(numbers) == 300 and set(numbers["role"]) == {"dev", "test"}
    assert (numbers.loc[numbers["value"] <= 120, "subwords"] == 1).all()
    assert (numbers.loc[numbers["value"].between(121, 199), "subwords"] == 2).all()
    assert result.meta["hundreds_compared"] == 2, "100-199 and 200-299 hold whole and split numbers"
    test = numbers[numbers["role"] == "test"]
    for row in trained.itertuples():
        errors = test[f"prediction_trained_{row.layer}"].to_numpy() - test["value"].to_numpy()
        assert row.rmse == pytest.approx(np.sqrt((errors ** 2).mean()))
        assert row.rmse_ci_low <= row.rmse <= row.rmse_ci_high
        strata = _gap_strata(test["value"].to_numpy(), test["subwords"].to_numpy() > 1)
        assert row.split_gap == pytest.approx(split_gap(errors[None], strata)[0])
    assert result.meta["test"] == len(test) and result.meta["chosen_layer"] in set(trained["layer"])
    shown = numeracy_table(layers)
    assert len(shown) == len(trained) and shown["layer"].str.contains("chosen on dev").sum() == 1


@pytest.mark.parametrize("field, value", [("top", 50), ("folds", 1), ("n_boot", 10)])
def test_numeracy_settings_are_checked_and_named(field, value):
    with pytest.raises(SettingError, match=field):
        NumeracySpec(**{field: value})


def test_the_command_writes_the_tables_and_refuses_a_bad_range_in_one_line(number_model, tmp_path):
    from bertology.cli import app

    out = tmp_path / "numeracy"
    done = CliRunner().invoke(app, ["knowledge", "numeracy", "-m", str(number_model), "--top", "199", "--folds", "3",
                                    "--no-untrained", "--out", str(out), "--cache-dir", str(tmp_path / "cache"),
                                    "--device", "cpu"])
    assert done.exit_code == 0, done.output
    assert set(pd.read_parquet(out / "layers.parquet")["weights"]) == {"trained"}
    bad = CliRunner().invoke(app, ["knowledge", "numeracy", "-m", str(number_model), "--top", "10"])
    # The command raises the complaint naming the option; bertology's entry point prints it as one line, exit 1.
    assert bad.exit_code == 1 and str(bad.exception).startswith("--top 10: expected an integer from 199")


def test_the_knowledge_section_notes_why_numeracy_was_skipped(tiny_dir, tmp_path):
    from bertology.knowledge.section import knowledge_section

    section = knowledge_section(str(tiny_dir), tmp_path / "out", max_sentences=20, mlm_probe_sentences=0,
                                device="cpu", cache_dir=tmp_path / "cache")
    assert "numeracy" not in section.results
    assert any(note.startswith("Numeracy: skipped") and "unknown token" in note for note in section.notes)
