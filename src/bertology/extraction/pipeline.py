"""Extraction: every requested layer's vectors (and word-level attentions) for a corpus, into a store.

Speed comes from three choices: model inputs are sorted by length and batched under a token budget
(almost no padding); only the layers asked for are kept; bf16 autocast is available on request.
Memory is bounded by one shard (a few tens of MB), not by the corpus.

The model runs through :meth:`Encoder.forward <bertology.models.encoders.Encoder.forward>`, the one
forward path; eager attention is switched on with :meth:`Encoder.eager_attention` for the run (when
attentions are asked for, or as the CPU bf16 fast path of :func:`_fast_attention`) and the encoder gets
its implementation back afterwards. Layers are numbered as everywhere (:mod:`bertology.numbering`):
layer ``l`` is ``hidden_states[l]``, 0 the embeddings; attention maps exist for layers 1..L.

Length: the plan, the batch loop and the shard writes of one extraction share their private types (batches,
pooling indices, shard parts), which the per-token overhead work of issue 31 is still reshaping; the seam
between planning (``plan_extraction``) and running (``ShardComputer``, ``_run``) is where it splits next.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import queue
import threading
import time
import warnings
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import torch

from bertology.data.corpus import sentences_from_strings
from bertology.data.sentence import Sentence
from bertology.errors import DataError, ModelError, OutputError
from bertology.extraction.alignment import (
    EncodedSentence, Segment, WordPieces, check_pool, encode_sentences, pool_rows, warn_unknown, word_groups,
    word_level_attention,
)
from bertology.extraction.spec import MAX_ATTENTION_WORDS, MAX_UNKNOWN_FRACTION, SHARD_BATCHES, ExtractionSpec
from bertology.files import exclusive
from bertology.models.batching import (
    TokenBudget, device_token_budget, pad_batch, pad_id_of, padding_floor, token_budget_batches,
)
from bertology.models.encoders import Encoder
from bertology.progress import progress_bar
from bertology.store.store import DTYPES, SENTENCE_POOLS, Store, file_sha256
from bertology.store.writer import StoreWriter, check_output, model_record, plan_shards

__all__ = ["MAX_ATTENTION_WORDS", "MAX_UNKNOWN_FRACTION", "ExtractionPlan", "ExtractionSpec", "ShardComputer",
           "as_sentences", "check_output", "corpus_hash", "extract", "plan_extraction", "run_context", "run_stats"]


def corpus_hash(sentences: Sequence[Sentence]) -> str:
    """Hash of the words of every sentence, in order: what the extraction actually depends on."""
    # One update of the whole text: the same digest as one update per sentence, at a fraction of the calls.
    text = "".join(["\x1f".join(sentence.words) + "\x1e" for sentence in sentences])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


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
    _check_unknown_share(encoder, sum(e.n_words for e in encoded), sum(e.unk_words for e in encoded), limit)


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
                "it with max_attention_words=, split the sentence, or leave out attentions="
            )


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
        local = torch.tensor(segment.local_positions)  # copies: a whole segment's are views of a read-only range
        target = torch.tensor(segment.global_positions)
        block = attention[:, :, local].float()  # [L, H, rows, seg_len]
        self.attention[:, :, target.unsqueeze(1), columns.unsqueeze(0)] = block

    def word_attention(self) -> torch.Tensor:
        """Clark et al. 2019: sum over the attended-to word's subwords, mean over the attending word's."""
        return word_level_attention(self.attention, word_groups(self.encoded))  # [L, H, G, G]


@dataclasses.dataclass
class ExtractionPlan:
    """Everything an engine needs to compute the missing shards of a store: made by
    :func:`plan_extraction` on the driver, shared by the local engine (:func:`extract`) and the Ray engine
    (:mod:`bertology.scale`). ``writer`` holds the store's index as on disk; ``complete`` when nothing is left.

    ``first`` holds the first sentences encoded (the unknown-token check ran on them); the rest are encoded
    shard by shard as the model reaches them (:func:`extract`), or all at once on first use of :attr:`encoded` (the Ray engine)."""

    encoder: Encoder
    sentences: list[Sentence]
    spec: ExtractionSpec
    layers: list[int]
    attention_layers: list[int]
    writer: StoreWriter
    row_counts: np.ndarray
    first: list[EncodedSentence] = dataclasses.field(default_factory=list)
    pieces: WordPieces = dataclasses.field(default_factory=WordPieces)  # each distinct word tokenized once
    _encoded: list[EncodedSentence] | None = None

    @property
    def out(self) -> Path:
        return self.writer.out

    @property
    def index(self) -> dict:
        return self.writer.index

    @property
    def todo(self) -> list[int]:
        """Shards the index does not list as whole, in order."""
        return self.writer.todo

    @property
    def complete(self) -> bool:
        return not self.todo

    @property
    def encoded(self) -> list[EncodedSentence]:
        """Every sentence encoded (:func:`encode_sentences`), on first use; the unknown-token check on all."""
        if self._encoded is None:
            rest = self.encode(len(self.first), len(self.sentences))
            self._encoded = self.first + rest
            _check_tokenizer(self.encoder, self._encoded, self.spec.max_unknown_fraction)
            warn_unknown(self._encoded)
        return self._encoded

    def encode_some(self, indices: Sequence[int]) -> list[EncodedSentence]:
        """The sentences at corpus positions ``indices`` encoded."""
        if not len(indices):
            return []
        return encode_sentences(self.encoder.tokenizer, [self.sentences[i] for i in indices], self.encoder.max_length,
                                self.spec.long_policy, indices=indices, pieces=self.pieces)

    def encode(self, start: int, stop: int) -> list[EncodedSentence]:
        """Sentences ``start..stop`` encoded (their segments numbered by corpus position)."""
        if start >= stop:
            return []
        return encode_sentences(self.encoder.tokenizer, self.sentences[start:stop], self.encoder.max_length,
                                self.spec.long_policy, first_index=start, pieces=self.pieces)

    def largest_shard_rows(self, shards: Sequence[int] | None = None) -> int:
        return self.writer.largest_shard_rows(shards)


#: Sentences encoded before anything is written (the unknown-token check reads them), and the first shard: the
#: model starts on them while the thread that prepares the batches encodes the rest (issue 31).
FIRST_SENTENCES = 128
#: Shards written at once on a GPU (:meth:`StoreWriter.shards_in_background`), each on a thread of its own: at most
#: this many, one per four host cores, and as many as keep the pinned host buffers (one per shard being written,
#: one being filled) within PINNED_BYTES. Filling fresh page cache and hashing, not the disk, bound one thread's
#: write (1.4 GB/s, shard_write_cpu.json), and threads writing different files add up. On an H200
#: one writer ran EWT dev's bert-base store in 0.69 s and four in 0.61 s on the same machine, two in 0.53 s on
#: another (gpu_check_h200_one_writer, _four_writers, _writers.json): four did not beat two; two kept.
GPU_WRITERS = 2
PINNED_BYTES = 4 << 30
#: ... and on a CPU, whose cores the model uses (the shard's hash still runs beside its write: store.write_shard_atomic).
CPU_WRITERS = 1


def plan_extraction(
    encoder: Encoder,
    sentences: Sequence[Sentence | str],
    out: str | Path,
    spec: ExtractionSpec | None = None,
    *,
    input_path: str | None = None,
    overwrite: bool = False,
    later: bool = False,
    **settings,
) -> ExtractionPlan:
    """Check the settings and the store folder, tokenize (the first sentences, or all for the ``tokens``
    pool, whose rows are subwords), plan the shards and write ``sentences.json`` and the index (a new store),
    or read the index back (a resumed one). Arguments as :func:`extract`; ``later``: leave ``sentences.json``
    and the index to the writer's thread (:meth:`~bertology.store.writer.StoreWriter.start`)."""
    spec = ExtractionSpec.of(spec, **settings)
    check_pool(encoder.tokenizer, spec.pool, encoder.name)  # no [CLS] (a decoder): refused before anything is written
    sentences = as_sentences(sentences)
    if not sentences:
        raise DataError("no sentences to extract")
    layers = spec.layer_list(encoder.num_layers)
    attention_layers = spec.attention_layer_list(layers)
    writer = StoreWriter(out, {"model": model_record(encoder), **spec.key(layers)}, corpus_hash(sentences),
                         overwrite=overwrite)
    pieces = WordPieces()
    plan = functools.partial(ExtractionPlan, encoder=encoder, sentences=sentences, spec=spec, layers=layers,
                             attention_layers=attention_layers, writer=writer, pieces=pieces)
    if writer.complete:
        return plan(row_counts=np.asarray(writer.index["row_counts"], dtype=np.int64))
    _check_attention_sizes(encoder, sentences, len(attention_layers), spec.max_attention_words, input_path)

    every = spec.pool == "tokens"
    first = encode_sentences(encoder.tokenizer, sentences if every else sentences[:FIRST_SENTENCES],
                            encoder.max_length, spec.long_policy, pieces=pieces)
    _check_tokenizer(encoder, first, spec.max_unknown_fraction)
    words = np.fromiter((len(s.words) for s in sentences), dtype=np.int64, count=len(sentences))
    if spec.pool in SENTENCE_POOLS:
        row_counts = np.ones(len(sentences), dtype=np.int64)
    elif every:
        row_counts = np.asarray([e.n_tokens for e in first], dtype=np.int64)
    else:
        row_counts = words
    store_bytes = torch.tensor([], dtype=DTYPES[spec.dtype]).element_size()
    groups = words + 2
    attention_bytes = 4 * encoder.num_heads * len(attention_layers) * groups * groups
    bytes_per_row = store_bytes * encoder.hidden_size * len(layers)
    # The first shard is the first sentences (already encoded): the model starts on it while the rest is tokenized.
    # Where batches fill the budget (a GPU: padding_floor), a shard holds a few full ones: its batches are cut
    # within it (ExtractionSpec.shard_target).
    tokens = _batch_budget(encoder, spec, bool(attention_layers))[0]
    fill = SHARD_BATCHES * tokens if padding_floor(encoder.device, tokens) else 0
    shard_bounds = plan_shards(row_counts, bytes_per_row, spec.shard_target(fill, bytes_per_row), attention_bytes,
                               ramp=FIRST_SENTENCES)
    records, input_record = [], {}
    if not writer.resuming or writer.sentences_lost:
        records = [{"id": s.id, "words": list(s.words)} for s in sentences]
        if every:
            for record, enc in zip(records, first):
                record["tokens"] = encoder.tokenizer.convert_ids_to_tokens(enc.token_ids)
    if not writer.resuming:
        input_file = Path(input_path) if input_path else None
        input_record = {"path": input_path,
                        "file_sha256": file_sha256(input_file) if input_file and input_file.is_file() else None,
                        "n_sentences": len(sentences), "n_words": int(words.sum())}
    # sentences.json and the index are written on the writer's thread, before the first shard, while the model
    # runs (extract); the Ray engine's workers write shard files themselves, so it has them written now.
    writer.start(records, row_counts, shard_bounds, input_record, later=later)
    made = plan(row_counts=row_counts, first=first)
    if made.complete:  # every shard whole, only sentences.json was lost: nothing runs that would write it
        writer.write_pending()
    if every:
        made._encoded = first
        warn_unknown(first)
    return made


