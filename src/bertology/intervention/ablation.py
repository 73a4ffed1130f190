"""One-shot interventions with a metric: masking heads, dropping layers, pruning by importance, and the
heads an attention analysis flags. Each returns a :class:`~bertology.results.Result`.

The metric comes from ``evaluate_fn(model) -> float`` (higher is better; GLUE's are fractions), as in
:mod:`bertology.intervention.importance`. Layers are 1..L as in ``hidden_states``, heads from 0; tables
carry ``layer``, ``head`` and ``head_label`` (``L4H5``).
"""

from __future__ import annotations

from typing import Iterable

import pandas as pd
import torch
from torch import nn

from bertology.attention.parsing import run_attention_analysis
from bertology.errors import DataError
from bertology.intervention.hooks import HeadSpec, drop_layers, grid_index, mask_heads, model_layout
from bertology.intervention.importance import EvaluateFn, head_importance, heads_frame, metric_of
from bertology.intervention.pruning import count_parameters, measure_latency, prune_heads
from bertology.results import Result

SCORE_COLUMNS = ["metric_name", "baseline", "metric", "delta"]


def _metric_name(evaluate_fn: EvaluateFn, metric_name: str | None) -> str:
    return metric_name or str(getattr(evaluate_fn, "metric", "metric"))


def _before_and_after(model, evaluate_fn: EvaluateFn, intervention, count_column: str, count: int,
                      metric_name: str | None) -> pd.DataFrame:
    """One row: the metric without and then inside ``intervention`` (a context manager of hooks)."""
    baseline = metric_of(evaluate_fn, model)
    with intervention:
        metric = metric_of(evaluate_fn, model)
    return pd.DataFrame([{count_column: count, "metric_name": _metric_name(evaluate_fn, metric_name),
                          "baseline": baseline, "metric": metric, "delta": metric - baseline}])


def ablate_heads(model: nn.Module, heads: HeadSpec, evaluate_fn: EvaluateFn, metric_name: str | None = None) -> Result:
    """The metric before and after masking ``heads`` (``"L4H5,L3"``, ``[(4, 5)]``...).

    Tables: ``scores`` (one row: ``n_masked, metric_name, baseline, metric, delta``) and ``heads`` (the
    heads masked: ``layer, head, head_label``). An empty head list is an error: it would report +0.
    """
    layout = model_layout(model)
    chosen = layout.heads(heads)
    if not chosen:
        raise DataError("ablate_heads: no heads given; expected e.g. 'L4H5' or [(4, 5)]")
    scores = _before_and_after(model, evaluate_fn, mask_heads(model, chosen), "n_masked", len(chosen), metric_name)
    return Result("ablate_heads", tables={"scores": scores, "heads": heads_frame(chosen)},
                  meta={"num_layers": layout.num_layers, "num_heads": layout.num_heads})


def ablate_layers(model: nn.Module, layers: Iterable[int] | str, evaluate_fn: EvaluateFn,
                  metric_name: str | None = None) -> Result:
    """The metric before and after skipping ``layers`` (1..L as in ``hidden_states``: ``"2"`` removes the
    layer whose output ``probe --layers 2`` reads; layer 0, the embeddings, is refused).

    Tables: ``scores`` (one row: ``n_dropped, metric_name, baseline, metric, delta``) and ``layers``
    (``layer``, one row per layer skipped).
    """
    layout = model_layout(model)
    chosen = layout.layer_list(layers)
    if not chosen:
        raise DataError("ablate_layers: no layers given; expected e.g. '2' or [2, 3]")
    scores = _before_and_after(model, evaluate_fn, drop_layers(model, chosen), "n_dropped", len(chosen), metric_name)
    return Result("ablate_layers", tables={"scores": scores, "layers": pd.DataFrame({"layer": chosen})},
                  meta={"num_layers": layout.num_layers})


def prune_by_importance(model: nn.Module, evaluate_fn: EvaluateFn, batches: list[dict], fraction: float,
                        latency_inputs: dict | None = None, latency_repeats: int = 10,
                        metric_name: str | None = None, progress: bool = False) -> Result:
    """Prune the ``fraction`` least important heads of ``model`` **in place** (Michel et al.'s importance
    on the labelled ``batches``), measuring metric, parameters and latency before and after.

    Tables: ``pruned`` (``layer, head, head_label, importance``, least important first) and
    ``before_after`` (``stage`` "before" | "after", ``metric, parameters, latency_s``; latency is the
    median over ``latency_repeats`` runs of ``model(**latency_inputs)``, default: the middle batch).
    """
    if not 0.0 <= fraction <= 1.0:
        raise DataError(f"fraction {fraction}: expected a value between 0 and 1")
    if not batches:
        raise DataError("prune_by_importance: no labelled batches to compute importance on")
    scores = head_importance(model, batches, progress=progress)
    layout = model_layout(model)
    ranked = sorted(layout.all_heads(), key=lambda lh: (scores[grid_index(*lh)], lh))
    chosen = ranked[: int(round(fraction * len(ranked)))]
    if latency_inputs is None:
        latency_inputs = {k: v for k, v in batches[len(batches) // 2].items() if k != "labels"}
    device = next(model.parameters()).device
    latency_inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in latency_inputs.items()}

    def measure(stage: str) -> dict:
        return {"stage": stage, "metric": metric_of(evaluate_fn, model), "parameters": count_parameters(model),
                "latency_s": measure_latency(model, latency_inputs, repeats=latency_repeats)["median_s"]}

    before = measure("before")
    prune_heads(model, chosen)
    after = measure("after")
    pruned = heads_frame(chosen)
    pruned["importance"] = [float(scores[grid_index(layer, head)]) for layer, head in chosen]
    return Result("prune", tables={"pruned": pruned, "before_after": pd.DataFrame([before, after])},
                  meta={"fraction": float(fraction), "n_heads": len(ranked), "n_pruned": len(chosen),
                        "metric_name": _metric_name(evaluate_fn, metric_name),
                        "latency_batch": int(next(iter(latency_inputs.values())).shape[0]),
                        "torch": torch.__version__, "threads": torch.get_num_threads()})


def attention_best_heads(encoder, max_sentences: int = 300, min_count: int = 100, progress: bool = True) -> pd.DataFrame:
    """Clark et al.'s best head per relation for ``encoder`` on UD EWT dev (``bertology.attention.parsing``),
    the table :func:`~bertology.intervention.importance.flagged_heads` reads.

    Attention weights need eager attention: it is switched on for the analysis only and whatever the
    model used before (sdpa, eager...) is restored, so the caller's model is left as it was.
    """
    with encoder.eager_attention():
        results = run_attention_analysis(encoder, max_eval=max_sentences, max_train=max_sentences,
                                         statistics=False, min_count=min_count, probe_seeds=(), progress=progress)
    return results["best_heads"]
