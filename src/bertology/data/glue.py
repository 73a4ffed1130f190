"""GLUE loaders (CoLA, SST-2, MRPC, STS-B, RTE): the GLUE files of a data folder, or the Hugging Face copy.

Where the data is found (:mod:`bertology.data.paths`): ``data_dir`` (``--data-dir``), else
``$BERTOLOGY_DATA/glue``, else ``datasets.load_dataset("nyu-mll/glue", task)`` (its cache, or the hub when
online; its ``validation`` split is our ``dev``), else one line saying how to provide it.

Each task's files have their own layout (checked against the real files, see each folder's PROVENANCE.md):

- CoLA: no header, 4 columns ``source  label  original_label  sentence``.
- SST-2: header ``sentence  label``; train is ``train.tsv.gz``.
- MRPC: header ``Quality  #1 ID  #2 ID  #1 String  #2 String``, each file starts with a UTF-8 BOM, and
  sentences hold unbalanced double quotes (so no CSV quoting is applied anywhere).
- STS-B: header ``index genre filename year old_index source1 source2 sentence1 sentence2 score`` (score 0-5).
- RTE: header ``index  sentence1  sentence2  label`` with ``entailment`` / ``not_entailment``.

Every loader returns ``list[GlueExample]``; a malformed line raises :class:`DataError` naming file:line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from bertology.data.corpus import numbered_lines
from bertology.data.paths import EXTERNAL, external_folder, load_hub_split, missing_data
from bertology.errors import DataError


@dataclass(frozen=True)
class GlueExample:
    """One GLUE example. ``label`` is an int class id, or a float score for STS-B (regression)."""

    text_a: str
    text_b: str | None
    label: int | float
    id: str
    source_line: int


@dataclass(frozen=True)
class GlueTask:
    """What a GLUE task is: its files, its label space and its metrics (the first is the headline one)."""

    name: str
    num_labels: int  # 1 = regression
    metrics: tuple[str, ...]
    files: dict[str, str]
    label_names: tuple[str, ...] = ()
    #: "glue": GLUE's files or its hub copy; "ewt": a SentEval task rebuilt from the packaged UD English EWT
    #: (:data:`PACKAGED_TASKS`), so fine-tuning always has a task, offline and with no data folder
    source: str = "glue"

    @property
    def is_regression(self) -> bool:
        return self.num_labels == 1

    @property
    def main_metric(self) -> str:
        return self.metrics[0]

    @property
    def is_pair(self) -> bool:
        return self.name in ("mrpc", "stsb", "rte")


GLUE_TASKS: dict[str, GlueTask] = {
    "cola": GlueTask("cola", 2, ("matthews_corr",), {"train": "train.tsv", "dev": "dev.tsv"}, ("unacceptable", "acceptable")),
    "sst2": GlueTask("sst2", 2, ("accuracy",), {"train": "train.tsv.gz", "dev": "dev.tsv"}, ("negative", "positive")),
    "mrpc": GlueTask("mrpc", 2, ("accuracy", "f1"), {"train": "train.tsv", "dev": "dev.tsv"}, ("not_paraphrase", "paraphrase")),
    "stsb": GlueTask("stsb", 1, ("pearson", "spearman"), {"train": "train.tsv", "dev": "dev.tsv"}),
    "rte": GlueTask("rte", 2, ("accuracy",), {"train": "train.tsv", "dev": "dev.tsv"}, ("entailment", "not_entailment")),
}

#: Sentence-classification tasks the package can always provide: SentEval's Bigram Shift (a sentence with
#: two adjacent words swapped, or not; Conneau et al. 2018) rebuilt from the packaged UD English EWT, its
#: sentences pooled and re-split 50/10/40 (``bertology.tasks``); its train and dev splits (the test sentences
#: are never read here). ``files`` maps our splits to the built task's ``Sentence.split``.
PACKAGED_TASKS: dict[str, GlueTask] = {
    "bshift": GlueTask("bshift", 2, ("accuracy",), {"train": "train", "dev": "dev"}, ("original", "inverted"),
                       source="ewt"),
}

#: Every task name :func:`glue_task` resolves (GLUE's and the packaged ones).
FINETUNE_TASKS = {**GLUE_TASKS, **PACKAGED_TASKS}

_RTE_LABELS = {"entailment": 0, "not_entailment": 1}


def glue_task(name: str) -> GlueTask:
    """The :class:`GlueTask` named ``name`` (case-insensitive; ``sst-2``/``sts-b`` accepted): a GLUE task or
    one of :data:`PACKAGED_TASKS`."""
    key = name.lower().replace("-", "").replace("_", "")
    if key not in FINETUNE_TASKS:
        raise DataError(f"unknown GLUE task {name!r}; expected one of {', '.join(GLUE_TASKS)}, or a task the package "
                        f"builds from UD English EWT ({', '.join(PACKAGED_TASKS)})")
    return FINETUNE_TASKS[key]


def glue_path(task: str, split: str, data_dir: str | Path | None = None) -> Path:
    """The file of ``task``'s ``split`` ('train' or 'dev') under ``data_dir`` (default: ``$BERTOLOGY_DATA/glue``);
    :class:`~bertology.errors.MissingData` when neither is there."""
    spec = glue_task(task)
    if split not in spec.files:
        raise DataError(f"unknown split {split!r} for GLUE {spec.name}; expected one of {', '.join(spec.files)}")
    root = external_folder("glue", data_dir)
    if root is None:
        raise missing_data("glue", f"{spec.name} {split}")
    return root / spec.name / spec.files[split]


def _int_label(path: Path, line_no: int, value: str, allowed: tuple[str, ...], column: str) -> int:
    if value not in allowed:
        raise DataError(f"{path}:{line_no}: {column} is {value!r}; expected one of {', '.join(allowed)}")
    return int(value)


def _fields(path: Path, line_no: int, line: str, n: int, what: str) -> list[str]:
    fields = line.split("\t")
    if len(fields) != n:
        raise DataError(f"{path}:{line_no}: {len(fields)} tab-separated fields; expected {n} ({what})")
    return fields


def _check_header(path: Path, line_no: int, line: str, expected: tuple[str, ...]) -> None:
    got = tuple(f.strip() for f in line.lstrip("\ufeff").split("\t"))
    if got != expected:
        raise DataError(f"{path}:{line_no}: header is {got!r}; expected {expected!r}")


def _nonempty(path: Path, line_no: int, text: str, column: str) -> str:
    text = text.strip()
    if not text:
        raise DataError(f"{path}:{line_no}: empty {column}; expected text")
    return text


def read_glue_file(path: str | Path, task: str) -> list[GlueExample]:
    """Read one GLUE ``task`` file (train or dev layout, which are the same per task) at ``path``."""
    spec = glue_task(task)
    path = Path(path)
    examples: list[GlueExample] = []
    header: tuple[str, ...] | None = {
        "cola": None,
        "sst2": ("sentence", "label"),
        "mrpc": ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
        "stsb": ("index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2", "score"),
        "rte": ("index", "sentence1", "sentence2", "label"),
    }[spec.name]
    for line_no, line in numbered_lines(path):
        if line_no == 1 and header is not None:
            _check_header(path, line_no, line, header)
            continue
        if not line.strip():
            continue
        if spec.name == "cola":
            if line_no == 1 and line.lstrip("\ufeff").startswith(("sentence", "label")):
                raise DataError(f"{path}:1: looks like a header; GLUE CoLA files have none (source, label, mark, sentence)")
            source, label, _, sentence = _fields(path, line_no, line, 4, "source, label, original mark, sentence")
            examples.append(GlueExample(_nonempty(path, line_no, sentence, "sentence"), None,
                                        _int_label(path, line_no, label, ("0", "1"), "label"), f"{source}-{line_no}", line_no))
        elif spec.name == "sst2":
            sentence, label = _fields(path, line_no, line, 2, "sentence, label")
            examples.append(GlueExample(_nonempty(path, line_no, sentence, "sentence"), None,
                                        _int_label(path, line_no, label, ("0", "1"), "label"), str(line_no), line_no))
        elif spec.name == "mrpc":
            quality, id1, id2, s1, s2 = _fields(path, line_no, line, 5, "Quality, #1 ID, #2 ID, #1 String, #2 String")
            examples.append(GlueExample(_nonempty(path, line_no, s1, "#1 String"), _nonempty(path, line_no, s2, "#2 String"),
                                        _int_label(path, line_no, quality, ("0", "1"), "Quality"), f"{id1}-{id2}", line_no))
        elif spec.name == "stsb":
            fields = _fields(path, line_no, line, 10, "index, genre, filename, year, old_index, source1, source2, sentence1, sentence2, score")
            try:
                score = float(fields[9])
            except ValueError:
                score = math.nan
            if not 0.0 <= score <= 5.0:
                raise DataError(f"{path}:{line_no}: score is {fields[9]!r}; expected a number from 0 to 5")
            examples.append(GlueExample(_nonempty(path, line_no, fields[7], "sentence1"), _nonempty(path, line_no, fields[8], "sentence2"),
                                        score, fields[0], line_no))
        else:  # rte
            index, s1, s2, label = _fields(path, line_no, line, 4, "index, sentence1, sentence2, label")
            if label not in _RTE_LABELS:
                raise DataError(f"{path}:{line_no}: label is {label!r}; expected entailment or not_entailment")
            examples.append(GlueExample(_nonempty(path, line_no, s1, "sentence1"), _nonempty(path, line_no, s2, "sentence2"),
                                        _RTE_LABELS[label], index, line_no))
    if not examples:
        raise DataError(f"{path}: no examples found; expected GLUE {spec.name} lines")
    return examples


def read_glue(task: str, split: str = "train", data_dir: str | Path | None = None) -> list[GlueExample]:
    """Read ``task``'s ``split`` ('train' or 'dev'): from ``data_dir`` or ``$BERTOLOGY_DATA/glue`` when given,
    else through Hugging Face ``datasets`` (module doc). Packaged tasks are read with
    :func:`bertology.finetune.read_examples`."""
    spec = glue_task(task)
    if spec.source != "glue":
        raise DataError(f"{spec.name} is not a GLUE task (it is built from the packaged treebank); read it with "
                        "bertology.finetune.read_examples")
    if split not in spec.files:
        raise DataError(f"unknown split {split!r} for GLUE {spec.name}; expected one of {', '.join(spec.files)}")
    if external_folder("glue", data_dir) is None:
        return read_glue_hub(spec.name, split)
    path = glue_path(task, split, data_dir)
    if not path.exists():
        raise DataError(f"{path}: file not found; expected GLUE {spec.name} {split} data there")
    return read_glue_file(path, task)


#: Our split names -> the hub copy's.
_HUB_SPLITS = {"train": "train", "dev": "validation"}


def read_glue_hub(task: str, split: str) -> list[GlueExample]:
    """``task``'s ``split`` from the Hugging Face copy ``nyu-mll/glue`` (same labels as the GLUE files:
    RTE 0 = entailment, MRPC 1 = paraphrase, STS-B a 0-5 score)."""
    spec = glue_task(task)
    rows = load_hub_split("glue", spec.name, _HUB_SPLITS[split], f"{spec.name} {split}")
    where = f"{EXTERNAL['glue'].hub_id} {spec.name} {_HUB_SPLITS[split]}"
    first, second = ("sentence", None) if not spec.is_pair else ("sentence1", "sentence2")
    examples = []
    for i, row in enumerate(rows):
        label = row.get("label")
        if label is None or (not spec.is_regression and label not in range(spec.num_labels)):
            raise DataError(f"{where}: row {i} has label {label!r}; expected "
                            + ("a score" if spec.is_regression else f"0..{spec.num_labels - 1}"))
        text_a = str(row.get(first) or "").strip()
        text_b = str(row.get(second) or "").strip() if second else None
        if not text_a or (second and not text_b):
            raise DataError(f"{where}: row {i} has an empty sentence; expected text")
        examples.append(GlueExample(text_a, text_b, float(label) if spec.is_regression else int(label),
                                    str(row.get("idx", i)), i + 1))
    if not examples:
        raise DataError(f"{where}: no examples")
    return examples
