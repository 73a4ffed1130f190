"""Where the heads are, and reversible hooks that mask heads and drop layers.

Head masking multiplies the per-head slices of the *input* of each layer's attention output projection
(``BertSelfOutput.dense``, DistilBERT's ``out_lin``, ALBERT's ``attention.dense``, MPNet's ``attn.o``...).
That input is the concatenated per-head context ``softmax(QK^T) V``, so scaling slice ``h`` by 0 removes
head ``h`` exactly as Michel et al. (2019) define it, whatever the attention implementation (eager, sdpa,
flash): no attention weights are needed. transformers 5 silently ignores ``head_mask=`` (no error, no
effect), which is why this module exists.

Layer dropping is a forward hook on the transformer block that returns the block's input as its output.
Every hook is removed when its context manager exits; no weight is copied or changed.

Modules are found by walking the model (q/k/v projections by name, the output projection next to them),
so the same code serves bert, roberta, electra, distilbert, albert (shared layers), deberta-v2 and mpnet.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Sequence

import torch
from torch import nn

from bertology.errors import DataError, ModelError

#: Sibling names of per-head query/key/value projections, one tuple per architecture family.
_QKV_NAMES: tuple[tuple[str, str, str], ...] = (
    ("query", "key", "value"),  # bert, roberta, electra, albert, camembert, xlm-roberta
    ("q_lin", "k_lin", "v_lin"),  # distilbert
    ("query_proj", "key_proj", "value_proj"),  # deberta, deberta-v2
    ("q", "k", "v"),  # mpnet
)
#: Output projection living inside the attention module itself (fused layouts).
_FUSED_OUTPUT_NAMES = ("dense", "out_lin", "o", "out_proj")
#: Per-head projections beyond q/k/v that must be sliced when pruning (DeBERTa's relative attention).
_EXTRA_PER_HEAD_NAMES = ("pos_key_proj", "pos_query_proj")

SUPPORTED_MODEL_TYPES = ("bert", "roberta", "electra", "distilbert", "albert", "deberta-v2", "mpnet",
                         "camembert", "xlm-roberta")


@dataclass
class AttentionSite:
    """One physical self-attention module and the logical layers it serves (several for ALBERT)."""

    name: str
    module: nn.Module
    query: nn.Linear
    key: nn.Linear
    value: nn.Linear
    output: nn.Linear
    output_name: str
    block: nn.Module
    block_name: str
    layers: list[int] = field(default_factory=list)
    qkv_names: tuple[str, str, str] = ("query", "key", "value")
    extra_per_head: dict[str, nn.Linear] = field(default_factory=dict)

    @property
    def fused(self) -> bool:
        """Whether the output projection is inside the q/k/v module (albert, distilbert, mpnet)."""
        return self.output_name.rpartition(".")[0] == self.name

    @property
    def head_size(self) -> int:
        size = getattr(self.module, "attention_head_size", None)
        if size is None:
            raise ModelError(f"{self.name}: no attention_head_size attribute; cannot split heads")
        return int(size)

    @property
    def num_heads(self) -> int:
        """Heads currently present (fewer than the config's after pruning)."""
        return self.output.in_features // self.head_size


@dataclass
class ModelLayout:
    """Every attention site of a model, indexed by logical layer, with the original head numbering."""

    model_type: str
    num_layers: int
    num_heads: int  # heads per layer before any pruning (the config's)
    sites: list[AttentionSite]
    base_model: nn.Module
    #: original head ids still present, per logical layer (all heads unless the model was pruned)
    present_heads: dict[int, list[int]]

    def site(self, layer: int) -> AttentionSite:
        for site in self.sites:
            if layer in site.layers:
                return site
        raise ModelError(f"no attention module serves layer {layer}")  # unreachable after validation

    @property
    def shared(self) -> bool:
        return any(len(site.layers) > 1 for site in self.sites)

    def all_heads(self) -> list[tuple[int, int]]:
        """Every (layer, head) still present, in layer-major order."""
        return [(layer, head) for layer in range(self.num_layers) for head in self.present_heads[layer]]

    def check_layer(self, layer: int) -> None:
        if not isinstance(layer, (int,)) or isinstance(layer, bool) or not 0 <= layer < self.num_layers:
            raise ModelError(
                f"layer {layer!r} out of range: this {self.model_type} model has {self.num_layers} layers "
                f"(0-{self.num_layers - 1})"
            )

    def check_head(self, layer: int, head: int) -> None:
        self.check_layer(layer)
        if not isinstance(head, int) or isinstance(head, bool) or not 0 <= head < self.num_heads:
            raise ModelError(
                f"head {head!r} out of range in layer {layer}: this {self.model_type} model has "
                f"{self.num_heads} heads per layer (0-{self.num_heads - 1})"
            )


def _config_int(config, *names: str) -> int:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return int(value)
    raise ModelError(f"{type(config).__name__} has none of {names}; cannot tell the model's size")


def _is_linear(module) -> bool:
    return isinstance(module, nn.Linear)


def _block_of(model: nn.Module, name: str) -> str:
    """The nearest ancestor of ``name`` that is an element of a ModuleList: the transformer block."""
    parts = name.split(".")
    for end in range(len(parts) - 1, 0, -1):
        if parts[end].isdigit():
            parent = model.get_submodule(".".join(parts[:end])) if end else model
            if isinstance(parent, nn.ModuleList):
                return ".".join(parts[: end + 1])
    raise ModelError(f"{name}: attention module is not inside a list of layers; unsupported layout")


def _find_output_projection(model: nn.Module, name: str, module: nn.Module, width: int) -> tuple[str, nn.Linear]:
    for child in _FUSED_OUTPUT_NAMES:
        candidate = getattr(module, child, None)
        if _is_linear(candidate) and candidate.in_features == width:
            return f"{name}.{child}", candidate
    # Separate layout (bert, deberta): parent.output.dense after parent.self
    parent_name = name.rpartition(".")[0]
    parent = model.get_submodule(parent_name) if parent_name else model
    output = getattr(parent, "output", None)
    dense = getattr(output, "dense", None) if output is not None else None
    if _is_linear(dense) and dense.in_features == width:
        return f"{parent_name}.output.dense", dense
    raise ModelError(
        f"{name}: found query/key/value projections but no attention output projection "
        f"(looked for {', '.join(_FUSED_OUTPUT_NAMES)} inside it and output.dense beside it)"
    )


def _layout_cache_key(model: nn.Module) -> tuple:
    return tuple((name, id(m)) for name, m in model.named_modules() if _is_linear(m))


def model_layout(model: nn.Module) -> ModelLayout:
    """Find every self-attention module of a BERT-family model, robustly, by walking its modules.

    Raises :class:`ModelError` naming the model type when the layout is not one this module understands.
    """
    config = getattr(model, "config", None)
    if config is None:
        raise ModelError(f"{type(model).__name__} has no .config; expected a transformers PreTrainedModel")
    model_type = getattr(config, "model_type", type(model).__name__)
    num_layers = _config_int(config, "num_hidden_layers", "n_layers")
    num_heads = _config_int(config, "num_attention_heads", "n_heads")

    found: list[AttentionSite] = []
    for name, module in model.named_modules():
        if "crossattention" in name:
            continue  # decoder cross-attention is not a head of the encoder
        for q_name, k_name, v_name in _QKV_NAMES:
            q, k, v = (getattr(module, n, None) for n in (q_name, k_name, v_name))
            if not (_is_linear(q) and _is_linear(k) and _is_linear(v)):
                continue
            if isinstance(module, nn.ModuleList) or isinstance(module, nn.ModuleDict):
                continue
            width = v.out_features
            out_name, out = _find_output_projection(model, name, module, width)
            block_name = _block_of(model, name)
            extra = {n: getattr(module, n) for n in _EXTRA_PER_HEAD_NAMES if _is_linear(getattr(module, n, None))}
            found.append(AttentionSite(
                name=name, module=module, query=q, key=k, value=v, output=out, output_name=out_name,
                block=model.get_submodule(block_name), block_name=block_name, extra_per_head=extra,
                qkv_names=(q_name, k_name, v_name),
            ))
            break
    if not found:
        raise ModelError(
            f"model type {model_type!r} ({type(model).__name__}): no self-attention module with separate "
            f"query/key/value projections found; head masking supports {', '.join(SUPPORTED_MODEL_TYPES)}"
        )

    if len(found) == num_layers:
        for layer, site in enumerate(found):
            site.layers = [layer]
    elif model_type == "albert":
        inner = _config_int(config, "inner_group_num")
        groups = _config_int(config, "num_hidden_groups")
        if inner != 1 or len(found) != groups:
            raise ModelError(
                f"albert with inner_group_num={inner}, num_hidden_groups={groups}: only inner_group_num=1 "
                "(every released ALBERT) is supported, where each logical layer is one shared layer call"
            )
        for layer in range(num_layers):
            # Same formula as AlbertTransformer.forward
            found[int(layer / (num_layers / groups))].layers.append(layer)
    else:
        raise ModelError(
            f"model type {model_type!r}: found {len(found)} attention modules for {num_layers} layers; "
            "layer sharing is only understood for albert"
        )

    pruned = {int(k): set(v) for k, v in (getattr(config, "bertology_pruned_heads", None) or {}).items()}
    present = {layer: [h for h in range(num_heads) if h not in pruned.get(layer, set())] for layer in range(num_layers)}
    for site in found:
        for layer in site.layers:
            if len(present[layer]) != site.num_heads:
                raise ModelError(
                    f"{site.name}: has {site.num_heads} heads but the config records {len(present[layer])} "
                    f"for layer {layer}; was the model pruned outside bertology?"
                )
    base = getattr(model, "base_model", model)
    return ModelLayout(model_type=model_type, num_layers=num_layers, num_heads=num_heads, sites=found,
                       base_model=base, present_heads=present)


def hook_points(model: nn.Module) -> dict[str, nn.Module]:
    """TransformerLens-style named hook points, discoverable by name.

    ``layer.{i}`` is the transformer block, ``layer.{i}.attn`` the self-attention module,
    ``layer.{i}.attn.q|k|v`` its projections and ``layer.{i}.attn.head_context`` the attention output
    projection, whose *input* is the per-head context ``[batch, tokens, heads * head_size]``
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
            points[f"{prefix}.attn.q"] = site.query
            points[f"{prefix}.attn.k"] = site.key
            points[f"{prefix}.attn.v"] = site.value
            points[f"{prefix}.attn.head_context"] = site.output
    return dict(sorted(points.items(), key=lambda kv: _natural_key(kv[0])))


def _natural_key(text: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


# --------------------------------------------------------------------------------------------------
# Head specifications


HeadSpec = Iterable[tuple[int, int]] | Mapping[int, Iterable[int]] | str


def parse_heads(spec: HeadSpec) -> list[tuple[int, int]]:
    """``"3-5,4-1"`` or ``[(3, 5), (4, 1)]`` or ``{3: [5], 4: [1]}`` -> sorted unique (layer, head) pairs.

    ``"3-*"`` stands for every head of layer 3 (expanded later, when the model is known: returns head -1).
    """
    pairs: list[tuple[int, int]] = []
    if isinstance(spec, str):
        for item in filter(None, (part.strip() for part in spec.split(","))):
            layer, sep, head = item.partition("-")
            if not sep or not layer.strip().isdigit() or not (head.strip().isdigit() or head.strip() == "*"):
                raise DataError(
                    f"head {item!r}: expected LAYER-HEAD with 0-based integers (e.g. 3-5), or LAYER-* for a whole layer"
                )
            pairs.append((int(layer), -1 if head.strip() == "*" else int(head)))
    elif isinstance(spec, Mapping):
        for layer, heads in spec.items():
            pairs.extend((int(layer), int(h)) for h in heads)
    else:
        for item in spec:
            try:
                layer, head = item
            except (TypeError, ValueError):
                raise DataError(f"head {item!r}: expected a (layer, head) pair") from None
            pairs.append((int(layer), int(head)))
    return sorted(set(pairs))


def _expand(layout: ModelLayout, heads: HeadSpec) -> list[tuple[int, int]]:
    out = []
    for layer, head in parse_heads(heads):
        if head == -1:
            layout.check_layer(layer)
            out.extend((layer, h) for h in range(layout.num_heads))
        else:
            layout.check_head(layer, head)
            out.append((layer, head))
    return sorted(set(out))


def heads_to_scales(model_or_layout, heads: HeadSpec, value: float = 0.0) -> torch.Tensor:
    """A ``[layers, heads]`` tensor of ones with ``value`` at every listed head (original numbering)."""
    layout = model_or_layout if isinstance(model_or_layout, ModelLayout) else model_layout(model_or_layout)
    scales = torch.ones(layout.num_layers, layout.num_heads)
    for layer, head in _expand(layout, heads):
        scales[layer, head] = value
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

    ``scales`` is ``[layers, heads]`` or per example ``[batch, layers, heads]`` in the original head
    numbering (a head pruned away is simply not there to scale). It may require grad: the gradient of a
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
            factor = scales[..., layer, :].index_select(-1, present[layer].to(scales.device))
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
def mask_heads(model: nn.Module, heads: HeadSpec) -> Iterator[list[tuple[int, int]]]:
    """Remove the listed heads (``[(layer, head)]``, ``{layer: [heads]}`` or ``"3-5,4-1"``) inside the block.

    Works with every attention implementation (sdpa included). Yields the validated (layer, head) list.
    An empty list leaves the model unchanged.
    """
    layout = model_layout(model)
    expanded = _expand(layout, heads)
    if not expanded:
        yield expanded
        return
    scales = heads_to_scales(layout, expanded)
    with scale_heads(model, scales):
        yield expanded


@contextlib.contextmanager
def drop_layers(model: nn.Module, layers: Iterable[int]) -> Iterator[list[int]]:
    """Skip the listed transformer layers inside the block: each returns its input unchanged.

    The skipped layer still runs (its output is discarded), so this is for measuring effects, not speed.
    For ALBERT a logical layer is one call of the shared layer, so other calls still run normally.
    """
    layout = model_layout(model)
    wanted = sorted(set(int(layer) for layer in layers))
    for layer in wanted:
        layout.check_layer(layer)
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
