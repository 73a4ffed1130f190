"""Structural probes (Hewitt and Manning 2019): gold trees, metrics by hand, recovery of a planted tree."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from sklearn.exceptions import NotFittedError

from bertology.data import Sentence
from bertology.data.treebank import tree_depths, tree_distances
from bertology.errors import DataError, SettingError, StoreError
from bertology.probing.structural import run_structural, summarize_structural
from bertology.probing.structural_probe import StructuralProbe
from bertology.probing.tree_metrics import (
    depth_spearman,
    distance_spearman,
    linear_chain_depths,
    linear_chain_distances,
    mst_edges,
    punctuation_mask,
    root_accuracy,
    uuas,
)


@pytest.fixture(autouse=True)
def one_torch_thread():
    # The test machine is shared; tiny ops on two contended threads run tens of times slower than on one.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def sentence(heads, upos=None, xpos=None, id="s"):
    n = len(heads)
    upos = tuple(upos) if upos is not None else ("NOUN",) * n
    return Sentence(words=tuple(f"w{i}" for i in range(n)), id=id, upos=upos,
                    xpos=tuple(xpos) if xpos is not None else upos, heads=tuple(heads), source_line=7)


# "The cat sat on the mat": The->cat, cat->sat (root), on->mat, the->mat, mat->sat
CAT_HEADS = (2, 3, 0, 6, 6, 3)


def test_tree_distances_and_depths_by_hand():
    expected = np.array([
        # The cat sat on the mat
        [0, 1, 2, 4, 4, 3],  # The
        [1, 0, 1, 3, 3, 2],  # cat
        [2, 1, 0, 2, 2, 1],  # sat
        [4, 3, 2, 0, 2, 1],  # on
        [4, 3, 2, 2, 0, 1],  # the
        [3, 2, 1, 1, 1, 0],  # mat
    ])
    np.testing.assert_array_equal(tree_distances(CAT_HEADS), expected)
    np.testing.assert_array_equal(tree_depths(CAT_HEADS), [2, 1, 0, 2, 2, 1])
    np.testing.assert_array_equal(tree_distances((0,)), [[0]])


@pytest.mark.parametrize("heads, message", [
    ((2, 1, 0), "cycle"),
    ((0, 0, 2), "exactly one"),
    ((2, 2, 0), "own head"),
    ((4, 0, 2), "0..3"),
])
def test_malformed_trees_raise_data_error(heads, message):
    with pytest.raises(DataError, match=message):
        tree_distances(heads)


def test_sentence_without_heads_is_named_in_the_error():
    bare = Sentence(words=("a", "b"), id="doc-7", source_line=12)
    with pytest.raises(DataError, match=r"doc-7.*line 12.*no dependency heads"):
        uuas([np.zeros((2, 2))], [bare])


def test_punctuation_schemes():
    s = sentence((2, 0, 2, 2), upos=("NOUN", "VERB", "PUNCT", "PUNCT"), xpos=("NN", "VBD", "HYPH", "."))
    np.testing.assert_array_equal(punctuation_mask(s, "upos"), [False, False, True, True])
    # Hewitt and Manning's XPOS list has no HYPH (PTB-WSJ had none)
    np.testing.assert_array_equal(punctuation_mask(s, "xpos"), [False, False, False, True])
    np.testing.assert_array_equal(punctuation_mask(s, "none"), [False] * 4)
    with pytest.raises(SettingError, match="punct .bogus.: expected one of upos, xpos, none"):
        punctuation_mask(s, "bogus")


def test_mst_edges_of_a_tree_metric_is_the_tree_and_zero_distances_still_count():
    assert mst_edges(tree_distances(CAT_HEADS)) == {(0, 1), (1, 2), (2, 5), (3, 5), (4, 5)}
    # all-zero predictions are still a complete graph (scipy, the former implementation, read 0 as "no edge")
    assert len(mst_edges(np.zeros((4, 4)))) == 3


def _scipy_mst_edges(distances, keep=None):
    """The former implementation (scipy's minimum_spanning_tree), the oracle of the one in numpy."""
    from scipy.sparse.csgraph import minimum_spanning_tree

    index = np.arange(len(distances)) if keep is None else np.flatnonzero(keep)
    sub = np.asarray(distances, dtype=np.float64)[np.ix_(index, index)]
    sub = (sub + sub.T) / 2
    tree = minimum_spanning_tree(np.triu(sub - sub.min() + 1.0, k=1)).tocoo()
    return {(int(min(index[a], index[b])), int(max(index[a], index[b]))) for a, b in zip(tree.row, tree.col)}


def test_mst_edges_match_scipys_on_random_predictions_gold_trees_and_punctuation():
    rng = np.random.default_rng(0)
    for n in range(2, 40):
        predicted = rng.random((n, n))  # not symmetric, as a probe's prediction need not be
        keep = rng.random(n) > 0.2
        assert mst_edges(predicted) == _scipy_mst_edges(predicted)
        if keep.sum() >= 2:
            assert mst_edges(predicted, keep) == _scipy_mst_edges(predicted, keep)
        heads = [0] + [int(rng.integers(1, k + 1)) for k in range(1, n)]  # word k+1 attaches to an earlier word
        gold = tree_distances(heads)
        assert mst_edges(gold, keep) == _scipy_mst_edges(gold, keep) if keep.sum() >= 2 else True
        assert mst_edges(gold) == {(min(k, h - 1), max(k, h - 1)) for k, h in enumerate(heads) if h}


def test_average_ranks_equal_scipys_rankdata_with_and_without_ties():
    from scipy.stats import rankdata

    from bertology.probing.tree_metrics import _average_ranks

    rng = np.random.default_rng(1)
    for n in range(1, 30):
        for values in (rng.random((3, n)), rng.integers(0, 4, (3, n)).astype(float)):
            np.testing.assert_array_equal(_average_ranks(values), rankdata(values, axis=-1))
            np.testing.assert_array_equal(_average_ranks(values[0]), rankdata(values[0]))


def test_uuas_of_a_known_predicted_tree_with_and_without_punctuation():
    # gold: B root; A, C, D and "." attach to B. Predicted: the linear chain A-B-C-D-.
    s = sentence((2, 0, 2, 2, 2), upos=("NOUN", "VERB", "NOUN", "ADV", "PUNCT"))
    chain = linear_chain_distances(5)
    # without ".": gold {AB, BC, BD}; chain {AB, BC, CD} -> 2/3
    assert uuas([chain], [s]) == pytest.approx(2 / 3)
    # with ".": gold adds B-.; chain adds D-. -> 2/4
    assert uuas([chain], [s], punct="none") == pytest.approx(0.5)
    # pooled over edges, not averaged over sentences: (2 + 1) / (3 + 1)
    pair = sentence((0, 1))
    assert uuas([chain, np.array([[0.0, 1.0], [1.0, 0.0]])], [s, pair]) == pytest.approx(3 / 4)
    # a leading layer axis gives one score per layer
    perfect = tree_distances(s.heads).astype(float)
    np.testing.assert_allclose(uuas([np.stack([chain, perfect])], [s]), [2 / 3, 1.0])


def test_depth_spearman_by_hand_and_length_window():
    s5 = sentence((2, 0, 2, 3, 4))  # depths 1 0 1 2 3
    np.testing.assert_array_equal(tree_depths(s5.heads), [1, 0, 1, 2, 3])
    pred = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    # ranks gold [2.5, 1, 2.5, 4, 5] vs [1..5]: centred (-0.5,-2,-0.5,1,2)·(-2,-1,0,1,2) = 8; norms 9.5 and 10
    assert depth_spearman([pred], [s5]) == pytest.approx(8 / np.sqrt(95))
    # sentences shorter than 5 words do not count
    short = sentence((0, 1, 1))
    assert depth_spearman([pred, np.array([3.0, 2.0, 1.0])], [s5, short]) == pytest.approx(8 / np.sqrt(95))
    assert np.isnan(depth_spearman([np.array([3.0, 2.0, 1.0])], [short]))


def test_distance_spearman_averages_words_within_a_length_then_lengths():
    rng = np.random.default_rng(3)
    s5a, s5b, s6 = sentence((2, 0, 2, 3, 4)), sentence((0, 1, 1, 1, 1)), sentence((2, 0, 2, 3, 4, 4))
    preds = [rng.random((n, n)) for n in (5, 5, 6)]
    per_word = {n: [] for n in (5, 6)}
    for p, s in zip(preds, (s5a, s5b, s6)):
        gold = tree_distances(s.heads)
        per_word[len(s)] += [spearmanr(p[i], gold[i]).correlation for i in range(len(s))]
    expected = np.mean([np.mean(per_word[5]), np.mean(per_word[6])])
    assert distance_spearman(preds, [s5a, s5b, s6]) == pytest.approx(expected)
    assert distance_spearman([tree_distances(s6.heads).astype(float)], [s6]) == pytest.approx(1.0)


def test_root_accuracy_skips_punctuation():
    s = sentence((2, 0, 2, 2), upos=("NOUN", "VERB", "NOUN", "PUNCT"))
    # least deep is the "." (punctuation), next is word 1, the gold root
    assert root_accuracy([np.array([2.0, 0.5, 3.0, 0.1])], [s]) == 1.0
    assert root_accuracy([np.array([2.0, 0.5, 3.0, 0.1])], [s], punct="none") == 0.0
    assert root_accuracy([np.array([0.2, 0.5, 3.0, 0.1]), np.array([1.0, 0.0, 2.0, 2.0])], [s, s]) == 0.5
    np.testing.assert_array_equal(linear_chain_depths(4), [0, 1, 2, 3])


def test_prediction_shapes_are_checked():
    with pytest.raises(DataError, match="shape"):
        uuas([np.zeros((3, 3))], [sentence(CAT_HEADS)])
    with pytest.raises(DataError, match="one per sentence"):
        root_accuracy([], [sentence(CAT_HEADS)])


# --------------------------------------------------------------------------------------------------
# Synthetic recovery: a tree planted in one layer as sums of one-hot edge vectors
# --------------------------------------------------------------------------------------------------

DIM, MAX_WORDS = 24, 12


def random_trees(rng, count, prefix):
    out = []
    for k in range(count):
        n = int(rng.integers(4, MAX_WORDS + 1))
        order = rng.permutation(n)
        heads = [0] * n
        for t in range(1, n):
            heads[order[t]] = int(order[rng.integers(0, t)]) + 1
        out.append(sentence(heads, id=f"{prefix}{k}"))
    return out


def edge_embedding(heads):
    """Row i = sum of one-hot vectors of the edges from word i up to the root (edge named by its child)."""
    depth = tree_depths(heads)
    n = len(heads)
    rows = np.zeros((n, n))
    for i in range(n):
        node = i
        while heads[node] != 0:
            rows[i, node] = 1.0
            node = heads[node] - 1
    assert np.array_equal((rows**2).sum(1), depth)
    return rows


def planted_vectors(rng, sentences, rotation, n_layers=3, planted=1):
    total = sum(len(s) for s in sentences)
    X = rng.normal(size=(n_layers, total, DIM)).astype(np.float32)
    blocks = []
    for s in sentences:
        block = np.zeros((len(s), DIM))
        block[:, :len(s)] = edge_embedding(s.heads)
        blocks.append(block)
    X[planted] = np.concatenate(blocks) @ rotation.T  # a rotation hides the axes from the probe
    return X


@pytest.fixture(scope="module")
def planted():
    rng = np.random.default_rng(0)
    rotation, _ = np.linalg.qr(rng.normal(size=(DIM, DIM)))
    splits = {}
    for name, count in (("train", 160), ("dev", 40), ("test", 60)):
        trees = random_trees(rng, count, name)
        splits[name] = (planted_vectors(rng, trees, rotation), trees)
    return splits


def test_edge_embedding_geometry_matches_tree_distance():
    heads = CAT_HEADS
    e = edge_embedding(heads)
    squared = ((e[:, None] - e[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(squared, tree_distances(heads))


@pytest.mark.parametrize("kind, metric, floor", [("distance", "uuas", 0.97), ("depth", "root_acc", 0.97)])
def test_probe_recovers_the_planted_layer_only(planted, kind, metric, floor):
    (Xtr, tr), (Xdv, dv), (Xte, te) = planted["train"], planted["dev"], planted["test"]
    probe = StructuralProbe(kind=kind, rank=16, epochs=25, lr=1e-2, batch_size=10, seed=0, device="cpu")
    probe.fit(Xtr, tr, Xdv, dv)
    scores = probe.score_layers(Xte, te).set_index(["layer", "metric"])["value"]
    assert scores[(1, metric)] >= floor
    # score: one float, the primary metric of the layer chosen on dev loss (the planted one)
    assert probe.best_layer_ == 1
    assert probe.score(Xte, te) == pytest.approx(scores[(1, metric)])
    for noise_layer in (0, 2):
        assert scores[(noise_layer, metric)] < 0.5
    spearman = "dspr" if kind == "distance" else "nspr"
    assert scores[(1, spearman)] > 0.9
    assert scores[(0, spearman)] < 0.5 and scores[(2, spearman)] < 0.5
    # dev loss of the planted layer is near zero; noise layers stay near the label scale
    assert probe.dev_loss_[1] < 0.1 < min(probe.dev_loss_[0], probe.dev_loss_[2])


@pytest.mark.parametrize("kind", ["distance", "depth"])
def test_dev_loss_is_the_papers_l1_loss_over_every_dev_sentence(planted, kind):
    # The dev batches are made once, of sentences of similar length, several per split here: each sentence's
    # loss must still be taken against its own gold tree (pairwise differences, by hand in numpy).
    (Xtr, tr), (Xdv, dv) = planted["train"], planted["dev"]
    probe = StructuralProbe(kind=kind, rank=8, epochs=1, lr=1e-2, batch_size=20, seed=3, device="cpu",
                            eval_batch_size=7).fit(Xtr, tr, Xdv, dv)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in dv])])
    for slot, layer in enumerate(probe.layers_):
        B = probe.weights_[slot].double().numpy()
        losses = []
        for i, s in enumerate(dv):
            P = Xdv[layer, offsets[i]:offsets[i + 1]].astype(np.float64) @ B
            n = len(s)
            if kind == "distance":
                predicted = ((P[:, None] - P[None]) ** 2).sum(-1)
                losses.append(np.abs(predicted - tree_distances(s.heads)).sum() / n**2)
            else:
                losses.append(np.abs((P**2).sum(-1) - tree_depths(s.heads)).sum() / n)
        assert probe.dev_loss_[layer] == pytest.approx(np.mean(losses), rel=1e-5)


