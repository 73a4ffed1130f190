"""Pooling over layers: LP (Tenney et al.'s scalar mix) and AP (Ma et al.'s average).

Input everywhere in :mod:`bertology.readouts`: ``x`` of shape ``[batch, layers, tokens, hidden]`` (layers in
the one numbering's order: index 0 = embeddings, index L = last transformer layer) and ``mask``
``[batch, tokens]`` (True on real tokens). Both poolers return ``[batch, tokens, hidden]``.
"""

from __future__ import annotations

import torch
from torch import nn


class ScalarMix(nn.Module):
    """LP: ``gamma * sum_l softmax(w)_l * x_l`` (Tenney et al. 2019; AllenNLP's ``ScalarMix``).

    ``w`` starts at zeros (a uniform mix) and ``gamma`` at 1, as AllenNLP's defaults. Parameters:
    ``layers + 1``. :meth:`layer_weights` gives the learned softmax weights (what the LP plot shows).
    """

    def __init__(self, num_layers: int):
        super().__init__()
        self.scalars = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        weights = torch.softmax(self.scalars, dim=0)
        return self.gamma * torch.einsum("l,bltd->btd", weights, x)

    def layer_weights(self) -> torch.Tensor:
        return torch.softmax(self.scalars.detach(), dim=0)


class LayerAverage(nn.Module):
    """AP: the plain mean over layers (Ma et al. 2019, "averaging all layers"). No parameters."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return x.mean(dim=1)
