"""Classification probes batched over layers, control tasks, baselines, structural probes; ``bertology probe``.

The public API: :func:`run_probing` (a model and a :class:`ProbingSpec`: tasks x layers x seeds with every
baseline, a :class:`~bertology.results.Result`), the estimators :class:`LayerwiseProbe`, :class:`ScalarMixProbe` and
:class:`~bertology.probing.structural_probe.StructuralProbe`, :func:`register_task` (a new token, edge or span
task), and :func:`features_from_store` + :func:`probe_labels` for probing labels of your own.
"""

from bertology._lazy import lazy_exports

# Imported on first use (bertology._lazy), so `bertology probe --help` does not load torch or sklearn.
__getattr__ = lazy_exports(__name__, {
    "controls": ("ControlTask", "SentenceControlTask", "majority_accuracy"),
    "experiment": ("run_probing",),
    "labels": ("features_from_store", "probe_labels"),
    "probes": ("LayerwiseProbe", "ScalarMixProbe"),
    "report": ("plot_layer_curves", "summarize", "table2", "table2_frame", "table2_rich"),
    "spec": ("ProbingSpec",),
    "tasks": ("get_task", "register_task", "task_names", "unregister_task"),
})

__all__ = [
    "ControlTask",
    "LayerwiseProbe",
    "ProbingSpec",
    "ScalarMixProbe",
    "SentenceControlTask",
    "features_from_store",
    "get_task",
    "majority_accuracy",
    "plot_layer_curves",
    "probe_labels",
    "register_task",
    "run_probing",
    "summarize",
    "table2",
    "table2_frame",
    "table2_rich",
    "task_names",
    "unregister_task",
]
