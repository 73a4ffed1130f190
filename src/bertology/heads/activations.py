"""All-layer activations of model inputs (SQuAD windows, GLUE sentences or pairs), written once to a store.

``bertology.extraction.extract`` works on word-split sentences of one segment; SQuAD windows are
question + context pairs with token type ids, and GLUE pair tasks are pairs too, so their activations are
written here - with the store's own machinery and layout (:mod:`bertology.store`): safetensors shards of
``layer.<l>`` tensors ``[rows, hidden]`` in float16, a ``store.json`` index that names a shard only once it
is whole (size + SHA-256), ``sentences.json`` with one record per input. ``Store.open`` reads the result
like any other store. Rows per input: every token (``pool="tokens"``: SQuAD windows, ``rows = tokens``
including [CLS]/[SEP]), or one row (``"cls"``: position 0; ``"mean"``: the mean over the input's tokens).

Beside the index, ``labels.json`` holds what the heads train on (span positions, answerable flags, GLUE
labels). Re-running with the same model and inputs resumes an interrupted write, or returns the finished
store at once; a store of another model or input in the folder is refused (or replaced with
``overwrite=True``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from bertology import __version__
from bertology.errors import DataError, StoreError
from bertology.files import ensure_dir, write_json
from bertology.models.encoders import Encoder
from bertology.progress import progress_bar
from bertology.store.store import (
    DTYPES, FORMAT_VERSION, INDEX_NAME, SENTENCES_NAME, Store, forget_damaged_shards, write_shard_atomic,
)

LABELS_NAME = "labels.json"
ROW_POOLS = ("tokens", "cls", "mean")
SHARD_TARGET_BYTES = 48 << 20


def inputs_hash(input_ids: Sequence[Sequence[int]], token_type_ids: Sequence[Sequence[int]] | None,
                labels: dict | None = None) -> str:
    digest = hashlib.sha256()
    for i, ids in enumerate(input_ids):
        digest.update(np.asarray(ids, dtype=np.int64).tobytes())
        if token_type_ids is not None:
            digest.update(np.asarray(token_type_ids[i], dtype=np.int8).tobytes())
        digest.update(b"|")
    if labels:
        digest.update(json.dumps(labels, sort_keys=True, default=float).encode())
    return digest.hexdigest()[:16]


def _model_key(encoder: Encoder) -> dict:
    return {"name": encoder.name, "source": encoder.source, "fingerprint": encoder.fingerprint,
            "model_type": encoder.config.model_type, "num_layers": encoder.num_layers,
            "num_heads": encoder.num_heads, "hidden_size": encoder.hidden_size,
            "num_parameters": encoder.num_parameters, "untrained_seed": encoder.untrained_seed}


def _existing(out: Path, fingerprint: str, input_hash: str, pool: str, dtype: str, overwrite: bool) -> dict | None:
    if not out.exists():
        return None
    if not out.is_dir():
        raise StoreError(f"{out}: is a file; expected a store folder")
    index_path = out / INDEX_NAME
    if not index_path.is_file():
        if any(out.iterdir()) and not overwrite:
            raise StoreError(f"{out}: exists and is not a bertology store; choose another folder")
        return None
    index = json.loads(index_path.read_text(encoding="utf-8"))
    problems = []
    if index.get("format_version") != FORMAT_VERSION:
        problems.append(f"format version {index.get('format_version')}")
    if index.get("model", {}).get("fingerprint") != fingerprint:
        problems.append(f"model {index.get('model', {}).get('name')!r} (fingerprint "
                        f"{index.get('model', {}).get('fingerprint')}), not fingerprint {fingerprint}")
    if index.get("input", {}).get("hash") != input_hash:
        problems.append(f"inputs with hash {index.get('input', {}).get('hash')}, not {input_hash}")
    if index.get("pool") != pool or index.get("dtype") != dtype:
        problems.append(f"pool/dtype {index.get('pool')}/{index.get('dtype')}, not {pool}/{dtype}")
    if problems:
        if overwrite:
            shutil.rmtree(out)
            return None
        raise StoreError(f"{out}: holds activations of other inputs: " + "; ".join(problems)
                         + ". Choose another folder or overwrite it")
    return index


def _plan_shards(rows: np.ndarray, bytes_per_row: int, target: int) -> list[tuple[int, int]]:
    shards, start, size = [], 0, 0
    for i, count in enumerate(rows):
        cost = int(count) * bytes_per_row
        if i > start and size + cost > target:
            shards.append((start, i))
            start, size = i, 0
        size += cost
    shards.append((start, len(rows)))
    return shards


def _batches(order: np.ndarray, lengths: np.ndarray, batch_tokens: int) -> list[np.ndarray]:
    """Length-sorted batches whose padded size stays under ``batch_tokens``."""
    ordered = order[np.argsort(lengths[order], kind="stable")]
    batches, current, longest = [], [], 0
    for i in ordered:
        longest_next = max(longest, int(lengths[i]))
        if current and longest_next * (len(current) + 1) > batch_tokens:
            batches.append(np.asarray(current))
            current, longest_next = [], int(lengths[i])
        current.append(int(i))
        longest = longest_next
    if current:
        batches.append(np.asarray(current))
    return batches


def write_activations(
    encoder: Encoder,
    input_ids: Sequence[Sequence[int]],
    token_type_ids: Sequence[Sequence[int]] | None,
    records: Sequence[dict],
    labels: dict,
    out: str | Path,
    *,
    pool: str = "tokens",
    kind: str = "inputs",
    settings: dict | None = None,
    dtype: str = "float16",
    batch_tokens: int = 8192,
    shard_bytes: int = SHARD_TARGET_BYTES,
    device: str | torch.device | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> Store:
    """Every layer's activations (0 = embeddings .. L) of each input into the store ``out``.

    ``records[i]`` (JSON-able, with an ``id``) describes input ``i`` in ``sentences.json``; ``labels`` (lists
    of one value per input) goes to ``labels.json``; ``settings`` (e.g. window length and stride) and
    ``kind`` are kept in the index. Returns the opened store.
    """
    if pool not in ROW_POOLS:
        raise DataError(f"pool {pool!r}: expected one of {', '.join(ROW_POOLS)}")
    if dtype not in DTYPES:
        raise DataError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    n = len(input_ids)
    if n == 0:
        raise DataError("no inputs to extract activations from")
    if len(records) != n or any(len(values) != n for values in labels.values()):
        raise DataError(f"{n} inputs but {len(records)} records / label lists of other lengths")
    out = Path(out)
    input_hash = inputs_hash(input_ids, token_type_ids, labels)
    existing = _existing(out, encoder.fingerprint, input_hash, pool, dtype, overwrite)
    if existing is not None:
        forget_damaged_shards(out, existing)  # a damaged shard is recomputed, not reused
    if existing is not None and all(s.get("sha256") for s in existing["shards"]):
        return Store.open(out, expect_fingerprint=encoder.fingerprint)
    lengths = np.fromiter((len(ids) for ids in input_ids), dtype=np.int64, count=n)
    if lengths.max() > encoder.max_length:
        raise DataError(f"an input has {int(lengths.max())} tokens; {encoder.name} takes at most {encoder.max_length}")
    row_counts = lengths if pool == "tokens" else np.ones(n, dtype=np.int64)
    layers = list(range(encoder.num_layers + 1))
    element = torch.tensor([], dtype=DTYPES[dtype]).element_size()
    bounds = _plan_shards(row_counts, element * encoder.hidden_size * len(layers), shard_bytes)
    if existing is None:
        ensure_dir(out)  # OS errors (a file in the way, no space) as one line
        write_json(out / SENTENCES_NAME, list(records))
        write_json(out / LABELS_NAME, {"kind": kind, "labels": labels})
        index = {
            "format_version": FORMAT_VERSION, "bertology_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "model": _model_key(encoder),
            "layers": layers, "pool": pool, "attentions": False, "dtype": dtype, "long_policy": "error",
            "autocast": None, "kind": kind, "settings": settings or {},
            "input": {"path": None, "hash": input_hash, "n_sentences": n, "n_words": int(lengths.sum())},
            "row_counts": row_counts.tolist(),
            "shards": [{"start": a, "stop": b, "file": f"shard-{k:05d}.safetensors", "bytes": None, "sha256": None}
                       for k, (a, b) in enumerate(bounds)],
            "stats": {},
        }
        write_json(out / INDEX_NAME, index, fsync=True)
    else:
        index = existing
    for leftover in out.glob(".*.tmp"):
        leftover.unlink(missing_ok=True)

    run_device = torch.device(device) if device is not None else encoder.device
    if encoder.device != run_device:
        encoder.model.to(run_device)
    pad_id = encoder.tokenizer.pad_token_id if encoder.tokenizer.pad_token_id is not None else 0
    todo = [k for k, shard in enumerate(index["shards"]) if not shard.get("sha256")]
    largest = max(int(row_counts[index["shards"][k]["start"]:index["shards"][k]["stop"]].sum()) for k in todo) if todo else 0
    # Two reusable shard buffers: one is filled while the writer thread streams the other to disk.
    buffers = [torch.empty(len(layers), largest, encoder.hidden_size, dtype=DTYPES[dtype]) for _ in range(2 if todo else 0)]
    offsets = np.concatenate([[0], np.cumsum(row_counts)])
    started, tokens, padded = time.perf_counter(), 0, 0
    pending: tuple[dict, Future] | None = None

    def finish(done: tuple[dict, Future]) -> None:
        shard, future = done
        shard.update(future.result())
        write_json(out / INDEX_NAME, index, fsync=True)

    with progress_bar(progress) as bar, ThreadPoolExecutor(1, thread_name_prefix="bertology-heads-writer") as writer:
        task = bar.add_task(f"activations {encoder.name}", total=sum(index["shards"][k]["stop"] - index["shards"][k]["start"]
                                                                   for k in todo))
        for position, k in enumerate(todo):
            shard = index["shards"][k]
            start, stop = shard["start"], shard["stop"]
            buffer = buffers[position % 2]
            base = offsets[start]
            for batch in _batches(np.arange(start, stop), lengths, batch_tokens):
                longest = int(lengths[batch].max())
                ids = torch.full((len(batch), longest), pad_id, dtype=torch.long)
                mask = torch.zeros((len(batch), longest), dtype=torch.long)
                types = torch.zeros((len(batch), longest), dtype=torch.long) if token_type_ids is not None else None
                for row, i in enumerate(batch):
                    ids[row, : lengths[i]] = torch.as_tensor(input_ids[i])
                    mask[row, : lengths[i]] = 1
                    if types is not None:
                        types[row, : lengths[i]] = torch.as_tensor(token_type_ids[i])
                inputs = {"input_ids": ids, "attention_mask": mask}
                if types is not None:
                    inputs["token_type_ids"] = types
                states = torch.stack(encoder.forward(inputs, hidden_states=True).hidden_states)  # [layers, B, T, H]
                tokens += int(mask.sum())
                padded += ids.numel()
                if pool == "tokens":
                    flat_mask = mask.reshape(-1).bool().to(states.device)
                    rows = states.reshape(len(layers), -1, states.shape[-1])[:, flat_mask]
                    destination = np.concatenate([np.arange(offsets[i], offsets[i + 1]) - base for i in batch])
                    buffer[:, torch.as_tensor(destination)] = rows.to("cpu", DTYPES[dtype])
                else:
                    if pool == "cls":
                        vectors = states[:, :, 0]
                    else:
                        weights = mask.to(states.device, states.dtype)
                        vectors = (states * weights[None, :, :, None]).sum(2) / weights.sum(1)[None, :, None]
                    buffer[:, torch.as_tensor(batch - start)] = vectors.to("cpu", DTYPES[dtype])
            used = int(offsets[stop] - base)
            tensors = {f"layer.{layer}": buffer[p, :used] for p, layer in enumerate(layers)}
            if pending is not None:
                finish(pending)  # the buffer the next shard fills must be on disk first
            pending = (shard, writer.submit(write_shard_atomic, out / shard["file"], tensors,
                                            {"format_version": str(FORMAT_VERSION)}))
            bar.advance(task, stop - start)
        if pending is not None:
            finish(pending)
    elapsed = time.perf_counter() - started
    if todo:
        index["stats"] = {"seconds": round(elapsed, 3), "tokens": tokens, "padded_tokens": padded,
                          "tokens_per_second": round(tokens / elapsed, 1) if elapsed else None}
        write_json(out / INDEX_NAME, index, fsync=True)
    return Store.open(out, expect_fingerprint=encoder.fingerprint)


def read_labels(store: Store) -> dict:
    """``labels.json`` of a store written by :func:`write_activations`: ``{"kind", "labels"}``."""
    path = store.path / LABELS_NAME
    if not path.is_file():
        raise StoreError(f"{store.path}: no {LABELS_NAME}; heads train on stores written by `bertology heads`")
    return json.loads(path.read_text(encoding="utf-8"))
