"""A fine-tuned checkpoint's GLUE metric as ``evaluate_fn(model) -> float``, and labelled batches for
head importance: what the interventions (:mod:`bertology.intervention`) need from GLUE.

:mod:`bertology.intervention` takes any ``evaluate_fn``; it never imports this package, so the two do
not depend on each other both ways (this module imports nothing from the intervention package).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
from scipy import stats

from bertology.data.glue import glue_task
from bertology.finetune.examples import read_examples
from bertology.errors import DataError, SettingError
from bertology.finetune.batching import EncodedExamples, collate, encode_examples, evaluation_batches
from bertology.finetune.train import evaluate
from bertology.runtime import seeded_subset


@dataclass
class TaskEvaluator:
    """``evaluate_fn(model) -> float``: the task's headline GLUE metric (a fraction, e.g. accuracy 0.79,
    or a correlation) on a fixed, pre-tokenised split.

    ``max_examples`` scores a subset drawn by ``seed`` (the same one every call). Hooks on the model
    (head masks, dropped layers) stay in force: it is evaluated as it is.
    """

    task: str
    tokenizer: object
    split: str = "dev"
    max_examples: Optional[int] = None
    data_dir: Optional[str] = None
    batch_size: int = 128
    seed: int = 0
    data: EncodedExamples = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.spec = glue_task(self.task)
        self.task = self.spec.name
        examples = read_examples(self.spec.name, self.split, self.data_dir)
        self.data = encode_examples(self.tokenizer, seeded_subset(examples, self.max_examples, self.seed))
        self.metric = self.spec.main_metric

    def __call__(self, model) -> float:
        scores = evaluate(model, self.tokenizer, self.data, metric=self.spec.name, batch_size=self.batch_size)
        return float(scores[self.metric])

    def describe(self) -> dict:
        """What the metric is measured on, for a result's ``meta``."""
        return {"task": self.task, "split": self.split, "metric": self.metric, "n_examples": len(self.data),
                "max_examples": self.max_examples, "subset_seed": self.seed}


def importance_batches(task: str, tokenizer, n_examples: int = 2000, batch_size: int = 32,
                       data_dir: str | None = None, seed: int = 0) -> list[dict]:
    """Labelled batches (model inputs + ``labels``) of ``n_examples`` from the **train** split, drawn by
    ``seed``: importance is never computed on the split the metric is reported on."""
    examples = seeded_subset(read_examples(task, "train", data_dir), n_examples, seed)
    data = encode_examples(tokenizer, examples)
    # similar lengths together (less padding), as evaluation batches them
    return [collate(data, indices.tolist()) for indices in evaluation_batches(data.lengths, batch_size)]


def checkpoint_task(path: str | Path, meta: dict, task: str | None = None, allow_mismatch: bool = False) -> str:
    """The GLUE task to score a checkpoint on: the one it was fine-tuned on (``finetune.json``), or ``task``.

    A ``task`` other than the recorded one is refused (:class:`~bertology.errors.SettingError` naming ``task``) unless
    ``allow_mismatch`` is set and the label spaces agree; a classifier is never scored on a regression task
    (or the reverse), nor on a task with another number of labels, whatever ``allow_mismatch`` says.
    """
    recorded = meta.get("task")
    if not task:
        if not recorded:
            raise DataError(f"{path}: the checkpoint does not record its task; give task=")
        return glue_task(recorded).name
    wanted = glue_task(task)
    labels = meta.get("num_labels")
    labels = int(labels) if labels is not None else (glue_task(recorded).num_labels if recorded else None)
    if labels is not None and labels != wanted.num_labels:
        made = "a regression (one score)" if labels == 1 else f"a {labels}-class classifier"
        wants = "a regression (one score)" if wanted.is_regression else f"{wanted.num_labels} classes"
        raise SettingError("task", task, f"{path} is {made}" + (f", fine-tuned on {recorded}" if recorded else "")
                           + f"; {wanted.name} is {wants}, so it cannot be scored on it"
                           + (f"; leave task= out to score it on {recorded}" if recorded else ""), shown=str(task))
    if recorded and glue_task(recorded).name != wanted.name and not allow_mismatch:
        raise SettingError("task", task, f"{path} was fine-tuned on {glue_task(recorded).name}, not {wanted.name}; "
                           f"leave task= out to score it on {glue_task(recorded).name}, or give allow_mismatch= to "
                           f"score it on {wanted.name} anyway (both have {wanted.num_labels} labels, but label ids "
                           "mean different things)", shown=str(task))
    return wanted.name


def checkpoint_name(path: str | Path, meta: dict) -> str:
    """A short name for result folders: ``minilm-rte-baseline-seed0`` (from ``finetune.json``)."""
    parts = [meta.get("base_model"), meta.get("task"), meta.get("variant"),
             None if meta.get("seed") is None else f"seed{meta['seed']}"]
    if meta.get("pruned_fraction") is not None:
        parts.append(f"pruned{meta['pruned_fraction']}")
    name = "-".join(str(p) for p in parts if p)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or Path(path).name


def learning_check(model, evaluator: TaskEvaluator):
    """Whether the fine-tuned ``model`` learned its task: its metric on the evaluator's examples with a 95%
    interval (Wilson for accuracy, Fisher's z for a correlation) against the baseline a model that learned
    nothing reaches (the majority class's share; a correlation of 0). ``learned`` is True only when the
    interval lies above the baseline; nothing is read from a model for which it is False."""
    value, n = float(evaluator(model)), len(evaluator.data)
    labels = np.asarray(evaluator.data.labels)
    z = stats.norm.ppf(0.975)
    if evaluator.spec.is_regression or evaluator.metric != "accuracy":
        baseline, baseline_name = 0.0, "no correlation"
        if evaluator.metric == "accuracy":
            baseline, baseline_name = float(np.bincount(labels.astype(int)).max() / n), "majority class"
        centre, half = np.arctanh(np.clip(value, -0.999999, 0.999999)), z / np.sqrt(max(n - 3, 1))
        low, high = float(np.tanh(centre - half)), float(np.tanh(centre + half))
    else:
        baseline, baseline_name = float(np.bincount(labels.astype(int)).max() / n), "majority class"
        centre = (value + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(value * (1 - value) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        low, high = float(centre - half), float(centre + half)
    return pd.DataFrame([{"task": evaluator.task, "metric": evaluator.metric, "value": value, "ci_low": low,
                          "ci_high": high, "n": n, "baseline": baseline, "baseline_name": baseline_name,
                          "learned": bool(low > baseline)}])
