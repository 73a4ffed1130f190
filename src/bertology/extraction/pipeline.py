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
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from bertology.data.corpus import sentences_from_strings
from bertology.data.sentence import Sentence
from bertology.errors import DataError, ModelError, OutputError
from bertology.extraction.alignment import (
    EncodedSentence, Segment, check_pool, encode_sentences, pool_rows, warn_unknown, word_groups, word_level_attention,
)
from bertology.extraction.spec import MAX_ATTENTION_WORDS, MAX_UNKNOWN_FRACTION, ExtractionSpec
from bertology.files import exclusive
from bertology.models.batching import pad_batch, pad_id_of, token_budget_batches
from bertology.models.encoders import Encoder
from bertology.progress import progress_bar
from bertology.store.store import DTYPES, SENTENCE_POOLS, Store, file_sha256
from bertology.store.writer import StoreWriter, check_output, model_record, plan_shards

__all__ = ["MAX_ATTENTION_WORDS", "MAX_UNKNOWN_FRACTION", "ExtractionPlan", "ExtractionSpec", "ShardComputer",
           "as_sentences", "check_output", "corpus_hash", "extract", "plan_extraction", "run_context", "run_stats"]


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


@dataclasses.dataclass
class ExtractionPlan:
    """Everything an engine needs to compute the missing shards of a store: made by
    :func:`plan_extraction` on the driver, shared by the local engine (:func:`extract`) and the Ray engine
    (:mod:`bertology.scale`). ``writer`` holds the store's index as on disk; ``complete`` when nothing is left."""

    encoder: Encoder
    encoded: list[EncodedSentence]
    spec: ExtractionSpec
    layers: list[int]
    attention_layers: list[int]
    writer: StoreWriter
    row_counts: np.ndarray

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

    def largest_shard_rows(self, shards: Sequence[int] | None = None) -> int:
        return self.writer.largest_shard_rows(shards)


