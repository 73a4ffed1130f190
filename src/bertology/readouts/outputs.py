"""Output heads on ``[batch, tokens, hidden]``: start/end logits per token, or a class per input.

:class:`SpanOutput` is BERT's SQuAD head (one ``hidden x 2`` linear map); padded positions get a large
negative logit so they never win. :class:`ClassOutput` classifies from position 0 ([CLS], or the single
row of sentence-level features): SQuAD's answerable-or-not framing and GLUE sentence tasks
(``num_labels == 1``: regression, STS-B).
"""

from __future__ import annotations

import torch
from torch import nn

#: Logit given to padded positions (finite, so a softmax over an all-padding row stays defined).
MASKED = -1e4


class SpanOutput(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, 2)

    def forward(self, h: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.linear(h)
        start, end = logits[..., 0], logits[..., 1]
        if mask is not None:
            start = start.masked_fill(~mask, MASKED)
            end = end.masked_fill(~mask, MASKED)
        return start, end


class ClassOutput(nn.Module):
    def __init__(self, hidden: int, num_labels: int = 2, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(hidden, num_labels)

    def forward(self, h: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.linear(self.dropout(h[:, 0]))
