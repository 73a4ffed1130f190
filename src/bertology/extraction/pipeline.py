"""Extraction: every requested layer's vectors (and word-level attentions) for a corpus, into a store.

Speed comes from three choices: model inputs are sorted by length and batched under a token budget
(almost no padding); only the layers asked for are kept; bf16 autocast is available on request.
Memory is bounded by one shard (a few tens of MB), not by the corpus.

The model runs through :meth:`Encoder.forward <bertology.models.encoders.Encoder.forward>`, the one
forward path; eager attention is switched on with :meth:`Encoder.eager_attention` for the run (when
attentions are asked for, or as the CPU bf16 fast path of :func:`_fast_attention`) and the encoder gets
its implementation back afterwards. Layers are numbered as everywhere (:mod:`bertology.numbering`):
layer ``l`` is ``hidden_states[l]``, 0 the embeddings; attention maps exist for layers 1..L.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from bertology import __version__
from bertology.data.corpus import Sentence, sentences_from_strings
from bertology.errors import BertologyWarning, DataError, ModelError, OutputError, StoreError, UsageError
from bertology.extraction.alignment import (
    EncodedSentence, Segment, check_pool, encode_sentences, pool_rows, warn_unknown, word_groups, word_level_attention,
)
from bertology.files import ensure_dir, write_json
from bertology.models.encoders import Encoder, fingerprint_tokenizer, tokenizer_types
from bertology.numbering import parse_layers
from bertology.progress import progress_bar
from bertology.store.store import (
    DTYPES, FORMAT_VERSION, INDEX_NAME, POOLS, SENTENCE_POOLS, SENTENCES_NAME, Store, file_sha256, forget_damaged_shards,
    read_sentences, write_shard_atomic,
)

SHARD_TARGET_BYTES = 48 << 20
#: With attentions, a sentence of more words than this is refused unless the limit is raised: its maps
#: take ``4 * heads * layers * (words + 2)**2`` bytes (a 2,000-word sentence in MiniLM: 1.15 GB).
MAX_ATTENTION_WORDS = 512
#: A tokenizer that maps more than this share of the corpus' words wholly to its unknown token is refused
#: (a model folder without its tokenizer files loads a 5-token vocabulary and turns every word into [UNK]).
MAX_UNKNOWN_FRACTION = 0.5


def corpus_hash(sentences: Sequence[Sentence]) -> str:
    """Hash of the words of every sentence, in order: what the extraction actually depends on."""
    digest = hashlib.sha256()
    for sentence in sentences:
        digest.update("\x1f".join(sentence.words).encode("utf-8"))
        digest.update(b"\x1e")
    return digest.hexdigest()[:16]


def as_sentences(sentences: Sequence[Sentence | str]) -> list[Sentence]:
    """Sentences as given: :class:`Sentence` objects, or plain strings (words split on whitespace; id
    ``input:<position>``), or a mix of both."""
    if isinstance(sentences, str):
        raise DataError("expected a list of sentences, got one string; wrap it in a list: [text]")
    items = list(sentences)
    for i, item in enumerate(items):
        if not isinstance(item, (Sentence, str)):
            raise DataError(f"sentence {i}: expected a Sentence or a string, got {type(item).__name__}")
        if isinstance(item, str) and not item.split():
            raise DataError(f"sentence {i}: empty sentence; expected at least one word")
    texts = [i for i, item in enumerate(items) if isinstance(item, str)]
    for i, sentence in zip(texts, sentences_from_strings([items[i] for i in texts])):
        items[i] = dataclasses.replace(sentence, id=f"input:{i}")
    return items


def _sentence_where(sentence: Sentence, input_path: str | None) -> str:
    if sentence.source_line is not None:
        return f"{input_path}:{sentence.source_line}" if input_path else f"line {sentence.source_line}"
    return f"sentence {sentence.id!r}"


def _check_tokenizer(encoder: Encoder, encoded: list[EncodedSentence], limit: float | None) -> None:
    """Refuse a tokenizer that turns most words into its unknown token: the vectors would be noise."""
    words = sum(e.n_words for e in encoded)
    unknown = sum(e.unk_words for e in encoded)
    if limit is None or not words or unknown / words <= limit:
        return
    tokenizer = encoder.tokenizer
    raise ModelError(
        f"{encoder.source or encoder.name}: the tokenizer maps {unknown:,} of {words:,} words "
        f"({unknown / words:.0%}) wholly to its unknown token {tokenizer.unk_token!r} (a vocabulary of "
        f"{len(tokenizer):,} tokens); its tokenizer files are missing or belong to another model. Save the "
        "model's own tokenizer in the folder (tokenizer.save_pretrained(DIR)), or pass max_unknown_fraction=None"
    )


def _check_attention_sizes(encoder: Encoder, sentences: Sequence[Sentence], n_layers: int, limit: int | None,
                           input_path: str | None) -> None:
    """Refuse, before anything is written, a sentence whose word-level maps would be huge."""
    if limit is None or not n_layers:
        return
    for sentence in sentences:
        n = len(sentence)
        if n > limit:
            size = 4 * encoder.num_heads * n_layers * (n + 2) ** 2
            raise DataError(
                f"{_sentence_where(sentence, input_path)}: a sentence of {n:,} words; its word-level attention "
                f"maps would take {size / 1e9:.2f} GB ({encoder.num_heads} heads x {n_layers} layers x "
                f"{n + 2}x{n + 2} float32). The limit is {limit:,} words per sentence with attentions: raise "
                "it with --max-attention-words (max_attention_words=), split the sentence, or leave out "
                "--attentions"
            )


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


class _ShardPooler:
    """Pools a shard's vectors on the model's device, a whole batch at a time.

    Each pool is a sum per stored row divided by the row's count (see :func:`pool_rows`), so one
    ``index_add_`` per layer and batch does the pooling for every sentence in the batch. The buffers
    are allocated once for the largest shard and reused: fresh 100 MB allocations per shard cost more
    in page faults than the pooling itself (measured). Results alternate between two buffers, so the
    writer thread can stream one shard to disk while the next is pooled into the other.
    """

    def __init__(self, encoded: list[EncodedSentence], pool: str, n_layers: int, dim: int, max_rows: int,
                 device: torch.device, dtype: torch.dtype):
        self.encoded, self.pool = encoded, pool
        self.sums = torch.empty(n_layers, max_rows, dim, device=device)
        self.results = [torch.empty(n_layers, max_rows, dim, dtype=dtype) for _ in range(2)]
        self.shards_begun = 0

    def begin(self, sentences: range) -> None:
        self.rows = {i: pool_rows(self.encoded[i], self.pool) for i in sentences}
        counts = [np.bincount(self.rows[i][self.rows[i] >= 0], minlength=1) for i in sentences]
        self.offset = dict(zip(sentences, np.cumsum([0] + [len(c) for c in counts[:-1]]).tolist()))
        self.counts = torch.as_tensor(np.concatenate(counts), dtype=torch.float32, device=self.sums.device).clamp(min=1)
        self.sums[:, : len(self.counts)].zero_()
        self.result = self.results[self.shards_begun % 2]
        self.shards_begun += 1

    def add(self, batch: list[Segment], width: int, hidden_states: Sequence[torch.Tensor], layers: list[int]) -> None:
        """``hidden_states``: the model's per-layer outputs [batch, width, dim] for the padded ``batch``."""
        flat, target = [], []
        for row, segment in enumerate(batch):
            rows = self.rows[segment.sentence][segment.global_positions]
            keep = rows >= 0
            flat.append(segment.local_positions[keep] + row * width)
            target.append(rows[keep] + self.offset[segment.sentence])
        device = self.sums.device
        flat = torch.as_tensor(np.concatenate(flat), device=device)
        target = torch.as_tensor(np.concatenate(target), device=device)
        for position, layer in enumerate(layers):
            states = hidden_states[layer]
            vectors = states.reshape(-1, states.shape[-1]).index_select(0, flat).float()
            self.sums[position].index_add_(0, target, vectors)

    def pooled(self) -> torch.Tensor:
        """[layers, rows, dim] on the CPU in the storage dtype: a view of a buffer that the shard after
        next reuses, so its write must be finished before then."""
        n = len(self.counts)
        sums = self.sums[:, :n]
        sums.div_(self.counts[None, :, None])
        self.result[:, :n].copy_(sums)
        return self.result[:, :n]


