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
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Sequence

import torch
from torch import nn

from bertology.errors import ModelError
from bertology.models.families import family
from bertology.models.layout import config_depth, config_heads, config_hidden, layer_blocks
from bertology.numbering import HeadSpec, head_label, parse_heads, parse_layers, transformer_layers

SUPPORTED_MODEL_TYPES = ("bert", "roberta", "electra", "distilbert", "albert", "deberta-v2", "mpnet",
                         "camembert", "xlm-roberta", "modernbert")
#: Per-head projections beyond q/k/v that must be sliced when pruning (DeBERTa's relative attention).
_EXTRA_PER_HEAD_NAMES = ("pos_key_proj", "pos_query_proj")


@dataclass
class AttentionSite:
    """One physical self-attention module and the logical layers it serves (several for ALBERT).

    ``output`` is the attention output projection: its input is the per-head context of every head side by
    side (``hook_z``), where heads are masked, scaled and measured. ``projections`` are the per-head input
    projections, separate ``{query, key, value}`` or one fused ``[q heads | k heads | v heads]`` projection:
    only head removal slices them.
    """

    name: str
    module: nn.Module
    output: nn.Linear
    output_name: str
    block: nn.Module
    block_name: str
    head_size: int
    projections: dict[str, nn.Linear] = field(default_factory=dict)
    layers: list[int] = field(default_factory=list)
    extra_per_head: dict[str, nn.Linear] = field(default_factory=dict)

    @property
    def fused(self) -> bool:
        """Whether the output projection is inside the attention module (albert, distilbert, mpnet, modernbert)."""
        return self.output_name.rpartition(".")[0] == self.name

    @property
    def fused_qkv(self) -> bool:
        """Whether one projection computes query, key and value together (modernbert's ``Wqkv``)."""
        return len(self.projections) == 1

    def _projection(self, index: int) -> nn.Linear | None:
        return None if self.fused_qkv or len(self.projections) != 3 else list(self.projections.values())[index]

    @property
    def query(self) -> nn.Linear | None:
        return self._projection(0)

    @property
    def key(self) -> nn.Linear | None:
        return self._projection(1)

    @property
    def value(self) -> nn.Linear | None:
        return self._projection(2)

    @property
    def num_heads(self) -> int:
        """Heads currently present (fewer than the config's after pruning)."""
        return self.output.in_features // self.head_size


def module_index(layer: int) -> int:
    """The module index of layer ``layer`` (1..L): ``encoder.layer[layer - 1]``; the one translation."""
    return int(layer) - 1


def grid_index(layer: int, head: int) -> tuple[int, int]:
    """Where head ``(layer, head)`` sits in a ``[layers, heads]`` grid (head scales, importance scores).

    Row ``layer - 1`` holds layer ``layer``: grids have one row per transformer layer and no row for the
    embeddings. Every grid in :mod:`bertology.intervention` is indexed through this function.
    """
    return module_index(layer), int(head)


@dataclass
class ModelLayout:
    """Every attention site of a model, by layer (1..L, hidden_states numbering), with the original heads."""

    model_type: str
    num_layers: int
    num_heads: int  # heads per layer before any pruning (the config's)
    sites: list[AttentionSite]
    base_model: nn.Module
    #: original head ids still present, per layer 1..L (all heads unless the model was pruned)
    present_heads: dict[int, list[int]]

    def site(self, layer: int) -> AttentionSite:
        """The attention module serving layer ``layer`` (1..L)."""
        for site in self.sites:
            if layer in site.layers:
                return site
        raise ModelError(f"no attention module serves layer {layer}; this {self.model_type} model has "
                         f"layers 1-{self.num_layers} (0 is the embeddings, which have no attention)")

    @property
    def shared(self) -> bool:
        return any(len(site.layers) > 1 for site in self.sites)

    @property
    def layers(self) -> list[int]:
        """``[1, ..., L]``: the layers that have heads and blocks."""
        return list(transformer_layers(self.num_layers))

    def all_heads(self) -> list[tuple[int, int]]:
        """Every (layer, head) still present, layer-major."""
        return [(layer, head) for layer in self.layers for head in self.present_heads[layer]]

    def block_layers(self) -> dict[str, list[int]]:
        """``{block module name: the layers (1..L) it serves}``, names relative to the model given
        (one layer each, except ALBERT's shared block)."""
        return {site.block_name: list(site.layers) for site in self.sites}

    def heads(self, spec: HeadSpec) -> list[tuple[int, int]]:
        """``spec`` (labels such as ``"L4H5,L3"``, ``[(4, 5)]`` or ``{4: [5]}``) checked against this model
        and expanded (``L3`` = every head of layer 3); sorted, unique. An empty list or mapping gives ``[]``;
        an empty string is an error (``--heads ''`` is a mistake, not a request for nothing)."""
        if not isinstance(spec, str):
            spec = spec if isinstance(spec, Mapping) else list(spec)
            if not spec:
                return []
        return [(layer, head) for layer, head in parse_heads(spec, self.num_layers, self.num_heads)]

    def layer_list(self, spec) -> list[int]:
        """``spec`` (``"1,2"``, ``"L3"``, ``[1, 2]``, ``"all"``) as checked layers 1..L; layer 0 is refused."""
        if not isinstance(spec, (str, int)) and spec is not None:
            spec = list(spec)
            if not spec:
                return []
        layers = parse_layers(spec, self.num_layers, transformer_only=True)
        return self.layers if layers is None else layers


