"""Readouts by name: a body over all layers plus an output layer (the task head), with parameter counts.

Names (``build_readout``): ``lp``, ``ap``, ``last`` (the final layer alone: the encoder's own view),
``adapter-<shared|independent>-<size>[-skip]`` (e.g. ``adapter-shared-386-skip``), ``cnn``, and ``stack``
(LP -> shared adapter 386 -> 1x3 separable convolution). Every readout takes ``x`` ``[batch, layers, tokens,
hidden]`` and ``mask`` ``[batch, tokens]``; the span task returns start and end logits ``[batch, tokens]``,
the classification task logits ``[batch, num_labels]``.
"""

from __future__ import annotations

import torch
from torch import nn

from bertology.errors import SettingError, UsageError
from bertology.runtime import seeded
from bertology.readouts.adapter import LayerAdapters
from bertology.readouts.cnn import LayerCNN
from bertology.readouts.names import ADAPTER_NAME as _ADAPTER
# The names live in names.py (light to import, checked before torch loads); the catalog re-exports them.
from bertology.readouts.names import READOUT_HELP, SEED_READOUTS, check_readout_name  # noqa: F401
from bertology.readouts.outputs import ClassOutput, SpanOutput
from bertology.readouts.pooling import LayerAverage, ScalarMix
from bertology.readouts.stack import PoolAdapterConv

TASKS = ("span", "classify")


class FinalLayer(nn.Module):
    """The last layer's activations unchanged: a readout on it sees what the encoder's own task head sees."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return x[:, -1]


class FeatureScaler(nn.Module):
    """Per-layer, per-dimension standardisation ``(x - mean) / std`` of the frozen activations.

    The statistics are buffers (saved with the readout, applied when it scores); they start as the identity
    and :func:`bertology.readouts.train.train_readout` sets them from the training activations when asked.
    Padded positions are set to 0 after scaling, as they were before it."""

    def __init__(self, num_layers: int, hidden: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(num_layers, hidden))
        self.register_buffer("std", torch.ones(num_layers, hidden))

    def set(self, mean, std) -> None:
        self.mean.copy_(torch.as_tensor(mean, dtype=self.mean.dtype))
        self.std.copy_(torch.as_tensor(std, dtype=self.std.dtype))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        # x: [batch, layers, tokens, hidden]
        scaled = (x - self.mean[None, :, None, :]) / self.std[None, :, None, :]
        if mask is not None:
            scaled = scaled * mask[:, None, :, None].to(scaled.dtype)
        return scaled


class ReadoutModel(nn.Module):
    """``scaler`` (identity unless standardised) then ``body`` (layers -> one ``[batch, tokens, hidden]``)
    then ``output`` (span or class logits)."""

    def __init__(self, name: str, body: nn.Module, output: nn.Module, task: str, num_layers: int, hidden: int):
        super().__init__()
        self.name, self.task = name, task
        self.scaler = FeatureScaler(num_layers, hidden)
        self.body, self.output = body, output

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None):
        return self.output(self.body(self.scaler(x, mask), mask), mask)

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def parameter_share(self, encoder_parameters: int) -> float:
        """Trainable parameters as a fraction of the encoder's."""
        return self.num_parameters / encoder_parameters

    def layer_weights(self) -> torch.Tensor | None:
        """Softmax layer weights of a learned pooling inside the body (LP, adapters, stack), else None."""
        getter = getattr(self.body, "layer_weights", None)
        return getter() if callable(getter) else None


def build_body(name: str, num_layers: int, hidden: int) -> nn.Module:
    name = check_readout_name(name)
    if name == "lp":
        return ScalarMix(num_layers)
    if name == "ap":
        return LayerAverage()
    if name == "last":
        return FinalLayer()
    if name == "cnn":
        return LayerCNN(num_layers)
    if name == "stack":
        return PoolAdapterConv(num_layers, hidden, adapter_size=386)
    kind, size, skip = _ADAPTER.match(name).groups()
    if int(size) < 1:
        raise SettingError("readouts", name, "adapter size must be at least 1")
    return LayerAdapters(num_layers, hidden, size=int(size), shared=kind == "shared", skip=bool(skip))


def build_readout(name: str, num_layers: int, hidden: int, task: str = "span", num_labels: int = 2,
                  seed: int | None = None) -> ReadoutModel:
    """A fresh readout ``name`` for ``num_layers`` stored layers (embeddings included) of width ``hidden``.

    ``seed`` fixes the initial weights (the global torch generator is left as it was).
    """
    if task not in TASKS:
        raise UsageError(f"task {task!r}: expected one of {', '.join(TASKS)}")
    with seeded(seed):
        body = build_body(name, num_layers, hidden)
        output = SpanOutput(hidden) if task == "span" else ClassOutput(hidden, num_labels)
    return ReadoutModel(check_readout_name(name), body, output, task, num_layers, hidden)
