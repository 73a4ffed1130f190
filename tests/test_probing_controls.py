"""Control tasks (Hewitt and Liang 2019), their sentence-level analogue, and the majority baseline."""

import subprocess
import sys

import numpy as np

from bertology.probing.controls import ControlTask, SentenceControlTask, majority_accuracy, majority_label


def test_majority_baseline_uses_training_labels_only():
    assert majority_label(["a", "b", "b", "c"]) == "b"
    assert majority_label(["b", "a"]) == "a"  # ties: smallest label, deterministic
    assert majority_accuracy(["a", "b", "b"], ["a", "a", "b", "c"]) == 0.25


def test_control_labels_are_a_fixed_function_of_the_type_with_the_task_distribution():
    rng = np.random.default_rng(0)
    y_train = rng.choice(["NOUN", "VERB", "DET"], p=[0.6, 0.3, 0.1], size=5000)
    control = ControlTask(y_train, seed=0)
    types = [f"word{i}" for i in range(4000)]
    labels = control.labels(types)
    assert set(labels) <= {"NOUN", "VERB", "DET"}
    shares = {lab: float((labels == lab).mean()) for lab in ("NOUN", "VERB", "DET")}
    assert abs(shares["NOUN"] - 0.6) < 0.03 and abs(shares["DET"] - 0.1) < 0.02
    # Same type -> same label, whatever the order; another seed -> another assignment.
    np.testing.assert_array_equal(control.labels(types[::-1])[::-1], labels)
    assert control.label("word7") == labels[7]
    other = ControlTask(y_train, seed=1).labels(types)
    assert (other != labels).mean() > 0.3


def test_control_labels_do_not_depend_on_the_process():
    """Assignments use a keyed hash, not Python's per-process salted hash()."""
    code = ("from bertology.probing.controls import ControlTask;"
            "print(list(ControlTask(['a','b','c','a'], seed=3).labels(['x','y','z','w'])))")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    assert len(runs) == 1


def test_sentence_control_keeps_the_label_distribution_and_depends_on_words_only():
    rng = np.random.default_rng(0)
    vocabulary = [f"w{i}" for i in range(300)]
    sentences = [tuple(rng.choice(vocabulary, size=rng.integers(4, 15))) for _ in range(2000)]
    y_train = np.array(["I"] * 1400 + ["O"] * 600)
    control = SentenceControlTask(y_train, sentences, seed=0)
    labels = control.labels(sentences)
    assert abs((labels == "I").mean() - 0.7) < 0.01
    # A function of the bag of (lower-cased) word types: order and case do not matter.
    s = sentences[5]
    assert control.labels([s])[0] == control.labels([tuple(w.upper() for w in reversed(s))])[0]