def extract(
    encoder: Encoder,
    sentences: Sequence[Sentence | str],
    out: str | Path,
    spec: ExtractionSpec | None = None,
    *,
    input_path: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
    device: str | None = None,
    compile_model: bool = False,
    **settings,
) -> Store:
    """Extract the layers ``spec`` names of ``encoder`` for ``sentences`` into the store folder ``out``;
    return it opened.

    * ``sentences``: :class:`Sentence` objects (from :func:`bertology.data.read_corpus`) or plain strings
      (words split on whitespace).
    * ``spec``: an :class:`~bertology.extraction.spec.ExtractionSpec` (what to extract and how), or its fields
      as keywords (``extract(encoder, sentences, out, layers="0,6", attentions=True)``; with a spec they
      replace its fields). The store holds, per layer, ``[rows, hidden]`` vectors: one row per word (word
      pools), per sentence (``cls``/``mean``) or per subword (``tokens``); with ``attentions``, word-level
      maps ``[heads, n+2, n+2]`` per layer 1..L and sentence (float32, eager attention).
    * ``input_path``: the corpus file, named in the index and in messages. ``device``: move the model there
      first.

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
    with exclusive(out, "writing the store"):  # a second process on the same store waits, then reuses it
        plan = plan_extraction(encoder, sentences, out, spec, input_path=input_path, overwrite=overwrite, later=True,
                               **settings)
        if plan.complete:
            return Store.open(plan.out)
        try:
            _run(plan, progress, device, compile_model)
        except OutputError as error:
            raise plan.writer.output_error(error) from None
        if plan.writer.sentences is None:  # resumed with its sentences.json as it was
            return Store.open(plan.out)
        # What this run has just written, without reading it back (a copy: the writer's index is its own).
        return Store(plan.out, json.loads(json.dumps(plan.index, default=str)), plan.writer.sentences)


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


def _row_count(encoded: EncodedSentence, pool: str) -> int:
    """Stored rows of a sentence: one (sentence pools), one per subword (``tokens``) or one per word."""
    return 1 if pool in SENTENCE_POOLS else encoded.n_tokens if pool == "tokens" else encoded.n_words


@dataclasses.dataclass
class _Pooling:
    """Where a batch's vectors go. Sentences whole in the batch (one segment) are pooled within it:
    ``gather`` (positions in the flattened ``[rows x width]`` states) adds into batch rows ``local``, each of
    which is the shard's row ``rows[local]``. Segments of a windowed sentence may sit in several batches, so
    theirs (``spill_gather``) add into the shard's rows ``spill_target`` across batches."""

    gather: np.ndarray
    local: np.ndarray
    rows: np.ndarray
    spill_gather: np.ndarray
    spill_target: np.ndarray
    weights: np.ndarray = dataclasses.field(default=None)  # float32: positions pooled into each local row (>= 1)

    def __post_init__(self) -> None:
        # counted here, on the host: a count on a GPU (bincount) would wait for the device
        self.weights = np.maximum(np.bincount(self.local, minlength=len(self.rows)), 1).astype(np.float32)


