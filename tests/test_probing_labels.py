"""Probing labels of your own: features_from_store + probe_labels, on a real store and on planted features."""

import numpy as np
import pandas as pd
import pytest

from bertology.data import default_corpus, read_conllu
from bertology.errors import DataError, UsageError
from bertology.probing import features_from_store, probe_labels
from bertology.results import Result


@pytest.fixture(scope="module")
def stores(tiny_bert, tmp_path_factory):
    from bertology.extraction import extract

    sentences = read_conllu(default_corpus("ewt-dev"))[:80]
    out = tmp_path_factory.mktemp("stores")
    store = extract(tiny_bert, sentences, out / "trained", progress=False)
    twin = extract(tiny_bert.untrained(1), sentences, out / "twin", progress=False)
    return sentences, store, twin


def test_features_from_store_are_layers_by_words(stores):
    sentences, store, _ = stores
    X = features_from_store(store)
    n_words = sum(len(s) for s in sentences)
    assert X.shape == (len(store.layers), n_words, store.dim) and X.dtype == np.float32
    np.testing.assert_array_equal(X[1], store.layer(1).astype(np.float32))
    only = features_from_store(store.path, "L2")  # a folder and a layer spec as tables print it
    np.testing.assert_array_equal(only[0], X[2])
    with pytest.raises(UsageError, match="layer 9 is out of range"):
        features_from_store(store, [0, 9])


def test_probe_labels_on_a_store_with_every_baseline(stores):
    sentences, store, twin = stores
    # Nouns against everything else; punctuation is left out (None).
    labels = [None if tag == "PUNCT" else tag == "NOUN" for s in sentences for tag in s.upos]
    result = probe_labels(store, labels, seeds=(0, 1), untrained=twin, l2=(1e-2,), device="cpu")
    assert isinstance(result, Result) and set(result.tables) == {"results", "summary", "table2", "table2_dev",
                                                                 "best_layer", "datasets"}
    frame = result["results"]
    assert set(frame.baseline) == {"none", "majority", "control", "untrained"}
    assert set(frame.layer) == set(store.layers) and set(frame.seed.dropna()) == {0, 1}
    assert frame.seed.isna().any(), "the point fit on every training word, beside the bootstrap seeds"
    sizes = result["datasets"].iloc[0]
    assert sizes["train"] + sizes["dev"] + sizes["test"] == sum(v is not None for v in labels)
    # The majority row is the share of the commonest training label in test.
    table = result["table2"]
    assert table["majority"].between(0.5, 1).all()
    assert table["mean"].between(0, 1).all() and table["delta"].notna().all()
    assert result.meta["splits_given"] is False and result.meta["control"] is True


def test_probe_labels_finds_the_planted_layer_and_respects_given_splits():
    rng = np.random.default_rng(0)
    n, dim = 900, 12
    y = rng.integers(0, 3, n)
    X = rng.normal(size=(4, n, dim)).astype(np.float32)
    X[2] += 3 * rng.normal(size=(3, dim))[y]
    splits = np.array(["train"] * 600 + ["dev"] * 150 + ["test"] * 150)
    keys = [f"w{i % 50}" for i in range(n)]
    result = probe_labels(X, y, splits, layers=[3, 4, 5, 6], control_keys=keys, seeds=(0,), device="cpu",
                          task="planted")
    table = result["table2"].set_index("layer")
    assert list(table.index) == [3, 4, 5, 6], "layer names as given"
    assert table.loc[5, "best_on_dev"] and table.loc[5, "mean"] > 0.9
    assert table.loc[5, "selectivity"] > 0.4, "a label the word key cannot predict is selective"
    assert result["datasets"].loc[0, "test"] == 150
    with pytest.raises(DataError, match="700 labels for 900"):
        probe_labels(X, y[:700])
    with pytest.raises(DataError, match="unknown values"):
        probe_labels(X, y, ["train", "validation"] * 450)


