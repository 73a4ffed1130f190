"""Paired bootstrap intervals over questions: every system's score and every difference between two.

Each system has one score per evaluation question (e.g. SQuAD F1 in [0, 1]); a resample draws the
questions with replacement, **the same draw for every system** (paired), so a difference between two
systems is judged on the same questions. The resamples are :func:`bertology.probing.summary.bootstrap_accuracies`
(multinomial counts from a seeded generator), whose mean over a resample is what it computes for any
per-example values. Intervals are the 2.5th and 97.5th percentiles; a difference is *established* when its
interval excludes 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from bertology.errors import DataError
from bertology.probing.summary import LEVEL, N_BOOT, bootstrap_accuracies


class PairedBootstrap:
    """Resampled means ``[systems, n_boot]`` of per-question scores ``{system: [questions]}`` (same order of
    questions for every system)."""

    def __init__(self, scores: Mapping[str, Sequence[float]], n_boot: int = N_BOOT, seed: int = 0,
                 level: float = LEVEL):
        if not scores:
            raise DataError("no systems to bootstrap")
        self.names = list(scores)
        values = [np.asarray(scores[name], dtype=np.float64) for name in self.names]
        sizes = {len(v) for v in values}
        if len(sizes) != 1:
            raise DataError(f"systems scored on different numbers of questions ({sorted(sizes)}); a paired "
                            "bootstrap needs the same questions for every system")
        self.values = np.stack(values)
        self.n_boot, self.seed, self.level = n_boot, seed, level
        self.resampled = bootstrap_accuracies(self.values, n_boot=n_boot, seed=seed)

    def _interval(self, boot: np.ndarray) -> tuple[float, float]:
        tail = (1 - self.level) / 2
        return float(np.quantile(boot, tail)), float(np.quantile(boot, 1 - tail))

    def system(self, name: str) -> dict:
        i = self.names.index(name)
        low, high = self._interval(self.resampled[i])
        return {"system": name, "mean": float(self.values[i].mean()), "low": low, "high": high,
                "n": int(self.values.shape[1])}

    def difference(self, a: str, b: str) -> dict:
        """``a - b``: the observed difference, its interval, and whether the interval excludes 0."""
        i, j = self.names.index(a), self.names.index(b)
        low, high = self._interval(self.resampled[i] - self.resampled[j])
        return {"a": a, "b": b, "difference": float(self.values[i].mean() - self.values[j].mean()),
                "low": low, "high": high, "established": bool(low > 0 or high < 0)}

    def systems(self) -> pd.DataFrame:
        return pd.DataFrame([self.system(name) for name in self.names])

    def differences(self, pairs: Sequence[tuple[str, str]]) -> pd.DataFrame:
        return pd.DataFrame([self.difference(a, b) for a, b in pairs])


def per_question_matrix(questions: pd.DataFrame, column: str = "f1", key: str = "component") -> dict[str, np.ndarray]:
    """``{system: scores}`` from a long table (``id``, ``key``, ``column``), every system on the same
    question ids in the same order; a system missing a question is an error naming it."""
    wide = questions.pivot_table(index="id", columns=key, values=column, aggfunc="mean")
    missing = wide.columns[wide.isna().any()].tolist()
    if missing:
        raise DataError(f"systems {missing} have no score for some questions; a paired bootstrap needs every "
                        "system on the same questions")
    return {name: wide[name].to_numpy() for name in wide.columns}
