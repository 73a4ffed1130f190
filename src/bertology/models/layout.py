"""Where a model keeps its transformer layers and how its config says how many: one helper, read from each
family's :class:`~bertology.models.families.Family` entry (``layers``, ``depth_key``, ``heads_key``,
``hidden_key``), for every capability that changes or walks the layer stack (fine-tuning variants,
dropping the top layers, magnitude pruning, head hooks).

:func:`layer_blocks` names every transformer block of a model (or of a module that wraps one, such as a
fine-tuning classifier) in call order; :func:`layer_stack` is the one module list of them when there is one per
layer; :func:`replace_layers` puts another list of blocks in its place and updates the config;
:func:`config_depth`, :func:`config_heads` and :func:`config_hidden` read the config.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from torch import nn

from bertology.errors import ModelError
from bertology.models.families import family
from bertology.numbering import HeadSpec, head_label, parse_heads, parse_layers, transformer_layers

#: The spellings of each config value some family uses, tried after the family's own key.
_SPELLINGS = {"depth": ("num_hidden_layers", "n_layers", "num_layers"),
              "heads": ("num_attention_heads", "n_heads"),
              "hidden": ("hidden_size", "dim")}


def _config_value(config, what: str, own_key: str) -> int:
    for key in (own_key, *_SPELLINGS[what]):
        value = getattr(config, key, None)
        if value is not None:
            return int(value)
    raise ModelError(f"{type(config).__name__} has none of {(own_key, *_SPELLINGS[what])}; cannot tell the "
                     f"model's {what}")


def _family_of(config):
    return family(getattr(config, "model_type", ""))


def config_depth(config) -> int:
    """The number of transformer layers the config records (``num_hidden_layers``, DistilBERT's ``n_layers``)."""
    return _config_value(config, "depth", _family_of(config).depth_key)


def config_heads(config) -> int:
    """Attention heads per layer (``num_attention_heads``, DistilBERT's ``n_heads``)."""
    return _config_value(config, "heads", _family_of(config).heads_key)


def config_hidden(config) -> int:
    """The width of the hidden states (``hidden_size``, DistilBERT's ``dim``)."""
    return _config_value(config, "hidden", _family_of(config).hidden_key)


def set_config_depth(config, depth: int) -> None:
    """Record ``depth`` layers in the config, under the key the family reads."""
    for key in (_family_of(config).depth_key, *_SPELLINGS["depth"]):
        if hasattr(config, key):
            setattr(config, key, depth)
            return
    raise ModelError(f"{type(config).__name__}: no num_hidden_layers/n_layers field to update")


def _config_of(model: nn.Module):
    config = getattr(model, "config", None)
    if config is None:
        backbone = getattr(model, "backbone", None)  # a fine-tuning wrapper (GlueModel) keeps its encoder there
        config = getattr(backbone, "config", None)
    if config is None:
        raise ModelError(f"{type(model).__name__} has no .config; expected a transformers PreTrainedModel")
    return config


def layer_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every transformer block of ``model`` as ``(name, module)``, in call order, named relative to ``model``
    (``bert.encoder.layer.3``); ALBERT's shared layer once. Found where the family's ``layers`` path says, under
    whatever wraps the encoder (a task head's model, a fine-tuning classifier); ``[]`` when there is none."""
    pattern = _family_of(_config_of(model)).layers
    regex = re.compile(r"(?:^|(?P<prefix>.*)\.)" + r"\.".join(r"\d+" if part == "*" else re.escape(part)
                                                              for part in pattern.split(".")) + "$")
    found, prefix = [], None
    for name, module in model.named_modules():
        match = regex.match(name)
        if match is None or (found and (match.group("prefix") or "") != prefix):
            continue  # only the first encoder's blocks, if a model holds more than one
        prefix = match.group("prefix") or ""
        found.append((name, module))
    return found


@dataclass(frozen=True)
class LayerStack:
    """The one module list of a model's transformer blocks: ``parent.<attribute>`` is ``layers``."""

    parent: nn.Module
    attribute: str
    layers: nn.ModuleList


def layer_stack(model: nn.Module, needed_for: str = "this needs one module per layer") -> LayerStack:
    """The module list holding one transformer block per layer. :class:`ModelError` (ending with
    ``needed_for``) when the model has none: ALBERT calls one shared layer L times."""
    config = _config_of(model)
    entry = _family_of(config)
    blocks = layer_blocks(model)
    if entry.layers.count("*") != 1 or not blocks:
        raise ModelError(f"{getattr(config, 'model_type', type(model).__name__)}: no list of "
                         f"{config_depth(config)} transformer layers found (layers shared, as in ALBERT?); {needed_for}")
    list_name = blocks[0][0].rpartition(".")[0]
    parent_name, _, attribute = list_name.rpartition(".")
    return LayerStack(model.get_submodule(parent_name), attribute, model.get_submodule(list_name))


def replace_layers(model: nn.Module, blocks: list[nn.Module], needed_for: str = "this needs one module per layer"
                   ) -> None:
    """Make ``blocks`` the model's transformer layers, in order (fewer to drop layers, copies to add some) and
    record the new depth in its config: each block's ``layer_idx`` (transformers' cache index) renumbered, and
    ModernBERT's per-layer attention types (``config.layer_types``) following the blocks."""
    stack = layer_stack(model, needed_for)
    for index, block in enumerate(blocks):
        for sub in block.modules():  # copies must not share a cache index
            if hasattr(sub, "layer_idx") and isinstance(getattr(sub, "layer_idx"), int):
                sub.layer_idx = index
    setattr(stack.parent, stack.attribute, nn.ModuleList(blocks))
    config = _config_of(model)
    set_config_depth(config, len(blocks))
    if isinstance(getattr(config, "layer_types", None), list):  # modernbert: each layer global or local
        if all(hasattr(block, "attention_type") for block in blocks):
            config.layer_types = [block.attention_type for block in blocks]
        else:
            config.layer_types = config.layer_types[:len(blocks)]


def drop_top_layers(model: nn.Module, k: int, needed_for: str = "this needs one module per layer") -> None:
    """Remove the top ``k`` transformer layers of ``model`` in place (hidden states then run 0..L-k)."""
    layers = list(layer_stack(model, needed_for).layers)
    replace_layers(model, layers[: len(layers) - k], needed_for)


# ------------------------------------------------------------------------------------------------
# the attention sites: where each layer's heads are (heads are masked, scaled and pruned there)

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