def test_layers_batched_together_train_exactly_like_one_layer_alone(planted):
    (Xtr, tr), (Xdv, dv) = planted["train"], planted["dev"]
    kwargs = dict(kind="distance", rank=8, epochs=3, lr=1e-2, batch_size=20, seed=5, device="cpu")
    together = StructuralProbe(**kwargs).fit(Xtr, tr, Xdv, dv)
    alone = StructuralProbe(**kwargs).fit(Xtr, tr, Xdv, dv, layers=[1])
    assert alone.layers_ == [1]
    torch.testing.assert_close(together.weights_[1], alone.weights_[0], rtol=1e-4, atol=1e-5)
    other_seed = StructuralProbe(**{**kwargs, "seed": 6}).fit(Xtr, tr, Xdv, dv, layers=[1])
    assert not torch.allclose(other_seed.weights_[0], alone.weights_[0])


def test_probe_input_errors(planted):
    (Xtr, tr), (Xdv, dv) = planted["train"], planted["dev"]
    with pytest.raises(NotFittedError):
        StructuralProbe().predict(Xtr, tr)
    with pytest.raises(NotFittedError):
        StructuralProbe().score(Xtr, tr)
    with pytest.raises(SettingError, match="kind 'width': expected one of distance, depth"):
        StructuralProbe(kind="width").fit(Xtr, tr, Xdv, dv)
    with pytest.raises(DataError, match="word vectors for"):
        StructuralProbe(device="cpu").fit(Xtr[:, :-1], tr, Xdv, dv)