_EMPTY = np.zeros(0, dtype=np.int64)


def _pooling_indices(segments: Sequence[Segment], encoded, first_rows: Mapping[int, int], pool: str,
                     width: int) -> _Pooling:
    """A batch's :class:`_Pooling`: :func:`pool_rows` of each sentence, shifted to the batch (whole sentences)
    or the shard (windowed ones). Whole sentences under ``word-mean`` or ``tokens`` (nearly every batch) take a
    few array operations per batch; the rest a few per segment."""
    sentences = [encoded[segment.sentence] for segment in segments]
    if pool in ("word-mean", "tokens") and all(segment.first and segment.last for segment in segments):
        n = np.fromiter((sentence.n_tokens for sentence in sentences), dtype=np.int64, count=len(sentences))
        starts = np.cumsum(n) - n
        within = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(starts, n)
        count = n if pool == "tokens" else np.fromiter((s.n_words for s in sentences), dtype=np.int64, count=len(n))
        local_first = np.cumsum(count) - count
        local = (within if pool == "tokens" else np.concatenate([s.word_index for s in sentences])) + np.repeat(
            local_first, n)
        first = np.fromiter((first_rows[segment.sentence] for segment in segments), dtype=np.int64, count=len(n))
        prefix = np.fromiter((sentence.n_prefix for sentence in sentences), dtype=np.int64, count=len(n))
        gather = np.repeat(np.arange(len(n), dtype=np.int64) * width + prefix, n) + within
        rows = np.repeat(first - local_first, count) + np.arange(int(count.sum()), dtype=np.int64)
        return _Pooling(gather, local, rows, _EMPTY, _EMPTY)
    gather, local, rows, spill_gather, spill_target = [], [], [], [], []
    next_local = 0
    for row, (segment, sentence) in enumerate(zip(segments, sentences)):
        targets = pool_rows(sentence, pool)[segment.global_positions]
        keep = targets >= 0
        positions = segment.local_positions[keep] + row * width
        first = first_rows[segment.sentence]
        if segment.first and segment.last:
            count = _row_count(sentence, pool)
            gather.append(positions)
            local.append(targets[keep] + next_local)
            rows.append(np.arange(first, first + count, dtype=np.int64))
            next_local += count
        else:
            spill_gather.append(positions)
            spill_target.append(targets[keep] + first)
    join = lambda parts: np.concatenate(parts) if parts else _EMPTY  # noqa: E731
    return _Pooling(join(gather), join(local), join(rows), join(spill_gather), join(spill_target))


