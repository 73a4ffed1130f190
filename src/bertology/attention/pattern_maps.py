"""Token-level attention maps for Kovaleva et al.'s (2019) pattern types: one :class:`AttentionSample` per
input (every layer and head) and :func:`resize_map`, the fixed-size image the CNN classifies.

Maps are token level (subwords plus [CLS]/[SEP]), as in the paper; :func:`token_attention_maps` gets them
through :meth:`bertology.models.Encoder.forward` (``attentions=True``). The spine's word-level maps can be
classified too (pass the arrays), but the labelled set and the shipped classifier were built on token-level maps.
Numbering (:mod:`bertology.numbering`): axis 0 of ``attentions`` holds layers 1..L (layer ``l`` is
``attentions[l - 1]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from bertology.errors import DataError
from bertology.models.texts import encode_texts

#: The side of the square image every map is resized to (:func:`resize_map`).
MAP_SIZE = 32


@dataclass
class AttentionSample:
    """All heads' attention for one input sequence.

    ``attentions`` is ``[n_layers, n_heads, n, n]`` (rows attend to columns, rows sum to 1). ``special`` marks
    the positions of special tokens ([CLS], [SEP], ...); ``segments`` gives each position's segment
    (``token_type_ids``: 0 for ``[CLS] A [SEP]``, 1 for ``B [SEP]``). Without them, position 0 and n-1 are
    taken as special and the whole sequence as one segment, which is what a plain ``[CLS] ... [SEP]`` input
    (and the spine's word-level maps) look like.
    """

    attentions: np.ndarray
    tokens: Sequence[str] | None = None
    special: np.ndarray | None = None
    segments: np.ndarray | None = None
    sentence_id: str | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        att = np.asarray(self.attentions, dtype=np.float32)
        if att.ndim == 2:
            att = att[None, None]
        if att.ndim != 4 or att.shape[-1] != att.shape[-2]:
            raise DataError(
                f"attention map of shape {tuple(att.shape)}; expected [n_layers, n_heads, n, n] (or [n, n])"
            )
        n = att.shape[-1]
        if n < 2:
            raise DataError(f"attention map over {n} position(s); expected at least 2 ([CLS] and [SEP])")
        if not np.isfinite(att).all():
            raise DataError("attention map contains NaN or infinite values")
        self.attentions = att
        if self.special is None:
            special = np.zeros(n, dtype=bool)
            special[[0, n - 1]] = True
        else:
            special = np.asarray(self.special, dtype=bool)
        if self.segments is None:
            segments = np.zeros(n, dtype=np.int64)
        else:
            segments = np.asarray(self.segments, dtype=np.int64)
        for name, value in (("special", special), ("segments", segments)):
            if value.shape != (n,):
                raise DataError(f"{name} has shape {value.shape}; expected ({n},) to match the attention map")
        if self.tokens is not None and len(self.tokens) != n:
            raise DataError(f"{len(self.tokens)} tokens for an attention map over {n} positions")
        self.special, self.segments = special, segments


def as_attention_sample(item, index: int) -> AttentionSample:
    """``item`` itself if it is an :class:`AttentionSample`; a plain ``[n_layers, n_heads, n, n]`` (or
    ``[n, n]``) array becomes one whose ``sentence_id`` is ``index``."""
    if isinstance(item, AttentionSample):
        return item
    return AttentionSample(np.asarray(item), sentence_id=str(index))


def token_attention_maps(
    encoder,
    texts: Iterable[str | tuple[str, str]],
    *,
    max_length: int = 128,
    batch_size: int = 16,
    ids: Sequence[str] | None = None,
) -> Iterator[AttentionSample]:
    """Token-level attention of every layer and head, one :class:`AttentionSample` per input, in input order.

    ``texts`` are strings or ``(sentence_a, sentence_b)`` pairs; pairs are encoded as ``[CLS] A [SEP] B [SEP]``
    which is what produces block patterns. ``encoder`` is a :class:`bertology.models.Encoder`; the model runs
    through :meth:`~bertology.models.Encoder.forward` with ``attentions=True``, which switches to eager
    attention for the call and restores the encoder's implementation afterwards. Each sample's
    ``attentions`` is ``[L, H, n, n]`` with axis 0 = layers 1..L. Inputs longer than ``max_length`` tokens
    are truncated.
    """
    texts = list(texts)
    ids = list(ids) if ids is not None else [str(i) for i in range(len(texts))]
    if len(ids) != len(texts):
        raise DataError(f"{len(ids)} ids for {len(texts)} texts")
    # A batch holds consecutive inputs of one kind, so a single sentence never gets an empty second segment.
    start = 0
    while start < len(texts):
        is_pair = isinstance(texts[start], tuple)
        stop = start + 1
        while stop < len(texts) and stop - start < batch_size and isinstance(texts[stop], tuple) == is_pair:
            stop += 1
        yield from _encode_batch(encoder, texts[start:stop], ids[start:stop], is_pair, max_length)
        start = stop


def _encode_batch(encoder, chunk, chunk_ids, is_pair, max_length) -> Iterator[AttentionSample]:
    tokenizer = encoder.tokenizer
    first = [t[0] if is_pair else t for t in chunk]
    second = [t[1] for t in chunk] if is_pair else None
    batch = encode_texts(tokenizer, first, second, max_length=max_length, special_tokens_mask=True)
    special_mask = batch.pop("special_tokens_mask")
    out = encoder.forward(dict(batch), hidden_states=False, attentions=True)
    att = np.stack([a.float().cpu().numpy() for a in out.attentions], axis=1)  # [B, L, H, n, n]
    for b in range(att.shape[0]):
        n = int(batch["attention_mask"][b].sum())
        input_ids = batch["input_ids"][b, :n].tolist()
        special = special_mask[b, :n].numpy().astype(bool)
        # Segments from the separator rather than token_type_ids, which RoBERTa-style tokenizers (and
        # some custom ones) leave at 0: everything after the first separator is sentence B.
        segments = np.zeros(n, dtype=np.int64)
        if is_pair:
            separators = np.flatnonzero(special[1:]) + 1
            if len(separators):
                segments[separators[0] + 1 :] = 1
        yield AttentionSample(
            attentions=att[b, :, :, :n, :n],
            tokens=tokenizer.convert_ids_to_tokens(input_ids),
            special=special,
            segments=segments,
            sentence_id=chunk_ids[b],
        )


def resize_map(attention: np.ndarray, size: int = MAP_SIZE) -> np.ndarray:
    """Resize one ``[n, n]`` map (or a stack ``[..., n, n]``) to ``[size, size]`` by area averaging.

    Maps shorter than ``size`` are stretched by repetition (adaptive average pooling does both), so every
    map becomes one fixed-size image whatever its length; each image is then scaled to a maximum of 1 so
    that long sequences (small weights) and short ones look alike to the CNN.
    """
    arr = np.asarray(attention, dtype=np.float32)
    lead = arr.shape[:-2]
    t = torch.from_numpy(arr.reshape(-1, 1, *arr.shape[-2:]))
    pooled = F.adaptive_avg_pool2d(t, (size, size)).reshape(-1, size * size)
    peak = pooled.max(dim=1, keepdim=True).values.clamp_min(1e-12)
    return (pooled / peak).reshape(*lead, size, size).numpy()