class _AttentionBuffer:
    """One sentence's token-level attention maps, assembled from the segments that cover it."""

    def __init__(self, encoded: EncodedSentence, n_layers: int, heads: int):
        self.encoded = encoded
        length = encoded.n_prefix + encoded.n_tokens + encoded.n_suffix
        self.attention = torch.zeros(n_layers, heads, length, length)

    def add(self, segment: Segment, attention: torch.Tensor) -> None:
        """``attention``: [layers, heads, seg_len, seg_len] for this segment's input."""
        enc = self.encoded
        columns = torch.cat([  # the window's positions in the full sequence
            torch.arange(enc.n_prefix),
            torch.arange(segment.start, segment.stop) + enc.n_prefix,
            torch.arange(enc.n_suffix) + enc.n_prefix + enc.n_tokens,
        ])
        local = torch.as_tensor(segment.local_positions)
        target = torch.as_tensor(segment.global_positions)
        block = attention[:, :, local].float()  # [L, H, rows, seg_len]
        self.attention[:, :, target.unsqueeze(1), columns.unsqueeze(0)] = block

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
            "tokenizer_fingerprint": fingerprint_tokenizer(encoder.tokenizer),
            "model_type": encoder.config.model_type,
            "num_layers": encoder.num_layers,
            "num_heads": encoder.num_heads,
            "hidden_size": encoder.hidden_size,
            "untrained_seed": encoder.untrained_seed,
            # Whether the tokenizer tells case apart: what a word type is for control tasks on this store.
            "word_types": tokenizer_types(encoder.tokenizer),
        },
        "layers": layers,
        "pool": pool,
        "attentions": attentions,
        "dtype": dtype,
        "long_policy": long_policy,
        "autocast": autocast,
    }