def _config_int(config, *names: str) -> int:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return int(value)
    raise ModelError(f"{type(config).__name__} has none of {names}; cannot tell the model's size")


def _is_linear(module) -> bool:
    return isinstance(module, nn.Linear)


def _submodule(root: nn.Module, path: str) -> nn.Module | None:
    try:
        return root.get_submodule(path)
    except AttributeError:
        return None


def _head_size(config, entry, num_heads: int) -> int:
    if entry.head_size_key and getattr(config, entry.head_size_key, None):
        return int(getattr(config, entry.head_size_key))
    return config_hidden(config) // num_heads


def model_layout(model: nn.Module) -> ModelLayout:
    """Find every self-attention module of an encoder: in each transformer block (:func:`bertology.models.layout.
    layer_blocks`), the attention output projection where its :class:`~bertology.models.families.Family` entry
    says it is.

    Raises :class:`ModelError` naming the model type when no layer has one (a family to register).
    """
    config = getattr(model, "config", None)
    if config is None:
        raise ModelError(f"{type(model).__name__} has no .config; expected a transformers PreTrainedModel")
    model_type = getattr(config, "model_type", type(model).__name__)
    entry = family(model_type)
    num_layers = config_depth(config)
    num_heads = config_heads(config)
    head_size = _head_size(config, entry, num_heads)

    found: list[AttentionSite] = []
    for block_name, block in layer_blocks(model):
        output = _submodule(block, entry.attention_output)
        attention = _submodule(block, entry.attention)
        if not _is_linear(output) or attention is None:
            continue
        projections = {n: getattr(attention, n) for n in entry.attention_names
                       if _is_linear(getattr(attention, n, None))}
        extra = {n: getattr(attention, n) for n in _EXTRA_PER_HEAD_NAMES if _is_linear(getattr(attention, n, None))}
        found.append(AttentionSite(
            name=f"{block_name}.{entry.attention}", module=attention, output=output,
            output_name=f"{block_name}.{entry.attention_output}", block=block, block_name=block_name,
            head_size=head_size, projections=projections, extra_per_head=extra,
        ))
    if not found:
        raise ModelError(
            f"model type {model_type!r} ({type(model).__name__}): no layer has an attention output projection at "
            f"{entry.attention_output!r} (layers looked for at {entry.layers!r}); head masking supports {', '.join(SUPPORTED_MODEL_TYPES)} (another family: "
            "register a Family with its attention_output in bertology.models.families)"
        )

    if len(found) == num_layers:
        for layer in transformer_layers(num_layers):
            found[module_index(layer)].layers = [layer]
    elif model_type == "albert":
        inner = _config_int(config, "inner_group_num")
        groups = _config_int(config, "num_hidden_groups")
        if inner != 1 or len(found) != groups:
            raise ModelError(
                f"albert with inner_group_num={inner}, num_hidden_groups={groups}: only inner_group_num=1 "
                "(every released ALBERT) is supported, where each logical layer is one shared layer call"
            )
        for layer in transformer_layers(num_layers):
            # Same formula as AlbertTransformer.forward, on the module index
            found[int(module_index(layer) / (num_layers / groups))].layers.append(layer)
    else:
        raise ModelError(
            f"model type {model_type!r}: found {len(found)} attention modules for {num_layers} layers; "
            "layer sharing is only understood for albert"
        )

    pruned = recorded_pruned_heads(config)
    present = {layer: [h for h in range(num_heads) if h not in pruned.get(layer, set())]
               for layer in transformer_layers(num_layers)}
    for site in found:
        for layer in site.layers:
            if len(present[layer]) * head_size != site.output.in_features:
                raise ModelError(
                    f"{site.output_name}: takes {site.output.in_features} inputs but the config records "
                    f"{len(present[layer])} heads of {head_size} for layer {layer}; was the model pruned outside "
                    "bertology?"
                )
    base = getattr(model, "base_model", model)
    return ModelLayout(model_type=model_type, num_layers=num_layers, num_heads=num_heads, sites=found,
                       base_model=base, present_heads=present)


#: Where a pruned model's config records the heads that are gone.
PRUNED_HEADS_KEY = "bertology_pruned_heads"


def recorded_pruned_heads(config) -> dict[int, set[int]]:
    """The heads a config records as pruned, ``{layer (1..L): {heads}}``.

    Written as a list of labels (``["L1H1", "L2H0"]``). Checkpoints pruned before the one numbering hold
    a mapping ``{"0": [1], "1": [0]}`` keyed by **module index** (0-based layers); it is read as such and
    converted (module index ``i`` is layer ``i + 1``), so those checkpoints keep loading unchanged.
    """
    raw = getattr(config, PRUNED_HEADS_KEY, None) or []
    record: dict[int, set[int]] = {}
    if isinstance(raw, Mapping):  # legacy: module indices
        for index, heads in raw.items():
            record.setdefault(int(index) + 1, set()).update(int(h) for h in heads)
        return record
    labels = [raw] if isinstance(raw, str) else list(raw)
    if labels:
        for layer, head in parse_heads(",".join(labels), option=f"config {PRUNED_HEADS_KEY}"):
            record.setdefault(layer, set()).add(head)
    return record


def record_pruned_heads(config, record: Mapping[int, Iterable[int]]) -> list[str]:
    """Store ``{layer: heads}`` in ``config`` as sorted labels (JSON-friendly); returns the labels."""
    labels = [head_label(layer, head) for layer in sorted(record) for head in sorted(record[layer])]
    setattr(config, PRUNED_HEADS_KEY, labels)
    return labels


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
