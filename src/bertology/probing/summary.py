"""Intervals, the power rule and the best layer: what a probing number may claim.

* :func:`bootstrap_intervals` gives every accuracy a 95% interval that combines the test-set sampling
  with the seed spread: for each seed, ``n_boot`` bootstrap resamples of the evaluation examples (the
  same resamples for every seed, layer and baseline of a task and split); the accuracies of all
  ``seeds x resamples`` are pooled and the interval is their 2.5th and 97.5th percentile. A seed whose
  accuracy differs from the others shifts its whole bootstrap cloud, so between-seed spread widens the
  interval; with one seed (or seeds that agree) it is the ordinary percentile bootstrap.
  With a *point fit* (key :data:`POINT`: the probe fitted on the whole training set while the seeds fit
  bootstrap resamples of it), the interval is centred on the point fit instead: each resample's point
  accuracy plus each seed's deviation from the seeds' mean accuracy (scaled by
  ``sqrt(k / (k - 1))`` for ``k`` seeds, so that the deviations' variance estimates the training
  variance without the small-sample shrinkage). A resample of ``n`` draws holds about 63% of the distinct
  examples, so bootstrap fits score lower than the fit on all of them (most on data-hungry tasks, e.g.
  Word Content): the seeds measure the spread, the point fit gives the number.
* :func:`meets_power_rule` / :func:`power_flags`: an interval is *powered* when its half-width is at
  most :data:`POWER_HALF_WIDTH` (1.5 points) and every split holds at least :data:`MIN_SPLIT` examples.
* :func:`best_layer`: the one rule for "best layer", used by ``bertology probe``'s tables, the figures
  and the report's findings sentences (returns a :class:`BestLayer`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bertology.errors import DataError
from bertology.probing.names import POWER_HALF_WIDTH

#: Splits with fewer examples than this are flagged in every table.
MIN_SPLIT = 200
#: Bootstrap resamples per (task, split).
N_BOOT = 1000
#: The interval's level.
LEVEL = 0.95
#: The key of the point fit (on the whole training set) among per-seed results: its rows have no seed.
POINT = None


def bootstrap_accuracies(correct: np.ndarray, n_boot: int = N_BOOT, seed: int = 0, totals: np.ndarray | None = None,
                         chunk: int = 200) -> np.ndarray:
    """Bootstrap accuracies of ``correct`` ``[..., n]`` (booleans per evaluation example): ``[..., n_boot]``.

    Every leading index (seed, layer, baseline) shares the same resamples of the ``n`` examples, drawn
    from ``np.random.default_rng(seed)`` as multinomial counts, so differences between layers are paired.
    With ``totals`` ``[n]`` (e.g. gold edges per sentence), ``correct`` holds hit counts per example and
    each resample's accuracy is ``sum(hits) / sum(totals)`` (UUAS pooled over edges, resampling sentences).
    """
    correct = np.asarray(correct)
    n = correct.shape[-1]
    if n == 0:
        raise DataError("no evaluation examples to bootstrap")
    flat = correct.reshape(-1, n).astype(np.float64)
    out = np.empty((flat.shape[0], n_boot), dtype=np.float64)
    for start, drawn in zip(range(0, n_boot, chunk), resample_counts(n, n_boot, seed, chunk)):
        counts = drawn.astype(np.float64)  # [size, n]
        denominator = n if totals is None else np.maximum(counts @ np.asarray(totals, dtype=np.float64), 1e-12)
        out[:, start:start + len(counts)] = (flat @ counts.T) / denominator
    return out.reshape(*correct.shape[:-1], n_boot)


@functools.lru_cache(maxsize=2)
def resample_counts(n: int, n_boot: int, seed: int, chunk: int) -> tuple[np.ndarray, ...]:
    """The multinomial counts of :func:`bootstrap_accuracies`' resamples, chunk by chunk (int32 ``[size, n]``),
    drawn from ``np.random.default_rng(seed)`` in that order. Kept for the last two ``(n, seed)``: every
    baseline, seed and layer of a task's split is scored on the same resamples, one call each, and drawing
    them was most of an interval's time on 25,000 test words (1.0 of 1.3 s in a one-off timing)."""
    rng = np.random.default_rng(seed)
    p = np.full(n, 1.0 / n)
    chunks = []
    for start in range(0, n_boot, chunk):
        drawn = rng.multinomial(n, p, size=min(chunk, n_boot - start)).astype(np.int32)
        drawn.setflags(write=False)  # shared by every later call
        chunks.append(drawn)
    return tuple(chunks)


