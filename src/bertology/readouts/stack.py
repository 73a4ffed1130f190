"""The seed's stacks: pooling -> adapter -> 1xN convolution, then the output head.

:class:`PoolAdapterConv`: LP (:class:`~bertology.readouts.pooling.ScalarMix`) reduces the layers, one
bottleneck :class:`~bertology.readouts.adapter.Adapter` transforms the pooled vectors, and a 1xN
depthwise-separable convolution over tokens (Xception's block: an N-token filter per hidden unit, then a
pointwise ``hidden x hidden`` mix, with a residual) lets neighbouring tokens inform each other.
``[batch, layers, tokens, hidden]`` -> ``[batch, tokens, hidden]``.
"""

from __future__ import annotations

import torch
from torch import nn

from bertology.readouts.adapter import Adapter
from bertology.readouts.pooling import ScalarMix


class SeparableTokenConv(nn.Module):
    """``h + pointwise(gelu(depthwise_N(h)))`` over ``[batch, tokens, hidden]``; padding stays zero."""

    def __init__(self, hidden: int, width: int = 3):
        super().__init__()
        self.depthwise = nn.Conv1d(hidden, hidden, width, padding=width // 2, groups=hidden)
        self.pointwise = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.pointwise.weight)
        nn.init.zeros_(self.pointwise.bias)

    def forward(self, h: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is not None:
            h = h * mask[..., None].to(h.dtype)
        mixed = self.depthwise(h.transpose(1, 2)).transpose(1, 2)
        return h + self.pointwise(nn.functional.gelu(mixed))


class PoolAdapterConv(nn.Module):
    def __init__(self, num_layers: int, hidden: int, adapter_size: int = 386, width: int = 3):
        super().__init__()
        self.mix = ScalarMix(num_layers)
        self.adapter = Adapter(hidden, adapter_size)
        self.conv = SeparableTokenConv(hidden, width)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.conv(self.adapter(self.mix(x)), mask)

    def layer_weights(self) -> torch.Tensor:
        return self.mix.layer_weights()