_KEY_FIELDS = ("layers", "pool", "attentions", "dtype", "long_policy", "autocast")


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
        raise OutputError(f"cannot write into {out}: {existing} is a file, not a folder; choose another --out")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write into {out}: permission denied in {existing} (read-only folder?); "
                          "choose another --out")


#: The index and sentences.json are written compactly: with an indent, ``json`` falls back to its pure-Python
#: encoder, which took 7% of an EWT dev extraction (the index is rewritten after every shard).


def _check_existing(out: Path, key: dict, input_hash: str, overwrite: bool) -> dict | None:
    """Return the existing index to resume from, or None; refuse a store of another model or input."""
    index_path = out / INDEX_NAME
    check_output(out)
    if not out.exists():
        return None
    if not index_path.is_file():
        if any(out.iterdir()) and not overwrite:
            raise StoreError(f"{out}: exists and is not a bertology store; choose another --out")
        return None
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        if not overwrite:
            raise StoreError(f"{index_path}: unreadable index ({error}); pass --overwrite or choose another --out") \
                from None
        shutil.rmtree(out)
        return None
    problems = []
    if index.get("format_version") != FORMAT_VERSION:
        problems.append(f"format version {index.get('format_version')} (current {FORMAT_VERSION})")
    old_model = index.get("model", {})
    if old_model.get("fingerprint") != key["model"]["fingerprint"]:
        tokenizer = ", another tokenizer" if old_model.get("tokenizer_fingerprint") not in (
            None, key["model"]["tokenizer_fingerprint"]) else ""
        problems.append(f"model {old_model.get('name')!r} (fingerprint {old_model.get('fingerprint')}{tokenizer}), "
                        f"not {key['model']['name']!r} (fingerprint {key['model']['fingerprint']})")
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


def _sentences_lost(out: Path) -> bool:
    """Whether the ``sentences.json`` of a store being reused is missing or unreadable (then rewritten from
    the input, which the index's input hash has just matched), said in one warning line."""
    try:
        read_sentences(out)
    except StoreError:
        path = out / SENTENCES_NAME
        warnings.warn(f"{path}: {'unreadable' if path.exists() else 'missing'}; rewriting it from the input",
                      BertologyWarning, stacklevel=3)
        return True
    return False


