"""The one store writer: plan, resume, write a shard atomically, finish.

Every store is written through :class:`StoreWriter`: by extraction (:func:`bertology.extraction.extract`),
by the Ray engine (:mod:`bertology.scale`, whose actors write shards with :func:`write_shard` and whose driver
records them) and by the frozen-feature activations (:mod:`bertology.readouts.activations`). The writer

* **plans**: the index's model record (:func:`model_record`), the input hash, and shards cut to a byte target
  (:func:`plan_shards`);
* **resumes**: an index in the folder is reused when it was written for the same model, input and settings
  (another is refused in one line, or removed with ``overwrite``; an unreadable index likewise); shards whose
  file no longer matches its recorded size and SHA-256 are forgotten and recomputed; a missing or unreadable
  ``sentences.json`` is rewritten;
* **writes one shard atomically** (temporary name, fsync, rename) and names it in the index only once whole;
* **finishes**: the run's statistics go into the index last.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from bertology import __version__
from bertology.errors import BertologyWarning, OutputError, StoreError, UsageError
from bertology.files import ensure_dir, write_json
from bertology.models.encoders import Encoder, fingerprint_tokenizer, tokenizer_types
from bertology.store.names import FORMAT_VERSION, INDEX_NAME, SENTENCES_NAME
from bertology.store.store import forget_damaged_shards, read_sentences, write_shard_atomic

#: The settings a store's index records beside the model and the input; a store is reused only when all agree.
KEY_FIELDS = ("layers", "pool", "attentions", "dtype", "long_policy", "autocast")


def model_record(encoder: Encoder) -> dict:
    """The index's ``model``: what a store's vectors depend on (weights, config and tokenizer) and what
    readers need to know about it."""
    return {
        "name": encoder.name,
        "source": encoder.source,
        "fingerprint": encoder.fingerprint,
        "tokenizer_fingerprint": fingerprint_tokenizer(encoder.tokenizer),
        "model_type": encoder.config.model_type,
        "num_layers": encoder.num_layers,
        "num_heads": encoder.num_heads,
        "hidden_size": encoder.hidden_size,
        "num_parameters": encoder.num_parameters,
        "untrained_seed": encoder.untrained_seed,
        # Whether the tokenizer tells case apart: what a word type is for control tasks on this store.
        "word_types": tokenizer_types(encoder.tokenizer),
    }


def plan_shards(row_counts: Sequence[int] | np.ndarray, bytes_per_row: int, target: int,
                extra_bytes: Sequence[int] | np.ndarray | None = None, ramp: int | None = None) -> list[tuple[int, int]]:
    """``(start, stop)`` input ranges, in order, each weighing about ``target`` bytes: input ``i`` weighs
    ``row_counts[i] * bytes_per_row`` plus ``extra_bytes[i]`` (its attention maps); a shard holds at least one.

    ``ramp`` (a number of inputs): shards grow into the target and shrink out of it. The first holds at most
    ``ramp`` inputs and each next at most twice the one before; none holds more than half of the inputs left
    (and at least ``ramp``), so the last ones halve down to about ``ramp`` (fewer than ``ramp / 2`` left over join
    the shard before). A pipeline that tokenizes a shard ahead of the model (or, on a CPU, just before it) and
    writes it behind then waits only for the first small shard's tokens at the start and the last small shard's write
    at the end (issue 31)."""
    n = len(row_counts)
    costs = np.asarray(row_counts, dtype=np.int64) * int(bytes_per_row)
    if extra_bytes is not None:
        costs = costs + np.asarray(extra_bytes, dtype=np.int64)
    shards, start, size, most = [], 0, 0, ramp
    for i in range(n):
        cost = int(costs[i])
        full = i > start and size + cost > target
        if ramp is not None and i > start and n - i > ramp // 2:  # a last few inputs join the shard before
            full = full or i - start >= max(min(most, (n - start) // 2), ramp)
        if full:
            shards.append((start, i))
            most = 2 * (i - start) if ramp is not None else None
            start, size = i, 0
        size += cost
    shards.append((start, n))
    return shards


def check_output(out: str | os.PathLike) -> None:
    """Refuse, before any work, a store folder that cannot be written: a file where the folder should be,
    a file in its path, or a folder (the store's, or the nearest existing parent) that is read-only.
    One-line :class:`~bertology.errors.OutputError`; nothing is created."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        ensure_dir(out)  # raises its one-line OutputError
    existing = next((p for p in (out, *out.parents) if p.exists()), None)
    if existing is None:
        return
    if not existing.is_dir():
        raise OutputError(f"cannot write into {out}: {existing} is a file, not a folder; choose another output folder (out=)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write into {out}: permission denied in {existing} (read-only folder?); "
                          "choose another output folder (out=)")


def shard_metadata() -> dict[str, str]:
    return {"format_version": str(FORMAT_VERSION)}


def write_shard(folder: str | os.PathLike, file: str, tensors: dict[str, torch.Tensor]) -> dict:
    """Write one shard of the store in ``folder`` atomically; return its index entry (file, bytes, SHA-256).
    Whoever holds the :class:`StoreWriter` records the entry (:meth:`StoreWriter.record`)."""
    return write_shard_atomic(Path(folder) / file, tensors, shard_metadata())


class StoreWriter:
    """One store being written. Made with the index's settings (``key``: ``{"model": model_record(...),
    **settings}``, ``settings`` holding :data:`KEY_FIELDS`) and the input's hash, it reads back and checks
    an index already in ``out`` (see the module docstring); then :meth:`start` writes what a new store begins
    with, and :meth:`record` / :meth:`shards_in_background` / :meth:`finish` write the rest.

    ``refused`` says what a store of another model, input or settings is, in the one-line refusal.
    """

    def __init__(self, out: str | os.PathLike, key: dict, input_hash: str, *, overwrite: bool = False,
                 refused: str = "belongs to another extraction"):
        self.out, self.key, self.input_hash = Path(out), key, input_hash
        self.index: dict | None = self._existing(overwrite, refused)
        self.resuming = self.index is not None
        self.sentences_lost = False
        self.unwritten_sentences: list[dict] | None = None  # what start() left for write_pending()
        self.index_unwritten = False
        self.sentences: list[dict] | None = None  # the sentences.json this writer wrote
        if self.resuming:
            forget_damaged_shards(self.out, self.index)
            self.sentences_lost = _sentences_lost(self.out)

    # -- resume ----------------------------------------------------------------------------------
    def _existing(self, overwrite: bool, refused: str) -> dict | None:
        """The existing index to resume from, or None; refuse a store of another model, input or settings."""
        out, key = self.out, self.key
        index_path = out / INDEX_NAME
        check_output(out)
        if not out.exists():
            return None
        if not index_path.is_file():
            if any(out.iterdir()) and not overwrite:
                raise StoreError(f"{out}: exists and is not a bertology store; choose another output "
                                 "folder (out=)")
            return None
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            if not overwrite:
                raise StoreError(f"{index_path}: unreadable index ({error}); allow overwriting "
                                 "(overwrite=) or choose another output folder (out=)") from None
            shutil.rmtree(out)
            return None
        problems = []
        if index.get("format_version") != FORMAT_VERSION:
            problems.append(f"format version {index.get('format_version')} (current {FORMAT_VERSION})")
        old_model, model = index.get("model", {}), key["model"]
        if old_model.get("fingerprint") != model["fingerprint"]:
            tokenizer = ", another tokenizer" if old_model.get("tokenizer_fingerprint") not in (
                None, model["tokenizer_fingerprint"]) else ""
            problems.append(f"model {old_model.get('name')!r} (fingerprint {old_model.get('fingerprint')}{tokenizer}), "
                            f"not {model['name']!r} (fingerprint {model['fingerprint']})")
        old_input = index.get("input", {})
        if old_input.get("hash") != self.input_hash:
            problems.append(f"input {old_input.get('path')!r} (hash {old_input.get('hash')}), "
                            f"not this input (hash {self.input_hash})")
        for field in KEY_FIELDS:
            if index.get(field) != key[field]:
                problems.append(f"{field}={index.get(field)!r}, not {key[field]!r}")
        if problems:
            if overwrite:
                shutil.rmtree(out)
                return None
            raise StoreError(f"{out}: {refused}: " + "; ".join(problems) + ". Choose another output folder (out=), "
                             "or allow overwriting (overwrite=)")
        return index

    @property
    def complete(self) -> bool:
        """Whether a store reused as it is needs nothing more: every shard whole, its sentences readable."""
        return (self.resuming and not self.sentences_lost
                and all(shard.get("sha256") for shard in self.index["shards"]))

    # -- plan ------------------------------------------------------------------------------------
    def start(self, records: Sequence[dict], row_counts: np.ndarray, shard_bounds: Sequence[tuple[int, int]],
              input_record: dict, *, extra: dict | None = None, files: dict[str, object] | None = None,
              later: bool = False) -> dict:
        """Begin writing: for a new store, ``sentences.json`` (``records``, one per input), the JSON ``files``
        beside it (name -> payload) and the index (``extra`` after the settings, e.g. a kind); for a resumed
        one, ``sentences.json`` (and ``files``) again where missing or unreadable. Removes what an interrupted
        write left (temporary files) and returns the index.

        ``later``: ``sentences.json`` and a new index are written (:meth:`write_pending`) by
        :meth:`shards_in_background`'s thread before its first shard, or by :meth:`record` or :meth:`finish`,
        whichever comes first: off the caller's way, in the same order on disk. Only for a caller that writes
        its shards through this writer (not the Ray engine, whose workers write shard files themselves)."""
        out = self.out
        ensure_dir(out)  # OS errors (a file in the way, no space, a read-only folder) as one line, now
        if not self.resuming or self.sentences_lost:
            self.unwritten_sentences = list(records)
            if not later:
                self.write_pending()  # sentences.json first, then the files, then the index
        for name, payload in (files or {}).items():
            if not self.resuming or not _readable_json(out / name):
                write_json(out / name, payload, indent=None, fsync=True)
        if not self.resuming:
            self.index = {
                "format_version": FORMAT_VERSION,
                "bertology_version": __version__,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                **self.key,
                **(extra or {}),
                "input": {**input_record, "hash": self.input_hash},
                "row_counts": np.asarray(row_counts).tolist(),
                "shards": [{"start": a, "stop": b, "file": f"shard-{k:05d}.safetensors", "bytes": None, "sha256": None}
                           for k, (a, b) in enumerate(shard_bounds)],
                "stats": {},
            }
            self.index_unwritten = True
        self.remove_leftovers()
        if not later:
            self.write_pending()
        return self.index

    def remove_leftovers(self) -> None:
        """Delete temporary files an interrupted write left (their shards are redone)."""
        for leftover in self.out.glob(".*.tmp"):
            leftover.unlink(missing_ok=True)

    @property
    def todo(self) -> list[int]:
        """Shards the index does not list as whole, in order."""
        return [k for k, shard in enumerate(self.index["shards"]) if not shard.get("sha256")]

    def shard_rows(self, k: int) -> int:
        shard = self.index["shards"][k]
        return int(sum(self.index["row_counts"][shard["start"]:shard["stop"]]))

    def largest_shard_rows(self, shards: Sequence[int] | None = None) -> int:
        return max((self.shard_rows(k) for k in (self.todo if shards is None else shards)), default=0)

    # -- write -----------------------------------------------------------------------------------
    def write_pending(self) -> None:
        """Write what :meth:`start` left for later: ``sentences.json``, then a new store's index."""
        if self.unwritten_sentences is not None:
            write_json(self.out / SENTENCES_NAME, self.unwritten_sentences, indent=None, fsync=True)
            self.sentences, self.unwritten_sentences = self.unwritten_sentences, None
        if self.index_unwritten:
            self._write_index()
            self.index_unwritten = False

    def write(self, k: int, tensors: dict[str, torch.Tensor]) -> dict:
        """Write shard ``k`` atomically (on the calling thread) and return its entry; not yet recorded."""
        return write_shard(self.out, self.index["shards"][k]["file"], tensors)

    def record(self, k: int, entry: dict, *, write_index: bool = True) -> None:
        """Mark shard ``k`` whole in the index on disk (``entry``: what :func:`write_shard` returned). Called
        only after the shard file has been renamed into place (and what :meth:`start` left, first).
        ``write_index=False``: in the index in memory only, which the :meth:`finish` that comes next writes."""
        self.write_pending()
        self.index["shards"][k].update(entry)
        if write_index:
            self._write_index()

    @contextlib.contextmanager
    def shards_in_background(self, on_written: Callable[[int], None] | None = None,
                             writers: int = 1) -> Iterator[Callable]:
        """``with writer.shards_in_background() as put: put(k, tensors)``: each shard is streamed to disk,
        fsynced, renamed and recorded in the index on a thread of its own while the caller computes the next one
        (``put(k, tensors, ready=f)``: that thread first calls ``f()``, e.g. to wait for a copy from a GPU).
        ``writers``: shards written at once. ``put`` first waits, oldest first, until fewer than ``writers`` are
        pending (so a caller cycling ``writers + 1`` buffers may refill the one it used longest ago) and calls
        ``on_written(k)`` for each; leaving the block waits for the rest. Shards may be recorded out of order (a
        resumed run computes whichever are missing); the index is written under a lock.

        ``put(k, tensors, last=True)``: the run's last shard, named in the index by the :meth:`finish` that
        follows the block rather than by a write of its own: one index write and fsync fewer at the end of the
        run, where nothing overlaps them (issue 31). Until then the shard is not whole for a resumed run."""
        if isinstance(writers, bool) or int(writers) != writers or writers < 1:
            raise UsageError(f"writers {writers!r}: expected a whole number of at least 1")
        pending: list[tuple[int, Future]] = []
        lock = threading.Lock()

        def write_and_record(k: int, tensors: dict[str, torch.Tensor], ready: Callable[[], object] | None,
                             last: bool) -> None:
            with lock:
                self.write_pending()  # the index before any shard file, as start() would have
            if ready is not None:
                ready()
            entry = self.write(k, tensors)
            with lock:
                self.record(k, entry, write_index=not last)

        def settle() -> None:
            k, future = pending.pop(0)
            future.result()
            if on_written is not None:
                on_written(k)

        def put(k: int, tensors: dict[str, torch.Tensor], ready: Callable[[], object] | None = None,
                last: bool = False) -> None:
            while len(pending) >= writers:
                settle()
            pending.append((k, thread.submit(write_and_record, k, tensors, ready, last)))

        with ThreadPoolExecutor(max_workers=writers, thread_name_prefix="bertology-shard-writer") as thread:
            yield put
            while pending:
                settle()

    # -- finish ----------------------------------------------------------------------------------
    def finish(self, stats: dict) -> None:
        """Write the run's statistics into the index, last."""
        self.write_pending()
        self.index["stats"] = stats
        self._write_index()

    def output_error(self, error: OutputError) -> OutputError:
        """``error`` (no space left, a folder made read-only) with what is kept and how to resume."""
        done = sum(bool(shard.get("sha256")) for shard in self.index["shards"])
        return OutputError(f"{error}; {done} of {len(self.index['shards'])} shards of {self.out} are whole and kept: "
                           "make room (or choose another output folder, out=) and run the same command again to resume")

    def _write_index(self) -> None:
        # Compact: with an indent ``json`` falls back to its pure-Python encoder, which took 7% of an EWT dev
        # extraction (the index is rewritten after every shard).
        write_json(self.out / INDEX_NAME, self.index, indent=None, fsync=True)


def _readable_json(path: Path) -> bool:
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return False
    return True


def _sentences_lost(out: Path) -> bool:
    """Whether the ``sentences.json`` of a store being reused is missing or unreadable (then rewritten from
    the input, which the index's input hash has just matched), said in one warning line."""
    try:
        read_sentences(out)
    except StoreError:
        path = out / SENTENCES_NAME
        warnings.warn(f"{path}: {'unreadable' if path.exists() else 'missing'}; rewriting it from the input",
                      BertologyWarning, stacklevel=4)
        return True
    return False