@dataclasses.dataclass
class _Batch:
    """One padded batch, made ready off the compute thread: the model's inputs and its pooling indices
    (:func:`_pooling_indices`). ``encoded`` and ``first_rows`` are the shard's, to cut it again (:meth:`subset`)."""

    segments: list[Segment]
    encoded: Mapping[int, EncodedSentence]
    first_rows: Mapping[int, int]
    pool: str
    ids: torch.Tensor
    mask: torch.Tensor
    indices: dict[str, torch.Tensor]  # the _Pooling's arrays as tensors
    tokens: int

    @classmethod
    def make(cls, segments, encoded, first_rows, pool: str, pad_id: int, pin: bool) -> "_Batch":
        inputs = pad_batch([segment.input_ids for segment in segments], pad_id)
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        pooling = _pooling_indices(segments, encoded, first_rows, pool, ids.shape[1])
        indices = {field.name: torch.from_numpy(getattr(pooling, field.name)) for field in dataclasses.fields(pooling)}
        if pin:  # pinned host memory: the copies to the device do not block the compute thread
            ids, mask = ids.pin_memory(), mask.pin_memory()
            indices = {name: tensor.pin_memory() for name, tensor in indices.items()}
        return cls(segments, encoded, first_rows, pool, ids, mask, indices,
                   tokens=int(sum(len(s.input_ids) for s in segments)))

    @property
    def padded(self) -> int:
        return self.ids.numel()

    @property
    def lengths(self) -> list[int]:
        return [len(segment.input_ids) for segment in self.segments]

    def subset(self, rows: np.ndarray, pad_id: int) -> "_Batch":
        return _Batch.make([self.segments[r] for r in rows.tolist()], self.encoded, self.first_rows, self.pool,
                           pad_id, self.ids.is_pinned())


