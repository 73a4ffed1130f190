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
:func:`~bertology.models.layout.recorded_pruned_heads` converts them. A loader, so it lives with the models
(:mod:`bertology.intervention.pruning` keeps the measurements and re-exports these names).
"""

from __future__ import annotations

import json
import os
import types
import warnings
from pathlib import Path

import torch
from torch import nn

from bertology.errors import ModelError
from bertology.files import atomic_dir
from bertology.models.auto import build_model, saved_class
from bertology.models.checkpoints import set_submodule
from bertology.models.encoders import load_model_config, load_saved_model, load_weights_file
from bertology.models.families import family
from bertology.models.layout import AttentionSite, model_layout, record_pruned_heads, recorded_pruned_heads
from bertology.numbering import HeadSpec


def _sliced_linear(linear: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    index = index.to(linear.weight.device)
    weight = linear.weight.detach().index_select(dim, index).clone()
    bias = None
    if linear.bias is not None:
        bias = linear.bias.detach().clone() if dim == 1 else linear.bias.detach().index_select(0, index).clone()
    out_features, in_features = weight.shape
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Initializing zero-element tensors is a no-op" for empty layers
        new = nn.Linear(in_features, out_features, bias=bias is not None, device="meta")
    new.weight = nn.Parameter(weight, requires_grad=linear.weight.requires_grad)
    if bias is not None:
        new.bias = nn.Parameter(bias, requires_grad=linear.bias.requires_grad)
    return new


def _no_heads_forward(model_type: str, site: AttentionSite):
    """The attention forward of a layer without heads: output bias only, residual kept by the caller."""

    def empty_context(hidden_states: torch.Tensor) -> torch.Tensor:
        return hidden_states.new_zeros(*hidden_states.shape[:-1], 0)

    if not site.fused:  # bert, roberta, electra, deberta-v2: the parent applies output.dense + residual

        def forward(self, hidden_states, *args, **kwargs):
            return empty_context(hidden_states), None

        return forward
    if model_type == "albert":

        def forward(self, hidden_states, attention_mask=None, **kwargs):
            out = self.output_dropout(self.dense(empty_context(hidden_states)))
            return self.LayerNorm(hidden_states + out), None

        return forward
    if model_type == "distilbert":

        def forward(self, hidden_states, attention_mask=None, **kwargs):
            return self.out_lin(empty_context(hidden_states)), None

        return forward
    if model_type == "modernbert":

        def forward(self, hidden_states, *args, **kwargs):
            return self.out_drop(self.Wo(empty_context(hidden_states))), None

        return forward
    raise ModelError(f"model type {model_type!r}: pruning every head of a layer is not supported")


def prune_heads(model: nn.Module, heads: HeadSpec) -> dict[int, list[int]]:
    """Remove the listed heads (``"L1H1,L2"``, ``[(1, 1)]``; layers 1..L, original head numbers) from
    ``model`` in place; returns every head pruned so far, ``{layer: [heads]}``.

    Heads already pruned are ignored. For ALBERT, whose layers share weights, every logical layer served
    by one module must prune the same heads.
    """
    layout = model_layout(model)
    refusal = family(layout.model_type).prune_refusal
    if refusal:
        raise ModelError(f"pruning {layout.model_type}: not supported, {refusal}; use mask_heads instead")
    missing = [site.name for site in layout.sites if len(site.projections) not in (1, 3)]
    if missing:
        raise ModelError(f"pruning {layout.model_type}: no per-head input projections "
                         f"{family(layout.model_type).attention_names} in {missing[0]}; use mask_heads instead")
    wanted: dict[int, set[int]] = {}
    for layer, head in layout.heads(heads):
        if head in layout.present_heads[layer]:
            wanted.setdefault(layer, set()).add(head)

    for site in layout.sites:
        sets = [frozenset(wanted.get(layer, ())) for layer in site.layers]
        if len(set(sets)) > 1:
            raise ModelError(
                f"layers {site.layers} share one attention module ({site.name}) and must prune the same heads; "
                f"asked for {[sorted(s) for s in sets]}"
            )
        prune = sets[0]
        if not prune:
            continue
        present = layout.present_heads[site.layers[0]]
        keep_positions = [pos for pos, head in enumerate(present) if head not in prune]
        size = site.head_size
        index = torch.tensor([pos * size + i for pos in keep_positions for i in range(size)], dtype=torch.long)
        width = len(present) * size
        for attr, linear in site.projections.items():  # a fused projection: the same heads of each row block
            rows = torch.cat([index + block * width for block in range(3)]) if site.fused_qkv else index
            setattr(site.module, attr, _sliced_linear(linear, rows, dim=0))
        for attr, linear in site.extra_per_head.items():
            setattr(site.module, attr, _sliced_linear(linear, index, dim=0))
        set_submodule(model, site.output_name, _sliced_linear(site.output, index, dim=1))
        for attr in ("num_attention_heads", "n_heads"):
            if isinstance(getattr(site.module, attr, None), int):
                setattr(site.module, attr, len(keep_positions))
        if isinstance(getattr(site.module, "all_head_size", None), int):
            site.module.all_head_size = len(keep_positions) * size
        if not keep_positions:
            site.module.forward = types.MethodType(_no_heads_forward(layout.model_type, site), site.module)

    record = recorded_pruned_heads(model.config)
    for layer, new in wanted.items():
        record.setdefault(layer, set()).update(new)
    result = {layer: sorted(heads) for layer, heads in sorted(record.items()) if heads}
    record_pruned_heads(model.config, result)
    return result


def save_pruned(model: nn.Module, out: str | os.PathLike, tokenizer=None) -> Path:
    """Save a (pruned) model with ``save_pretrained`` via a temporary folder renamed into place."""
    out = Path(out)
    with atomic_dir(out, replace=False) as tmp:
        model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
    return out


def load_pruned(path: str | os.PathLike, attn_implementation: str = "sdpa") -> nn.Module:
    """Load a model saved by :func:`save_pruned` (or any ``save_pretrained`` folder) as the model it was, head
    included, pruned shapes rebuilt."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ModelError(f"{path}: not a model directory (no config.json)")
    config = load_model_config(path)
    pruned = recorded_pruned_heads(config)
    record_pruned_heads(config, {})
    cls = saved_class(config)
    if not pruned:
        return load_saved_model(path, cls, attn_implementation).eval()
    config._attn_implementation = attn_implementation
    model = build_model(config, cls=cls)
    prune_heads(model, pruned)
    state: dict[str, torch.Tensor] = {}
    index = path / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else ["model.safetensors"]
    for name in files:
        if not (path / name).is_file():
            raise ModelError(f"{path / name}: missing weights file")
        state.update(load_weights_file(path / name))
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    if unexpected or set(missing) - tied:
        raise ModelError(
            f"{path}: weights do not fit the pruned shapes (missing {sorted(set(missing) - tied)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]})"
        )
    if missing:
        model.tie_weights()
    return model.eval()