@dataclasses.dataclass
class ExtractionPlan:
    """Everything an engine needs to compute the missing shards of a store: made by
    :func:`plan_extraction` on the driver, shared by the local engine (:func:`extract`) and the Ray engine
    (:mod:`bertology.scale`). ``index`` is the store's index as on disk; ``complete`` when nothing is left."""

    encoder: Encoder
    encoded: list[EncodedSentence]
    out: Path
    index: dict
    layers: list[int]
    attention_layers: list[int]
    pool: str
    dtype: str
    autocast: str | None
    batch_tokens: int
    max_batch: int
    row_counts: np.ndarray

    @property
    def todo(self) -> list[int]:
        """Shards the index does not list as whole, in order."""
        return [k for k, s in enumerate(self.index["shards"]) if not s.get("sha256")]

    @property
    def complete(self) -> bool:
        return not self.todo

    def largest_shard_rows(self, shards: Sequence[int] | None = None) -> int:
        shards = self.todo if shards is None else shards
        return max((int(self.row_counts[self.index["shards"][k]["start"]:self.index["shards"][k]["stop"]].sum())
                    for k in shards), default=0)

    def settings(self) -> dict:
        """What a :class:`ShardComputer` on another process needs besides the encoder and the sentences."""
        return {"layers": self.layers, "attention_layers": self.attention_layers, "pool": self.pool,
                "dtype": self.dtype, "autocast": self.autocast, "batch_tokens": self.batch_tokens,
                "max_batch": self.max_batch}

    def record(self, k: int, entry: dict) -> None:
        """Mark shard ``k`` whole in the index on disk (``entry``: what :func:`write_shard_atomic` returned).
        Called only after the shard file has been renamed into place."""
        self.index["shards"][k].update(entry)
        write_json(self.out / INDEX_NAME, self.index, indent=None, fsync=True)

    def finish(self, stats: dict) -> None:
        self.index["stats"] = stats
        write_json(self.out / INDEX_NAME, self.index, indent=None, fsync=True)

    def output_error(self, error: OutputError) -> OutputError:
        done = sum(bool(shard.get("sha256")) for shard in self.index["shards"])
        return OutputError(f"{error}; {done} of {len(self.index['shards'])} shards of {self.out} are whole and kept: "
                           "make room (or choose another --out) and run the same command again to resume")