def pooled_interval(boot: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of bootstrap accuracies ``[n_seeds, ..., n_boot]`` pooled over seeds and
    resamples: returns ``(low, high)`` of shape ``[...]``."""
    boot = np.asarray(boot)
    pooled = np.moveaxis(boot, 0, -2).reshape(*boot.shape[1:-1], -1)
    tail = (1 - level) / 2
    return np.quantile(pooled, tail, axis=-1), np.quantile(pooled, 1 - tail, axis=-1)


def fits_in_order(by_seed: Mapping[int | None, object]) -> tuple[list, bool]:
    """The values of ``{seed: value}`` in seed order, the point fit's (key :data:`POINT`) first, and whether
    there is one."""
    has_point = POINT in by_seed
    keys = ([POINT] if has_point else []) + sorted(s for s in by_seed if s is not POINT)
    return [by_seed[k] for k in keys], has_point


def centred_on_point(boot: np.ndarray) -> np.ndarray:
    """Bootstrap accuracies ``[1 + k, ..., n_boot]`` (the point fit first, then ``k`` seeds) turned into
    ``[k, ..., n_boot]`` clouds around the point fit: ``point_b + sqrt(k / (k - 1)) * (seed - mean)``, where
    ``seed`` is a seed's accuracy (its mean over the resamples) and ``mean`` the seeds' (module doc); with one
    seed, the point fit's own cloud.

    The seeds' deviations are taken on the whole evaluation set, not resample by resample: on each resample two
    probes' accuracies also differ by the test-sampling noise of the examples they disagree on, large for
    near-chance probes that disagree on many, and that noise is already in the point fit's own cloud."""
    point, seeds = boot[0], boot[1:]
    k = len(seeds)
    if k < 2:
        return point[None]
    accuracy = seeds.mean(axis=-1, keepdims=True)
    return point[None] + np.sqrt(k / (k - 1)) * (accuracy - accuracy.mean(axis=0, keepdims=True))


def bootstrap_intervals(correct_by_seed: Mapping[int | None, np.ndarray], n_boot: int = N_BOOT, seed: int = 0,
                        level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """95% intervals of accuracies from per-seed correctness ``{seed: [n_layers, n]}`` (or ``[n]``), or
    per-seed ``(hits [n, n_layers], totals [n])`` for ratio metrics: ``(low, high)`` per layer, combining
    test resampling and seed spread (module doc). A :data:`POINT` key holds the point fit's correctness:
    the interval is then centred on it (:func:`centred_on_point`)."""
    if not correct_by_seed:
        raise DataError("no seeds to bootstrap")
    values, has_point = fits_in_order(correct_by_seed)
    if isinstance(values[0], tuple):  # (hits [n, n_layers], totals [n]) per seed: ratio of sums
        totals = np.asarray(values[0][1])
        boot = bootstrap_accuracies(np.stack([np.asarray(h).T for h, _ in values]), n_boot, seed, totals=totals)
    else:
        boot = bootstrap_accuracies(np.stack([np.asarray(v) for v in values]), n_boot, seed)
    return pooled_interval(centred_on_point(boot) if has_point else boot, level)


# ------------------------------------------------------------------------------------------------
# the power rule


def half_width(ci_low, ci_high):
    """Half the width of an interval (fractions)."""
    return (np.asarray(ci_high, dtype=float) - np.asarray(ci_low, dtype=float)) / 2


def meets_power_rule(row, half_width_max: float = POWER_HALF_WIDTH, min_split: int = MIN_SPLIT) -> bool:
    """Whether one row of :func:`~bertology.probing.report.table2_frame` (a mapping or a namedtuple with
    ``ci_low``, ``ci_high`` and, where present, ``n_train``, ``n_dev``, ``n_test``) is powered: its 95%
    interval is at most +/- ``half_width_max`` and no split is under ``min_split`` examples. A row
    without an interval is not powered."""
    get = row.get if isinstance(row, Mapping) else (lambda k, d=None: getattr(row, k, d))
    low, high = get("ci_low"), get("ci_high")
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return False
    if float(half_width(low, high)) > half_width_max + 1e-12:
        return False
    sizes = [get(k) for k in ("n_train", "n_dev", "n_test")]
    return not any(s is not None and not pd.isna(s) and int(s) < min_split for s in sizes)


def power_flags(table: pd.DataFrame, half_width_max: float = POWER_HALF_WIDTH,
                min_split: int = MIN_SPLIT) -> pd.DataFrame:
    """``table`` with two boolean columns: ``powered`` (:func:`meets_power_rule`) and ``small_split``
    (some split holds fewer than ``min_split`` examples)."""
    out = table.copy()
    out["powered"] = [meets_power_rule(r, half_width_max, min_split) for r in out.to_dict("records")]
    small = np.zeros(len(out), dtype=bool)
    for column in ("n_train", "n_dev", "n_test"):
        if column in out:
            small |= out[column].astype("float64").fillna(np.inf).to_numpy() < min_split
    out["small_split"] = small
    return out


# ------------------------------------------------------------------------------------------------
# the best layer


def layer_span(layers: Sequence[int]) -> str:
    """``[2, 3, 4, 6]`` -> ``"2-4, 6"``."""
    layers = sorted(int(x) for x in layers)
    parts, start = [], None
    for i, layer in enumerate(layers):
        if start is None:
            start = layer
        if i + 1 == len(layers) or layers[i + 1] != layer + 1:
            parts.append(str(start) if start == layer else f"{start}-{layer}")
            start = None
    return ", ".join(parts)


@dataclass(frozen=True)
class BestLayer:
    """The verdict of :func:`best_layer` for one task (fractions throughout).

    ``layer``: the layer chosen on dev (highest dev mean; ties: the lower layer); ``layers``: that
    layer and every layer whose interval reaches its accuracy (ascending), so ``layers == (layer,)``
    exactly when ``distinguishable``; ``accuracy``, ``ci_low``, ``ci_high``: the chosen layer's mean and
    95% interval on the reported split; ``runner_up``: the other layer with the highest reported mean
    (None with one layer); ``majority``: the majority baseline; ``beats_majority``: the interval lies
    wholly above the majority baseline (False when there is none); ``powered``: the interval meets the
    power rule (:func:`meets_power_rule`).
    """

    task: str
    metric: str
    split: str
    layer: int
    layers: tuple[int, ...]
    accuracy: float
    ci_low: float
    ci_high: float
    runner_up: int | None
    distinguishable: bool
    majority: float
    beats_majority: bool
    powered: bool

    @property
    def marked(self) -> int | None:
        """The layer to mark as best: only when distinguishable and above the majority baseline (where the
        task has one: the structural probes have none)."""
        return self.layer if self.distinguishable and (self.beats_majority or pd.isna(self.majority)) else None

    def label(self) -> str:
        """Short form for a table cell: ``"3"``, ``"2-4 (tied)"``; ``" <maj"`` is appended when the chosen
        layer does not beat the majority baseline."""
        text = str(self.layer) if self.distinguishable else f"{layer_span(self.layers)} (tied)"
        return text if self.beats_majority or pd.isna(self.majority) else f"{text} <maj"

    def sentence(self) -> str:
        """One sentence with the number, its interval and the majority baseline (percent)."""
        number = (f"{100 * self.accuracy:.1f}% (95% CI {100 * self.ci_low:.1f}-{100 * self.ci_high:.1f})"
                  if not pd.isna(self.ci_low) else f"{100 * self.accuracy:.1f}%")
        if self.distinguishable:
            text = f"{self.task}: layer {self.layer} is best, {number} on {self.split}"
        else:
            text = (f"{self.task}: layers {layer_span(self.layers)} are indistinguishable (layer {self.layer}, "
                    f"chosen on dev: {number} on {self.split})")
        if not pd.isna(self.majority):
            text += f"; majority baseline {100 * self.majority:.1f}%"
            if not self.beats_majority:
                text += " - NOT above the majority baseline"
        return text + ("" if self.powered else " (underpowered: 95% CI wider than ±1.5 points or a split under 200)")


def best_layer(table: pd.DataFrame, task: str | None = None) -> BestLayer:
    """The best layer of one task of a :func:`~bertology.probing.report.table2_frame` table.

    The candidate is the layer with the highest **dev** mean (``dev_mean``; ties: the lower layer), so
    nothing is selected on test. It is *distinguishable* when its reported (test) mean lies above the
    95% interval of every other layer (in particular the runner-up's); otherwise every layer whose
    interval reaches the candidate's mean is reported with it ("layers 2-4 are indistinguishable").
    ``beats_majority`` requires the candidate's interval to lie wholly above the majority baseline.
    Without intervals (``ci_low``/``ci_high`` missing) no layer is distinguishable. ``task`` may be left
    out when the table holds one task. The scalar-mix row is not a layer and is ignored.
    """
    frame = table
    if task is None:
        tasks = list(dict.fromkeys(frame["task"]))
        if len(tasks) != 1:
            raise DataError(f"best_layer: the table holds tasks {tasks}; name one")
        task = tasks[0]
    rows = frame[(frame["task"] == task) & frame["layer"].notna()]
    if rows.empty:
        raise DataError(f"best_layer: no per-layer rows for task {task!r}")
    rows = rows.assign(layer=rows["layer"].astype(int)).sort_values("layer")
    for column in ("ci_low", "ci_high"):
        if column not in rows:
            rows = rows.assign(**{column: np.nan})
    select = rows["dev_mean"] if "dev_mean" in rows and rows["dev_mean"].notna().any() else rows["mean"]
    chosen = rows.loc[select.idxmax()]  # idxmax: first maximum = the lower layer among ties
    layer, mean = int(chosen["layer"]), float(chosen["mean"])
    others = rows[rows["layer"] != layer]
    runner_up = int(others.loc[others["mean"].idxmax(), "layer"]) if not others.empty else None
    has_ci = not (pd.isna(chosen["ci_low"]) or others["ci_high"].isna().any())
    reaching = others[others["ci_high"].fillna(np.inf) >= mean]["layer"].tolist() if has_ci else others["layer"].tolist()
    distinguishable = has_ci and not reaching
    majority = float(chosen["majority"]) if "majority" in rows and not pd.isna(chosen["majority"]) else np.nan
    beats = bool(not np.isnan(majority) and not pd.isna(chosen["ci_low"]) and float(chosen["ci_low"]) > majority)
    return BestLayer(
        task=str(task), metric=str(chosen.get("metric", "accuracy")), split=str(chosen.get("split", "test")),
        layer=layer, layers=tuple(sorted([layer, *map(int, reaching)])), accuracy=mean,
        ci_low=float(chosen["ci_low"]), ci_high=float(chosen["ci_high"]), runner_up=runner_up,
        distinguishable=bool(distinguishable), majority=majority, beats_majority=beats,
        powered=meets_power_rule(chosen.to_dict()),
    )


def best_layers(table: pd.DataFrame) -> dict[str, BestLayer]:
    """:func:`best_layer` for every task of ``table`` (in table order)."""
    return {task: best_layer(table, task) for task in dict.fromkeys(table["task"])
            if table[(table["task"] == task) & table["layer"].notna()].shape[0]}
