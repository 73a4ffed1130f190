"""Kovaleva pattern types: planted maps, the labelled set, the shipped classifier, tables, figure and CLI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bertology.attention.figures import plot_pattern_proportions
from bertology.attention.pattern_classifiers import (
    PATTERN_TYPES,
    CNNPatternClassifier,
    FeaturePatternClassifier,
    RulePatternClassifier,
)
from bertology.attention.pattern_features import FEATURE_NAMES, attention_features
from bertology.attention.pattern_maps import AttentionSample, resize_map, token_attention_maps
from bertology.attention.pattern_resources import classifier_evaluation, load_labelled_maps, load_pattern_classifier
from bertology.attention.patterns import (
    compare_pattern_proportions,
    pattern_analysis,
    pattern_proportions,
    pattern_types,
)
from bertology.errors import DataError, UsageError


def _normalise(a: np.ndarray) -> np.ndarray:
    return a / a.sum(axis=1, keepdims=True)


def _noise(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((n, n))


def planted_diagonal(n: int = 24) -> np.ndarray:
    a = 0.05 * _noise(n, 0) / n
    a[np.arange(1, n), np.arange(n - 1)] += 1.0  # previous token
    a[0, 0] += 1.0
    return _normalise(a)


def planted_cls_column(n: int = 24) -> np.ndarray:
    a = 0.1 * _noise(n, 1) / n
    a[:, 0] += 1.0
    return _normalise(a)


def planted_block(n: int = 30, split: int = 14) -> tuple[np.ndarray, np.ndarray]:
    segments = (np.arange(n) >= split).astype(np.int64)
    same = segments[:, None] == segments[None, :]
    a = np.where(same, 0.5 + _noise(n, 2), 0.01)
    return _normalise(a), segments


def planted_vertical_diagonal(n: int = 24) -> np.ndarray:
    a = 0.05 * _noise(n, 3) / n
    a[:, n - 1] += 1.0  # [SEP]
    a[np.arange(n - 1), np.arange(1, n)] += 1.0  # next token
    a[n - 1, n - 2] += 1.0
    return _normalise(a)


def _block_sample() -> AttentionSample:
    a, segments = planted_block()
    special = np.zeros(len(segments), bool)
    special[[0, 13, len(segments) - 1]] = True
    return AttentionSample(a, special=special, segments=segments)


PLANTED = {
    "diagonal": lambda: AttentionSample(planted_diagonal()),
    "vertical": lambda: AttentionSample(planted_cls_column()),
    "block": _block_sample,
    "vertical+diagonal": lambda: AttentionSample(planted_vertical_diagonal()),
}


@pytest.mark.parametrize("expected", sorted(PLANTED))
def test_rules_classify_planted_maps(expected):
    sample = PLANTED[expected]()
    assert RulePatternClassifier().predict_features(attention_features(sample))[0] == expected


@pytest.mark.parametrize("expected", sorted(PLANTED))
def test_shipped_cnn_classifies_planted_maps(expected):
    sample = PLANTED[expected]()
    table = pattern_types([sample], classifier="cnn")
    assert table["type"].tolist() == [expected]


def test_uniform_map_is_heterogeneous_for_rules_and_cnn():
    uniform = np.full((20, 20), 1 / 20)
    assert pattern_types([uniform], classifier="rules")["type"].tolist() == ["heterogeneous"]
    assert pattern_types([uniform], classifier="cnn")["type"].tolist() == ["heterogeneous"]


def test_features_measure_the_planted_mass():
    f = dict(zip(FEATURE_NAMES, attention_features(AttentionSample(planted_cls_column()))[0, 0]))
    assert f["cls"] > 0.85 and f["vertical"] > 0.85 and f["diagonal"] < 0.2
    f = dict(zip(FEATURE_NAMES, attention_features(_block_sample())[0, 0]))
    assert f["block"] > 0.8 and f["has_two_segments"] == 1.0
    f = dict(zip(FEATURE_NAMES, attention_features(AttentionSample(planted_diagonal()))[0, 0]))
    assert f["diagonal"] > 0.85


def test_resize_map_is_fixed_size_and_max_scaled():
    for n in (7, 32, 100):
        image = resize_map(planted_diagonal(n))
        assert image.shape == (32, 32)
        assert image.max() == pytest.approx(1.0)
    # Downsampling keeps the diagonal on the diagonal.
    image = resize_map(planted_diagonal(96))
    assert np.trace(image) + np.trace(image, offset=-1) > 0.5 * image.sum()


def test_attention_sample_rejects_bad_shapes():
    with pytest.raises(DataError, match="expected"):
        AttentionSample(np.ones((3, 4)))
    with pytest.raises(DataError, match="segments"):
        AttentionSample(np.full((4, 4), 0.25), segments=np.zeros(5))
    with pytest.raises(DataError, match="NaN"):
        AttentionSample(np.full((4, 4), np.nan))


def test_labelled_set_has_enough_maps_models_and_sources():
    images, table = load_labelled_maps()
    assert len(table) >= 300 and images.shape == (len(table), 32, 32)
    assert table["model"].nunique() >= 2
    assert table["source"].nunique() >= 2
    assert set(table["label"]) <= set(PATTERN_TYPES)
    assert set(table["split"]) == {"train", "dev", "test"}
    # Splits are grouped by sentence: no sentence of one model appears in two splits.
    assert (table.groupby(["model", "sentence_id"])["split"].nunique() == 1).all()
    for column in ("layer", "head", "sentence_id", "blind_label", "rule_label"):
        assert table[column].notna().all()


def test_shipped_cnn_beats_majority_on_test_split():
    images, table = load_labelled_maps()
    test = table["split"] == "test"
    cnn = load_pattern_classifier()
    accuracy = cnn.score(images[test.to_numpy()], table.loc[test, "label"])
    majority = (table.loc[test, "label"] == table.loc[table["split"] != "test", "label"].mode()[0]).mean()
    assert accuracy > majority + 0.15


def test_cnn_and_feature_models_fit_save_and_load(tmp_path):
    images, table = load_labelled_maps()
    train = (table["split"] == "train").to_numpy()
    labels = table.loc[train, "label"].to_numpy()
    cnn = CNNPatternClassifier(channels=4, epochs=2).fit(images[train][:64], labels[:64])
    cnn.save(tmp_path / "cnn.npz")
    again = CNNPatternClassifier.load(tmp_path / "cnn.npz")
    np.testing.assert_allclose(cnn.predict_proba_images(images[:8]), again.predict_proba_images(images[:8]), atol=1e-6)
    features = table.loc[train, [f"f_{k}" for k in FEATURE_NAMES]].to_numpy()
    logistic = FeaturePatternClassifier("logistic").fit(features, labels)
    assert logistic.score(features, labels) > 0.6
    assert (tmp_path / "cnn.npz").stat().st_mode & 0o044 == 0o044 and not list(tmp_path.glob(".*tmp"))


def test_classifiers_follow_the_estimator_contract():
    from sklearn.base import clone
    from sklearn.exceptions import NotFittedError

    for estimator in (CNNPatternClassifier(channels=4), FeaturePatternClassifier("boosting", random_state=3),
                      RulePatternClassifier(single_min=0.4)):
        assert clone(estimator).get_params() == estimator.get_params()
    with pytest.raises(NotFittedError):
        CNNPatternClassifier().predict_images(np.zeros((1, 32, 32)))
    with pytest.raises(NotFittedError):
        FeaturePatternClassifier().predict_features(np.zeros((1, len(FEATURE_NAMES))))


def test_classifier_evaluation_reads_the_shipped_file():
    import json
    from importlib import resources

    numbers = classifier_evaluation()
    raw = json.loads((resources.files("bertology") / "resources" / "attention_patterns" / "evaluation.json")
                     .read_text(encoding="utf-8"))
    shipped = next(row for row in raw["test"] if row["classifier"].startswith("CNN (shipped"))
    assert numbers["test_accuracy"] == shipped["test_accuracy"] and numbers["n_maps"] == raw["n_maps"]
    assert numbers["n_test"] == raw["split_sizes"]["test"] == sum(raw["test_label_counts"].values())
    assert 0 < numbers["majority_accuracy"] < numbers["test_accuracy"] <= 1
    # the shipped CNN scores what the file says on the labelled test split
    images, table = load_labelled_maps()
    test = (table["split"] == "test").to_numpy()
    assert load_pattern_classifier().score(images[test], table.loc[test, "label"]) == \
        pytest.approx(numbers["test_accuracy"])


def _table(types_by_layer: dict[int, list[str]]) -> pd.DataFrame:
    rows = [("s0", layer, head, t) for layer, types in types_by_layer.items() for head, t in enumerate(types)]
    return pd.DataFrame(rows, columns=["sentence", "layer", "head", "type"])


def test_pattern_proportions_sum_to_one_per_layer():
    table = _table({1: ["vertical", "vertical", "diagonal", "block"], 2: ["heterogeneous"] * 4})
    result = pattern_proportions(table)
    props = result["by_layer"]
    assert len(props) == 2 * len(PATTERN_TYPES)
    assert str(props["layer"].dtype) == "Int64"
    sums = props.groupby("layer")["proportion"].sum()
    np.testing.assert_allclose(sums.to_numpy(), 1.0)
    got = props.set_index(["layer", "type"])["proportion"]
    assert got[(1, "vertical")] == 0.5 and got[(1, "block")] == 0.25 and got[(2, "heterogeneous")] == 1.0
    overall = result["overall"].set_index("type")["proportion"]
    assert overall["heterogeneous"] == 0.5 and overall.sum() == pytest.approx(1.0)
    with pytest.raises(DataError, match="type"):
        pattern_proportions(table.drop(columns="type"))


def test_compare_and_plot_two_models(tmp_path):
    a = _table({1: ["vertical"] * 3 + ["diagonal"], 2: ["vertical"] * 4})
    b = _table({1: ["heterogeneous"] * 4, 2: ["heterogeneous"] * 3 + ["block"]})
    comparison = compare_pattern_proportions({"trained": a, "untrained": b})
    # overall shares live in their own table: no "all" string in the integer layer column
    assert str(comparison["by_layer"]["layer"].dtype) == "Int64"
    assert list(dict.fromkeys(comparison["by_layer"]["model"])) == ["trained", "untrained"]
    overall = comparison["overall"].set_index(["model", "type"])["proportion"]
    assert overall[("trained", "vertical")] == pytest.approx(7 / 8)
    assert overall[("untrained", "heterogeneous")] == pytest.approx(7 / 8)
    by_layer = comparison["by_layer"].set_index(["model", "layer", "type"])["proportion"]
    assert by_layer[("untrained", 2, "block")] == 0.25
    fig = plot_pattern_proportions({"trained": a, "untrained": b}, tmp_path / "fig.png")
    assert (tmp_path / "fig.png").stat().st_size > 5000
    assert len(fig.axes) == 2


def test_token_attention_maps_on_tiny_model_pairs(tiny_bert):
    samples = list(token_attention_maps(tiny_bert, ["the cat sat", ("a dog ran", "it was fast")], ids=["x", "y"]))
    single, pair = samples
    assert single.attentions.shape[:2] == (2, 4)
    assert single.tokens[0] == "[CLS]" and single.tokens[-1] == "[SEP]"
    assert pair.segments.max() == 1 and pair.special.sum() == 3
    np.testing.assert_allclose(pair.attentions.sum(-1), 1.0, atol=1e-5)
    table = pattern_types(samples, classifier="rules")
    assert len(table) == 2 * 2 * 4
    assert set(table["sentence"]) == {"x", "y"} and set(table["layer"]) == {1, 2}
    assert table["head_label"].iloc[-1] == "L2H3"


def test_token_attention_maps_keep_input_order_across_singles_and_pairs(tiny_bert):
    texts = ["the cat sat", ("a dog ran", "it was fast"), "the end", ("x y", "z")]
    samples = list(token_attention_maps(tiny_bert, texts, batch_size=8))
    assert [s.sentence_id for s in samples] == ["0", "1", "2", "3"]
    assert [int(s.segments.max()) for s in samples] == [0, 1, 0, 1]
    alone = next(token_attention_maps(tiny_bert, ["the end"]))
    np.testing.assert_allclose(samples[2].attentions, alone.attentions, atol=1e-5)


def test_pattern_maps_leave_an_sdpa_encoder_sdpa():
    """Regression: computing maps switched the caller's model to eager attention for good."""
    from bertology.models.tiny import tiny_encoder

    sdpa = tiny_encoder("bert", attentions=False)
    eager = tiny_encoder("bert", attentions=True)
    assert sdpa.attention_implementation == "sdpa"
    from_sdpa = list(token_attention_maps(sdpa, ["the cat sat on the mat"]))
    assert sdpa.attention_implementation == "sdpa"
    from_eager = list(token_attention_maps(eager, ["the cat sat on the mat"]))
    np.testing.assert_allclose(from_sdpa[0].attentions, from_eager[0].attentions, atol=1e-6)
    result = pattern_analysis(sdpa, ["the cat sat", ("a dog ran", "it was fast")], classifier="rules")
    assert sdpa.attention_implementation == "sdpa"
    assert set(result["types"]["model"]) == {"tiny-bert", "tiny-bert (untrained, seed 0)"}


