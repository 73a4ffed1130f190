"""The shipped pattern resources in ``resources/attention_patterns``: the labelled maps, the CNN trained on
them and its held-out evaluation (written by tools/label_patterns.py and tools/train_pattern_classifier.py;
docs/attention_patterns.md has the labelling protocol)."""

from __future__ import annotations

import io
import json
from importlib import resources

import numpy as np
import pandas as pd

from bertology.attention.pattern_classifiers import PATTERN_TYPES, CNNPatternClassifier
from bertology.errors import DataError


def _resource_dir():
    return resources.files("bertology") / "resources" / "attention_patterns"


def load_labelled_maps() -> tuple[np.ndarray, pd.DataFrame]:
    """The labelled set: ``images [N, 32, 32]`` float32 (:func:`~bertology.attention.pattern_maps.resize_map`
    of each map) and a DataFrame with one row per map (map_id, model, source, sentence_id, layer, head,
    n_tokens, label, rule_label, split, and the features of
    :data:`~bertology.attention.pattern_features.FEATURE_NAMES`)."""
    folder = _resource_dir()
    with (folder / "maps.npz").open("rb") as handle:
        data = np.load(io.BytesIO(handle.read()), allow_pickle=False)
        images = data["images"].astype(np.float32)
    with (folder / "labels.csv").open("r", encoding="utf-8") as handle:
        table = pd.read_csv(handle)
    if len(table) != len(images):
        raise DataError(f"labels.csv has {len(table)} rows for {len(images)} images in maps.npz")
    bad = sorted(set(table["label"]) - set(PATTERN_TYPES))
    if bad:
        raise DataError(f"labels.csv: unknown label(s) {bad}; expected one of {PATTERN_TYPES}")
    return images, table


_DEFAULT_CNN: CNNPatternClassifier | None = None


def load_pattern_classifier() -> CNNPatternClassifier:
    """The shipped CNN, trained on the train and dev splits of :func:`load_labelled_maps` (plus synthetic maps)."""
    global _DEFAULT_CNN
    if _DEFAULT_CNN is None:
        with resources.as_file(_resource_dir() / "cnn.npz") as path:
            _DEFAULT_CNN = CNNPatternClassifier.load(path)
    return _DEFAULT_CNN


def classifier_evaluation() -> dict:
    """The shipped classifier's held-out numbers, read from ``resources/attention_patterns/evaluation.json``
    (written by ``tools/train_pattern_classifier.py``), for reports and docs that quote them.

    Returns ``n_maps`` (labelled maps), ``n_test`` (test maps), ``n_train`` (the maps the shipped CNN
    was trained on), ``classifier`` (the shipped CNN's
    description), ``test_accuracy`` and ``test_macro_f1`` (fractions, the shipped seed),
    ``test_accuracy_seed_mean`` and ``test_accuracy_seed_sd`` (over the training seeds tried) and
    ``majority_accuracy`` (the majority class on test).
    """
    with (_resource_dir() / "evaluation.json").open("r", encoding="utf-8") as handle:
        evaluation = json.load(handle)
    rows = evaluation.get("test", [])
    shipped = [row for row in rows if str(row.get("classifier", "")).startswith("CNN (shipped")]
    majority = [row for row in rows if str(row.get("classifier", "")).startswith("majority")]
    if not shipped:
        raise DataError("evaluation.json: no 'CNN (shipped ...' row in 'test'; rerun tools/train_pattern_classifier.py")
    row = shipped[0]
    return {
        "n_maps": int(evaluation["n_maps"]),
        "n_test": int(evaluation["split_sizes"]["test"]),
        "n_train": sum(int(evaluation["split_sizes"][part]) for part in
                       str(evaluation.get("shipped_cnn", {}).get("trained_on", "train")).split("+")),
        "classifier": row["classifier"],
        "test_accuracy": float(row["test_accuracy"]),
        "test_macro_f1": float(row["test_macro_f1"]),
        "test_accuracy_seed_mean": float(row["seed_mean"]),
        "test_accuracy_seed_sd": float(row["seed_sd"]),
        "majority_accuracy": float(majority[0]["test_accuracy"]) if majority else float("nan"),
    }
