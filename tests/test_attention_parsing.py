"""Heads as parsers, offset baselines, Clark's Table 1 and the attention-only probe on crafted attention."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from bertology.attention.parsing_heads import (
    CLARK_TABLE1, best_heads_table, compare_with_clark, head_predictions, heads_as_parsers, offset_baselines,
)
from bertology.attention.parsing_probe import AttentionOnlyProbe, probe_batches, probe_features
from bertology.data import Sentence
from bertology.errors import DataError

#  1 the  2 dog  3 saw  4 a  5 cat  6 .
TREE = Sentence(
    words=("the", "dog", "saw", "a", "cat", "."), id="t1",
    heads=(2, 3, 0, 5, 3, 3), deprels=("det", "nsubj", "root", "det", "obj", "punct"),
)


def _tree_attention(sentence: Sentence) -> np.ndarray:
    """[1 layer, 3 heads, n+2, n+2]: head 0 attends dependent -> head, head 1 head -> dependents,
    head 2 to the previous token. Specials and the root attend to [SEP]."""
    n = len(sentence)
    a = np.zeros((3, n + 2, n + 2))
    for i, h in enumerate(sentence.heads, start=1):
        a[0, i, h if h else n + 1] = 1.0
        a[2, i, i - 1] = 1.0
        if h:
            a[1, h, i] = 1.0
    for head in range(3):
        for row in range(n + 2):
            if a[head, row].sum() == 0:
                a[head, row, n + 1] = 1.0
    return (a / a.sum(-1, keepdims=True))[None].astype(np.float32)


def _accuracy(df, relation, direction, head):
    row = df[(df.relation == relation) & (df.direction == direction) & (df.layer == 1) & (df["head"] == head)]
    return float(row["accuracy"].iloc[0])


def test_head_following_the_tree_scores_one():
    df = heads_as_parsers([_tree_attention(TREE)], [TREE])
    for relation in ("det", "nsubj", "obj", "punct"):
        assert _accuracy(df, relation, "dep->head", 0) == 1.0
        assert _accuracy(df, relation, "head->dep", 1) == 1.0  # heads attend to their dependents
    assert _accuracy(df, "root", "dep->head", 0) == 0.0  # a word is never predicted as root
    assert _accuracy(df, "all", "dep->head", 0) == pytest.approx(5 / 6)
    # head 2 attends to the previous token, which is never the head of nsubj/obj/punct here
    for relation in ("nsubj", "obj", "punct"):
        assert _accuracy(df, relation, "dep->head", 2) == 0.0
    counts = df.drop_duplicates("relation").set_index("relation")["count"]
    assert counts.to_dict() == {"det": 2, "nsubj": 1, "root": 1, "obj": 1, "punct": 1, "all": 6}
    assert list(df.columns) == ["relation", "direction", "layer", "head", "head_label", "correct", "count", "accuracy"]
    assert set(df["head_label"]) == {"L1H0", "L1H1", "L1H2"}


def test_offset_baselines_known_values():
    base = offset_baselines([TREE]).set_index(["relation", "offset"])["accuracy"]
    assert base["det", 1] == 1.0  # the -> dog, a -> cat
    assert base["det", -1] == 0.0
    assert base["obj", -2] == 1.0  # cat -> saw
    assert base["punct", -3] == 1.0
    assert base["all", 1] == pytest.approx(3 / 6)  # the, dog, a; "." points past the end and is wrong
    assert 0 not in set(base.index.get_level_values("offset"))


def test_best_heads_table_and_clark_comparison():
    parse = heads_as_parsers([_tree_attention(TREE)], [TREE])
    base = offset_baselines([TREE])
    table = best_heads_table(parse, base, min_count=0, held_out_parse=parse, held_out_baselines=base)
    assert table["relation"].iloc[0] == "all"
    assert "punct" not in set(table["relation"]) and "root" not in set(table["relation"])
    det = table.set_index("relation").loc["det"]
    assert (det["layer"], det["head"], det["head_label"], det["direction"], det["accuracy"]) == \
        (1, 0, "L1H0", "dep->head", 1.0)
    assert (det["baseline_offset"], det["baseline_accuracy"], det["held_out_accuracy"]) == (1, 1.0, 1.0)
    assert "best_head" not in table.columns
    # min_count drops rare relations but never "all"
    assert list(best_heads_table(parse, base, min_count=2)["relation"]) == ["all", "det"]

    compared = compare_with_clark(table).set_index("paper_relation")
    # Clark prints det's head as "8-11" (both from 1): layer 8, head 10 in our numbering; accuracies are fractions
    assert (compared.loc["det", "paper_layer"], compared.loc["det", "paper_head"]) == (8, 10)
    assert compared.loc["det", "paper_head_label"] == "L8H10" and compared.loc["det", "paper_accuracy"] == 0.943
    assert compared.loc["dobj", "relation"] == "obj" and compared.loc["dobj", "accuracy"] == 1.0
    assert compared.loc["dobj", "head_label"] == "L1H0" and compared.loc["dobj", "paper_baseline_accuracy"] == 0.4
    assert np.isnan(compared.loc["prep", "accuracy"]) and compared["layer"].isna()["prep"]  # no UD counterpart
    assert len(compared) == len(CLARK_TABLE1)
    assert str(compared["paper_layer"].dtype) == "int64" and str(compared["layer"].dtype) == "Int64"


def test_clark_table_is_in_our_numbering_and_fractions():
    table = CLARK_TABLE1.set_index("paper_relation")
    assert (table.loc["dobj", "paper_layer"], table.loc["dobj", "paper_head"]) == (8, 9)  # the paper's "8-10"
    assert table.loc["pobj", "paper_head_label"] == "L9H5"  # "9-6"
    assert table["paper_head"].between(0, 11).all() and table["paper_layer"].between(1, 12).all()
    assert table[["paper_accuracy", "paper_baseline_accuracy"]].stack().between(0, 1).all()
    assert not any(column.startswith("clark_") or column == "detail" for column in CLARK_TABLE1.columns)


def test_specials_and_self_never_win_the_argmax():
    n = 4
    a = np.zeros((1, 1, n + 2, n + 2))
    a[..., :, 0] = 0.6  # most attention to [CLS]
    a[..., :, n + 1] = 0.3
    a[..., np.arange(n + 2), np.arange(n + 2)] += 0.08  # then to itself
    a[..., 1:n + 1, 1] += 0.02  # a little to word 1
    predictions = head_predictions(a, n)
    assert predictions.shape == (2, 1, 1, n)
    assert predictions.min() >= 1 and predictions.max() <= n
    assert list(predictions[0, 0, 0]) == [2, 1, 1, 1]  # word 1 may not pick itself; ties go to the first word


def test_possessive_rule_scores_the_possessor_by_its_clitic():
    s = Sentence(words=("John", "'s", "dog", "barks"), id="p", heads=(3, 1, 4, 0),
                 deprels=("nmod:poss", "case", "nsubj", "root"))
    a = np.zeros((1, 1, 6, 6))
    a[0, 0, 1, 2] = 1  # John -> 's (wrong on its own)
    a[0, 0, 2, 3] = 1  # 's -> dog (the possessor's head)
    for row in (0, 3, 4, 5):
        a[0, 0, row, 5] = 1
    with_rule = heads_as_parsers([a], [s])
    without = heads_as_parsers([a], [s], possessive_rule=False)
    assert _accuracy(with_rule, "nmod:poss", "dep->head", 0) == 1.0
    assert _accuracy(without, "nmod:poss", "dep->head", 0) == 0.0


def test_bad_input():
    plain = Sentence(words=("no", "tree"), id="plain")
    with pytest.raises(DataError, match=r"sentence 0 \(plain\): no dependency tree"):
        heads_as_parsers([np.full((1, 1, 4, 4), 0.25)], [plain])
    with pytest.raises(DataError, match=r"sentence 0 \(t1\).*expected \[n_layers, n_heads, 8, 8\]"):
        heads_as_parsers([np.full((1, 1, 4, 4), 0.25)], [TREE])


def _random_tree(rng, n):
    heads = [0] + [int(rng.integers(1, i + 1)) for i in range(1, n)]  # each word attaches to an earlier one
    order = rng.permutation(n)  # relabel positions so heads go both ways
    inverse = np.argsort(order)
    relabelled = [0] * n
    for old, h in enumerate(heads):
        relabelled[inverse[old]] = 0 if h == 0 else int(inverse[h - 1]) + 1
    return relabelled


def _planted_corpus(rng, n_sentences, planted=(1, 2)):
    """Random trees; one head (layer 1, head 2) puts half its mass on the gold head, the rest is noise."""
    attentions, sentences = [], []
    for k in range(n_sentences):
        n = int(rng.integers(4, 12))
        heads = _random_tree(rng, n)
        a = rng.dirichlet(np.ones(n + 2), size=(2, 3, n + 2))
        layer, head = planted
        for i, h in enumerate(heads, start=1):
            a[layer, head, i] *= 0.5
            a[layer, head, i, h] += 0.5  # root = [CLS], index 0
        attentions.append(a.astype(np.float32))
        sentences.append(Sentence(words=tuple(f"w{i}" for i in range(n)), id=f"r{k}", heads=tuple(heads),
                                  deprels=("dep",) * n))
    return attentions, sentences


def test_probe_learns_a_planted_head():
    rng = np.random.default_rng(0)
    train_att, train = _planted_corpus(rng, 60)
    test_att, test = _planted_corpus(rng, 30)
    probe = AttentionOnlyProbe(epochs=15, seed=0).fit(train_att, train)
    assert probe.loss_curve_[-1] < probe.loss_curve_[0]
    assert probe.score(test_att, test) > 0.95
    weights = probe.head_weights_  # [2 directions, 6 heads]; (layer 1, head 2) is flat index 5
    assert np.argmax(weights[0]) == 5 and weights[0, 5] > 3 * np.abs(np.delete(weights[0], 5)).max()
    # features prepared once serve every seed and give the same probe as the raw arrays
    prepared = probe_batches(train_att, train)
    again = AttentionOnlyProbe(epochs=15, seed=0).fit(prepared)
    np.testing.assert_array_equal(again.head_weights_, weights)
    test_batches = probe_batches(test_att, test, need_tree=False)
    kept = probe.prepare(test_att, test, need_tree=False)  # the old method is the function with the probe's settings
    assert [b[0] for b in kept.batches] == [b[0] for b in test_batches.batches]
    assert [p.tolist() for p in again.predict(test_batches)] == [p.tolist() for p in probe.predict(test_att, test)]
    with pytest.raises(DataError, match="need_tree=False"):
        AttentionOnlyProbe(epochs=1).fit(test_batches)
    predictions = probe.predict(test_att, test)
    assert [len(p) for p in predictions] == [len(s) for s in test]
    # the best fixed offset is far below on random trees
    base = offset_baselines(test)
    assert base[base.relation == "all"]["accuracy"].max() < 0.5


def test_probe_features_layout():
    a = np.arange(2 * 3 * 5 * 5, dtype=float).reshape(2, 3, 5, 5)  # n = 3
    f = probe_features(a, 3)
    assert f.shape == (3, 4, 12)
    # dependent word 2 (row 1), candidate 0 ([CLS] as ROOT): forward = a[:, :, 2, 0], backward = a[:, :, 0, 2]
    np.testing.assert_array_equal(f[1, 0, :6], a[:, :, 2, 0].ravel())
    np.testing.assert_array_equal(f[1, 0, 6:], a[:, :, 0, 2].ravel())


def test_probe_follows_the_estimator_contract():
    probe = AttentionOnlyProbe(epochs=3, seed=4)
    with pytest.raises(NotFittedError, match="not fitted"):
        probe.predict([_tree_attention(TREE)], [TREE])
    with pytest.raises(NotFittedError):
        probe.head_weights_
    assert clone(probe).get_params() == probe.get_params() and probe.get_params()["seed"] == 4
    assert probe.fit([_tree_attention(TREE)], [TREE]) is probe
    assert isinstance(probe.score([_tree_attention(TREE)], [TREE]), float)


def test_the_split_modules_keep_the_old_import_path():
    """attention/parsing.py was split (analysis, estimator, runner); every public name of the analysis and the
    estimator is still importable from it, as the same object."""
    import bertology.attention.parsing as runner
    import bertology.attention.parsing_heads as heads
    import bertology.attention.parsing_probe as probe

    for module in (heads, probe):
        public = [name for name in vars(module) if not name.startswith("_")
                  and getattr(getattr(module, name), "__module__", module.__name__) == module.__name__
                  and not isinstance(getattr(module, name), type(runner))]
        for name in public:
            if name[0].isupper() or callable(getattr(module, name)):
                assert getattr(runner, name) is getattr(module, name), name
    assert callable(runner.run_attention_analysis)
