"""Where the heads are, and reversible hooks that mask heads and drop layers.

One per-head hook point serves every attention layout: the *input* of each layer's attention output projection
(``BertSelfOutput.dense``, DistilBERT's ``out_lin``, ALBERT's ``attention.dense``, MPNet's ``attn.o``,
DeBERTa-v2's ``output.dense``, ModernBERT's ``attn.Wo``), TransformerLens's ``hook_z``. That input is the
per-head context ``softmax(QK^T) V`` of every head side by side, ``[batch, tokens, heads * head_size]``, whether
the model projects q/k/v separately, fused (ModernBERT's ``Wqkv``) or with relative attention (DeBERTa), and
whatever the attention implementation (eager, sdpa, flash): a forward pre-hook there reshapes it to
``[batch, tokens, heads, head_size]`` and multiplies each head by its gate. Scaling head ``h`` by 0 removes it
exactly as Michel et al. (2019) define it, and the gradient with respect to the gates is their head importance;
masking, importance, pruning curves, flagged-vs-random tests and compression by heads all go through it.
:func:`head_contexts` reads the same tensor. transformers 5 silently ignores ``head_mask=`` (no error, no
effect), which is why this module exists. Where the projection sits is the family's ``attention_output``
(:mod:`bertology.models.families`); nothing else about the attention is needed.

Layer dropping is a forward hook on the transformer block that returns the block's input as its output.
Every hook is removed when its context manager exits; no weight is copied or changed.

Modules are found in each element of the model's list of layers, at the family's path, so the same code
serves bert, roberta, electra, xlm-roberta, distilbert, albert (shared layers), deberta-v2, mpnet and modernbert.

Numbering: the one of :mod:`bertology.numbering`. Layer ``l`` (``1..L``) is ``hidden_states[l]``: masking a
head of layer ``l`` or dropping layer ``l`` changes ``hidden_states[l]`` and nothing below it. Heads count
from 0; ``L4H5`` is head 5 of layer 4. Layer 0 (the embeddings) has no heads and no block and is refused.
This module is the one place where a layer becomes a module index (:func:`module_index`:
``encoder.layer[l - 1]``) or a row of a ``[layers, heads]`` grid (:func:`grid_index`).
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterable, Iterator, Sequence

import torch
from torch import nn

from bertology.errors import ModelError
# The layout of the heads lives with the models (bertology.models.layout); these names stay importable here.
from bertology.models.layout import (PRUNED_HEADS_KEY, SUPPORTED_MODEL_TYPES, AttentionSite, ModelLayout,  # noqa: F401
                                     config_depth, config_heads, config_hidden, grid_index, layer_blocks,
                                     model_layout, module_index, record_pruned_heads, recorded_pruned_heads)
from bertology.numbering import HeadSpec

def hook_points(model: nn.Module) -> dict[str, nn.Module]:
    """TransformerLens-style named hook points, discoverable by name.

    ``layer.{l}`` (``l`` = 1..L, the layer whose output is ``hidden_states[l]``) is the transformer block,
    ``layer.{l}.attn`` the self-attention module, ``layer.{l}.attn.q|k|v`` its projections and
    ``layer.{l}.attn.head_context`` the attention output projection, whose *input* is the per-head context
    ``[batch, tokens, heads * head_size]``; slice ``h * head_size:(h + 1) * head_size`` is head ``h``
    (a forward pre-hook there sees or edits each head's contribution). With ALBERT several names
    point to one shared module.
    """
    layout = model_layout(model)
    points: dict[str, nn.Module] = {}
    for site in layout.sites:
        for layer in site.layers:
            prefix = f"layer.{layer}"
            points[prefix] = site.block
            points[f"{prefix}.attn"] = site.module
            if site.fused_qkv:
                points[f"{prefix}.attn.qkv"] = next(iter(site.projections.values()))
            elif len(site.projections) == 3:
                points[f"{prefix}.attn.q"] = site.query
                points[f"{prefix}.attn.k"] = site.key
                points[f"{prefix}.attn.v"] = site.value
            points[f"{prefix}.attn.head_context"] = site.output
    return dict(sorted(points.items(), key=lambda kv: _natural_key(kv[0])))


def _natural_key(text: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


# --------------------------------------------------------------------------------------------------
# Head grids


def heads_to_scales(model_or_layout, heads: HeadSpec, value: float = 0.0) -> torch.Tensor:
    """A ``[layers, heads]`` grid of ones with ``value`` at every listed head (``L4H5``, ``[(4, 5)]``...).

    Row ``l - 1`` is layer ``l`` (see :func:`grid_index`); heads keep their original numbers after pruning.
    """
    layout = model_or_layout if isinstance(model_or_layout, ModelLayout) else model_layout(model_or_layout)
    scales = torch.ones(layout.num_layers, layout.num_heads)
    for layer, head in layout.heads(heads):
        scales[grid_index(layer, head)] = value
    return scales


# --------------------------------------------------------------------------------------------------
# Hooks


class _CallCounter:
    """Which logical layer a shared module is serving: its k-th call in this forward pass."""

    def __init__(self) -> None:
        self.calls: dict[int, int] = {}

    def reset(self, *_args, **_kwargs) -> None:
        self.calls.clear()

    def next_layer(self, module_key: int, layers: Sequence[int]) -> int:
        k = self.calls.get(module_key, 0)
        self.calls[module_key] = k + 1
        return layers[k % len(layers)]


@contextlib.contextmanager
def scale_heads(model: nn.Module, scales: torch.Tensor) -> Iterator[torch.Tensor]:
    """Multiply each head's context by ``scales`` inside the block; the hooks go when it exits.

    ``scales`` is a ``[layers, heads]`` grid (row ``l - 1`` = layer ``l``, :func:`grid_index`) or per example
    ``[batch, layers, heads]``, in the original head numbering (a head pruned away is simply not there
    to scale). It may require grad: the gradient of a
    loss with respect to it is Michel et al.'s head-importance signal. Yields ``scales``.
    """
    layout = model_layout(model)
    expected = (layout.num_layers, layout.num_heads)
    if scales.dim() not in (2, 3) or tuple(scales.shape[-2:]) != expected:
        raise ModelError(
            f"head scales of shape {tuple(scales.shape)}: expected [{expected[0]}, {expected[1]}] "
            f"or [batch, {expected[0]}, {expected[1]}] for this model"
        )
    counter = _CallCounter()
    handles = [layout.base_model.register_forward_pre_hook(counter.reset)]
    for site in layout.sites:
        present = {layer: torch.tensor(layout.present_heads[layer], dtype=torch.long) for layer in site.layers}

        def pre_hook(module, args, kwargs, site=site, present=present):
            context = args[0] if args else kwargs["input"]
            layer = counter.next_layer(id(site.output), site.layers)
            factor = scales[..., module_index(layer), :].index_select(-1, present[layer].to(scales.device))
            factor = factor.to(dtype=context.dtype, device=context.device)
            heads, size = factor.shape[-1], site.head_size
            shaped = context.unflatten(-1, (heads, size))
            if factor.dim() == 1:
                shaped = shaped * factor[:, None]
            else:  # per example: [batch, heads] against [batch, tokens..., heads, size]
                if factor.shape[0] != context.shape[0]:
                    raise ModelError(
                        f"per-example head scales for batch {factor.shape[0]} but the batch has {context.shape[0]}"
                    )
                view = (factor.shape[0],) + (1,) * (shaped.dim() - 3) + (heads, 1)
                shaped = shaped * factor.reshape(view)
            new = shaped.flatten(-2)
            return ((new,) + tuple(args[1:]), kwargs) if args else (args, {**kwargs, "input": new})

        handles.append(site.output.register_forward_pre_hook(pre_hook, with_kwargs=True))
    try:
        yield scales
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def head_contexts(model: nn.Module, layers=None) -> Iterator[dict[int, torch.Tensor]]:
    """Record each head's context (``hook_z``) inside the block: yields a dict that every forward pass fills with
    ``{layer: [batch, tokens, heads, head_size]}`` (layers 1..L, ``layers`` to keep some; the last pass wins;
    detached). Heads are those present, in the original numbering's order; a mask or scale active outside this
    block is already applied (hooks run in the order they were registered)."""
    layout = model_layout(model)
    wanted = set(layout.layer_list(layers if layers is not None else "all"))
    record: dict[int, torch.Tensor] = {}
    counter = _CallCounter()
    handles = [layout.base_model.register_forward_pre_hook(counter.reset)]
    for site in layout.sites:

        def pre_hook(module, args, kwargs, site=site):
            context = args[0] if args else kwargs["input"]
            layer = counter.next_layer(id(site.output), site.layers)
            if layer in wanted:
                record[layer] = context.detach().unflatten(-1, (-1, site.head_size))

        handles.append(site.output.register_forward_pre_hook(pre_hook, with_kwargs=True))
    try:
        yield record
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def mask_heads(model: nn.Module, heads: HeadSpec) -> Iterator[list[tuple[int, int]]]:
    """Remove the listed heads inside the block: ``"L4H5,L3H0"``, ``"L4"`` (every head of layer 4),
    ``[(4, 5)]`` or ``{4: [5]}``, layers 1..L as in ``hidden_states``, heads from 0.

    Head ``h`` of layer ``l`` is the head whose attention map is ``attentions[l - 1][:, h]``; masking it
    zeroes its context slice and changes ``hidden_states[l]`` onwards. Works with every attention
    implementation (sdpa included). Yields the validated (layer, head) list. An empty list leaves the
    model unchanged; an empty string, layer 0 or a head the model lacks raise :class:`UsageError`.
    """
    layout = model_layout(model)
    expanded = layout.heads(heads)
    if not expanded:
        yield expanded
        return
    scales = heads_to_scales(layout, expanded)
    with scale_heads(model, scales):
        yield expanded


@contextlib.contextmanager
def drop_layers(model: nn.Module, layers: Iterable[int] | str) -> Iterator[list[int]]:
    """Skip the listed layers inside the block: each returns its input unchanged.

    Layers are numbered 1..L as in ``hidden_states`` (``"1,2"``, ``"L3"``, ``[1, 2]``): dropping layer ``l``
    makes ``hidden_states[l]`` equal ``hidden_states[l - 1]``, the same layer ``probe --layers l`` reads.
    Layer 0 (the embeddings) cannot be dropped. The skipped layer still runs (its output is discarded),
    so this is for measuring effects, not speed. For ALBERT a logical layer is one call of the shared
    layer, so other calls still run normally. An empty list leaves the model unchanged.
    """
    layout = model_layout(model)
    wanted = layout.layer_list(layers)
    if not wanted:
        yield wanted
        return
    counter = _CallCounter()
    handles = [layout.base_model.register_forward_pre_hook(counter.reset)]
    for site in layout.sites:
        if not set(site.layers) & set(wanted):
            continue

        def hook(module, args, kwargs, output, site=site):
            layer = counter.next_layer(id(site.block), site.layers)
            if layer not in wanted:
                return None
            hidden = args[0] if args else kwargs["hidden_states"]
            if isinstance(output, tuple):  # deberta-v2, mpnet: (hidden, attentions...)
                return (hidden,) + tuple(output[1:])
            return hidden

        # prepend: transformers' own output-capturing hooks (hidden_states=...) must see the skip
        handles.append(site.block.register_forward_hook(hook, with_kwargs=True, prepend=True))
    try:
        yield wanted
    finally:
        for handle in handles:
            handle.remove()
