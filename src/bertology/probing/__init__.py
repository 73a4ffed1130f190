"""Classification probes batched over layers, control tasks, baselines, structural probes; ``bertology probe``.

The public API: :func:`run_probing` (models x tasks x layers x seeds with every baseline, a
:class:`~bertology.results.Result`), the estimators :class:`LayerwiseProbe`, :class:`ScalarMixProbe` and
:class:`~bertology.probing.structural.StructuralProbe`, :func:`register_task` (a new token, edge or span
task), and :func:`features_from_store` + :func:`probe_labels` for probing labels of your own.
"""

from bertology.probing.controls import ControlTask, SentenceControlTask, majority_accuracy
from bertology.probing.experiment import run_probing
from bertology.probing.labels import features_from_store, probe_labels
from bertology.probing.probes import LayerwiseProbe, ScalarMixProbe
from bertology.probing.report import plot_layer_curves, summarize, table2, table2_frame, table2_rich
from bertology.probing.tasks import get_task, register_task, task_names, unregister_task

__all__ = [
    "ControlTask",
    "LayerwiseProbe",
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
