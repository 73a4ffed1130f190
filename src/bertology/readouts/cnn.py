"""The seed's "BERT activations as images": a small 2-D CNN over (tokens x hidden), layers as channels.

Two 3x3 convolutions (``layers -> channels -> 1``, GELU between, zero padding so the image keeps its
size) turn ``[batch, layers, tokens, hidden]`` into ``[batch, tokens, hidden]``. Padded tokens are zeroed
before and after each convolution, so they do not leak into real ones through the kernel's edge.
"""

from __future__ import annotations

import torch
from torch import nn


class LayerCNN(nn.Module):
    def __init__(self, num_layers: int, channels: int = 8, kernel: int = 3):
        super().__init__()
        self.first = nn.Conv2d(num_layers, channels, kernel, padding=kernel // 2)
        self.second = nn.Conv2d(channels, 1, kernel, padding=kernel // 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        keep = mask[:, None, :, None].to(x.dtype) if mask is not None else None
        if keep is not None:
            x = x * keep
        hidden = nn.functional.gelu(self.first(x))
        if keep is not None:  # the first kernel's bias makes padded pixels non-zero: clear them again
            hidden = hidden * keep
        image = self.second(hidden)
        if keep is not None:
            image = image * keep
        return image[:, 0]