def plan_extraction(
    encoder: Encoder,
    sentences: Sequence[Sentence | str],
    out: str | Path,
    spec: ExtractionSpec | None = None,
    *,
    input_path: str | None = None,
    overwrite: bool = False,
    **settings,
) -> ExtractionPlan:
    """Check the settings and the store folder, tokenize, plan the shards and write ``sentences.json`` and
    the index (a new store), or read the index back (a resumed one). Arguments as :func:`extract`."""
    spec = ExtractionSpec.of(spec, **settings)
    check_pool(encoder.tokenizer, spec.pool, encoder.name)  # no [CLS] (a decoder): refused before anything is written
    sentences = as_sentences(sentences)
    if not sentences:
        raise DataError("no sentences to extract")
    layers = spec.layer_list(encoder.num_layers)
    attention_layers = spec.attention_layer_list(layers)
    writer = StoreWriter(out, {"model": model_record(encoder), **spec.key(layers)}, corpus_hash(sentences),
                         overwrite=overwrite)
    plan = functools.partial(ExtractionPlan, encoder=encoder, spec=spec, layers=layers,
                             attention_layers=attention_layers, writer=writer)
    if writer.complete:
        return plan(encoded=[], row_counts=np.asarray(writer.index["row_counts"], dtype=np.int64))
    _check_attention_sizes(encoder, sentences, len(attention_layers), spec.max_attention_words, input_path)

    encoded = encode_sentences(encoder.tokenizer, list(sentences), encoder.max_length, spec.long_policy)
    _check_tokenizer(encoder, encoded, spec.max_unknown_fraction)
    warn_unknown(encoded)
    if spec.pool in SENTENCE_POOLS:
        row_counts = np.ones(len(encoded), dtype=np.int64)
    elif spec.pool == "tokens":
        row_counts = np.asarray([e.n_tokens for e in encoded], dtype=np.int64)
    else:
        row_counts = np.asarray([e.n_words for e in encoded], dtype=np.int64)
    store_bytes = torch.tensor([], dtype=DTYPES[spec.dtype]).element_size()
    groups = np.asarray([e.n_words + 2 for e in encoded], dtype=np.int64)
    attention_bytes = 4 * encoder.num_heads * len(attention_layers) * groups * groups
    shard_bounds = plan_shards(row_counts, store_bytes * encoder.hidden_size * len(layers), spec.shard_bytes,
                               attention_bytes)
    records, input_record = [], {}
    if not writer.resuming or writer.sentences_lost:
        records = [{"id": s.id, "words": list(s.words)} for s in sentences]
        if spec.pool == "tokens":
            for record, enc in zip(records, encoded):
                record["tokens"] = encoder.tokenizer.convert_ids_to_tokens(enc.token_ids)
    if not writer.resuming:
        input_file = Path(input_path) if input_path else None
        input_record = {"path": input_path,
                        "file_sha256": file_sha256(input_file) if input_file and input_file.is_file() else None,
                        "n_sentences": len(sentences), "n_words": int(sum(len(s) for s in sentences))}
    writer.start(records, row_counts, shard_bounds, input_record)
    return plan(encoded=encoded, row_counts=row_counts)


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
        plan = plan_extraction(encoder, sentences, out, spec, input_path=input_path, overwrite=overwrite, **settings)
        if plan.complete:
            return Store.open(plan.out)
        try:
            _run(plan, progress, device, compile_model)
        except OutputError as error:
            raise plan.writer.output_error(error) from None
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
    """Computes whole shards on one encoder replica: the one shard loop of every engine, batching with
    :func:`bertology.models.batching.token_budget_batches` (extraction's rule: the defaults) and
    :func:`~bertology.models.batching.pad_batch`.

    ``encoded`` maps a sentence's position in the corpus to its :class:`EncodedSentence` (the whole list,
    or only the sentences of the shards this replica is given); ``layers`` are the spec's, resolved for this
    model. :meth:`compute` returns a shard's tensors (views of reused buffers: write them before the shard
    after next is computed) and its counts.
    """

    def __init__(self, encoder: Encoder, encoded, spec: ExtractionSpec, layers: Sequence[int], max_rows: int,
                 model=None):
        self.encoder, self.encoded, self.spec = encoder, encoded, spec
        self.layers, self.attention_layers = list(layers), spec.attention_layer_list(layers)
        self.model = model if model is not None else encoder.model
        self.pad_id = pad_id_of(encoder.tokenizer)
        self.pooler = _ShardPooler(encoded, spec.pool, len(self.layers), encoder.hidden_size, max_rows,
                                   encoder.device, DTYPES[spec.dtype])

    def compute(self, start: int, stop: int) -> tuple[dict[str, torch.Tensor], dict]:
        encoder, encoded, device = self.encoder, self.encoded, self.encoder.device
        sentence_range = range(start, stop)
        self.pooler.begin(sentence_range)
        maps = {i: _AttentionBuffer(encoded[i], len(self.attention_layers), encoder.num_heads)
                for i in sentence_range} if self.attention_layers else {}
        segments = [seg for i in sentence_range for seg in encoded[i].segments]
        counts = {"tokens": 0, "padded_tokens": 0,
                  "windowed_sentences": sum(len(encoded[i].segments) > 1 for i in sentence_range)}
        lengths = [len(segment.input_ids) for segment in segments]
        for chosen in token_budget_batches(lengths, self.spec.batch_tokens, self.spec.max_batch):
            batch = [segments[i] for i in chosen]
            inputs = pad_batch([segment.input_ids for segment in batch], self.pad_id)
            ids, mask = inputs["input_ids"], inputs["attention_mask"]
            counts["tokens"] += int(mask.sum())
            counts["padded_tokens"] += ids.numel()
            hidden_states, attention = _forward(encoder, self.model, ids.to(device), mask.to(device),
                                                self.attention_layers)
            self.pooler.add(batch, ids.shape[1], hidden_states, self.layers)
            for row, segment in enumerate(batch if attention is not None else ()):
                length = len(segment.input_ids)
                maps[segment.sentence].add(segment, attention[:, row, :, :length, :length])
        return _shard_tensors(self.pooler, maps, sentence_range, self.layers, self.attention_layers), counts


def run_stats(counts: Sequence[dict], seconds: float, **extra) -> dict:
    """The index's ``stats``: summed shard counts over the wall-clock time of the run."""
    total = {key: sum(c[key] for c in counts) for key in ("tokens", "padded_tokens", "windowed_sentences")}
    return {"seconds": round(seconds, 3), **total,
            "tokens_per_second": round(total["tokens"] / seconds, 1) if seconds else None, **extra}


def _run(plan: ExtractionPlan, progress: bool, device: str | None, compile_model: bool) -> None:
    """Compute the shards the index does not list as whole, writing each as it is done: a shard is
    streamed to disk on a second thread while the next one computes, and named in the index only once whole."""
    encoder, writer = plan.encoder, plan.writer
    if device:
        encoder.model.to(device)
    todo = writer.todo
    sizes = {k: writer.index["shards"][k]["stop"] - writer.index["shards"][k]["start"] for k in todo}
    started = time.perf_counter()
    counts: list[dict] = []
    with (progress_bar(progress) as bar, run_context(encoder, plan.spec.autocast, plan.attention_layers),
          writer.shards_in_background(on_written=lambda k: bar.advance(task, sizes[k])) as put):
        task = bar.add_task(f"extract {encoder.name} (sentences)", total=sum(sizes.values()))
        computer = ShardComputer(encoder, plan.encoded, plan.spec, plan.layers, max_rows=plan.largest_shard_rows(todo),
                                 model=encoder.compiled() if compile_model else None)
        for k in todo:
            shard = writer.index["shards"][k]
            tensors, shard_counts = computer.compute(shard["start"], shard["stop"])
            counts.append(shard_counts)
            put(k, tensors)  # waits for the shard before, which frees the buffer the next shard pools into
    writer.finish(run_stats(counts, time.perf_counter() - started))


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
