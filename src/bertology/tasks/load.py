"""Load probing tasks, built by bertology or SentEval's own files: ``load_task`` and ``list_tasks``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bertology.data import Sentence, read_senteval
from bertology.errors import DataError
from bertology.tasks.build import MANIFEST_NAME, manifest_entry_splits
from bertology.tasks.catalog import SENTEVAL_FILES, TASK_NAMES, TASKS, resolve_task_name, task_for_file_name

SPLITS = ("train", "dev", "test")


def _label_key(label: str):
    # Numeric labels (SentLen bins, tree depths) sort as numbers, the rest alphabetically.
    return (0, int(label), "") if label.lstrip("-").isdigit() else (1, 0, label)


@dataclass
class ProbingTask:
    """One probing task: sentences with labels and splits, aligned by index."""

    name: str
    path: Path
    sentences: list[Sentence]
    labels: np.ndarray  # int64 index into label_names, one per sentence
    splits: np.ndarray  # "train" / "dev" / "test", one per sentence
    label_names: list[str]
    manifest: dict | None = field(default=None, repr=False)

    @property
    def column(self) -> str:
        return TASKS[self.name].column

    def __len__(self) -> int:
        return len(self.sentences)

    def indices(self, split: str) -> np.ndarray:
        if split not in SPLITS:
            raise DataError(f"split {split!r}: expected one of {', '.join(SPLITS)}")
        return np.flatnonzero(self.splits == split)

    def subset(self, split: str) -> tuple[list[Sentence], np.ndarray]:
        """Sentences and label indices of one split."""
        idx = self.indices(split)
        return [self.sentences[i] for i in idx], self.labels[idx]

    def counts(self) -> pd.DataFrame:
        """Tidy counts: one row per split x label."""
        frame = pd.DataFrame({"split": self.splits, "label": np.asarray(self.label_names, dtype=object)[self.labels]})
        out = frame.groupby(["split", "label"], sort=False).size().rename("n").reset_index()
        return out.sort_values(["split", "label"], key=lambda col: col.map(
            {s: i for i, s in enumerate(SPLITS)}) if col.name == "split" else col.map(_label_key)).reset_index(drop=True)


def _task_file(directory: Path, name: str) -> Path:
    exact = directory / SENTEVAL_FILES[name]
    if exact.is_file():
        return exact
    variants = sorted(directory.glob(f"{name}.*.txt"))  # e.g. tree_depth.te_tail_sample.txt
    if len(variants) == 1:
        return variants[0]
    if not variants:
        raise DataError(f"{directory}: no {SENTEVAL_FILES[name]} (task {name}); run `bertology tasks build` first")
    raise DataError(f"{directory}: several files for task {name}: {', '.join(p.name for p in variants)}")


def _manifest_entry(directory: Path, name: str) -> dict | None:
    path = directory / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        return manifest_entry_splits(json.loads(path.read_text(encoding="utf-8")).get("tasks", {}).get(name))
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return None


def load_task(path: str | os.PathLike, name: str | None = None) -> ProbingTask:
    """A task from a directory (bertology-built or SentEval's ``data/probing``) or from one task file.

    ``name`` accepts canonical or Table 2 names (``SentLen``); it may be left out for a file whose name
    says the task (``sentence_length.txt``, ``sentence_length.te_tail_sample.txt``).
    """
    path = Path(path)
    if path.is_dir():
        if name is None:
            raise DataError(f"{path}: a directory holds several tasks; name one of {', '.join(TASK_NAMES)}")
        name = resolve_task_name(name)
        file = _task_file(path, name)
    elif path.is_file():
        guessed = task_for_file_name(path.name)
        name = resolve_task_name(name) if name is not None else guessed
        if name is None:
            raise DataError(
                f"{path}: cannot tell the task from the file name; pass name= (one of {', '.join(TASK_NAMES)})"
            )
        file = path
    else:
        raise DataError(f"{path}: not found; expected a task directory or a SentEval task file")
    sentences = read_senteval(file)
    label_names = sorted({s.label for s in sentences}, key=_label_key)
    index = {label: i for i, label in enumerate(label_names)}
    return ProbingTask(
        name=name,
        path=file,
        sentences=sentences,
        labels=np.array([index[s.label] for s in sentences], dtype=np.int64),
        splits=np.array([s.split for s in sentences]),
        label_names=label_names,
        manifest=_manifest_entry(file.parent, name),
    )


def list_tasks(directory: str | os.PathLike) -> pd.DataFrame:
    """The task files in a directory: task, Table 2 column, file, sentences per split, labels."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"{directory}: not a directory; expected a folder of SentEval task files")
    rows = []
    for name in TASK_NAMES:
        candidates = [directory / SENTEVAL_FILES[name], *sorted(directory.glob(f"{name}.*.txt"))]
        for file in (c for c in candidates if c.is_file()):
            task = load_task(file, name)
            sizes = {s: int((task.splits == s).sum()) for s in SPLITS}
            rows.append({
                "task": name, "column": task.column, "file": file.name, **sizes,
                "n_labels": len(task.label_names), "labels": ",".join(task.label_names),
            })
    return pd.DataFrame(rows, columns=["task", "column", "file", *SPLITS, "n_labels", "labels"])
