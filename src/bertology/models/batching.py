"""The one batcher: which inputs go through the model together, and how a batch is padded.

Every loop that runs the model over many inputs (extraction, frozen-feature activations, pseudo-log-likelihood,
LAMA, SQuAD evaluation) picks its batches with :func:`token_budget_batches` and pads them with
:func:`pad_batch`. Sorting by length before cutting batches leaves almost no padding; a token budget (padded
size = rows x longest input) rather than a fixed count keeps memory flat from short to long inputs.

Padding is on the right, with ``attention_mask`` 1 on real tokens and 0 on padding, every tensor ``long``.

The budget follows the device (:func:`device_token_budget`: today's 4,096 tokens on a CPU, a share of the free
memory on a GPU; on a GPU a batch fills a sixteenth of it before padding closes it, :func:`padding_floor`), and
a loop that runs its batches through :class:`TokenBudget` survives a GPU running out of memory: the budget
halves, the batch is cut again under it and retried, with one warning line.
"""

from __future__ import annotations

import itertools
import warnings
from typing import Callable, Sequence

import numpy as np
import torch

from bertology.errors import BertologyWarning, ModelError, UsageError

#: Extraction's rule (and the default): a batch also closes once adding the next input would make more than
#: this share of it padding, when it already holds ``min_batch`` rows (so batches stay big enough to use the cores).
MAX_PADDING = 0.1
MIN_BATCH = 8

#: The CPU's token budget and row limit (what a 2-core CPU runs best at; BENCHMARKS.md).
CPU_BATCH_TOKENS = 4096
CPU_MAX_BATCH = 128
#: A GPU's budget: this share of the free memory, within these bounds (the bare forward pass of a bert-base
#: model on an H200 reaches 0.8-0.9 million tokens/s at 16k-64k tokens a batch; issue 31).
GPU_MEMORY_SHARE = 0.4
GPU_BATCH_TOKENS = (8192, 65536)
#: On a GPU a batch closes for its padding only once it holds this share (1 / n) of the budget (:func:`padding_floor`).
#: A quarter (session 17) left EWT dev's bert-base batches 2.60x padded on an H200, where fp32 at 8k tokens a batch is
#: already compute bound (``gpu_check_h200.json``); a sixteenth pads them 1.61x in 19 batches instead of 10.
GPU_PADDING_FLOOR = 16