class FakeStore:
    """Duck-typed stand-in exposing the Store fields the probe reads (a real Store is used in the MiniLM test)."""

    def __init__(self, X, counts, pool="word-mean"):
        self._X, self.layers, self.pool = X, list(range(X.shape[0])), pool
        self.offsets = np.concatenate([[0], np.cumsum(counts)])

    def layer(self, l):
        return self._X[l]


def test_store_with_other_words_or_a_sentence_pool_is_refused(planted):
    (Xtr, tr), (Xdv, dv) = planted["train"], planted["dev"]
    counts = [len(s) for s in tr]
    wrong = FakeStore(Xtr, [counts[0] + 1, counts[1] - 1] + counts[2:])
    with pytest.raises(StoreError, match=r"sentence 0 \('train0'\)"):
        StructuralProbe(device="cpu").fit(wrong, tr, Xdv, dv)
    with pytest.raises(StoreError, match="pool='cls'"):
        StructuralProbe(device="cpu").fit(FakeStore(Xtr, counts, pool="cls"), tr, Xdv, dv)


def test_run_structural_tidy_frame_with_baselines(planted):
    (Xtr, tr), (Xdv, dv), (Xte, te) = planted["train"], planted["dev"], planted["test"]
    rng = np.random.default_rng(9)
    # "untrained twin": same shapes, no tree anywhere
    twin = tuple(rng.normal(size=X.shape).astype(np.float32) for X in (Xtr, Xdv, Xte))
    train_store = FakeStore(Xtr, [len(s) for s in tr])
    results = run_structural(train_store, tr, Xdv, dv, Xte, te, seeds=(0, 1), rank=16, epochs=12, lr=1e-2,
                             batch_size=10, untrained=twin, device="cpu", model="synthetic", progress=True)
    assert set(results.tables) == {"results", "summary"}
    results = results["results"]
    assert str(results["layer"].dtype) == "Int64" and str(results["seed"].dtype) == "Int64"
    assert list(results.columns) == ["model", "task", "layer", "seed", "metric", "value", "baseline", "split"]
    assert set(results["task"]) == {"structural-distance", "structural-depth"}
    assert set(results["metric"]) == {"uuas", "dspr", "root_acc", "nspr"}
    assert set(results["baseline"]) == {"none", "untrained", "linear-chain"}
    # one row per baseline x task-metric x layer x seed x split
    assert len(results) == 3 * 4 * 3 * 2 * 2
    assert not results.duplicated(["baseline", "task", "metric", "layer", "seed", "split"]).any()
    test = results[results["split"] == "test"].set_index(["baseline", "metric", "layer", "seed"])["value"]
    for seed in (0, 1):
        assert test[("none", "uuas", 1, seed)] > 0.9
        assert test[("none", "uuas", 1, seed)] > test[("untrained", "uuas", 1, seed)] + 0.3
        assert test[("none", "root_acc", 1, seed)] > test[("linear-chain", "root_acc", 1, seed)] + 0.3
    # the linear-chain baseline is the same number on every row, and equals the metric of |i - j| directly
    chain = results[(results["baseline"] == "linear-chain") & (results["split"] == "test")]
    chain_uuas = chain[chain["metric"] == "uuas"]["value"]
    assert chain_uuas.nunique() == 1
    assert chain_uuas.iloc[0] == pytest.approx(uuas([linear_chain_distances(len(s)) for s in te], te))

    summary = summarize_structural(results)
    best = summary[summary["best_on_dev"] & (summary["baseline"] == "none") & (summary["split"] == "dev")]
    assert set(best["layer"]) == {1}
    assert set(best["metric"]) == {"uuas", "dspr", "root_acc", "nspr"}


