"""The one batcher: which inputs go through the model together, and how a batch is padded.

Every loop that runs the model over many inputs (extraction, frozen-feature activations, pseudo-log-likelihood,
LAMA, SQuAD evaluation) picks its batches with :func:`token_budget_batches` and pads them with
:func:`pad_batch`. Sorting by length before cutting batches leaves almost no padding; a token budget (padded
size = rows x longest input) rather than a fixed count keeps memory flat from short to long inputs.

Padding is on the right, with ``attention_mask`` 1 on real tokens and 0 on padding, every tensor ``long``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from bertology.errors import UsageError

#: Extraction's rule (and the default): a batch also closes once adding the next input would make more than
#: this share of it padding, when it already holds ``min_batch`` rows (so batches stay big enough to use the cores).
MAX_PADDING = 0.1
MIN_BATCH = 8


def token_budget_batches(lengths: Sequence[int] | np.ndarray, batch_tokens: int | None,
                         max_batch: int | None = None, *, rows: Sequence[int] | np.ndarray | None = None,
                         sort: bool = True, max_padding: float | None = MAX_PADDING,
                         min_batch: int = MIN_BATCH) -> list[np.ndarray]:
    """Batches of input indices (positions in ``lengths``), each an int64 array.

    * ``lengths``: tokens of each input. With ``sort`` the inputs are taken shortest first (a stable sort,
      so equal lengths keep their order); without, in the order given.
    * ``batch_tokens``: a batch's padded size (rows x its longest input) stays within it; a single input
      longer than the budget gets a batch of its own. ``None``: no budget (then ``max_batch`` cuts).
    * ``max_batch``: at most this many rows per batch (``None``: no limit).
    * ``rows``: rows each input puts into the batch (default 1 each; pseudo-log-likelihood puts one masked
      copy per word), counted by the budget, ``max_batch``, ``max_padding`` and ``min_batch``.
    * ``max_padding``: close a batch of at least ``min_batch`` rows once adding the next input would make
      more than this share of its padded size padding (``None``: only the budget and ``max_batch`` close it).
    """
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    counts = np.ones(len(lengths), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64).reshape(-1)
    if len(counts) != len(lengths):
        raise UsageError(f"rows: {len(counts)} values for {len(lengths)} inputs; expected one per input")
    for name, value in (("batch_tokens", batch_tokens), ("max_batch", max_batch)):
        if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
            raise UsageError(f"{name} {value!r}: expected a whole number of at least 1")
    if batch_tokens is None and max_batch is None:
        raise UsageError("batch_tokens and max_batch are both None; expected a token budget, a batch size or both")
    order = np.argsort(lengths, kind="stable") if sort else np.arange(len(lengths))
    batches, current, longest, real, held = [], [], 0, 0, 0
    for i in order.tolist():
        length, count = int(lengths[i]), int(counts[i])
        padded = max(longest, length) * (held + count)
        wasteful = (max_padding is not None and held >= min_batch
                    and 1 - (real + length * count) / padded > max_padding)
        if current and ((batch_tokens is not None and padded > batch_tokens)
                        or (max_batch is not None and held + count > max_batch) or wasteful):
            batches.append(np.asarray(current, dtype=np.int64))
            current, longest, real, held = [], 0, 0, 0
        current.append(i)
        longest = max(longest, length)
        real += length * count
        held += count
    if current:
        batches.append(np.asarray(current, dtype=np.int64))
    return batches


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int, token_type_ids: Sequence[Sequence[int]] | None = None,
              width: int | None = None) -> dict[str, torch.Tensor]:
    """Model inputs for one batch: ``input_ids`` and ``attention_mask`` (and ``token_type_ids`` when given),
    ``long`` tensors ``[len(sequences), width]``, right-padded with ``pad_id`` (type id 0) to ``width``
    (default: the longest sequence)."""
    if not len(sequences):
        raise UsageError("pad_batch: no sequences; expected at least one")
    longest = max(len(ids) for ids in sequences)
    width = longest if width is None else width
    if width < longest:
        raise UsageError(f"pad_batch: width {width} is shorter than the longest sequence ({longest} tokens)")
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    types = torch.zeros((len(sequences), width), dtype=torch.long) if token_type_ids is not None else None
    for row, ids in enumerate(sequences):
        n = len(ids)
        input_ids[row, :n] = torch.as_tensor(ids)
        attention_mask[row, :n] = 1
        if types is not None:
            types[row, :n] = torch.as_tensor(token_type_ids[row])
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if types is not None:
        batch["token_type_ids"] = types
    return batch


def pad_id_of(tokenizer) -> int:
    """The id padding uses: the tokenizer's pad token, or 0 when it has none."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
