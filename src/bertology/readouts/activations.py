"""All-layer activations of model inputs (SQuAD windows, GLUE sentences or pairs), written once to a store.

``bertology.extraction.extract`` works on word-split sentences of one segment; SQuAD windows are
question + context pairs with token type ids, and GLUE pair tasks are pairs too, so their activations are
written here - through the one store writer (:class:`bertology.store.writer.StoreWriter`), in the store's
layout: safetensors shards of ``layer.<l>`` tensors ``[rows, hidden]`` in float16, a ``store.json`` index that
names a shard only once it is whole (size + SHA-256), ``sentences.json`` with one record per input. ``Store.open`` reads the result
like any other store. Rows per input: every token (``pool="tokens"``: SQuAD windows, ``rows = tokens``
including [CLS]/[SEP]), or one row (``"cls"``: position 0; ``"mean"``: the mean over the input's tokens).

Beside the index, ``labels.json`` holds what the readouts train on (span positions, answerable flags, GLUE
labels). Re-running with the same model and inputs resumes an interrupted write, or returns the finished
store at once; a store of another model or input in the folder is refused (or replaced with
``overwrite=True``).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from bertology.errors import DataError, StoreError
from bertology.files import exclusive
from bertology.models.batching import pad_batch, pad_id_of, token_budget_batches
from bertology.models.encoders import Encoder
from bertology.progress import progress_bar
from bertology.store.names import SHARD_TARGET_BYTES
from bertology.store.store import DTYPES, Store
from bertology.store.writer import StoreWriter, model_record, plan_shards

LABELS_NAME = "labels.json"
ROW_POOLS = ("tokens", "cls", "mean")


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


def write_activations(encoder: Encoder, input_ids: Sequence[Sequence[int]],
                      token_type_ids: Sequence[Sequence[int]] | None, records: Sequence[dict], labels: dict,
                      out: str | Path, **settings) -> Store:
    """Every layer's activations (0 = embeddings .. L) of each input into the store ``out``.

    ``records[i]`` (JSON-able, with an ``id``) describes input ``i`` in ``sentences.json``; ``labels`` (lists
    of one value per input) goes to ``labels.json``; ``settings`` (e.g. window length and stride) and
    ``kind`` are kept in the index. Returns the opened store. Under the store's lock
    (:func:`~bertology.files.exclusive`): a second process writing the same store waits, then reuses it.
    Keywords: ``pool``, ``kind``, ``settings``, ``dtype``, ``batch_tokens``, ``shard_bytes``, ``device``,
    ``overwrite``, ``progress`` (see :func:`_write_activations`).
    """
    with exclusive(out, "writing the store"):
        return _write_activations(encoder, _Inputs(input_ids, token_type_ids, records, labels), out, **settings)


@dataclass(frozen=True)
class _Inputs:
    """What :func:`write_activations` writes the activations of: the inputs' token ids (and token types), one
    record and the labels of each."""

    input_ids: Sequence[Sequence[int]]
    token_type_ids: Sequence[Sequence[int]] | None
    records: Sequence[dict]
    labels: dict


def _write_activations(
    encoder: Encoder,
    items: _Inputs,
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
    """:func:`write_activations` under the store's lock."""
    input_ids, token_type_ids, records, labels = items.input_ids, items.token_type_ids, items.records, items.labels
    if pool not in ROW_POOLS:
        raise DataError(f"pool {pool!r}: expected one of {', '.join(ROW_POOLS)}")
    if dtype not in DTYPES:
        raise DataError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    n = len(input_ids)
    if n == 0:
        raise DataError("no inputs to extract activations from")
    if len(records) != n or any(len(values) != n for values in labels.values()):
        raise DataError(f"{n} inputs but {len(records)} records / label lists of other lengths")
    layers = list(range(encoder.num_layers + 1))
    key = {"model": model_record(encoder), "layers": layers, "pool": pool, "attentions": False, "dtype": dtype,
           "long_policy": "error", "autocast": None}
    writer = StoreWriter(out, key, inputs_hash(input_ids, token_type_ids, labels), overwrite=overwrite,
                         refused="holds activations of other inputs")
    if writer.complete:
        return Store.open(writer.out, expect_fingerprint=encoder.fingerprint)
    lengths = np.fromiter((len(ids) for ids in input_ids), dtype=np.int64, count=n)
    if lengths.max() > encoder.max_length:
        raise DataError(f"an input has {int(lengths.max())} tokens; {encoder.name} takes at most {encoder.max_length}")
    row_counts = lengths if pool == "tokens" else np.ones(n, dtype=np.int64)
    element = torch.tensor([], dtype=DTYPES[dtype]).element_size()
    bounds = plan_shards(row_counts, element * encoder.hidden_size * len(layers), shard_bytes)
    index = writer.start(records, row_counts, bounds, {"path": None, "n_sentences": n, "n_words": int(lengths.sum())},
                         extra={"kind": kind, "settings": settings or {}},
                         files={LABELS_NAME: {"kind": kind, "labels": labels}})

    run_device = torch.device(device) if device is not None else encoder.device
    if encoder.device != run_device:
        encoder.to(run_device)
    pad_id = pad_id_of(encoder.tokenizer)
    todo = writer.todo
    largest = writer.largest_shard_rows(todo)
    # Two reusable shard buffers: one is filled while the writer thread streams the other to disk.
    buffers = [torch.empty(len(layers), largest, encoder.hidden_size, dtype=DTYPES[dtype]) for _ in range(2 if todo else 0)]
    offsets = np.concatenate([[0], np.cumsum(row_counts)])
    started, tokens, padded = time.perf_counter(), 0, 0
    sizes = {k: index["shards"][k]["stop"] - index["shards"][k]["start"] for k in todo}

    with (progress_bar(progress) as bar,
          writer.shards_in_background(on_written=lambda k: bar.advance(task, sizes[k])) as put):
        task = bar.add_task(f"activations {encoder.name}", total=sum(sizes.values()))
        for position, k in enumerate(todo):
            shard = index["shards"][k]
            start, stop = shard["start"], shard["stop"]
            buffer = buffers[position % 2]
            base = offsets[start]
            for chosen in token_budget_batches(lengths[start:stop], batch_tokens, max_padding=None):
                batch = chosen + start
                inputs = pad_batch([input_ids[i] for i in batch], pad_id,
                                   None if token_type_ids is None else [token_type_ids[i] for i in batch])
                mask = inputs["attention_mask"]
                states = torch.stack(encoder.forward(inputs, hidden_states=True).hidden_states)  # [layers, B, T, H]
                tokens += int(mask.sum())
                padded += mask.numel()
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
            put(k, {f"layer.{layer}": buffer[p, :used] for p, layer in enumerate(layers)})
    elapsed = time.perf_counter() - started
    if todo:
        writer.finish({"seconds": round(elapsed, 3), "tokens": tokens, "padded_tokens": padded,
                       "tokens_per_second": round(tokens / elapsed, 1) if elapsed else None})
    return Store.open(writer.out, expect_fingerprint=encoder.fingerprint)


def read_labels(store: Store) -> dict:
    """``labels.json`` of a store written by :func:`write_activations`: ``{"kind", "labels"}``."""
    path = store.path / LABELS_NAME
    if not path.is_file():
        raise StoreError(f"{store.path}: no {LABELS_NAME}; readouts train on stores written by `bertology readouts`")
    return json.loads(path.read_text(encoding="utf-8"))
