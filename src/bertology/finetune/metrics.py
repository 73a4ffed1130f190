"""GLUE metrics (Wang et al. 2018), computed with scikit-learn and scipy.

CoLA: Matthews correlation; SST-2 and RTE: accuracy; MRPC: accuracy and F1 of the positive
(paraphrase) class; STS-B: Pearson and Spearman correlation with the gold 0-5 score.
"""

from __future__ import annotations

import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bertology.data.glue import glue_task
from bertology.errors import DataError


def _as_array(values, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise DataError(f"{name}: expected a 1-d sequence, got shape {array.shape}")
    return array


def glue_metric(task: str, predictions, labels) -> dict[str, float]:
    """The GLUE metrics of ``task`` for ``predictions`` against gold ``labels``.

    Classification tasks take class ids; STS-B takes real-valued scores. Returns e.g.
    ``{"accuracy": 0.84, "f1": 0.89}`` for MRPC; the first key is the task's headline metric.
    A correlation that is undefined (constant predictions) is reported as 0.0, as GLUE's scorer does.
    """
    spec = glue_task(task)
    predictions = _as_array(predictions, "predictions")
    labels = _as_array(labels, "labels")
    if len(predictions) != len(labels):
        raise DataError(f"{len(predictions)} predictions for {len(labels)} labels; expected as many of each")
    if len(labels) == 0:
        raise DataError("no labels to score; expected at least one example")
    out: dict[str, float] = {}
    for metric in spec.metrics:
        out[metric] = _score(metric, predictions, labels)
    return out


def _score(metric: str, predictions: np.ndarray, labels: np.ndarray) -> float:
    if metric == "accuracy":
        return float(accuracy_score(labels.astype(int), predictions.astype(int)))
    if metric == "f1":
        return float(f1_score(labels.astype(int), predictions.astype(int), pos_label=1, zero_division=0.0))
    if metric == "matthews_corr":
        return float(matthews_corrcoef(labels.astype(int), predictions.astype(int)))
    predictions = predictions.astype(float)
    labels = labels.astype(float)
    if np.ptp(predictions) == 0 or np.ptp(labels) == 0:
        return 0.0
    if metric == "pearson":
        return float(stats.pearsonr(predictions, labels)[0])
    if metric == "spearman":
        return float(stats.spearmanr(predictions, labels)[0])
    raise DataError(f"unknown metric {metric!r}")
