"""What pruning heads buys: the parameters (:func:`count_parameters`, :func:`attention_parameters`) and the
latency (:func:`measure_latency`) of a model before and after.

Pruning itself (slicing away the weights of pruned heads) and loading a pruned checkpoint live with the models,
in :mod:`bertology.models.pruning` (a loader belongs beside the other loaders); ``prune_heads``, ``save_pruned``
and ``load_pruned`` are re-exported here.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from bertology.models.layout import model_layout
from bertology.models.encoders import Encoder
from bertology.models.pruning import load_pruned, prune_heads, save_pruned  # noqa: F401


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters (tied weights counted once)."""
    seen, total = set(), 0
    for parameter in model.parameters():
        if id(parameter) not in seen:
            seen.add(id(parameter))
            total += parameter.numel()
    return total


def attention_parameters(model: nn.Module) -> int:
    """Parameters of the per-head projections (q/k/v/output), the part pruning shrinks."""
    layout = model_layout(model)
    total = 0
    for site in layout.sites:
        for linear in (*site.projections.values(), site.output, *site.extra_per_head.values()):
            total += sum(p.numel() for p in linear.parameters())
    return total


@torch.inference_mode()
def measure_latency(model: nn.Module, inputs: dict, repeats: int = 20, warmup: int = 3) -> dict[str, float]:
    """Wall-clock seconds of one forward pass of ``model`` (a module or its :class:`~bertology.models.Encoder`)
    on ``inputs``, through the handle: median, min and spread over ``repeats`` runs."""
    handle = Encoder.of(model)
    handle.model.eval()
    for _ in range(warmup):
        handle.forward(inputs, hidden_states=False)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        handle.forward(inputs, hidden_states=False)
        times.append(time.perf_counter() - start)
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "stdev_s": statistics.stdev(times) if len(times) > 1 else 0.0,
        "repeats": float(repeats),
    }