def plan_extraction(
    encoder: Encoder,
    sentences: Sequence[Sentence | str],
    out: str | Path,
    layers: str | int | Sequence[int] | None = None,
    pool: str = "word-mean",
    attentions: bool = False,
    dtype: str = "float16",
    autocast: str | None = None,
    batch_tokens: int = 4096,
    max_batch: int = 128,
    long_policy: str = "window",
    input_path: str | None = None,
    overwrite: bool = False,
    shard_bytes: int | None = None,
    max_attention_words: int | None = MAX_ATTENTION_WORDS,
    max_unknown_fraction: float | None = MAX_UNKNOWN_FRACTION,
) -> ExtractionPlan:
    """Check the arguments and the store folder, tokenize, plan the shards and write ``sentences.json`` and
    the index (a new store), or read the index back (a resumed one). Arguments as :func:`extract`."""
    if pool not in POOLS:
        raise DataError(f"unknown pooling {pool!r}; expected one of {', '.join(POOLS)}")
    check_pool(encoder.tokenizer, pool, encoder.name)  # no [CLS] (a decoder): refused before anything is written
    if dtype not in DTYPES:
        raise DataError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    if autocast not in (None, "bfloat16", "bf16"):
        raise DataError(f"autocast {autocast!r}: expected None or 'bfloat16'")
    shard_bytes = SHARD_TARGET_BYTES if shard_bytes is None else shard_bytes
    for name, value in (("batch_tokens", batch_tokens), ("max_batch", max_batch), ("shard_bytes", shard_bytes),
                        ("max_attention_words", max_attention_words or 1)):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise UsageError(f"{name} {value!r}: expected a whole number of at least 1")
    autocast = "bfloat16" if autocast else None
    if attentions and autocast:
        autocast = None  # attention maps stay float32 (see docstring)
    sentences = as_sentences(sentences)
    if not sentences:
        raise DataError("no sentences to extract")
    if attentions and pool == "tokens":
        raise DataError("attentions are stored at word level; use a word pool (word-mean/first/last) with them")
    out = Path(out)
    chosen = parse_layers(layers, encoder.num_layers, option="layers")
    layers = list(range(encoder.num_layers + 1)) if chosen is None else chosen
    attention_layers = [layer for layer in layers if layer >= 1] if attentions else []
    key = _model_key(encoder, layers, pool, attentions, dtype, long_policy, autocast)
    input_hash = corpus_hash(sentences)
    existing = _check_existing(out, key, input_hash, overwrite)
    sentences_lost = False
    if existing is not None:
        forget_damaged_shards(out, existing)
        sentences_lost = _sentences_lost(out)
    plan = functools.partial(ExtractionPlan, encoder=encoder, out=out, layers=layers,
                             attention_layers=attention_layers, pool=pool, dtype=dtype, autocast=autocast,
                             batch_tokens=batch_tokens, max_batch=max_batch)
    if existing is not None and not sentences_lost and all(s.get("sha256") for s in existing["shards"]):
        return plan(encoded=[], index=existing, row_counts=np.asarray(existing["row_counts"], dtype=np.int64))
    _check_attention_sizes(encoder, sentences, len(attention_layers), max_attention_words, input_path)

    encoded = encode_sentences(encoder.tokenizer, list(sentences), encoder.max_length, long_policy)
    _check_tokenizer(encoder, encoded, max_unknown_fraction)
    warn_unknown(encoded)
    if pool in SENTENCE_POOLS:
        row_counts = np.ones(len(encoded), dtype=np.int64)
    elif pool == "tokens":
        row_counts = np.asarray([e.n_tokens for e in encoded], dtype=np.int64)
    else:
        row_counts = np.asarray([e.n_words for e in encoded], dtype=np.int64)
    store_bytes = torch.tensor([], dtype=DTYPES[dtype]).element_size()
    groups = np.asarray([e.n_words + 2 for e in encoded], dtype=np.int64)
    attention_bytes = 4 * encoder.num_heads * len(attention_layers) * groups * groups
    shard_bounds = _plan_shards(encoded, row_counts, store_bytes * encoder.hidden_size * len(layers), attention_bytes,
                                 shard_bytes)

    if existing is None or sentences_lost:
        ensure_dir(out)
        sentence_records = [{"id": s.id, "words": list(s.words)} for s in sentences]
        if pool == "tokens":
            for record, enc in zip(sentence_records, encoded):
                record["tokens"] = encoder.tokenizer.convert_ids_to_tokens(enc.token_ids)
        write_json(out / SENTENCES_NAME, sentence_records, indent=None, fsync=True)
    if existing is None:
        input_file = Path(input_path) if input_path else None
        index = {
            "format_version": FORMAT_VERSION,
            "bertology_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **key,
            "input": {"path": input_path, "hash": input_hash,
                      "file_sha256": file_sha256(input_file) if input_file and input_file.is_file() else None,
                      "n_sentences": len(sentences), "n_words": int(sum(len(s) for s in sentences))},
            "row_counts": row_counts.tolist(),
            "shards": [{"start": a, "stop": b, "file": f"shard-{k:05d}.safetensors", "bytes": None, "sha256": None}
                       for k, (a, b) in enumerate(shard_bounds)],
            "stats": {},
        }
        write_json(out / INDEX_NAME, index, indent=None, fsync=True)
    else:
        index = existing
        ensure_dir(out)  # a folder made read-only since: one line now, not a traceback later
    for leftover in out.glob(".*.tmp"):
        leftover.unlink(missing_ok=True)
    return plan(encoded=encoded, index=index, row_counts=row_counts)


