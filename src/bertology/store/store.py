"""The activation store: safetensors shards plus a JSON index, written so that it streams and resumes.

Layout of a store directory::

    store.json          index: format version, model fingerprint, input hash, layers, pooling, shards
    sentences.json      sentence ids and words (written once, before any shard)
    shard-00000.safetensors  tensors "layer.<l>" [rows, dim] and, with attentions, "attention.<l>"
    ...

Why safetensors shards and not zarr: a shard is one file written to a temporary name and renamed, so
a crash never leaves a half-written chunk that looks whole; the index lists a shard only after its
rename, with its size and SHA-256. Each tensor in a shard is read on its own through a memory map, so
reading one layer never touches the bytes of the others. safetensors is kept by Hugging Face, has no
native dependencies, and handles bfloat16.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
from safetensors import safe_open

from bertology.errors import BertologyWarning, StoreError
from bertology.files import atomic_path, write_json
from bertology.store.names import (  # noqa: F401  (the names every store module has read from here)
    DTYPE_NAMES, FORMAT_VERSION, INDEX_NAME, POOLS, SENTENCE_POOLS, SENTENCES_NAME, WORD_POOLS,
)

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
assert tuple(DTYPES) == DTYPE_NAMES


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_SAFETENSORS_DTYPES = {torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32"}


def write_shard_atomic(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> dict:
    """Write one safetensors shard via a temporary file, fsync and rename; return its index entry.

    The one streaming writer of the package, on :func:`bertology.files.atomic_path`: a failure (no space
    left, ...) removes the temporary file and raises one-line :class:`~bertology.errors.OutputError`,
    so no partial shard is left behind. The tensors are streamed into the file as they lie in memory,
    with no whole-file ``bytes`` copy in between (on these machines filling fresh memory costs more than
    the pooling; BENCHMARKS.md), and hashed on a second thread while they are written and fsynced (both release
    the GIL: the shard costs the longer of the two, not their sum; :func:`_digest_beside`). The layout is
    safetensors' own: an 8-byte little-endian header length, a JSON header padded with spaces to 8 bytes, then
    the raw tensors in header order; `safe_open` reads it.
    """
    header, offset, buffers = {"__metadata__": dict(metadata)}, 0, []
    for name, tensor in tensors.items():
        tensor = tensor.detach().cpu().contiguous()
        raw = tensor.reshape(-1).view(torch.uint8).numpy()
        header[name] = {"dtype": _SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + raw.nbytes]}
        offset += raw.nbytes
        buffers.append(raw)
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    blocks = (len(encoded).to_bytes(8, "little"), encoded, *buffers)
    with _digest_beside(blocks) as digest, atomic_path(path) as tmp, open(tmp, "wb") as handle:
        for block in blocks:
            handle.write(block)
        handle.flush()
        os.fsync(handle.fileno())
    return {"file": path.name, "bytes": 8 + len(encoded) + offset, "sha256": digest()}


#: Below this many bytes a shard is hashed on the writing thread (a thread's start would cost more than it saves).
HASH_THREAD_BYTES = 1 << 22


@contextlib.contextmanager
def _digest_beside(blocks) -> Iterator[Callable[[], str]]:
    """The SHA-256 of ``blocks`` (bytes-like, in order), computed on a thread of its own while the caller writes
    them; yields ``digest()``, which waits for it. hashlib and file writes both release the GIL on large buffers,
    and hashing (about 1.7 GB/s on one core) costs as much as writing and fsyncing (BENCHMARKS.md, "Writing a
    store's shards"), so overlapping the two nearly halves a shard's time."""
    hasher = hashlib.sha256()

    def hash_all() -> None:
        for block in blocks:
            hasher.update(block)

    if sum(len(block) for block in blocks) < HASH_THREAD_BYTES:
        hash_all()
        yield hasher.hexdigest
        return
    thread = threading.Thread(target=hash_all, name="bertology-shard-hash", daemon=True)
    thread.start()
    try:
        yield lambda: (thread.join(), hasher.hexdigest())[1]
    finally:
        thread.join()  # a failed write leaves no thread reading the buffers the caller is about to reuse


def shard_problem(folder: Path, entry: dict) -> str | None:
    """What is wrong with a shard the index lists as whole (``entry``: its index entry), or None: the file
    is missing, of another size, or its SHA-256 differs from the one recorded when it was written."""
    path = Path(folder) / entry["file"]
    if not path.is_file():
        return f"{path.name}: missing"
    size = path.stat().st_size
    if size != entry.get("bytes"):
        return f"{path.name}: size {size}, index says {entry.get('bytes')}"
    if file_sha256(path) != entry.get("sha256"):
        return f"{path.name}: SHA-256 differs from the index"
    return None


def damaged_shards(folder: str | os.PathLike, index: dict) -> dict[int, str]:
    """``{shard number: problem}`` for every shard the index lists as whole whose file does not match its
    recorded size and SHA-256 (checked on every reuse of a store: a changed byte would change results)."""
    return {k: problem for k, entry in enumerate(index.get("shards", ()))
            if entry.get("sha256") and (problem := shard_problem(Path(folder), entry)) is not None}


def forget_damaged_shards(folder: str | os.PathLike, index: dict) -> dict[int, str]:
    """Before a store is reused: mark every damaged shard (:func:`damaged_shards`) not done, in ``index``
    and in the index file, and remove its file, so that the run reusing the store recomputes it; say so in
    one :class:`~bertology.errors.BertologyWarning` line. Returns the damaged shards."""
    folder = Path(folder)
    damaged = damaged_shards(folder, index)
    if not damaged:
        return damaged
    for k in damaged:
        index["shards"][k].update(bytes=None, sha256=None)
    write_json(folder / INDEX_NAME, index, indent=None, fsync=True)
    for k in damaged:
        (folder / index["shards"][k]["file"]).unlink(missing_ok=True)
    first = next(iter(damaged.values()))
    more = f" and {len(damaged) - 1} more" if len(damaged) > 1 else ""
    warnings.warn(f"{folder}: {len(damaged)} of {len(index['shards'])} shard(s) damaged ({first}{more}); "
                  "recomputing them", BertologyWarning, stacklevel=3)
    return damaged


@dataclass
class ShardInfo:
    index: int
    start: int
    stop: int
    file: str
    bytes: int | None
    sha256: str | None

    @property
    def complete(self) -> bool:
        return self.sha256 is not None


def read_sentences(folder: str | os.PathLike) -> list[dict]:
    """The ``sentences.json`` of a store folder, or one-line :class:`StoreError` when it is missing or
    unreadable (the store is then incomplete or damaged)."""
    path = Path(folder) / SENTENCES_NAME
    if not path.is_file():
        raise StoreError(f"{path}: missing; the store is incomplete or damaged: run the same `bertology extract` "
                         "again to rebuild it")
    try:
        sentences = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StoreError(f"{path}: unreadable ({exc}); the store is damaged: run the same `bertology extract` "
                         "again to rebuild it") from None
    if not isinstance(sentences, list) or not all(isinstance(s, dict) and "words" in s for s in sentences):
        raise StoreError(f"{path}: not a list of sentence records; the store is damaged: run the same "
                         "`bertology extract` again to rebuild it")
    return sentences


class Store:
    """Read access to an extracted store. Open with :meth:`open`; nothing is loaded until asked."""

    def __init__(self, path: Path, index: dict, sentences: list[dict]):
        self.path = Path(path)
        self.index = index
        self._sentences = sentences
        self.shards = [ShardInfo(index=i, **s) for i, s in enumerate(index["shards"])]
        counts = np.asarray(index["row_counts"], dtype=np.int64)
        self.row_counts = counts
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._word_counts = np.asarray([len(s["words"]) for s in sentences], dtype=np.int64)
        self._word_counts.flags.writeable = False

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | os.PathLike,
        expect_fingerprint: str | None = None,
        expect_input_hash: str | None = None,
        allow_incomplete: bool = False,
    ) -> "Store":
        """Open the store folder ``path`` (nothing is read but the index and the sentences).

        ``expect_fingerprint``/``expect_input_hash`` refuse a store of another model (weights and
        tokenizer) or input; an incomplete store is refused unless ``allow_incomplete``. Then
        ``layer(l)`` is ``[rows, hidden]`` float32 (rows of sentence ``i``: ``offsets[i]:offsets[i+1]``),
        ``sentence_vectors(l)`` ``[n_sentences, hidden]`` and ``attention(i)``
        ``[len(attention_layers), heads, n+2, n+2]``; layers in the one numbering (0 = embeddings).
        Raises :class:`StoreError` with one line for anything wrong.
        """
        path = Path(path)
        index_path = path / INDEX_NAME
        if not index_path.is_file():
            raise StoreError(f"{path}: not a bertology store (no {INDEX_NAME})")
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreError(f"{index_path}: unreadable index ({exc})") from None
        version = index.get("format_version")
        if version != FORMAT_VERSION:
            raise StoreError(
                f"{path}: store format version {version!r}, this bertology reads version {FORMAT_VERSION}; "
                "re-extract it with `bertology extract`"
            )
        if expect_fingerprint and index["model"]["fingerprint"] != expect_fingerprint:
            raise StoreError(
                f"{path}: built from model {index['model']['name']!r} (fingerprint "
                f"{index['model']['fingerprint']}), not the model given (fingerprint {expect_fingerprint})"
            )
        if expect_input_hash and index["input"]["hash"] != expect_input_hash:
            raise StoreError(
                f"{path}: built from input {index['input'].get('path')!r} (hash {index['input']['hash']}), "
                f"not the input given (hash {expect_input_hash})"
            )
        sentences = read_sentences(path)
        store = cls(path, index, sentences)
        if not allow_incomplete and not store.complete:
            done = sum(s.complete for s in store.shards)
            raise StoreError(
                f"{path}: incomplete ({done}/{len(store.shards)} shards); run the same `bertology extract` "
                "again to resume"
            )
        return store

    # -- what it holds ---------------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        return all(s.complete for s in self.shards)

    @property
    def metadata(self) -> dict:
        return {k: v for k, v in self.index.items() if k not in ("shards", "row_counts")}

    @property
    def layers(self) -> list[int]:
        return list(self.index["layers"])

    @property
    def pool(self) -> str:
        return self.index["pool"]

    @property
    def dim(self) -> int:
        return int(self.index["model"]["hidden_size"])

    @property
    def has_attentions(self) -> bool:
        return bool(self.index["attentions"])

    @property
    def n_sentences(self) -> int:
        return len(self._sentences)

    @property
    def sentence_ids(self) -> list[str]:
        return [s["id"] for s in self._sentences]

    @property
    def word_counts(self) -> np.ndarray:
        """``[n_sentences]`` words per sentence (read-only; computed once when the store is opened)."""
        return self._word_counts

    def words(self, i: int) -> tuple[str, ...]:
        return tuple(self._sentences[i]["words"])

    def tokens(self, i: int) -> tuple[str, ...]:
        """Subword tokens of sentence ``i`` (stored for ``pool="tokens"``)."""
        return tuple(self._sentences[i].get("tokens") or ())

    def __len__(self) -> int:
        return self.n_sentences

    def __repr__(self) -> str:
        return (f"Store({str(self.path)!r}, model={self.index['model']['name']!r}, layers={self.layers}, "
                f"pool={self.pool!r}, sentences={self.n_sentences}, attentions={self.has_attentions})")

    # -- reading ---------------------------------------------------------------------------------
    def _check_layer(self, layer: int) -> None:
        if layer not in self.layers:
            raise StoreError(f"{self.path}: layer {layer} not in store (has {self.layers})")

    def _shard_path(self, shard: ShardInfo) -> Path:
        path = self.path / shard.file
        if not shard.complete:
            raise StoreError(f"{path}: shard {shard.index} is not complete; resume the extraction")
        if not path.is_file() or path.stat().st_size != shard.bytes:
            raise StoreError(f"{path}: shard missing or of the wrong size; the store is damaged, re-extract")
        return path

    def _read(self, shard: ShardInfo, name: str) -> torch.Tensor:
        with safe_open(str(self._shard_path(shard)), framework="pt") as handle:
            return handle.get_tensor(name)

    def iter_layer(self, layer: int) -> Iterator[tuple[ShardInfo, np.ndarray]]:
        """Stream one layer shard by shard: (shard, float32 rows of its sentences)."""
        self._check_layer(layer)
        for shard in self.shards:
            yield shard, self._read(shard, f"layer.{layer}").float().numpy()

    def layer(self, layer: int) -> np.ndarray:
        """All rows of one layer as float32: [total_words, dim] (word pools) or [n_sentences, dim]."""
        self._check_layer(layer)
        out = np.empty((int(self.offsets[-1]), self.dim), dtype=np.float32)
        for shard, rows in self.iter_layer(layer):
            out[self.offsets[shard.start] : self.offsets[shard.stop]] = rows
        return out

    def sentence_rows(self, i: int, layer: int) -> np.ndarray:
        """The rows of sentence ``i`` in one layer, reading only its shard's tensor."""
        self._check_layer(layer)
        shard = self._shard_of(i)
        rows = self._read(shard, f"layer.{layer}").float().numpy()
        base = self.offsets[shard.start]
        return rows[self.offsets[i] - base : self.offsets[i + 1] - base]

    def sentence_vectors(self, layer: int, how: str = "mean") -> np.ndarray:
        """One vector per sentence: the mean (or first) of its rows. [n_sentences, dim]."""
        if self.pool in SENTENCE_POOLS:
            return self.layer(layer)
        rows = self.layer(layer)
        if how == "first":
            return rows[self.offsets[:-1]]
        if how != "mean":
            raise StoreError(f"sentence_vectors: how={how!r}, expected 'mean' or 'first'")
        sums = np.add.reduceat(rows, self.offsets[:-1], axis=0)
        return sums / self.row_counts[:, None]

    def _shard_of(self, i: int) -> ShardInfo:
        if not 0 <= i < self.n_sentences:
            raise StoreError(f"{self.path}: sentence {i} out of range (0..{self.n_sentences - 1})")
        for shard in self.shards:
            if shard.start <= i < shard.stop:
                return shard
        raise StoreError(f"{self.path}: no shard holds sentence {i}")

    def _attention_sizes(self, start: int, stop: int) -> np.ndarray:
        """Floats per layer of each sentence's word-level map, for sentences ``start:stop``."""
        groups = self._word_counts[start:stop] + 2
        return self.index["model"]["num_heads"] * groups * groups

    def iter_attention_layer(self, layer: int) -> Iterator[np.ndarray]:
        """Word-level attention of one layer, sentence by sentence: float32 [heads, n+2, n+2]."""
        self._require_attentions()
        self._check_layer_attention(layer)
        heads = self.index["model"]["num_heads"]
        for shard in self.shards:
            flat = self._read(shard, f"attention.{layer}").float().numpy()
            bounds = np.concatenate([[0], np.cumsum(self._attention_sizes(shard.start, shard.stop))])
            for k, i in enumerate(range(shard.start, shard.stop)):
                g = int(self._word_counts[i]) + 2
                yield flat[bounds[k] : bounds[k + 1]].reshape(heads, g, g)

    attention_layer = iter_attention_layer

    def attention(self, i: int) -> np.ndarray:
        """Word-level attention of sentence ``i``: float32 [layers, heads, n+2, n+2].

        Position 0 is the leading special token(s) ([CLS]), 1..n the words, n+1 the trailing ones ([SEP]).
        """
        self._require_attentions()
        shard = self._shard_of(i)
        heads = self.index["model"]["num_heads"]
        g = int(self._word_counts[i]) + 2
        sizes = self._attention_sizes(shard.start, shard.stop)
        begin = int(sizes[: i - shard.start].sum())
        maps = []
        with safe_open(str(self._shard_path(shard)), framework="pt") as handle:
            for layer in self.attention_layers:
                flat = handle.get_slice(f"attention.{layer}")[begin : begin + int(sizes[i - shard.start])]
                maps.append(flat.float().numpy().reshape(heads, g, g))
        return np.stack(maps)

    def iter_attentions(self) -> Iterator[np.ndarray]:
        """Every sentence's word-level attention float32 [layers, heads, n+2, n+2], in order.

        Reads each shard once (all its attention layers, a few tens of MB), so a pass over the store is
        linear in its size.
        """
        self._require_attentions()
        heads = self.index["model"]["num_heads"]
        layers = self.attention_layers
        for shard in self.shards:
            with safe_open(str(self._shard_path(shard)), framework="pt") as handle:
                flat = [handle.get_tensor(f"attention.{layer}").float().numpy() for layer in layers]
            bounds = np.concatenate([[0], np.cumsum(self._attention_sizes(shard.start, shard.stop))])
            for k, i in enumerate(range(shard.start, shard.stop)):
                g = int(self._word_counts[i]) + 2
                yield np.stack([f[bounds[k] : bounds[k + 1]].reshape(heads, g, g) for f in flat])

    @property
    def attention_layers(self) -> list[int]:
        return [layer for layer in self.layers if layer >= 1]

    def _check_layer_attention(self, layer: int) -> None:
        if layer not in self.attention_layers:
            raise StoreError(f"{self.path}: no attention for layer {layer} (has {self.attention_layers})")

    def _require_attentions(self) -> None:
        if not self.has_attentions:
            raise StoreError(f"{self.path}: extracted without attentions; re-extract it with attention maps "
                             "(attentions=)")

    # -- verification ----------------------------------------------------------------------------
    def verify(self) -> list[str]:
        """Check every shard's size and SHA-256 against the index; return the problems found."""
        problems = []
        for shard in self.shards:
            if not shard.complete:
                problems.append(f"shard {shard.index}: not complete")
            else:
                problem = shard_problem(self.path, {"file": shard.file, "bytes": shard.bytes, "sha256": shard.sha256})
                if problem is not None:
                    problems.append(problem)
        return problems

    def size_on_disk(self) -> int:
        return sum(p.stat().st_size for p in self.path.iterdir() if p.is_file())
