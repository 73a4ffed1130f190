"""SentEval probing tasks (Conneau et al., 2018), built from CoNLL-U treebanks or read from SentEval files."""

from bertology._lazy import lazy_exports

# Imported on first use (bertology._lazy): the catalogue is light, building and loading need pandas.
__getattr__ = lazy_exports(__name__, {
    "build": ("BuildReport", "build_tasks", "load_splits"),
    "catalog": ("SENTEVAL_FILES", "TABLE2_COLUMNS", "TASK_NAMES", "TASKS", "TaskInfo", "resolve_task_name"),
    "load": ("ProbingTask", "list_tasks", "load_task"),
})

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
