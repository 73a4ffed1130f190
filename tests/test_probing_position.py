"""The position probe (Lin et al. 2019's linear word order): each word of real UD EWT sentences labelled with its
position, and the task run on a tiny model beside its baselines (what the word-order claim reads)."""

from __future__ import annotations

from collections import Counter

from bertology.data import default_corpus, read_conllu
from bertology.probing.datasets import POSITION_CAP, position_examples
from bertology.probing.experiment import run_probing
from bertology.probing.spec import ProbingSpec
from bertology.probing.tasks import get_task
from bertology.report.sections import report_probing_tasks


def test_every_word_is_labelled_with_its_position_up_to_the_cap():
    sentences = read_conllu(default_corpus("ewt-dev"))[:80]
    refs, labels = position_examples(sentences)
    assert len(refs) == sum(len(s.words) for s in sentences)  # every word, punctuation included
    counts = Counter(labels)
    assert counts["0"] == len(sentences)  # one first word per sentence
    assert counts[f"{POSITION_CAP}+"] == sum(max(0, len(s.words) - POSITION_CAP) for s in sentences)
    for position in (1, 7, POSITION_CAP - 1):
        assert counts[str(position)] == sum(len(s.words) > position for s in sentences)
    assert all(label == (str(j) if j < POSITION_CAP else f"{POSITION_CAP}+") for (_, j), label in zip(refs, labels))
    assert get_task("position").level == "token" and "position" in report_probing_tasks()


def test_position_probe_runs_with_its_baselines(tiny_dir, tmp_path):
    from bertology.data import packaged_treebank

    spec = ProbingSpec(tasks=("position",), treebank=packaged_treebank(), seeds=(0,), max_train=300, max_eval=200,
                       max_sentences=40, l2=(1e-2,), n_boot=100)
    table2 = run_probing(str(tiny_dir), spec, cache_dir=tmp_path, progress=False, device="cpu")["table2"]
    rows = table2[(table2["task"] == "position") & table2["layer"].notna()]
    assert sorted(rows["layer"].astype(int)) == [0, 1, 2]
    assert rows[["mean", "ci_low", "ci_high", "majority", "untrained", "control"]].notna().all().all()
    assert (rows["ci_low"] <= rows["mean"]).all() and (rows["mean"] <= rows["ci_high"]).all()
