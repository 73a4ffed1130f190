"""The ten SentEval probing tasks (Conneau et al., 2018): canonical names, file names, Table 2 columns."""

from __future__ import annotations

from dataclasses import dataclass

from bertology.errors import DataError


@dataclass(frozen=True)
class TaskInfo:
    """One probing task. ``name`` is the SentEval file stem (also our canonical name)."""

    name: str
    column: str  # the column name in Conneau et al. (2018) Table 2 / Jawahar et al. (2019) Table 2
    category: str  # Surface, Syntactic or Semantic, as in the paper
    senteval_class: str  # SentEval's evaluation class, for users who know SentEval's code
    description: str

    @property
    def file_name(self) -> str:
        return f"{self.name}.txt"


TASKS: dict[str, TaskInfo] = {
    info.name: info
    for info in (
        TaskInfo("sentence_length", "SentLen", "Surface", "Length",
                 "length of the sentence in words, in 6 bins (5-8, 9-12, 13-16, 17-20, 21-25, 26-28)"),
        TaskInfo("word_content", "WC", "Surface", "WordContent",
                 "which of a fixed set of mid-frequency words the sentence contains (exactly one, once)"),
        TaskInfo("tree_depth", "TreeDepth", "Syntactic", "Depth",
                 "depth of the dependency tree, decorrelated from sentence length"),
        TaskInfo("top_constituents", "TopConst", "Syntactic", "TopConstituents",
                 "the sequence of the root's immediate dependents (most frequent sequences + OTHER)"),
        TaskInfo("bigram_shift", "BShift", "Syntactic", "BigramShift",
                 "whether two adjacent words were inverted (I) or not (O)"),
        TaskInfo("past_present", "Tense", "Semantic", "Tense",
                 "tense of the main clause's finite verb (PAST/PRES)"),
        TaskInfo("subj_number", "SubjNum", "Semantic", "SubjNumber",
                 "number of the main clause's subject noun (NN singular / NNS plural)"),
        TaskInfo("obj_number", "ObjNum", "Semantic", "ObjNumber",
                 "number of the main clause's direct-object noun (NN singular / NNS plural)"),
        TaskInfo("odd_man_out", "SOMO", "Semantic", "OddManOut",
                 "whether a noun or verb was replaced by another of the same part of speech (C) or not (O)"),
        TaskInfo("coordination_inversion", "CoordInv", "Semantic", "CoordinationInversion",
                 "whether two coordinated main clauses were swapped (I) or not (O)"),
    )
}

#: How the sentences are divided into train/dev/test (``build_tasks(split=...)``, ``bertology tasks build --split``).
SPLIT_CHOICES = ("treebank", "pooled")

#: Canonical task names (SentEval file stems), in the order of the paper's Table 2.
TASK_NAMES: tuple[str, ...] = tuple(TASKS)
#: Canonical name -> SentEval file name (``sentence_length`` -> ``sentence_length.txt``).
SENTEVAL_FILES: dict[str, str] = {name: info.file_name for name, info in TASKS.items()}
#: Canonical name -> Table 2 column name (``sentence_length`` -> ``SentLen``).
TABLE2_COLUMNS: dict[str, str] = {name: info.column for name, info in TASKS.items()}

_ALIASES: dict[str, str] = {}
for _info in TASKS.values():
    for _alias in (_info.name, _info.column, _info.senteval_class, _info.file_name):
        _ALIASES[_alias.lower()] = _info.name


def resolve_task_name(name: str) -> str:
    """Canonical name for any spelling users meet: ``SentLen``, ``sentence_length(.txt)``, ``Length``."""
    key = name.strip().lower()
    if key in _ALIASES:
        return _ALIASES[key]
    raise DataError(
        f"unknown probing task {name!r}; expected one of {', '.join(TASK_NAMES)} "
        f"(or a Table 2 name: {', '.join(TABLE2_COLUMNS.values())})"
    )


def task_for_file_name(file_name: str) -> str | None:
    """The task a file belongs to: ``tree_depth.txt`` or a sample like ``tree_depth.te_tail_sample.txt``."""
    base = file_name.rsplit("/", 1)[-1]
    if not base.endswith(".txt"):
        return None
    stem = base.split(".", 1)[0]
    return stem if stem in TASKS else None
