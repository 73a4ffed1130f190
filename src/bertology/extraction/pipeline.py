"""Extraction: every requested layer's vectors (and word-level attentions) for a corpus, into a store.

Speed comes from three choices: model inputs are sorted by length and batched under a token budget
(almost no padding); only the layers asked for are kept; bf16 autocast is available on request.
Memory is bounded by one shard (a few tens of MB), not by the corpus.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from bertology import __version__
from bertology.data.corpus import Sentence
from bertology.errors import DataError, ModelError, StoreError
from bertology.extraction.alignment import (
    EncodedSentence, Segment, encode_sentences, warn_unknown, word_groups, word_level_attention,
)
from bertology.models.encoders import Encoder
from bertology.store.store import (
    DTYPES, FORMAT_VERSION, INDEX_NAME, POOLS, SENTENCE_POOLS, SENTENCES_NAME, Store, file_sha256, write_json_atomic,
    write_shard_atomic,
)

SHARD_TARGET_BYTES = 48 << 20


def corpus_hash(sentences: Sequence[Sentence]) -> str:
    """Hash of the words of every sentence, in order: what the extraction actually depends on."""
    digest = hashlib.sha256()
    for sentence in sentences:
        digest.update("\x1f".join(sentence.words).encode("utf-8"))
        digest.update(b"\x1e")
    return digest.hexdigest()[:16]


@dataclass
class ExtractionStats:
    sentences: int
    words: int
    tokens: int
    padded_tokens: int
    seconds: float
    windowed_sentences: int

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else float("nan")


def _resolve_layers(encoder: Encoder, layers: Sequence[int] | None) -> list[int]:
    total = encoder.num_layers
    if layers is None:
        return list(range(total + 1))
    resolved = []
    for layer in layers:
        layer = int(layer)
        if layer < 0:
            layer += total + 1
        if not 0 <= layer <= total:
            raise ModelError(f"layer {layer} out of range: {encoder.name} has layers 0..{total} (0 = embeddings)")
        resolved.append(layer)
    return sorted(set(resolved))


def _batches(segments: list[Segment], batch_tokens: int, max_batch: int,
             max_padding: float = 0.1, min_batch: int = 8) -> list[list[Segment]]:
    """Length-sorted batches whose padded size stays under ``batch_tokens``.

    A batch also closes once adding the next input would make more than ``max_padding`` of it padding
    (when it already holds ``min_batch`` inputs, so batches stay big enough to use the cores).
    """
    ordered = sorted(segments, key=lambda s: len(s.input_ids))
    batches, current, longest, real = [], [], 0, 0
    for segment in ordered:
        length = len(segment.input_ids)
        padded = max(longest, length) * (len(current) + 1)
        wasteful = len(current) >= min_batch and 1 - (real + length) / padded > max_padding
        if current and (padded > batch_tokens or len(current) >= max_batch or wasteful):
            batches.append(current)
            current, longest, real = [], 0, 0
        current.append(segment)
        longest = max(longest, length)
        real += length
    if current:
        batches.append(current)
    return batches


def _plan_shards(encoded: list[EncodedSentence], row_counts: np.ndarray, bytes_per_row: int,
                 attention_bytes: np.ndarray, target: int) -> list[tuple[int, int]]:
    shards, start, size = [], 0, 0
    for i in range(len(encoded)):
        cost = int(row_counts[i]) * bytes_per_row + int(attention_bytes[i])
        if i > start and size + cost > target:
            shards.append((start, i))
            start, size = i, 0
        size += cost
    shards.append((start, len(encoded)))
    return shards


class _SentenceBuffer:
    """Assembles one sentence's full token sequence from the segments that cover it."""

    def __init__(self, encoded: EncodedSentence, n_layers: int, dim: int, heads: int, n_att_layers: int):
        self.encoded = encoded
        length = encoded.n_prefix + encoded.n_tokens + encoded.n_suffix
        self.hidden = torch.zeros(n_layers, length, dim)
        self.attention = torch.zeros(n_att_layers, heads, length, length) if n_att_layers else None

    def global_positions(self, segment: Segment) -> torch.Tensor:
        enc = self.encoded
        n_content = segment.stop - segment.start
        return torch.cat([
            torch.arange(enc.n_prefix),
            torch.arange(segment.start, segment.stop) + enc.n_prefix,
            torch.arange(enc.n_suffix) + enc.n_prefix + enc.n_tokens,
        ])[: enc.n_prefix + n_content + enc.n_suffix]

    def add(self, segment: Segment, hidden: torch.Tensor, attention: torch.Tensor | None) -> None:
        """``hidden``: [layers, seg_len, dim]; ``attention``: [att_layers, heads, seg_len, seg_len]."""
        enc = self.encoded
        rows_local = [torch.as_tensor(segment.owned_positions)]
        rows_global = [torch.as_tensor(segment.owned_tokens) + enc.n_prefix]
        seg_len = len(segment.input_ids)
        if segment.first:
            rows_local.append(torch.arange(enc.n_prefix))
            rows_global.append(torch.arange(enc.n_prefix))
        if segment.last:
            rows_local.append(torch.arange(seg_len - enc.n_suffix, seg_len))
            rows_global.append(torch.arange(enc.n_suffix) + enc.n_prefix + enc.n_tokens)
        local = torch.cat(rows_local)
        target = torch.cat(rows_global)
        self.hidden[:, target] = hidden[:, local].float()
        if self.attention is not None and attention is not None:
            columns = self.global_positions(segment)
            block = attention[:, :, local].float()  # [L, H, rows, seg_len]
            self.attention[:, :, target.unsqueeze(1), columns.unsqueeze(0)] = block

    def pooled(self, pool: str) -> torch.Tensor:
        enc = self.encoded
        content = self.hidden[:, enc.n_prefix : enc.n_prefix + enc.n_tokens]
        if pool == "tokens":
            return content.clone()
        if pool == "cls":
            return self.hidden[:, :1].clone() if enc.n_prefix else content[:, :1].clone()
        if pool == "mean":
            return content.mean(dim=1, keepdim=True)
        index = torch.as_tensor(enc.word_index)
        if pool == "word-mean":
            sums = torch.zeros(content.shape[0], enc.n_words, content.shape[2])
            sums.index_add_(1, index, content)
            counts = torch.bincount(index, minlength=enc.n_words).clamp(min=1)
            return sums / counts[None, :, None]
        positions = torch.arange(len(index))
        if pool == "word-first":
            first = torch.full((enc.n_words,), len(index), dtype=torch.long).scatter_reduce(
                0, index, positions, reduce="amin")
            return content[:, first]
        if pool == "word-last":
            last = torch.zeros(enc.n_words, dtype=torch.long).scatter_reduce(0, index, positions, reduce="amax")
            return content[:, last]
        raise DataError(f"unknown pooling {pool!r}; expected one of {', '.join(POOLS)}")

    def word_attention(self) -> torch.Tensor:
        """Clark et al. 2019: sum over the attended-to word's subwords, mean over the attending word's."""
        return word_level_attention(self.attention, word_groups(self.encoded))  # [L, H, G, G]


