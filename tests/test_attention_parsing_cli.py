"""``bertology attention stats|parse`` end to end on a tiny random BERT saved to disk."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from bertology.attention.cli import app
from bertology.attention.stats import STATISTICS
from bertology.data import default_corpus


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from bertology.models.tiny import tiny_encoder

    encoder = tiny_encoder("bert")
    path = tmp_path_factory.mktemp("tiny-bert")
    encoder.model.save_pretrained(path)
    encoder.tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def treebank(tmp_path_factory):
    """A UD folder with dev and test only (the probe then trains on dev)."""
    folder = tmp_path_factory.mktemp("ud")
    for split in ("dev", "test"):
        (folder / f"en_ewt-ud-{split}.conllu.gz").symlink_to(default_corpus(f"ewt-{split}"))
    return folder


def test_parse_command_writes_tables_and_figures(tiny_model_dir, treebank, tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [
        "parse", "--model", str(tiny_model_dir), "--treebank", str(treebank), "--out", str(out),
        "--max-sentences", "12", "--seeds", "2", "--epochs", "2", "--min-count", "3", "--compare-clark",
    ])
    assert result.exit_code == 0, result.output
    assert "Clark" in result.output and "attention-only probe" in result.output
    for name in ("heads", "baselines", "best_heads", "clark", "probe", "statistics", "probe_summary"):
        csv = pd.read_csv(out / f"attention_{name}.csv")
        parquet = pd.read_parquet(out / f"attention_{name}.parquet")
        assert len(csv) == len(parquet) > 0
    heads = pd.read_parquet(out / "attention_heads.parquet")
    assert set(heads["split"]) == {"dev", "test"}
    assert heads["layer"].between(1, 2).all() and heads["head"].between(0, 3).all()  # 2 layers, 4 heads
    probe = pd.read_csv(out / "attention_probe.csv")
    assert probe["method"].value_counts()["attention-only probe"] == 2
    assert set(probe["train_split"]) == {"dev"}  # no train file in this folder
    assert probe["uas"].between(0, 1).all()
    figures = list((out / "figures").rglob("*.png"))
    assert any(p.name == "parse_det.png" for p in figures)
    assert sum(p.name.startswith("head_stat_") for p in figures) == len(STATISTICS)


def test_stats_command(tiny_model_dir, tmp_path):
    data = tmp_path / "corpus.txt"
    data.write_text("The dog saw a cat .\nShe said , quietly , that it rained .\n", encoding="utf-8")
    out = tmp_path / "stats"
    result = CliRunner().invoke(app, ["stats", "--model", str(tiny_model_dir), "--data", str(data), "--out", str(out)])
    assert result.exit_code == 0, result.output
    stats = pd.read_parquet(out / "head_statistics.parquet")
    assert len(stats) == len(STATISTICS) * 2 * 4
    attention = stats[stats["statistic"].str.startswith("attn_")]["value"]
    assert attention.between(0, 1).all()
    assert len(list((out / "figures").glob("head_stat_*.png"))) == len(STATISTICS)


def test_missing_split_is_a_data_error(tiny_model_dir, tmp_path):
    from bertology.errors import DataError

    result = CliRunner().invoke(app, ["parse", "--model", str(tiny_model_dir), "--treebank", str(tmp_path)])
    assert isinstance(result.exception, DataError)
    assert "no dev or test file" in str(result.exception)
