"""Tokenising GLUE examples once, and batching them: dynamic padding (the epoch order, length-grouped batches,
is :func:`bertology.training.training_batches`).

Padding every batch to 128 tokens wastes most of the compute on GLUE (median SST-2 sentence: ~13
tokens). We pad each batch to its own longest example and group examples of similar length into the
same batch (sorted within shuffled windows of ``window`` batches, so batch order stays random).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from bertology.data.glue import GlueExample
from bertology.models.batching import pad_batch, token_budget_batches



@dataclass
class EncodedExamples:
    """Token ids of examples (unpadded) and their labels; what :func:`evaluate` and training consume."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    labels: np.ndarray
    pad_token_id: int

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(ids) for ids in self.input_ids), dtype=np.int64, count=len(self.input_ids))

    def subset(self, indices: Sequence[int]) -> "EncodedExamples":
        return EncodedExamples(
            [self.input_ids[i] for i in indices],
            None if self.token_type_ids is None else [self.token_type_ids[i] for i in indices],
            self.labels[np.asarray(indices, dtype=np.int64)],
            self.pad_token_id,
        )


def encode_examples(tokenizer, examples: Sequence[GlueExample], max_length: int = 128) -> EncodedExamples:
    """Tokenise (pairs as ``[CLS] a [SEP] b [SEP]``), truncating to ``max_length`` tokens."""
    texts_a = [e.text_a for e in examples]
    pairs = [e.text_b for e in examples]
    has_pairs = any(b is not None for b in pairs)
    if has_pairs:
        encoded = tokenizer(texts_a, [b or "" for b in pairs], truncation=True, max_length=max_length)
    else:
        encoded = tokenizer(texts_a, truncation=True, max_length=max_length)
    labels = np.asarray([e.label for e in examples])
    return EncodedExamples(
        list(encoded["input_ids"]),
        list(encoded["token_type_ids"]) if "token_type_ids" in encoded else None,
        labels,
        int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0),
    )


def collate(data: EncodedExamples, indices: Sequence[int], pad_to: int | None = None) -> dict[str, torch.Tensor]:
    """Pad ``indices``' examples to the longest of them (or to ``pad_to``) into model inputs + labels."""
    types = [data.token_type_ids[i] for i in indices] if data.token_type_ids is not None else None
    batch = pad_batch([data.input_ids[i] for i in indices], data.pad_token_id, types, width=pad_to)
    labels = data.labels[list(indices)]
    batch["labels"] = torch.as_tensor(labels, dtype=torch.float32 if labels.dtype.kind == "f" else torch.long)
    return batch



def evaluation_batches(lengths: np.ndarray, batch_size: int) -> Iterator[np.ndarray]:
    """Batches of ``batch_size`` in order of length (least padding); callers put predictions back by index."""
    yield from token_budget_batches(lengths, None, batch_size, max_padding=None)
