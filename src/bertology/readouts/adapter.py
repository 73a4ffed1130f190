"""Houlsby et al.'s bottleneck adapter on frozen activations, per layer, then pooled over layers.

``adapter(h) = h + up(gelu(down(h)))`` with ``down: hidden -> size`` and ``up: size -> hidden``; ``up``
starts at zero so each adapter starts as the identity (Houlsby et al.'s near-identity initialisation).
:class:`LayerAdapters` applies one adapter to every layer (``shared=True``: the same weights for all
layers; ``False``: one adapter per layer, ``layers`` times the parameters), pools the results with a
scalar mix (:class:`~bertology.readouts.pooling.ScalarMix`) and, with ``skip=True``, adds the final layer's
activations (the seed's skip connection from the encoder's sequence output). A ``size`` above ``hidden``
(386 on a 384-wide MiniLM, the seed's "square" size for BERT-large's 1024) widens instead of narrowing.
"""

from __future__ import annotations

import torch
from torch import nn

from bertology.readouts.pooling import ScalarMix


class Adapter(nn.Module):
    """One bottleneck adapter over ``[..., hidden]``."""

    def __init__(self, hidden: int, size: int):
        super().__init__()
        self.down = nn.Linear(hidden, size)
        self.up = nn.Linear(size, hidden)
        nn.init.normal_(self.down.weight, std=0.02)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.up(nn.functional.gelu(self.down(h)))


class LayerAdapters(nn.Module):
    """``[batch, layers, tokens, hidden]`` -> ``[batch, tokens, hidden]``: adapters per layer, scalar mix,
    optional skip from the final layer."""

    def __init__(self, num_layers: int, hidden: int, size: int = 64, shared: bool = True, skip: bool = False):
        super().__init__()
        self.shared, self.skip = shared, skip
        self.adapters = nn.ModuleList([Adapter(hidden, size)] if shared else
                                      [Adapter(hidden, size) for _ in range(num_layers)])
        self.mix = ScalarMix(num_layers)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.shared:
            adapted = self.adapters[0](x)
        else:
            adapted = torch.stack([adapter(x[:, layer]) for layer, adapter in enumerate(self.adapters)], dim=1)
        pooled = self.mix(adapted)
        return pooled + x[:, -1] if self.skip else pooled

    def layer_weights(self) -> torch.Tensor:
        return self.mix.layer_weights()
