"""The compression methods by name, and ``--methods`` read and checked without torch (light module).

A method is ``NAME`` or ``NAME:VALUE``:

======================  =====================================================================================
``int8-dynamic``        post-training dynamic int8 quantization of the linear layers (weights int8 per
                        output channel, activations quantized on the fly per batch)
``int8-static``         static int8: activations on grids calibrated on ``--calibration`` sentences
``fp16``, ``bf16``      half-precision weights
``magnitude:S``         unstructured magnitude pruning of the transformer layers' linear weights to sparsity
                        ``S`` in [0, 1), one threshold for all of them (global)
``magnitude-layer:S``   the same, each weight matrix to sparsity ``S`` (per layer)
``heads-importance:F``  structured pruning of the fraction ``F`` of heads least important (Michel et al.)
``heads-random:F``      the same number of heads drawn at random (seeded)
``drop-top:K``          the top ``K`` transformer layers removed
======================  =====================================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from bertology.errors import SettingError

#: name -> (what its value is, or None for no value; one line of help)
METHODS: dict[str, tuple[str | None, str]] = {
    "int8-dynamic": (None, "dynamic int8 quantization of the linear layers"),
    "int8-static": (None, "static int8 quantization of the linear layers, calibrated"),
    "fp16": (None, "float16 weights"),
    "bf16": (None, "bfloat16 weights"),
    "magnitude": ("sparsity", "unstructured magnitude pruning, one global threshold"),
    "magnitude-layer": ("sparsity", "unstructured magnitude pruning, each weight matrix alone"),
    "heads-importance": ("fraction", "prune the least important heads (Michel et al. 2019)"),
    "heads-random": ("fraction", "prune as many heads drawn at random"),
    "drop-top": ("layers", "remove the top K transformer layers"),
}

#: The acceptance set of issue 22 (what ``--methods default`` means).
DEFAULT_METHODS = ("int8-dynamic,fp16,bf16,magnitude:0.3,magnitude:0.5,magnitude:0.7,heads-importance:0.25,"
                   "heads-random:0.25,heads-importance:0.5,heads-random:0.5,drop-top:1,drop-top:2")

#: ``--finetune`` recipe defaults: the report's BShift fine-tuning (report/interventions.py InterventionSettings:
#: all training sentences, 2 epochs, lr 1e-4), which reached 80.5% on BShift dev with MiniLM.
FINETUNE_MAX_TRAIN: int | None = None
FINETUNE_EPOCHS = 2.0
FINETUNE_LR = 1e-4


@dataclass(frozen=True)
class Method:
    """One compression method with its value (``None`` for methods without one)."""

    name: str
    value: float | int | None = None

    @property
    def label(self) -> str:
        """How tables and folders name it: ``magnitude-0.5``, ``drop-top-2``, ``fp16``."""
        if self.value is None:
            return self.name
        return f"{self.name}-{self.value:g}"


def parse_method(text: str, option: str = "methods") -> Method:
    """One method from ``NAME`` or ``NAME:VALUE``; a :class:`UsageError` naming the option otherwise."""
    name, _, value_text = text.strip().partition(":")
    name = name.strip().lower()
    if name not in METHODS:
        raise SettingError(option, None, f"unknown method {name!r}; expected one of {', '.join(METHODS)}", shown="")
    kind = METHODS[name][0]
    if kind is None:
        if value_text:
            raise SettingError(option, None, f"method {name!r} takes no value (got {text.strip()!r})", shown="")
        return Method(name)
    if not value_text:
        raise SettingError(option, None, f"method {name!r} needs a {kind}: {name}:VALUE", shown="")
    try:
        value = float(value_text)
    except ValueError:
        raise SettingError(option, None, f"{text.strip()!r}: {value_text!r} is not a number", shown="") from None
    if kind == "sparsity" and not 0.0 <= value < 1.0:
        raise SettingError(option, None, f"{text.strip()!r}: sparsity {value:g} is outside [0, 1)", shown="")
    if kind == "fraction" and not 0.0 < value < 1.0:
        raise SettingError(option, None, f"{text.strip()!r}: fraction of heads {value:g} is outside (0, 1)", shown="")
    if kind == "layers":
        if value != int(value) or value < 1:
            raise SettingError(option, None, f"{text.strip()!r}: expected a whole number of layers, at least 1",
                               shown="")
        return Method(name, int(value))
    return Method(name, value)


def parse_methods(text: str | None, option: str = "methods") -> list[Method]:
    """Comma-separated methods (``default``: :data:`DEFAULT_METHODS`); duplicates kept once, order kept."""
    if text is None or text.strip().lower() == "default":
        text = DEFAULT_METHODS
    methods = [parse_method(part, option) for part in text.split(",") if part.strip()]
    if not methods:
        raise SettingError(option, None, "no methods given; expected e.g. int8-dynamic,fp16,drop-top:2", shown="")
    return list(dict.fromkeys(methods))
