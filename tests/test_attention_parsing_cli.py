"""``bertology attention stats|parse`` end to end on a tiny random BERT saved to disk."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from bertology.cli.attention import app
from bertology.attention.stats import STATISTICS
from bertology.data import default_corpus
from bertology.errors import UsageError
from bertology.results import Result


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
        "--max-eval", "12", "--seeds", "2", "--seed", "5", "--epochs", "2", "--min-count", "3", "--compare-clark",
    ])
    assert result.exit_code == 0, result.output
    assert "Clark" in result.output and "attention-only probe" in result.output and "L8H10" in result.output
    saved = Result.load(out)
    for name in ("heads", "baselines", "best_heads", "clark", "probe", "statistics", "probe_summary"):
        csv = pd.read_csv(out / f"{name}.csv")
        parquet = pd.read_parquet(out / f"{name}.parquet")
        assert len(csv) == len(parquet) == len(saved[name]) > 0
    heads = saved["heads"]
    assert set(heads["split"]) == {"dev", "test"}
    assert heads["layer"].between(1, 2).all() and heads["head"].between(0, 3).all()  # 2 layers, 4 heads
    assert (heads["head_label"] == "L" + heads["layer"].astype(str) + "H" + heads["head"].astype(str)).all()
    best = saved["best_heads"]
    assert {"layer", "head", "head_label"} <= set(best.columns) and "best_head" not in best.columns
    probe = saved["probe"]
    assert "detail" not in probe.columns
    assert sorted(probe.loc[probe["method"] == "attention-only probe", "seed"].tolist()) == [5, 6]
    assert probe.loc[probe["method"] != "attention-only probe", "seed"].isna().all()  # no sentinel seeds
    single = probe[probe["method"] == "best single head"].iloc[0]
    assert single["head_label"] == f"L{single['layer']}H{single['head']}" and single["direction"] in ("dep->head", "head->dep")
    assert probe.loc[probe["method"] == "best fixed offset", "offset"].notna().all()
    assert (probe.loc[probe["method"] == "attention-only probe", "epochs"] == 2).all()
    assert set(probe["train_split"]) == {"dev"}  # no train file in this folder
    assert probe["uas"].between(0, 1).all()
    clark = saved["clark"]
    assert clark["paper_accuracy"].between(0, 1).all() and clark["accuracy"].dropna().between(0, 1).all()
    assert saved.meta["probe_seeds"] == [5, 6]
    figures = list((out / "figures").rglob("*.png"))
    assert any(p.name == "parse_det.png" for p in figures)
    assert sum(p.name.startswith("head_stat_") for p in figures) == len(STATISTICS)


def test_parse_layers_option_restricts_the_heads(tiny_model_dir, treebank, tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [
        "parse", "--model", str(tiny_model_dir), "--treebank", str(treebank), "--out", str(out), "--layers", "L2",
        "--max-eval", "6", "--seeds", "0", "--min-count", "3", "--no-statistics", "--no-progress",
    ])
    assert result.exit_code == 0, result.output
    saved = Result.load(out)
    assert set(saved["heads"]["layer"]) == {2} and set(saved["best_heads"]["layer"]) == {2}
    assert set(saved["probe"]["method"]) == {"best single head", "best fixed offset"}
    figure = next((out / "figures").rglob("parse_all.png"))
    assert figure.stat().st_size > 1000


def test_bad_options_give_one_line(tiny_model_dir, treebank, tmp_path):
    for args, message in ((["--layers", "0"], "--layers"), (["--layers", "3"], "--layers"),
                          (["--max-eval", "0"], "--max-eval"), (["--seeds", "-1"], "--seeds")):
        result = CliRunner().invoke(app, ["parse", "--model", str(tiny_model_dir), "--treebank", str(treebank),
                                          "--out", str(tmp_path / "x"), *args])
        assert isinstance(result.exception, UsageError), (args, result.output)
        assert message in str(result.exception)


def test_stats_command(tiny_model_dir, tmp_path):
    data = tmp_path / "corpus.txt"
    data.write_text("The dog saw a cat .\nShe said , quietly , that it rained .\n", encoding="utf-8")
    out = tmp_path / "stats"
    result = CliRunner().invoke(app, ["stats", "-m", str(tiny_model_dir), "-d", str(data), "-o", str(out)])
    assert result.exit_code == 0, result.output
    stats = pd.read_parquet(out / "statistics.parquet")
    assert len(stats) == len(STATISTICS) * 2 * 4
    attention = stats[stats["statistic"].str.startswith("attn_")]["value"]
    assert attention.between(0, 1).all()
    assert len(list((out / "figures").glob("head_stat_*.png"))) == len(STATISTICS)
    assert Result.load(out).meta["uniform_entropy"] > 0
    # only layer 2: the table and the figures name layer 2, not layer 1
    only = tmp_path / "only2"
    result = CliRunner().invoke(app, ["stats", "-m", str(tiny_model_dir), "-d", str(data), "-o", str(only),
                                      "--layers", "2", "--no-progress"])
    assert result.exit_code == 0, result.output
    stats = pd.read_parquet(only / "statistics.parquet")
    assert set(stats["layer"]) == {2} and len(stats) == len(STATISTICS) * 4


def test_missing_split_is_a_data_error(tiny_model_dir, tmp_path):
    from bertology.errors import DataError

    result = CliRunner().invoke(app, ["parse", "--model", str(tiny_model_dir), "--treebank", str(tmp_path)])
    assert isinstance(result.exception, DataError)
    assert "no dev or test file" in str(result.exception)