class ShardComputer:
    """Computes whole shards on one encoder replica: the one shard loop of every engine, and the one place
    extraction's batches go through the model.

    A shard is computed in steps that may run on two threads: :meth:`batches` (tokens to padded inputs and
    pooling indices, no model; :func:`extract` runs it a shard ahead on a background thread beside a GPU, in line
    on a CPU: :class:`_Parts`), then on the
    compute thread :meth:`begin`, :meth:`run` for each batch and :meth:`finish`. :meth:`compute` does all
    of it for one shard in turn (the Ray engine). Pooling, the word-level attention sums and the cast to the
    store's dtype happen on the model's device; a shard's rows leave it once, into one of :attr:`writers` + 1
    reused (on a GPU, pinned) host buffers, without blocking: write them before that many more shards are finished.

    Batches follow :func:`bertology.models.batching.token_budget_batches` under :attr:`budget` (a
    :class:`~bertology.models.batching.TokenBudget`: the spec's ``batch_tokens``, or the device's
    (:func:`~bertology.models.batching.device_token_budget`), halved when the device runs out of memory).
    ``encoded`` maps a sentence's corpus position to its :class:`EncodedSentence` (the Ray engine fills it
    per shard; :func:`extract` as parts are encoded); ``layers`` are the spec's, resolved for this model.
    """

    def __init__(self, encoder: Encoder, encoded, spec: ExtractionSpec, layers: Sequence[int], max_rows: int,
                 model=None):
        self.encoder, self.encoded, self.spec = encoder, encoded, spec
        self.layers, self.attention_layers = list(layers), spec.attention_layer_list(layers)
        self.model = model if model is not None else encoder.model
        self.pad_id = pad_id_of(encoder.tokenizer)
        self.device = encoder.device
        self.pin = self.device.type == "cuda"
        tokens, self.max_batch = _batch_budget(encoder, spec, bool(self.attention_layers))
        self.budget = TokenBudget(tokens, what=f"extract {encoder.name}")
        max_rows = max(1, max_rows)
        shape, dtype = (len(self.layers), max_rows, encoder.hidden_size), DTYPES[spec.dtype]
        # The shard's rows in the store's dtype, filled batch by batch where the model runs; on a GPU copied
        # without blocking into a pinned host buffer (on a CPU the buffers are filled directly). One buffer per
        # shard being written and one being filled: on a GPU the store's writes, not the model, set the pace
        # (hashing and writing 500 MB of a bert-base store of EWT dev against 0.1-0.4 s of model), so
        # up to GPU_WRITERS shards are written at once there.
        shard_bytes = math.prod(shape) * torch.tensor([], dtype=dtype).element_size()
        self.writers = max(1, min(GPU_WRITERS, (os.cpu_count() or 1) // 4, PINNED_BYTES // shard_bytes - 1)) \
            if self.pin else CPU_WRITERS
        self.results = [torch.empty(shape, dtype=dtype, pin_memory=self.pin) for _ in range(self.writers + 1)]
        self.device_result = torch.empty(shape, dtype=dtype, device=self.device) if self.pin else None
        self.spill: torch.Tensor | None = None  # float32 sums of windowed sentences' rows, made when needed
        self.shards_done = 0

    # -- off the compute thread ------------------------------------------------------------------
    def batches(self, sentences: Sequence[int], first_rows: Mapping[int, int]) -> Iterator[_Batch]:
        """The batches of ``sentences`` (a shard's, encoded in :attr:`encoded`; ``first_rows``: each one's
        first row in the shard), one at a time: length-sorted, cut under the budget in force, padded, with
        their pooling indices."""
        encoded = self.encoded
        segments = [segment for i in sentences for segment in encoded[i].segments]
        lengths = [len(segment.input_ids) for segment in segments]
        for chosen in token_budget_batches(lengths, self.budget.tokens, self.max_batch,
                                           min_tokens=padding_floor(self.device, self.budget.tokens)):
            yield _Batch.make([segments[j] for j in chosen.tolist()], encoded, first_rows, self.spec.pool,
                              self.pad_id, self.pin)

    # -- on the compute thread -------------------------------------------------------------------
    def begin(self, start: int, stop: int, rows: int) -> None:
        """Start shard ``start..stop`` of ``rows`` stored rows."""
        self.range, self.rows = range(start, stop), rows
        self.host_result = self.results[self.shards_done % len(self.results)]
        self.result = self.device_result if self.pin else self.host_result
        self.spilled = False
        self.maps: dict[int, _AttentionBuffer] = {}
        self.counts = {"tokens": 0, "padded_tokens": 0, "windowed_sentences": 0}

    def run(self, batch: _Batch) -> None:
        """One batch through the model, pooled into the shard; on out-of-memory, the budget halves and the
        batch runs again in pieces (:class:`~bertology.models.batching.TokenBudget`)."""
        if len(batch.segments) > 1 and batch.padded > self.budget.tokens:  # cut before a halving
            for piece in token_budget_batches(batch.lengths, self.budget.tokens, sort=False, max_padding=None):
                self.run(batch.subset(piece, self.pad_id))
            return
        self.budget.run(batch.lengths, lambda rows: self._pool(
            batch if len(rows) == len(batch.segments) else batch.subset(rows, self.pad_id)))

    def _pool(self, batch: _Batch) -> None:
        device = self.device
        ids, mask = batch.ids.to(device, non_blocking=True), batch.mask.to(device, non_blocking=True)
        hidden_states, attention = _forward(self.encoder, self.model, ids, mask, self.attention_layers)
        index = {name: tensor.to(device, non_blocking=True) for name, tensor in batch.indices.items()}
        states = [hidden_states[layer].reshape(-1, hidden_states[layer].shape[-1]) for layer in self.layers]
        # Everything that allocates comes first: an out-of-memory error leaves the shard untouched.
        means = None
        if len(index["rows"]):
            # Every layer in one buffer: one zeroing, division, cast and copy into the shard per batch, not one
            # per layer (each plane receives the same sums in the same order as a buffer of its own would).
            sums = torch.zeros(len(states), len(index["rows"]), self.encoder.hidden_size, device=device)
            for plane, layer_states in zip(sums, states):
                plane.index_add_(0, index["local"], layer_states.index_select(0, index["gather"]).float())
            means = sums.div_(index["weights"][:, None]).to(self.result.dtype)
        spilled = [layer_states.index_select(0, index["spill_gather"]).float() for layer_states in states] \
            if len(index["spill_target"]) else []
        if spilled and not self.spilled:
            self.spill = torch.zeros(len(self.layers) + 1, self.rows, self.encoder.hidden_size, device=device) \
                if self.spill is None or self.spill.shape[1] < self.rows else self.spill.zero_()
            self.spilled = True
        if means is not None:
            self.result.index_copy_(1, index["rows"], means)
        for position, rows in enumerate(spilled):
            self.spill[position].index_add_(0, index["spill_target"], rows)
        if spilled:  # the last plane counts what each row received
            self.spill[-1, :, 0].index_add_(0, index["spill_target"], torch.ones(len(index["spill_target"]),
                                                                                 device=device))
        for row, segment in enumerate(batch.segments if attention is not None else ()):
            length = len(segment.input_ids)
            if segment.sentence not in self.maps:
                self.maps[segment.sentence] = _AttentionBuffer(self.encoded[segment.sentence],
                                                               len(self.attention_layers), self.encoder.num_heads)
            self.maps[segment.sentence].add(segment, attention[:, row, :, :length, :length])
        self.counts["tokens"] += batch.tokens
        self.counts["padded_tokens"] += batch.padded

    def finish(self) -> tuple[dict[str, torch.Tensor], dict, object]:
        """The shard's tensors (views of a reused host buffer), its counts, and ``ready``: a callable that
        returns once the tensors have arrived from the device (None on a CPU)."""
        n = self.rows
        if self.spilled:  # windowed sentences' rows: their sums over every batch, divided by what each received
            weights = self.spill[-1, :n, 0]
            touched = torch.nonzero(weights).reshape(-1)
            means = self.spill[:-1, :n].index_select(1, touched) / weights[touched][None, :, None]
            self.result[:, :n].index_copy_(1, touched, means.to(self.result.dtype))
        result = self.host_result[:, :n]
        self.shards_done += 1
        ready = None
        if self.pin:  # copy without blocking: the next shard's batches run while it travels
            result.copy_(self.result[:, :n], non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            ready = event.synchronize
        tensors = {f"layer.{layer}": result[position] for position, layer in enumerate(self.layers)}
        if self.attention_layers:
            word_maps = [self.maps[i].word_attention() for i in self.range]  # each [L, H, G, G]
            for position, layer in enumerate(self.attention_layers):
                tensors[f"attention.{layer}"] = torch.cat([m[position].reshape(-1) for m in word_maps]).float()
        encoded = self.encoded
        self.counts["windowed_sentences"] = sum(len(encoded[i].segments) > 1 for i in self.range)
        return tensors, self.counts, ready

    def compute(self, start: int, stop: int) -> tuple[dict[str, torch.Tensor], dict]:
        """Shard ``start..stop`` from end to end on this thread: its tensors (views of reused buffers, arrived)
        and its counts."""
        counts = [_row_count(self.encoded[i], self.spec.pool) for i in range(start, stop)]
        self.begin(start, stop, sum(counts))
        first_rows = dict(zip(range(start, stop), np.cumsum([0] + counts[:-1]).tolist()))
        for batch in self.batches(range(start, stop), first_rows):
            self.run(batch)
        tensors, counts, ready = self.finish()
        if ready is not None:
            ready()
        return tensors, counts


def _batch_budget(encoder: Encoder, spec: ExtractionSpec, attentions: bool) -> tuple[int, int | None]:
    """``(batch_tokens, max_batch)`` of a run (``attentions``: attention maps are kept): the spec's, or the
    device's (:func:`~bertology.models.batching.device_token_budget`)."""
    tokens, max_batch = device_token_budget(encoder.device, _bytes_per_token(encoder, attentions))
    return spec.batch_tokens or tokens, spec.max_batch if spec.max_batch is not None else max_batch


def _bytes_per_token(encoder: Encoder, attentions: bool) -> int:
    """Device memory a token takes in a batch that keeps every layer's states (float32): the states returned,
    a layer's transient activations, and with eager attention (attentions asked for) its score rows."""
    hidden, layers = encoder.hidden_size, encoder.num_layers
    ffn = getattr(encoder.config, "intermediate_size", None) or 4 * hidden
    per_token = hidden * (layers + 1) + 2 * ffn + 8 * hidden
    if attentions:
        per_token += 2 * encoder.num_heads * encoder.max_length * (layers + 1)
    return 4 * per_token


def run_stats(counts: Sequence[dict], seconds: float, **extra) -> dict:
    """The index's ``stats``: summed shard counts over the wall-clock time of the run."""
    total = {key: sum(c[key] for c in counts) for key in ("tokens", "padded_tokens", "windowed_sentences")}
    return {"seconds": round(seconds, 3), **total,
            "tokens_per_second": round(total["tokens"] / seconds, 1) if seconds else None, **extra}


def _batches_ahead(device: torch.device) -> bool:
    """Whether a run's batches are made a shard ahead on a thread of their own (:class:`_Parts`): beside a GPU."""
    return device.type == "cuda"


class _Parts:
    """The batches of the shards to do (the rest of the tokenizing, the alignment, padding and pooling indices),
    made ready either a shard ahead on a background thread (``background``: beside a GPU, whose compute thread
    waits on the device with the GIL let go) or on the compute thread just before its shard runs (a CPU).

    On a CPU the model's Python dispatch holds the GIL but for the moment of each op, and a background thread with
    Python to run takes it at each of those moments: the two threads' Python runs one after the other anyway, now
    with a hand-over per op. On issue 31's overhead proxy (EWT dev, one torch thread) the pipeline kept 58-61% of the bare
    forward's speed with the batches made in line against 56-59% made ahead, in three runs of both (BENCHMARKS.md,
    "Batches made in line on a CPU"). The whole corpus's unknown-token check runs before the last shard's batches are handed over, so a
    refused tokenizer never finishes a store."""

    #: In line (a CPU), every batch of a shard is made before the first of them runs: the model's batches then run
    #: one after another, as in the bare forward pass, rather than each after its own padding and pooling indices
    #: (``bench_extract_overhead.py --lazy`` times the two in the same rounds; BENCHMARKS.md, "A shard's batches
    #: made at once").
    at_once = True

    def __init__(self, plan: ExtractionPlan, computer: ShardComputer, todo: Sequence[int], background: bool):
        self.plan, self.computer, self.todo = plan, computer, list(todo)
        self.background = background
        # Unbounded within a shard: the thread prepares a shard's batches in one go and then waits, rather than
        # contending for the GIL with the model's Python batch after batch; it starts the next shard only once
        # the compute thread has begun this one (see _produce).
        self.queue: queue.Queue = queue.Queue()
        self.begun = threading.Semaphore(1)
        self.stopped = threading.Event()
        self.unknown_words = 0
        self.thread = threading.Thread(target=self._produce, name="bertology-extract-batches", daemon=True)

    def __enter__(self) -> "_Parts":
        encoded = self.computer.encoded
        for i, sentence in enumerate(self.plan.first):
            encoded[i] = sentence
        if self.background:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if not self.background:
            return
        self.stopped.set()
        while self.thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self.queue.get(timeout=0.05)
        self.thread.join()

    def _put(self, item) -> bool:
        while not self.stopped.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _batches(self, k: int) -> Iterator[_Batch]:
        """Shard ``k``'s batches: its sentences encoded where they are not yet, the unknown-token check before
        the last shard's first batch."""
        plan, computer = self.plan, self.computer
        encoded = computer.encoded
        start, stop = plan.index["shards"][k]["start"], plan.index["shards"][k]["stop"]
        rows = plan.row_counts[start:stop]
        first_rows = dict(zip(range(start, stop), (np.cumsum(rows) - rows).tolist()))
        missing = [i for i in range(start, stop) if i not in encoded]
        for i, sentence in zip(missing, plan.encode_some(missing)):
            encoded[i] = sentence
        self.unknown_words += sum(encoded[i].unknown_words for i in range(start, stop))
        if k == self.todo[-1]:
            self._check_unknown()
        yield from computer.batches(range(start, stop), first_rows)

    def _produce(self) -> None:
        try:
            for k in self.todo:
                while not self.begun.acquire(timeout=0.1):  # at most one shard ahead of the compute thread
                    if self.stopped.is_set():
                        return
                for batch in self._batches(k):
                    if not self._put((k, batch)):
                        return
                if not self._put((k, None)):
                    return
        except BaseException as error:  # noqa: BLE001 - handed to the compute thread, which raises it
            self._put(error)

    def _check_unknown(self) -> None:
        """The unknown-token share over every sentence (those of shards already whole encoded again)."""
        plan, encoded = self.plan, self.computer.encoded
        if plan.spec.max_unknown_fraction is None:
            return
        unseen = [i for i in range(len(plan.sentences)) if i not in encoded]
        every = [encoded[i] for i in encoded] + encode_sentences(
            plan.encoder.tokenizer, [plan.sentences[i] for i in unseen], plan.encoder.max_length, plan.spec.long_policy,
            pieces=plan.pieces) if unseen else [encoded[i] for i in encoded]
        _check_tokenizer(plan.encoder, every, plan.spec.max_unknown_fraction)

    def of_shard(self, k: int) -> Iterator[_Batch]:
        """The batches of shard ``k`` (the shards come in the order of ``todo``)."""
        if not self.background:
            yield from list(self._batches(k)) if self.at_once else self._batches(k)
            return
        self.begun.release()  # the next shard may be prepared now
        while True:
            item = self.queue.get()
            if isinstance(item, BaseException):
                raise item
            shard, batch = item
            if shard != k:
                raise RuntimeError(f"shard {shard} prepared where shard {k} was expected")
            if batch is None:
                return
            yield batch


def _run(plan: ExtractionPlan, progress: bool, device: str | None, compile_model: bool) -> None:
    """Compute the shards the index does not list as whole, writing each as it is done: the model runs on this
    thread, each shard's batches are prepared on it too (a CPU) or a shard ahead on another (a GPU: :class:`_Parts`),
    and each shard is streamed to disk on a writer's thread and named in the index only once whole."""
    encoder, writer = plan.encoder, plan.writer
    if device:
        encoder.to(device)
    todo = writer.todo
    shards = writer.index["shards"]
    sizes = {k: shards[k]["stop"] - shards[k]["start"] for k in todo}
    started = time.perf_counter()
    counts: list[dict] = []
    computer = ShardComputer(encoder, {}, plan.spec, plan.layers, max_rows=plan.largest_shard_rows(todo),
                             model=encoder.compiled() if compile_model else None)
    with (progress_bar(progress) as bar, run_context(encoder, plan.spec.autocast, plan.attention_layers),
          writer.shards_in_background(on_written=lambda k: bar.advance(task, sizes[k]),
                                      writers=computer.writers) as put,
          _Parts(plan, computer, todo, background=_batches_ahead(computer.device)) as parts):
        task = bar.add_task(f"extract {encoder.name} (sentences)", total=sum(sizes.values()))
        for k in todo:
            computer.begin(shards[k]["start"], shards[k]["stop"], writer.shard_rows(k))
            for batch in parts.of_shard(k):
                computer.run(batch)
            tensors, shard_counts, ready = computer.finish()
            counts.append(dict(shard_counts))
            # waits for the shard before, which frees the buffer the next one fills; the last is named in the
            # index by writer.finish below
            put(k, tensors, ready=ready, last=k == todo[-1])
    if parts.unknown_words:
        warnings.warn(f"{parts.unknown_words} word(s) produced no subword tokens and were encoded as the unknown "
                      "token", stacklevel=3)
    writer.finish(run_stats(counts, time.perf_counter() - started, **computer.budget.record(),
                            max_batch=computer.max_batch, device=str(computer.device)))


def _check_unknown_share(encoder: Encoder, words: int, unknown: int, limit: float | None) -> None:
    if limit is None or not words or unknown / words <= limit:
        return
    tokenizer = encoder.tokenizer
    raise ModelError(
        f"{encoder.source or encoder.name}: the tokenizer maps {unknown:,} of {words:,} words "
        f"({unknown / words:.0%}) wholly to its unknown token {tokenizer.unk_token!r} (a vocabulary of "
        f"{len(tokenizer):,} tokens); its tokenizer files are missing or belong to another model. Save the "
        "model's own tokenizer in the folder (tokenizer.save_pretrained(DIR)), or pass max_unknown_fraction=None"
    )


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