def test_default_splits_keep_whole_sentences_together():
    from bertology.probing.labels import _split_assignment

    groups = np.repeat(np.arange(50), 7)  # 50 sentences of 7 words
    assignment = _split_assignment(None, len(groups), groups, split_seed=0)
    per_sentence = pd.Series(assignment).groupby(groups).nunique()
    assert (per_sentence == 1).all()
    assert pd.Series(assignment).value_counts().to_dict() == {"train": 280, "dev": 35, "test": 35}


def _docs_block(heading: str) -> str:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "probing.md").read_text(encoding="utf-8")
    section = text.split(f"## {heading}", 1)[1]
    return section.split("```python", 1)[1].split("```", 1)[0]


@pytest.mark.integration
def test_the_documented_own_labels_snippet_runs_on_minilm(minilm, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(_docs_block("Probing your own labels"), "docs/probing.md", "exec"), namespace)
    table = namespace["result"]["table2"]
    assert list(table["layer"]) == list(range(7))
    best = table[table["best_on_dev"]].iloc[0]
    assert best["mean"] > best["majority"] + 0.1, "MiniLM's words tell nouns from the rest"
    assert namespace["X"].shape[0] == 3 and "selectivity" in capsys.readouterr().out


def test_the_documented_task_builder_builds_examples():
    namespace: dict = {}
    block = _docs_block("Adding a task").split("register_task(", 1)[0]  # the builder, without running MiniLM
    exec(compile(block, "docs/probing.md", "exec"), namespace)
    sentences = read_conllu(default_corpus("ewt-dev"))[:5]
    refs, labels = namespace["head_left"](sentences)
    assert len(refs) == sum(len(s) - 1 for s in sentences)  # every word but the root
    i, j = refs[0]
    assert labels[0] == (sentences[i].heads[j] - 1 < j)


def test_probe_labels_control_types_follow_the_stores_tokenizer(stores, tmp_path):
    from bertology.extraction import extract
    from bertology.models.tiny import tiny_encoder

    sentences, store, _ = stores
    labels = [None if tag == "PUNCT" else tag == "NOUN" for s in sentences for tag in s.upos]
    # The tiny BERT's WordPiece lower-cases: "auto" makes one type of "The" and "the".
    assert store.index["model"]["word_types"] == "lower"
    auto = probe_labels(store, labels, seeds=(0,), l2=(1e-2,), device="cpu")
    assert auto.meta["control_types"] == "lower"
    exact = probe_labels(store, labels, seeds=(0,), l2=(1e-2,), device="cpu", control_types="exact")
    assert exact.meta["control_types"] == "exact"
    # Different type definitions draw different control labels ("The" and "the" are one type or two). The
    # labels are compared, not the control probe's accuracy, which a tiny random model can leave unchanged.
    from bertology.probing.controls import ControlTask, word_type

    words = [w for i in range(store.n_sentences) for w in store.words(i)]
    known = [tag for tag in labels if tag is not None]
    drawn = {types: ControlTask(known, seed=0).labels([word_type(w, types) for w in words])
             for types in ("lower", "exact")}
    assert any(w != w.lower() for w in words) and not np.array_equal(drawn["lower"], drawn["exact"])
    # A byte-level BPE keeps case: its store records exact forms, and "auto" follows it.
    cased = extract(tiny_encoder("roberta"), sentences[:20], tmp_path / "cased", progress=False)
    assert cased.index["model"]["word_types"] == "exact"
    few = [None if tag == "PUNCT" else tag == "NOUN" for s in sentences[:20] for tag in s.upos]
    assert probe_labels(cased, few, seeds=(0,), l2=(1e-2,), device="cpu", control=True).meta["control_types"] == "exact"
    given = probe_labels(store, labels, seeds=(0,), l2=(1e-2,), device="cpu",
                         control_keys=[w for s in sentences for w in s.words])
    assert given.meta["control_types"] == "given keys"
    with pytest.raises(DataError, match="control types 'upper'"):
        probe_labels(store, labels, seeds=(0,), l2=(1e-2,), device="cpu", control_types="upper")