def test_pattern_analysis_tables_and_layers(tiny_bert):
    result = pattern_analysis(tiny_bert, ["the cat sat", "the dog ran"], untrained_seeds=(1, 2),
                              classifier="rules", layers=[2])
    types = result["types"]
    assert list(types.columns) == ["model", "sentence", "layer", "head", "head_label", "type"]
    assert set(types["layer"]) == {2} and len(types) == 3 * 2 * 4  # three models x two texts x four heads
    assert set(result["by_layer"]["layer"]) == {2}
    assert [m["untrained_seed"] for m in result.meta["models"]] == [None, 1, 2]
    assert len({m["fingerprint"] for m in result.meta["models"]}) == 3
    with pytest.raises(DataError, match="layers"):
        pattern_analysis(tiny_bert, ["the cat"], layers=[3], untrained_seeds=())


@pytest.mark.integration
def test_minilm_vs_untrained_twin_patterns():
    from bertology.models import load_encoder

    texts = ["The quick brown fox jumps over the lazy dog .",
             ("A man is playing a guitar on stage .", "Someone plays music .")]
    trained = pattern_types(token_attention_maps(load_encoder("minilm"), texts))
    twin = pattern_types(token_attention_maps(load_encoder("minilm", untrained_seed=0), texts))
    assert len(trained) == len(twin) == 2 * 6 * 12
    share = lambda t, kind: (t["type"] == kind).mean()  # noqa: E731
    # The untrained twin attends almost uniformly; the trained model mostly to [CLS]/[SEP].
    assert share(twin, "heterogeneous") > 0.9
    assert share(trained, "heterogeneous") < 0.6
    assert share(trained, "vertical") + share(trained, "vertical+diagonal") > 0.3


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A tiny BERT on disk, initialised from seed 1 so that its untrained twin (seed 0) has other weights."""
    from bertology.models.tiny import tiny_encoder

    encoder = tiny_encoder("bert", seed=1)
    path = tmp_path_factory.mktemp("tiny-bert-seed1")
    encoder.model.save_pretrained(path)
    encoder.tokenizer.save_pretrained(path)
    return path


def test_cli_patterns_writes_tables_and_figure(tmp_path, tiny_model_dir):
    from typer.testing import CliRunner

    from bertology.cli.attention import app
    from bertology.models import load_encoder
    from bertology.results import Result

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\nthe dog ran fast\nit was late\n", encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["patterns", "-m", str(tiny_model_dir), "-d", str(corpus), "--max-sentences", "2",
                                      "--classifier", "rules", "-o", str(out), "--seed", "3", "--no-progress"])
    assert result.exit_code == 0, result.output
    saved = Result.load(out)
    types = pd.read_csv(out / "types.csv")
    assert len(types) == len(saved["types"]) == 2 * 2 * 2 * 4  # (model + twin) x 2 sentences x 2 layers x 4 heads
    assert set(types["sentence"]) == {"corpus.txt:1", "corpus.txt:2"}  # --max-sentences 2
    # the second model is the real untrained twin: the saved model re-initialised from --seed 3
    model, twin = saved.meta["models"]
    assert model["untrained_seed"] is None and twin["untrained_seed"] == 3
    assert twin["fingerprint"] == load_encoder(tiny_model_dir, untrained_seed=3).fingerprint
    assert twin["fingerprint"] != model["fingerprint"] == load_encoder(tiny_model_dir).fingerprint
    assert set(types["model"]) == {model["name"], twin["name"]} and "untrained" in twin["name"]
    props = pd.read_parquet(out / "by_layer.parquet")
    assert set(props["layer"]) == {1, 2} and str(props["layer"].dtype) == "Int64"
    assert set(pd.read_csv(out / "overall.csv")["model"]) == {model["name"], twin["name"]}
    assert (out / "pattern_proportions.png").stat().st_size > 5000
    bad = CliRunner().invoke(app, ["patterns", "-d", str(corpus), "--classifier", "svm", "-o", str(out)])
    assert isinstance(bad.exception, UsageError) and "--classifier" in str(bad.exception)
    bad = CliRunner().invoke(app, ["patterns", "-m", str(tiny_model_dir), "-d", str(corpus), "--layers", "0",
                                   "-o", str(out)])
    assert isinstance(bad.exception, UsageError) and "--layers" in str(bad.exception)
