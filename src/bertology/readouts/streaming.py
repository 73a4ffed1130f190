"""Streaming all-layer activations from a store into training batches, without holding the set in memory.

The seed's lesson: with every layer of every token materialised, "loading the data usually takes more
than 90% of the training time". Here a background thread does all the loading while the readout trains:

* **Shards, shuffled.** Each epoch visits the store's shards in a random order (seeded by ``seed`` and
  the epoch), ``buffer_shards`` at a time. The shards of a group are read straight from their files into
  one reusable float16 buffer (``readinto`` at the offsets of the safetensors header: no per-shard
  allocation, no copy through Python objects).
* **Within a buffer, shuffled.** The examples of a group are permuted, sorted by length within windows of
  ``SORT_WINDOW`` batches (less padding, as ``bertology.finetune``'s batching) and cut into batches, whose
  order is shuffled again; a batch mixes examples of ``buffer_shards`` shards. Every example is in
  exactly one batch per epoch.
* **Reusable batch buffers.** Batches are assembled (padded, converted to float32) into a ring of
  ``queue_depth + 2`` preallocated slots - pinned when ``pin_memory`` - and handed over through a queue
  of ``queue_depth``. A batch's tensors are overwritten once the consumer has asked for two more batches
  beyond the queue, so a training step must use (or copy) its batch before fetching the next.

Memory is one group buffer (``buffer_shards`` shards) plus the ring, whatever the store's size.
``epoch(k, start_batch=b)`` skips the first ``b`` batches without reading their shards: how training
resumes after an interruption. ``wait_seconds`` is the time the consumer spent blocked on data
(``prefetch=False`` does the same work on the consumer's thread, where all of it is waiting: the
baseline of ``benchmarks/perf/bench_heads.py``).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from bertology.errors import StoreError
from bertology.runtime import derive_seed
from bertology.store.store import DTYPES, Store

#: Batches whose examples are sorted by length together (less padding, as finetune's batching).
SORT_WINDOW = 8


@dataclass
class Batch:
    """``x`` ``[batch, layers, tokens, hidden]`` (zero beyond each example's length), ``mask``
    ``[batch, tokens]`` (True on real rows), ``indices`` the examples' positions in the store."""

    x: torch.Tensor
    mask: torch.Tensor
    indices: np.ndarray
    number: int  # position of the batch in its epoch


@dataclass
class GroupPlan:
    shards: list[int]
    batches: list[np.ndarray]


def _header(path) -> tuple[int, dict]:
    with open(path, "rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        return 8 + size, json.loads(handle.read(size))


class StreamingReader:
    """Batches of a store's activations, every layer, streamed by a background thread.

    ``store``: a complete store (any pool: token rows or one row per input). ``batch_size`` inputs per
    batch; ``shuffle=False`` gives store order (for evaluation).
    """

    def __init__(self, store: Store, batch_size: int = 16, *, shuffle: bool = True, seed: int = 0,
                 buffer_shards: int = 4, queue_depth: int = 4, pin_memory: bool = False,
                 dtype: torch.dtype = torch.float32, prefetch: bool = True):
        if not store.complete:
            raise StoreError(f"{store.path}: incomplete store; finish writing it before streaming")
        if batch_size < 1 or buffer_shards < 1 or queue_depth < 1:
            raise StoreError("batch_size, buffer_shards and queue_depth must each be at least 1")
        self.store, self.batch_size, self.shuffle, self.seed = store, batch_size, shuffle, seed
        self.buffer_shards, self.queue_depth, self.prefetch = buffer_shards, queue_depth, prefetch
        self.layers, self.hidden = store.layers, store.dim
        self.n_examples = store.n_sentences
        self.rows = store.row_counts
        self.max_rows = int(self.rows.max())
        shard_rows = np.asarray([store.offsets[s.stop] - store.offsets[s.start] for s in store.shards])
        capacity = int(np.sort(shard_rows)[::-1][:buffer_shards].sum())
        self._group = torch.empty(len(self.layers), capacity, self.hidden, dtype=DTYPES[store.index["dtype"]])
        slot = batch_size * len(self.layers) * self.max_rows * self.hidden
        self._slots = [torch.empty(slot, dtype=dtype, pin_memory=pin_memory) for _ in range(queue_depth + 2)]
        self._masks = [torch.empty(batch_size * self.max_rows, dtype=torch.bool, pin_memory=pin_memory)
                       for _ in range(queue_depth + 2)]
        self.wait_seconds = 0.0
        self.read_seconds = 0.0
        self.bytes_read = 0

    # -- planning ------------------------------------------------------------------------------------
    def plan(self, epoch: int) -> list[GroupPlan]:
        """The epoch's groups of shards and their batches (example indices), fixed by seed and epoch."""
        rng = np.random.default_rng(derive_seed(self.seed, "heads-stream", epoch))
        order = rng.permutation(len(self.store.shards)) if self.shuffle else np.arange(len(self.store.shards))
        groups = []
        for g in range(0, len(order), self.buffer_shards):
            shards = [int(k) for k in order[g: g + self.buffer_shards]]
            examples = np.concatenate([np.arange(self.store.shards[k].start, self.store.shards[k].stop) for k in shards])
            if self.shuffle:
                examples = rng.permutation(examples)
                # length grouping: sorted within shuffled windows of SORT_WINDOW batches, batch order shuffled
                window = self.batch_size * SORT_WINDOW
                examples = np.concatenate([
                    chunk[np.argsort(self.rows[chunk], kind="stable")]
                    for chunk in (examples[w: w + window] for w in range(0, len(examples), window))])
            batches = [examples[b: b + self.batch_size] for b in range(0, len(examples), self.batch_size)]
            if self.shuffle:
                batches = [batches[j] for j in rng.permutation(len(batches))]
            groups.append(GroupPlan(shards, batches))
        return groups

    def __len__(self) -> int:
        """Batches per epoch."""
        return sum(len(group.batches) for group in self.plan(0))

    # -- reading ---------------------------------------------------------------------------------------
    def _load_group(self, shards: list[int]) -> dict[int, int]:
        """Read ``shards`` into the group buffer; return each example's first row in it."""
        started = time.perf_counter()
        where, cursor = {}, 0
        for k in shards:
            info = self.store.shards[k]
            path = self._shard_file(info)
            data_start, header = _header(path)
            n_rows = int(self.store.offsets[info.stop] - self.store.offsets[info.start])
            with open(path, "rb", buffering=0) as handle:
                for p, layer in enumerate(self.layers):
                    entry = header.get(f"layer.{layer}")
                    if entry is None or entry["shape"] != [n_rows, self.hidden]:
                        raise StoreError(f"{path}: layer.{layer} is missing or not [{n_rows}, {self.hidden}]; "
                                         "the store is damaged, write it again")
                    target = self._group[p, cursor: cursor + n_rows].view(torch.uint8).numpy().reshape(-1)
                    begin, end = entry["data_offsets"]
                    if end - begin != target.nbytes:
                        raise StoreError(f"{path}: layer.{layer} holds {end - begin} bytes, expected {target.nbytes}")
                    handle.seek(data_start + begin)
                    got = handle.readinto(memoryview(target))
                    if got != target.nbytes:
                        raise StoreError(f"{path}: truncated (layer.{layer}); the store is damaged, write it again")
                    self.bytes_read += got
            for i in range(info.start, info.stop):
                where[i] = cursor + int(self.store.offsets[i] - self.store.offsets[info.start])
            cursor += n_rows
        self.read_seconds += time.perf_counter() - started
        return where

    def _shard_file(self, info):
        path = self.store.path / info.file
        if not info.complete or not path.is_file() or path.stat().st_size != info.bytes:
            raise StoreError(f"{path}: shard missing or of the wrong size; the store is damaged, write it again")
        return path

    def _assemble(self, slot: int, examples: np.ndarray, where: dict[int, int], number: int) -> Batch:
        counts = self.rows[examples]
        width = int(counts.max())
        b, n_layers = len(examples), len(self.layers)
        x = self._slots[slot][: b * n_layers * width * self.hidden].view(b, n_layers, width, self.hidden)
        mask = self._masks[slot][: b * width].view(b, width)
        for row, (i, n) in enumerate(zip(examples, counts)):
            first = where[int(i)]
            x[row, :, :n].copy_(self._group[:, first: first + n])
            x[row, :, n:].zero_()
            mask[row, :n] = True
            mask[row, n:] = False
        return Batch(x, mask, examples, number)

    def epoch(self, epoch: int = 0, start_batch: int = 0) -> Iterator[Batch]:
        """Every example once, in batches; the first ``start_batch`` batches are skipped unread."""
        groups = self.plan(epoch)
        work, number = [], 0
        for group in groups:
            todo = [(number + j, batch) for j, batch in enumerate(group.batches) if number + j >= start_batch]
            number += len(group.batches)
            if todo:
                work.append((group.shards, todo))
        if not self.prefetch:
            yield from self._inline(work)
            return
        handoff: queue.Queue = queue.Queue(maxsize=self.queue_depth)
        stop = threading.Event()

        def put(item) -> bool:
            while not stop.is_set():
                try:
                    handoff.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def produce() -> None:
            slot = 0
            try:
                for shards, todo in work:
                    where = self._load_group(shards)
                    for number, examples in todo:
                        if not put(self._assemble(slot, examples, where, number)):
                            return
                        slot = (slot + 1) % len(self._slots)
                put(None)
            except BaseException as error:  # handed to the consumer, which raises it
                put(error)

        thread = threading.Thread(target=produce, name="bertology-readouts-prefetch", daemon=True)
        thread.start()
        try:
            while True:
                waited = time.perf_counter()
                item = handoff.get()
                self.wait_seconds += time.perf_counter() - waited
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join()

    def _inline(self, work) -> Iterator[Batch]:
        """The same reading and assembly on the consumer's thread (``prefetch=False``): all of it is
        waiting. The baseline of benchmarks/perf/bench_heads.py."""
        slot = 0
        for shards, todo in work:
            waited = time.perf_counter()
            where = self._load_group(shards)
            self.wait_seconds += time.perf_counter() - waited
            for number, examples in todo:
                waited = time.perf_counter()
                batch = self._assemble(slot, examples, where, number)
                self.wait_seconds += time.perf_counter() - waited
                slot = (slot + 1) % len(self._slots)
                yield batch
