"""GLUE metrics agree with scikit-learn / scipy on fixed inputs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bertology.errors import DataError
from bertology.finetune import glue_metric

GOLD = np.array([1, 0, 1, 1, 0, 1, 0, 0, 1, 1])
PRED = np.array([1, 0, 0, 1, 0, 1, 1, 0, 1, 0])


def test_classification_metrics_match_sklearn():
    assert glue_metric("cola", PRED, GOLD) == {"matthews_corr": pytest.approx(matthews_corrcoef(GOLD, PRED))}
    assert glue_metric("sst2", PRED, GOLD) == {"accuracy": pytest.approx(0.7)}
    assert glue_metric("rte", PRED, GOLD)["accuracy"] == pytest.approx(accuracy_score(GOLD, PRED))
    mrpc = glue_metric("mrpc", PRED, GOLD)
    assert list(mrpc) == ["accuracy", "f1"]  # headline first
    assert mrpc["f1"] == pytest.approx(f1_score(GOLD, PRED))
    # worked by hand: tp=4, fp=1, fn=2 -> F1 = 8/11
    assert mrpc["f1"] == pytest.approx(8 / 11)


def test_regression_metrics_match_scipy():
    gold = np.array([0.0, 1.5, 2.0, 3.2, 4.8, 5.0])
    pred = np.array([0.4, 1.0, 2.5, 3.0, 4.0, 4.9])
    scores = glue_metric("stsb", pred, gold)
    assert scores["pearson"] == pytest.approx(stats.pearsonr(pred, gold)[0])
    assert scores["spearman"] == pytest.approx(stats.spearmanr(pred, gold)[0])
    assert glue_metric("stsb", np.full(6, 2.0), gold)["pearson"] == 0.0  # constant predictions


def test_metric_input_errors():
    with pytest.raises(DataError, match="3 predictions for 2 labels"):
        glue_metric("sst2", [1, 0, 1], [1, 0])
    with pytest.raises(DataError, match="unknown GLUE task"):
        glue_metric("squad", [1], [1])