def _pad(batch: list[Segment], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(len(s.input_ids) for s in batch)
    ids = torch.full((len(batch), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), longest), dtype=torch.long)
    for row, segment in enumerate(batch):
        ids[row, : len(segment.input_ids)] = torch.as_tensor(segment.input_ids)
        mask[row, : len(segment.input_ids)] = 1
    return ids, mask


def _model_key(encoder: Encoder, layers, pool, attentions, dtype, long_policy, autocast) -> dict:
    return {
        "model": {
            "name": encoder.name,
            "source": encoder.source,
            "fingerprint": encoder.fingerprint,
            "model_type": encoder.config.model_type,
            "num_layers": encoder.num_layers,
            "num_heads": encoder.num_heads,
            "hidden_size": encoder.hidden_size,
            "untrained_seed": encoder.untrained_seed,
        },
        "layers": layers,
        "pool": pool,
        "attentions": attentions,
        "dtype": dtype,
        "long_policy": long_policy,
        "autocast": autocast,
    }


_KEY_FIELDS = ("layers", "pool", "attentions", "dtype", "long_policy", "autocast")


def _check_existing(out: Path, key: dict, input_hash: str, overwrite: bool) -> dict | None:
    """Return the existing index to resume from, or None; refuse a store of another model or input."""
    index_path = out / INDEX_NAME
    if not out.exists():
        return None
    if not index_path.is_file():
        if any(out.iterdir()) and not overwrite:
            raise StoreError(f"{out}: exists and is not a bertology store; choose another --out")
        return None
    index = json.loads(index_path.read_text(encoding="utf-8"))
    problems = []
    if index.get("format_version") != FORMAT_VERSION:
        problems.append(f"format version {index.get('format_version')} (current {FORMAT_VERSION})")
    if index.get("model", {}).get("fingerprint") != key["model"]["fingerprint"]:
        problems.append(f"model {index.get('model', {}).get('name')!r} "
                        f"(fingerprint {index.get('model', {}).get('fingerprint')}), not {key['model']['name']!r} "
                        f"(fingerprint {key['model']['fingerprint']})")
    if index.get("input", {}).get("hash") != input_hash:
        problems.append(f"input {index.get('input', {}).get('path')!r} (hash {index.get('input', {}).get('hash')}), "
                        f"not this input (hash {input_hash})")
    for field in _KEY_FIELDS:
        if index.get(field) != key[field]:
            problems.append(f"{field}={index.get(field)!r}, not {key[field]!r}")
    if problems:
        if overwrite:
            shutil.rmtree(out)
            return None
        raise StoreError(f"{out}: belongs to another extraction: " + "; ".join(problems)
                         + ". Choose another --out, or pass --overwrite")
    return index


