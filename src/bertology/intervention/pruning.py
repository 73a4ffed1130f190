"""Actual pruning: slice away the weights of pruned heads so the model is smaller and faster.

For each pruned head the rows of the query/key/value projections (the three row blocks of a fused one such
as ModernBERT's ``Wqkv``, and DeBERTa's relative-position projections) and the columns of the attention output
projection go. The output projection keeps its
bias, so a pruned model computes exactly what the masked model computes. A layer whose heads are all
pruned skips attention altogether: its attention sub-layer adds only the output bias to the residual.

transformers 5 dropped ``prune_heads`` and ``config.pruned_heads``; we record the pruned heads (original
head numbers, as labels such as ``"L1H1"``: layers 1..L as in ``hidden_states``) in
``config.bertology_pruned_heads`` and :func:`load_pruned` rebuilds the smaller shapes before loading the
weights. Checkpoints written before the one numbering (a mapping keyed by 0-based module index) load too:
:func:`~bertology.models.layout.recorded_pruned_heads` converts them. Pruning and loading a pruned model live in
:mod:`bertology.models.pruning` (a loader belongs with the models); this module re-exports them beside what it
measures (parameters, latency).
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


