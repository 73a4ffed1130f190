"""The Convexity report's fine-tuning variants (Modarressi & Mohebbi 2020, Table 1), each one spec string.

A variant is ``baseline`` or ``+``-joined parts, each ``name[:k]``:

- ``drop-last:k``       remove the top k transformer layers before fine-tuning ("Dropping last two layers").
- ``copy-last:k``       duplicate the top k layers: their copies (same pre-trained weights) are stacked on top,
                        so depth grows by k ("Coping last layers").
- ``extra-layer[:k]``   stack k new, randomly initialised layers on top ("extra Layer").
- ``multi-objective:k`` a classifier on the [CLS] of each of the top k layers; the loss is their mean.
                        Predictions come from the top layer's classifier ("Multi-objective fine-tuning").

Parts are applied in the order drop, copy, extra; ``multi-objective`` counts layers of the result, so
``multi-objective:3+extra-layer`` puts classifiers on the new layer and the two below it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from torch import nn

from bertology.errors import ModelError
from bertology.models.layout import config_depth, layer_stack, replace_layers
from bertology.runtime import derive_seed, seeded

_NAMES = {"drop-last": "drop_last", "copy-last": "copy_last", "extra-layer": "extra_layers", "multi-objective": "multi_objective"}
_DEFAULT_K = {"drop_last": 2, "copy_last": 2, "extra_layers": 1, "multi_objective": 4}


@dataclass(frozen=True)
class Variant:
    """A model variant for fine-tuning; :func:`parse_variant` builds one from its spec string."""

    drop_last: int = 0
    copy_last: int = 0
    extra_layers: int = 0
    multi_objective: int = 0

    @property
    def name(self) -> str:
        parts = []
        if self.drop_last:
            parts.append(f"drop-last:{self.drop_last}")
        if self.copy_last:
            parts.append(f"copy-last:{self.copy_last}")
        if self.extra_layers:
            parts.append("extra-layer" if self.extra_layers == 1 else f"extra-layer:{self.extra_layers}")
        if self.multi_objective:
            parts.append(f"multi-objective:{self.multi_objective}")
        return "+".join(parts) or "baseline"

    def __str__(self) -> str:
        return self.name

    def depth(self, base_layers: int) -> int:
        """Number of transformer layers after applying this variant to a model of ``base_layers``."""
        return base_layers - self.drop_last + self.copy_last + self.extra_layers

    def objective_layers(self, depth: int) -> list[int]:
        """Layers (1..depth as in ``hidden_states``, of the modified model) whose [CLS] feeds a classifier;
        the last is the predictor."""
        k = max(1, self.multi_objective)
        return list(range(depth - k + 1, depth + 1))

    def check(self, base_layers: int) -> None:
        """Raise :class:`ModelError` if this variant asks for layers a ``base_layers``-layer model lacks."""
        if self.drop_last >= base_layers:
            raise ModelError(
                f"variant {self.name!r}: cannot drop {self.drop_last} layers of a model with {base_layers}; "
                f"expected drop-last:k with k < {base_layers} (at least one layer must remain)"
            )
        kept = base_layers - self.drop_last
        if self.copy_last > kept:
            raise ModelError(
                f"variant {self.name!r}: cannot copy the last {self.copy_last} layers of a model with {kept} "
                f"(after dropping {self.drop_last}); expected copy-last:k with k <= {kept}"
            )
        depth = self.depth(base_layers)
        if self.multi_objective > depth:
            raise ModelError(
                f"variant {self.name!r}: multi-objective over {self.multi_objective} layers, but the model has "
                f"{depth}; expected multi-objective:k with k <= {depth}"
            )


def parse_variant(spec: str | Variant) -> Variant:
    """Parse a variant spec like ``baseline``, ``drop-last:2`` or ``multi-objective:4+extra-layer``."""
    if isinstance(spec, Variant):
        return spec
    text = spec.strip().lower().replace("_", "-")
    if text in ("", "baseline", "none"):
        return Variant()
    values: dict[str, int] = {}
    for part in text.split("+"):
        name, _, count = part.strip().partition(":")
        if name not in _NAMES:
            raise ModelError(
                f"unknown variant part {name!r} in {spec!r}; expected baseline or parts joined by '+' from "
                f"{', '.join(n + '[:k]' for n in _NAMES)}"
            )
        field = _NAMES[name]
        if field in values:
            raise ModelError(f"variant {spec!r}: {name} given twice")
        try:
            k = int(count) if count else _DEFAULT_K[field]
        except ValueError:
            raise ModelError(f"variant {spec!r}: {name}:{count} is not a whole number of layers") from None
        if k < 1:
            raise ModelError(f"variant {spec!r}: {name}:{k}; expected at least 1 layer")
        values[field] = k
    return Variant(**values)


#: What a refusal of a model without a layer stack says the stack is needed for.
_VARIANTS_NEED = "the fine-tuning variants other than baseline need a BERT-like encoder"


def _reinitialise(module: nn.Module, std: float) -> None:
    """BERT's initialisation (Devlin et al.): N(0, std) weights, zero biases, unit LayerNorm."""
    for sub in module.modules():
        if isinstance(sub, nn.Linear):
            nn.init.normal_(sub.weight, mean=0.0, std=std)
            if sub.bias is not None:
                nn.init.zeros_(sub.bias)
        elif isinstance(sub, nn.LayerNorm):
            nn.init.ones_(sub.weight)
            nn.init.zeros_(sub.bias)


def apply_variant(backbone: nn.Module, variant: Variant | str, seed: int = 0) -> nn.Module:
    """Change ``backbone``'s layer stack in place as ``variant`` says; returns it. Updates the config's depth."""
    variant = parse_variant(variant)
    if not (variant.drop_last or variant.copy_last or variant.extra_layers):
        # the stack stays as it is (ALBERT, whose one shared layer is no stack, fine-tunes too)
        variant.check(config_depth(backbone.config))
        return backbone
    layers = layer_stack(backbone, _VARIANTS_NEED).layers
    variant.check(len(layers))
    stack = list(layers)
    if variant.drop_last:
        stack = stack[: len(stack) - variant.drop_last]
    if variant.copy_last:
        stack = stack + [copy.deepcopy(layer) for layer in stack[-variant.copy_last:]]
    if variant.extra_layers:
        std = float(getattr(backbone.config, "initializer_range", 0.02))
        with seeded(derive_seed(seed, "extra-layer")):  # new layers depend on the run's seed only
            for _ in range(variant.extra_layers):
                fresh = copy.deepcopy(stack[-1])
                _reinitialise(fresh, std)
                stack.append(fresh)
    replace_layers(backbone, stack, _VARIANTS_NEED)
    return backbone