def extract(
    encoder: Encoder,
    sentences: Sequence[Sentence],
    out: str | Path,
    layers: Sequence[int] | None = None,
    pool: str = "word-mean",
    attentions: bool = False,
    dtype: str = "float16",
    autocast: str | None = None,
    batch_tokens: int = 4096,
    max_batch: int = 128,
    long_policy: str = "window",
    input_path: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
    device: str | None = None,
    shard_bytes: int = SHARD_TARGET_BYTES,
) -> Store:
    """Extract ``layers`` (0 = embeddings; default all) of ``encoder`` for ``sentences`` into ``out``.

    Re-running with the same arguments resumes an interrupted extraction, or returns the finished
    store at once. Attention maps are always computed in float32 with eager attention, since bf16
    moves attention probabilities by up to 0.02.
    """
    if pool not in POOLS:
        raise DataError(f"unknown pooling {pool!r}; expected one of {', '.join(POOLS)}")
    if dtype not in DTYPES:
        raise DataError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    if autocast not in (None, "bfloat16", "bf16"):
        raise DataError(f"autocast {autocast!r}: expected None or 'bfloat16'")
    autocast = "bfloat16" if autocast else None
    if attentions and autocast:
        autocast = None  # attention maps stay float32 (see docstring)
    if not sentences:
        raise DataError("no sentences to extract")
    if attentions and pool == "tokens":
        raise DataError("attentions are stored at word level; use a word pool (word-mean/first/last) with them")
    out = Path(out)
    layers = _resolve_layers(encoder, layers)
    if attentions:
        encoder.with_attentions()
    key = _model_key(encoder, layers, pool, attentions, dtype, long_policy, autocast)
    input_hash = corpus_hash(sentences)
    existing = _check_existing(out, key, input_hash, overwrite)
    if existing is not None and all(s.get("sha256") for s in existing["shards"]):
        return Store.open(out)

    encoded = encode_sentences(encoder.tokenizer, list(sentences), encoder.max_length, long_policy)
    warn_unknown(encoded)
    if pool in SENTENCE_POOLS:
        row_counts = np.ones(len(encoded), dtype=np.int64)
    elif pool == "tokens":
        row_counts = np.asarray([e.n_tokens for e in encoded], dtype=np.int64)
    else:
        row_counts = np.asarray([e.n_words for e in encoded], dtype=np.int64)
    store_bytes = torch.tensor([], dtype=DTYPES[dtype]).element_size()
    attention_layers = [layer for layer in layers if layer >= 1] if attentions else []
    groups = np.asarray([e.n_words + 2 for e in encoded], dtype=np.int64)
    attention_bytes = 4 * encoder.num_heads * len(attention_layers) * groups * groups
    shard_bounds = _plan_shards(encoded, row_counts, store_bytes * encoder.hidden_size * len(layers), attention_bytes,
                                 shard_bytes)

    if existing is None:
        out.mkdir(parents=True, exist_ok=True)
        sentence_records = [{"id": s.id, "words": list(s.words)} for s in sentences]
        if pool == "tokens":
            for record, enc in zip(sentence_records, encoded):
                record["tokens"] = encoder.tokenizer.convert_ids_to_tokens(enc.token_ids)
        write_json_atomic(out / SENTENCES_NAME, sentence_records)
        index = {
            "format_version": FORMAT_VERSION,
            "bertology_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **key,
            "input": {"path": input_path, "hash": input_hash, "file_sha256": file_sha256(Path(input_path)) if input_path and Path(input_path).is_file() else None,
                      "n_sentences": len(sentences), "n_words": int(sum(len(s) for s in sentences))},
            "row_counts": row_counts.tolist(),
            "shards": [{"start": a, "stop": b, "file": f"shard-{k:05d}.safetensors", "bytes": None, "sha256": None}
                       for k, (a, b) in enumerate(shard_bounds)],
            "stats": {},
        }
        write_json_atomic(out / INDEX_NAME, index)
    else:
        index = existing
    for leftover in out.glob(".*.tmp"):
        leftover.unlink(missing_ok=True)

    model = encoder.model
    if device:
        model.to(device)
    run_device = next(model.parameters()).device
    pad_id = encoder.tokenizer.pad_token_id if encoder.tokenizer.pad_token_id is not None else 0
    todo = [k for k, s in enumerate(index["shards"]) if not s.get("sha256")]
    total_sentences = sum(index["shards"][k]["stop"] - index["shards"][k]["start"] for k in todo)
    started = time.perf_counter()
    token_count = padded = windowed = 0
    columns = [TextColumn("[bold]extract[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("sentences"), TimeRemainingColumn()]
    with Progress(*columns, disable=not progress, transient=False) as bar:
        task = bar.add_task(encoder.name, total=total_sentences)
        for k in todo:
            shard = index["shards"][k]
            start, stop = shard["start"], shard["stop"]
            buffers = {i: _SentenceBuffer(encoded[i], len(layers), encoder.hidden_size, encoder.num_heads,
                                          len(attention_layers)) for i in range(start, stop)}
            segments = [seg for i in range(start, stop) for seg in encoded[i].segments]
            windowed += sum(len(encoded[i].segments) > 1 for i in range(start, stop))
            for batch in _batches(segments, batch_tokens, max_batch):
                ids, mask = _pad(batch, pad_id)
                token_count += int(mask.sum())
                padded += ids.numel()
                hidden, attention = _forward(model, ids.to(run_device), mask.to(run_device), layers,
                                             attention_layers, autocast)
                for row, segment in enumerate(batch):
                    length = len(segment.input_ids)
                    buffers[segment.sentence].add(
                        segment, hidden[:, row, :length],
                        attention[:, row, :, :length, :length] if attention is not None else None)
            tensors = _shard_tensors(buffers, range(start, stop), layers, attention_layers, pool, dtype)
            entry = write_shard_atomic(out / shard["file"], tensors, {"format_version": str(FORMAT_VERSION)})
            shard.update(entry)
            write_json_atomic(out / INDEX_NAME, index)
            bar.advance(task, stop - start)
    elapsed = time.perf_counter() - started
    index["stats"] = {"seconds": round(elapsed, 3), "tokens": token_count, "padded_tokens": padded,
                      "windowed_sentences": windowed,
                      "tokens_per_second": round(token_count / elapsed, 1) if elapsed else None}
    write_json_atomic(out / INDEX_NAME, index)
    return Store.open(out)


@torch.inference_mode()
def _forward(model, ids, mask, layers, attention_layers, autocast):
    context = torch.autocast(ids.device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with context:
        outputs = model(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                        output_attentions=bool(attention_layers), return_dict=True)
    hidden = torch.stack([outputs.hidden_states[layer] for layer in layers]).float().cpu()
    attention = None
    if attention_layers:
        if not outputs.attentions:
            raise ModelError("the model returned no attention weights; it must use eager attention")
        attention = torch.stack([outputs.attentions[layer - 1] for layer in attention_layers]).float().cpu()
    return hidden, attention


def _shard_tensors(buffers, sentence_range, layers, attention_layers, pool, dtype) -> dict[str, torch.Tensor]:
    pooled = [buffers[i].pooled(pool) for i in sentence_range]  # each [layers, rows, dim]
    stacked = torch.cat(pooled, dim=1).to(DTYPES[dtype])
    tensors = {f"layer.{layer}": stacked[position] for position, layer in enumerate(layers)}
    if attention_layers:
        maps = [buffers[i].word_attention() for i in sentence_range]  # each [L, H, G, G]
        for position, layer in enumerate(attention_layers):
            tensors[f"attention.{layer}"] = torch.cat([m[position].reshape(-1) for m in maps]).float()
    return tensors