def extract(
    encoder: Encoder,
    sentences: Sequence[Sentence | str],
    out: str | Path,
    layers: str | int | Sequence[int] | None = None,
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
    shard_bytes: int | None = None,
    compile_model: bool = False,
    max_attention_words: int | None = MAX_ATTENTION_WORDS,
    max_unknown_fraction: float | None = MAX_UNKNOWN_FRACTION,
) -> Store:
    """Extract ``layers`` of ``encoder`` for ``sentences`` into the store folder ``out``; return it opened.

    * ``sentences``: :class:`Sentence` objects (from :func:`bertology.data.read_corpus`) or plain strings
      (words split on whitespace).
    * ``layers``: as :func:`bertology.numbering.parse_layers` reads them (``None``/``"all"``: every layer
      ``0..L``; 0 = embeddings). The store holds, per layer, ``[rows, hidden]`` vectors: one row per word
      (word pools), per sentence (``cls``/``mean``) or per subword (``tokens``).
    * ``attentions``: also store word-level maps ``[heads, n+2, n+2]`` per layer 1..L and sentence
      (float32, eager attention). A sentence of more than ``max_attention_words`` words is refused
      before anything is written (``None`` lifts the limit).
    * ``max_unknown_fraction``: refuse a tokenizer that maps more than this share of the words wholly
      to its unknown token (``None`` to accept any).

    Re-running with the same arguments resumes an interrupted extraction, or returns the finished
    store at once; a store of another model, tokenizer, input or settings is refused (``overwrite``
    replaces it). Attention maps are always computed in float32, since bf16 moves attention
    probabilities by up to 0.02. Bad arguments raise before anything is written; an output that
    cannot be written (no space left, a read-only folder) raises one-line
    :class:`~bertology.errors.OutputError` and leaves no partial shard, only whole shards to resume from.

    ``compile_model=True`` runs the model through ``torch.compile`` (dynamic shapes): 10-30 s of
    compiling up front, then at most about 1.15x the throughput on CPU; it pays off only on corpora of several
    hundred thousand tokens and up (see BENCHMARKS.md). The same store, written by several processes or
    machines at once: :func:`bertology.scale.extract_ray`.
    """
    plan = plan_extraction(encoder, sentences, out, layers=layers, pool=pool, attentions=attentions, dtype=dtype,
                           autocast=autocast, batch_tokens=batch_tokens, max_batch=max_batch,
                           long_policy=long_policy, input_path=input_path, overwrite=overwrite,
                           shard_bytes=shard_bytes, max_attention_words=max_attention_words,
                           max_unknown_fraction=max_unknown_fraction)
    if plan.complete:
        return Store.open(plan.out)
    try:
        _run(plan, progress, device, compile_model)
    except OutputError as error:
        raise plan.output_error(error) from None
    return Store.open(plan.out)


def run_context(encoder: Encoder, autocast: str | None, attention_layers: Sequence[int]) -> contextlib.ExitStack:
    """The precision and attention implementation a run computes under, entered once around many shards:
    one bf16 autocast region (so each weight is cast once, not once per batch) and eager attention when
    attention weights are asked for (or as the CPU bf16 fast path of :func:`_fast_attention`); the
    encoder gets its implementation back on exit."""
    device = encoder.device
    stack = contextlib.ExitStack()
    if autocast:
        stack.enter_context(torch.autocast(device.type, dtype=torch.bfloat16))
    fast = bool(autocast) and not attention_layers and device.type == "cpu"
    stack.enter_context(encoder.eager_attention() if attention_layers else _fast_attention(encoder, when=fast))
    return stack


class ShardComputer:
    """Computes whole shards on one encoder replica: the one batching loop of every engine.

    ``encoded`` maps a sentence's position in the corpus to its :class:`EncodedSentence` (the whole list,
    or only the sentences of the shards this replica is given). :meth:`compute` returns a shard's tensors
    (views of reused buffers: write them before the shard after next is computed) and its counts.
    """

    def __init__(self, encoder: Encoder, encoded, layers: list[int], attention_layers: list[int], pool: str,
                 dtype: str, batch_tokens: int, max_batch: int, max_rows: int, model=None, **_ignored):
        self.encoder, self.encoded = encoder, encoded
        self.layers, self.attention_layers = list(layers), list(attention_layers)
        self.batch_tokens, self.max_batch = batch_tokens, max_batch
        self.model = model if model is not None else encoder.model
        self.pad_id = encoder.tokenizer.pad_token_id if encoder.tokenizer.pad_token_id is not None else 0
        self.pooler = _ShardPooler(encoded, pool, len(layers), encoder.hidden_size, max_rows, encoder.device,
                                   DTYPES[dtype])

    def compute(self, start: int, stop: int) -> tuple[dict[str, torch.Tensor], dict]:
        encoder, encoded, device = self.encoder, self.encoded, self.encoder.device
        sentence_range = range(start, stop)
        self.pooler.begin(sentence_range)
        maps = {i: _AttentionBuffer(encoded[i], len(self.attention_layers), encoder.num_heads)
                for i in sentence_range} if self.attention_layers else {}
        segments = [seg for i in sentence_range for seg in encoded[i].segments]
        counts = {"tokens": 0, "padded_tokens": 0,
                  "windowed_sentences": sum(len(encoded[i].segments) > 1 for i in sentence_range)}
        for batch in _batches(segments, self.batch_tokens, self.max_batch):
            ids, mask = _pad(batch, self.pad_id)
            counts["tokens"] += int(mask.sum())
            counts["padded_tokens"] += ids.numel()
            hidden_states, attention = _forward(encoder, self.model, ids.to(device), mask.to(device),
                                                self.attention_layers)
            self.pooler.add(batch, ids.shape[1], hidden_states, self.layers)
            for row, segment in enumerate(batch if attention is not None else ()):
                length = len(segment.input_ids)
                maps[segment.sentence].add(segment, attention[:, row, :, :length, :length])
        return _shard_tensors(self.pooler, maps, sentence_range, self.layers, self.attention_layers), counts