def device_token_budget(device: torch.device | str, bytes_per_token: int) -> tuple[int, int | None]:
    """``(batch_tokens, max_batch)`` for a model that keeps ``bytes_per_token`` of activations per token on
    ``device``: :data:`CPU_BATCH_TOKENS` and :data:`CPU_MAX_BATCH` on a CPU (or anything but CUDA); on CUDA
    :data:`GPU_MEMORY_SHARE` of the free memory, rounded down to a power of two within
    :data:`GPU_BATCH_TOKENS`, and no row limit (short sentences should fill a batch too)."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return CPU_BATCH_TOKENS, CPU_MAX_BATCH
    free, _ = torch.cuda.mem_get_info(device)
    tokens = int(free * GPU_MEMORY_SHARE) // max(1, int(bytes_per_token))
    low, high = GPU_BATCH_TOKENS
    tokens = max(low, min(high, tokens))
    return 1 << (tokens.bit_length() - 1), None


def padding_floor(device: torch.device | str, batch_tokens: int) -> int:
    """The padded size below which a batch is not closed for its padding (:func:`token_budget_batches`'s
    ``min_tokens``): none on a CPU, whose time follows the padded tokens, so padding is what to save; on CUDA
    a :data:`GPU_PADDING_FLOOR` share of the budget ``batch_tokens``, since a GPU's forward pass over a few hundred
    tokens costs about what it costs over thousands (its kernels' launches, not its arithmetic, set the time):
    cut at 10% padding in length order, EWT dev's batches held about 360 tokens whatever the budget (issue 31)."""
    return int(batch_tokens) // GPU_PADDING_FLOOR if torch.device(device).type == "cuda" else 0


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is a device running out of memory (``torch.OutOfMemoryError``, which
    ``torch.cuda.OutOfMemoryError`` is)."""
    kinds = tuple(k for k in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None))
                  if k is not None)
    return isinstance(error, kinds)


class TokenBudget:
    """A batch loop's token budget that halves when the device runs out of memory.

    ``budget.run(lengths, compute)`` calls ``compute(indices)`` once for the whole batch (``indices``: positions
    in ``lengths``, the inputs' tokens). When that raises an out-of-memory error (:func:`is_out_of_memory`),
    the budget halves (one warning line, naming ``what``), the batch is cut again under it (in the order given)
    and each piece is run the same way; ``compute`` must leave nothing behind when it raises (accumulate only
    after the allocations). Later batches are cut by the caller under :attr:`tokens`, the budget now in force;
    :attr:`initial` and :attr:`halvings` say what happened, for a run's recorded settings. A single input that
    does not fit is a one-line :class:`~bertology.errors.ModelError`.
    """

    def __init__(self, tokens: int, what: str = "batch"):
        if isinstance(tokens, bool) or int(tokens) != tokens or tokens < 1:
            raise UsageError(f"token budget {tokens!r}: expected a whole number of at least 1")
        self.tokens = self.initial = int(tokens)
        self.what = what
        self.halvings = 0

    def run(self, lengths: Sequence[int] | np.ndarray, compute: Callable[[np.ndarray], None],
            indices: np.ndarray | None = None) -> None:
        lengths = np.asarray(lengths, dtype=np.int64)
        indices = np.arange(len(lengths)) if indices is None else indices
        try:
            compute(indices)
            return
        except Exception as error:  # noqa: BLE001 - only out-of-memory is handled; the rest is raised again
            if not is_out_of_memory(error):
                raise
        # Retried outside the handler, so the failed attempt's tensors (held by the traceback) are freed first.
        if len(indices) == 1:
            raise ModelError(f"{self.what}: out of device memory on a single input of {int(lengths[indices[0]]):,} "
                             "tokens; use a smaller token_budget=, a shorter max length or another device")
        padded = int(lengths[indices].max()) * len(indices)
        self.halve(padded)
        pieces = token_budget_batches(lengths[indices], self.tokens, sort=False, max_padding=None)
        if len(pieces) == 1:  # the batch already fits the halved budget: cut it in two
            pieces = np.array_split(np.arange(len(indices)), 2)
        for piece in pieces:
            self.run(lengths, compute, indices[piece])

    def halve(self, padded: int) -> None:
        """Halve the budget (below the ``padded`` size that failed, if it is already smaller), one warning line."""
        before = self.tokens
        self.tokens = max(1, min(self.tokens, padded) // 2)
        self.halvings += 1
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        warnings.warn(f"{self.what}: out of device memory on a batch of {padded:,} padded tokens; token budget "
                      f"{before:,} -> {self.tokens:,}, retrying the batch", BertologyWarning, stacklevel=3)

    def record(self) -> dict:
        """The budget as a run records it: the one it started with, the one it ended with, the halvings."""
        return {"batch_tokens": self.initial, "batch_tokens_used": self.tokens, "out_of_memory_halvings": self.halvings}


def token_budget_batches(lengths: Sequence[int] | np.ndarray, batch_tokens: int | None,
                         max_batch: int | None = None, *, rows: Sequence[int] | np.ndarray | None = None,
                         sort: bool = True, max_padding: float | None = MAX_PADDING,
                         min_batch: int = MIN_BATCH, min_tokens: int = 0) -> list[np.ndarray]:
    """Batches of input indices (positions in ``lengths``), each an int64 array.

    * ``lengths``: tokens of each input. With ``sort`` the inputs are taken shortest first (a stable sort,
      so equal lengths keep their order); without, in the order given.
    * ``batch_tokens``: a batch's padded size (rows x its longest input) stays within it; a single input
      longer than the budget gets a batch of its own. ``None``: no budget (then ``max_batch`` cuts).
    * ``max_batch``: at most this many rows per batch (``None``: no limit).
    * ``rows``: rows each input puts into the batch (default 1 each; pseudo-log-likelihood puts one masked
      copy per word), counted by the budget, ``max_batch``, ``max_padding`` and ``min_batch``.
    * ``max_padding``: close a batch of at least ``min_batch`` rows and ``min_tokens`` padded tokens once
      adding the next input would make more than this share of its padded size padding (``None``: only the
      budget and ``max_batch`` close it). ``min_tokens``: :func:`padding_floor` on a GPU.
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
        wasteful = (max_padding is not None and held >= min_batch and padded >= min_tokens
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
    # One vectorised fill rather than a copy per row: the batcher runs once per batch of a long corpus.
    lengths = np.fromiter((len(ids) for ids in sequences), dtype=np.int64, count=len(sequences))
    mask = np.arange(width)[None, :] < lengths[:, None]
    ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    ids[mask] = _flat(sequences, int(lengths.sum()))
    input_ids = torch.from_numpy(ids)
    attention_mask = torch.from_numpy(mask.astype(np.int64))
    types = None
    if token_type_ids is not None:
        filled = np.zeros((len(sequences), width), dtype=np.int64)
        filled[mask] = _flat(token_type_ids, int(lengths.sum()))
        types = torch.from_numpy(filled)
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if types is not None:
        batch["token_type_ids"] = types
    return batch


def _flat(sequences: Sequence[Sequence[int]], total: int) -> np.ndarray:
    """Every row's values in order, one int64 array: Python lists (what tokenizers give) in one pass over their
    items, rather than an array per row and a concatenation (issue 31: per-row work is what a small model waits on)."""
    if all(type(row) is list for row in sequences):
        return np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int64, count=total)
    return np.concatenate([np.asarray(row, dtype=np.int64).reshape(-1) for row in sequences])


def pad_id_of(tokenizer) -> int:
    """The id padding uses: the tokenizer's pad token, or 0 when it has none."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
