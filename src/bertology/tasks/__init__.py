"""SentEval probing tasks (Conneau et al., 2018), built from CoNLL-U treebanks or read from SentEval files."""

from bertology.tasks.build import BuildReport, build_tasks, load_splits
from bertology.tasks.catalog import (
    SENTEVAL_FILES,
    TABLE2_COLUMNS,
    TASK_NAMES,
    TASKS,
    TaskInfo,
    resolve_task_name,
)
from bertology.tasks.load import ProbingTask, list_tasks, load_task

__all__ = [
    "BuildReport",
    "ProbingTask",
    "SENTEVAL_FILES",
    "TABLE2_COLUMNS",
    "TASKS",
    "TASK_NAMES",
    "TaskInfo",
    "build_tasks",
    "list_tasks",
    "load_splits",
    "load_task",
    "resolve_task_name",
]