def shard_metadata() -> dict[str, str]:
    return {"format_version": str(FORMAT_VERSION)}


def run_stats(counts: Sequence[dict], seconds: float, **extra) -> dict:
    """The index's ``stats``: summed shard counts over the wall-clock time of the run."""
    total = {key: sum(c[key] for c in counts) for key in ("tokens", "padded_tokens", "windowed_sentences")}
    return {"seconds": round(seconds, 3), **total,
            "tokens_per_second": round(total["tokens"] / seconds, 1) if seconds else None, **extra}


def _run(plan: ExtractionPlan, progress: bool, device: str | None, compile_model: bool) -> None:
    """Compute the shards the index does not list as whole, writing each as it is done."""
    encoder, index, out = plan.encoder, plan.index, plan.out
    if device:
        encoder.model.to(device)
    todo = plan.todo
    total_sentences = sum(index["shards"][k]["stop"] - index["shards"][k]["start"] for k in todo)
    started = time.perf_counter()
    counts: list[dict] = []
    # A shard is streamed to disk, fsynced and renamed on a second thread while the next one computes.
    # The index names a shard only once its file is whole.
    pending: tuple[int, int, Future] | None = None

    def finish(done: tuple[int, int, Future]) -> None:
        k, n_sentences, future = done
        plan.record(k, future.result())
        bar.advance(task, n_sentences)

    with (progress_bar(progress) as bar, run_context(encoder, plan.autocast, plan.attention_layers),
          ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertology-shard-writer") as writer):
        task = bar.add_task(f"extract {encoder.name} (sentences)", total=total_sentences)
        computer = ShardComputer(encoder, plan.encoded, max_rows=plan.largest_shard_rows(todo),
                                 model=encoder.compiled() if compile_model else None, **plan.settings())
        for k in todo:
            shard = index["shards"][k]
            tensors, shard_counts = computer.compute(shard["start"], shard["stop"])
            counts.append(shard_counts)
            if pending is not None:
                finish(pending)  # frees the buffer the next shard will pool into
            pending = (k, shard["stop"] - shard["start"],
                       writer.submit(write_shard_atomic, out / shard["file"], tensors, shard_metadata()))
        if pending is not None:
            finish(pending)
    plan.finish(run_stats(counts, time.perf_counter() - started))

def _fast_attention(encoder: Encoder, when: bool):
    """The CPU bf16 fast path: eager attention for the duration (on CPU under bf16 it beats sdpa with a
    padding mask; BENCHMARKS.md), through :meth:`Encoder.eager_attention`, which restores what was there."""
    return encoder.eager_attention() if when else contextlib.nullcontext()


def _forward(encoder: Encoder, model, ids: torch.Tensor, mask: torch.Tensor, attention_layers: list[int]):
    """One padded batch through :meth:`Encoder.forward` (``model``: the encoder's model or its compiled
    version): the hidden states of every layer, and the attention of ``attention_layers`` stacked as
    float32 ``[layers, batch, heads, tokens, tokens]`` on the CPU (None when none are asked for)."""
    output = encoder.forward({"input_ids": ids, "attention_mask": mask}, hidden_states=True,
                             attentions=bool(attention_layers), model=model)
    attention = None
    if attention_layers:
        attention = torch.stack([output.attention(layer) for layer in attention_layers]).float().cpu()
    return output.hidden_states, attention


def _shard_tensors(pooler: _ShardPooler, maps, sentence_range, layers, attention_layers) -> dict[str, torch.Tensor]:
    stacked = pooler.pooled()
    tensors = {f"layer.{layer}": stacked[position] for position, layer in enumerate(layers)}
    if attention_layers:
        word_maps = [maps[i].word_attention() for i in sentence_range]  # each [L, H, G, G]
        for position, layer in enumerate(attention_layers):
            tensors[f"attention.{layer}"] = torch.cat([m[position].reshape(-1) for m in word_maps]).float()
    return tensors
