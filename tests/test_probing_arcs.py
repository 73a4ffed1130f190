"""Edge probes by dependency arc length (bertology.probing.arcs): the bins against a hand count of real UD EWT
arcs, per-bin accuracies that add up to the overall test accuracy, and the intervals on known hits."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from bertology.data import default_corpus
from bertology.probing.arcs import ARC_BINS, arc_bins, arc_length_table, arc_lengths
from bertology.probing.experiment import run_probing
from bertology.probing.spec import ProbingSpec


@pytest.fixture(scope="module")
def small_treebank(tmp_path_factory):
    """Train/dev/test CoNLL-U slices of the packaged UD EWT dev file."""
    folder = tmp_path_factory.mktemp("treebank")
    with gzip.open(default_corpus("ewt-dev"), "rt", encoding="utf-8") as handle:
        blocks = [b for b in handle.read().split("\n\n") if b.strip()]
    for split, part in (("train", blocks[:100]), ("dev", blocks[100:140]), ("test", blocks[140:200])):
        (folder / f"en_ewt-ud-{split}.conllu").write_text("\n\n".join(part) + "\n\n", encoding="utf-8")
    return folder


def hand_count(path) -> dict[str, int]:
    """Arcs per length bin, read straight from the CoNLL-U columns (ID, HEAD): no root arcs, no multi-word
    token ranges (3-4) or empty nodes (8.1)."""
    counts = {"1": 0, "2": 0, "3-4": 0, "5-8": 0, "9+": 0}
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split("\t")
        if len(fields) != 10 or not fields[0].isdigit() or fields[6] in ("0", "_"):
            continue
        length = abs(int(fields[0]) - int(fields[6]))
        label = "1" if length == 1 else "2" if length == 2 else "3-4" if length <= 4 else "5-8" if length <= 8 else "9+"
        counts[label] += 1
    return counts


@pytest.fixture(scope="module")
def probed(tiny_dir, small_treebank, tmp_path_factory):
    spec = ProbingSpec(tasks=("deprel",), treebank=small_treebank, seeds=(0, 1), max_train=300, l2=(1e-2,),
                       n_boot=200)
    return run_probing(str(tiny_dir), spec, cache_dir=tmp_path_factory.mktemp("cache"), progress=False,
                       device="cpu")


def test_bins_of_lengths():
    assert arc_lengths(np.array([[0, 3, 2], [0, 0, 9], [1, 5, 1]])).tolist() == [1, 9, 4]
    assert arc_bins(np.array([1, 2, 3, 4, 5, 8, 9, 40, 0])).tolist() == [0, 1, 2, 2, 3, 3, 4, 4, -1]
    assert [label for label, _, _ in ARC_BINS] == ["1", "2", "3-4", "5-8", "9+"]


def test_arc_counts_per_bin_are_the_hand_count_of_the_test_file(probed, small_treebank):
    arcs = probed["arc_length"]
    expected = hand_count(small_treebank / "en_ewt-ud-test.conllu")
    assert all(count > 0 for count in expected.values()), expected  # every bin is exercised
    ours = arcs[(arcs["baseline"] == "none") & (arcs["layer"] == 0)].set_index("bin")["arcs"].to_dict()
    assert ours == expected
    assert sum(expected.values()) == int(probed["datasets"].set_index("task").loc["deprel", "test"])


def test_bin_accuracies_add_up_to_the_overall_test_accuracy(probed):
    arcs, summary = probed["arc_length"], probed["summary"]
    assert {"none", "untrained", "control", "majority"} <= set(arcs["baseline"])
    for (baseline, layer), rows in arcs.groupby(["baseline", "layer"]):
        overall = summary[(summary["task"] == "deprel") & (summary["baseline"] == baseline) & (summary["split"] == "test")
                          & (summary["metric"] == "accuracy") & (summary["layer"] == layer) & summary["component"].isna()]
        weighted = float((rows["accuracy"] * rows["arcs"]).sum() / rows["arcs"].sum())
        assert weighted == pytest.approx(float(overall["mean"].iloc[0]), abs=1e-9), (baseline, layer)
        shortest = float(rows[rows["bin"] == "1"]["accuracy"].iloc[0])
        np.testing.assert_allclose(rows["drop"], shortest - rows["accuracy"], atol=1e-12)
        assert (rows["ci_low"] <= rows["accuracy"] + 1e-12).all() and (rows["accuracy"] <= rows["ci_high"] + 1e-12).all()
        assert (rows["drop_ci_low"] <= rows["drop"] + 1e-12).all() and (rows["drop"] <= rows["drop_ci_high"] + 1e-12).all()


def test_table_on_known_hits():
    # 40 adjacent arcs all right, 40 arcs of length 10 all wrong, 40 of length 3 half right; two seeds, one layer
    lengths = np.array([1] * 40 + [10] * 40 + [3] * 40)
    hits = np.concatenate([np.ones(40), np.zeros(40), np.arange(40) % 2]).astype(bool)[None]
    table = arc_length_table({("linear", None, "none", "test"): {0: hits, 1: hits},
                              ("linear", None, "none", "dev"): {0: hits[:, :3]}}, lengths, [2], "m", "deprel",
                             n_boot=300).set_index("bin")
    assert list(table.index) == ["1", "3-4", "9+"] and set(table["layer"]) == {2}
    assert table.loc["1", "accuracy"] == 1.0 and table.loc["9+", "accuracy"] == 0.0
    assert table.loc["9+", ["drop", "drop_ci_low", "drop_ci_high"]].tolist() == [1.0, 1.0, 1.0]
    assert table.loc["3-4", "accuracy"] == 0.5 and table.loc["3-4", "arcs"] == 40
    low, high = table.loc["3-4", ["ci_low", "ci_high"]]
    assert 0.3 < low < 0.45 and 0.55 < high < 0.7  # about +/- 1.96 * sqrt(0.25 / 40) = 0.155
    with pytest.raises(ValueError, match="arc lengths"):
        arc_length_table({("linear", None, "none", "test"): {0: hits}}, lengths[:10], [2], "m", "deprel")
