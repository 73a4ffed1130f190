"""Classification probes batched over layers, control tasks, baselines, structural probes; ``bertology probe``."""

from bertology.probing.controls import ControlTask, SentenceControlTask, majority_accuracy
from bertology.probing.experiment import run_probing
from bertology.probing.probes import LayerwiseProbe, ScalarMixProbe
from bertology.probing.report import plot_layer_curves, summarize, table2, table2_frame, table2_rich

__all__ = [
    "ControlTask",
    "LayerwiseProbe",
    "ScalarMixProbe",
    "SentenceControlTask",
    "majority_accuracy",
    "plot_layer_curves",
    "run_probing",
    "summarize",
    "table2",
    "table2_frame",
    "table2_rich",
]