def test_run_structural_pairs_each_seed_with_its_own_twin(planted):
    (Xtr, tr), (Xdv, dv), (Xte, te) = planted["train"], planted["dev"], planted["test"]
    rng = np.random.default_rng(4)
    noise = {s: tuple(rng.normal(size=X.shape).astype(np.float32) for X in (Xtr, Xdv, Xte)) for s in (0, 1)}
    # twin 1 secretly holds the planted tree: only seed 1's untrained rows may recover it
    noise[1] = (Xtr, Xdv, Xte)
    results = run_structural(Xtr, tr, Xdv, dv, Xte, te, seeds=(0, 1), rank=16, kinds=("distance",), epochs=12,
                             lr=1e-2, batch_size=10, untrained=noise, device="cpu", progress=False)["results"]
    twin = results[(results["baseline"] == "untrained") & (results["split"] == "test")
                   & (results["metric"] == "uuas") & (results["layer"] == 1)].set_index("seed")["value"]
    assert twin[1] > 0.9 > 0.5 > twin[0]
    with pytest.raises(DataError, match=r"not for seeds \[2\]"):
        run_structural(Xtr, tr, Xdv, dv, Xte, te, seeds=(0, 2), untrained=noise, progress=False)


def test_structural_probe_follows_the_scikit_learn_estimator_api(planted):
    """get_params/set_params/clone and the API checks that apply to an estimator whose targets are trees.

    The data checks of ``sklearn.utils.estimator_checks`` feed ``[n, dim]`` matrices with numeric ``y``;
    a structural probe's ``y`` is a list of dependency trees aligned with word vectors, so only the checks
    that do not fit on such data run here."""
    from sklearn.base import clone
    from sklearn.utils.estimator_checks import (check_do_not_raise_errors_in_init_or_set_params,
                                                check_estimator_cloneable, check_estimator_repr,
                                                check_get_params_invariance, check_no_attributes_set_in_init,
                                                check_parameters_default_constructible, check_set_params)

    probe = StructuralProbe(kind="depth", rank=8)
    for check in (check_estimator_cloneable, check_estimator_repr, check_no_attributes_set_in_init,
                  check_get_params_invariance, check_set_params, check_do_not_raise_errors_in_init_or_set_params,
                  check_parameters_default_constructible):
        check("StructuralProbe", probe)
    assert probe.get_params()["rank"] == 8
    copy = clone(probe.set_params(epochs=2, seed=3))
    assert copy.get_params() == probe.get_params() and copy is not probe
    (Xtr, tr), (Xdv, dv) = planted["train"], planted["dev"]
    fitted = copy.set_params(device="cpu").fit(Xtr, tr, Xdv, dv)
    assert fitted is copy
    assert not hasattr(clone(fitted), "weights_"), "clone drops what fit learned"
