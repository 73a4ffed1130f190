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
from dataclasses import dataclass

from torch import nn

from bertology.errors import ModelError
from bertology.models.families import family

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
