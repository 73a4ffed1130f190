"""Texts to model inputs: the one tokenizer call that pads (:func:`encode_texts`) and the one loop that encodes
a list of texts in fixed-size batches, in their order (:func:`text_batches`).

Corpora of words go through the token-budget batcher (:mod:`bertology.models.batching`, as extraction does);
these are for the loops that batch a handful of texts by count (calibration inputs, importance batches, the two
models of ``compare``, attention maps of single inputs) and need the tokenizer's own output (``word_ids``, the
special-token mask, pairs).
"""

from __future__ import annotations

from typing import Iterator, Sequence


def encode_texts(tokenizer, texts: Sequence, second: Sequence | None = None, *, words: bool = False,
                 max_length: int | None = None, special_tokens_mask: bool = False):
    """One batch of ``texts`` (strings, or word lists with ``words``; ``second``: the second segment of each
    pair) as padded ``long`` tensors, right-padded to the longest and truncated to ``max_length`` tokens: the
    tokenizer's ``BatchEncoding`` (``word_ids(row)`` and the rest), with ``special_tokens_mask`` when asked."""
    extra = {"return_special_tokens_mask": True} if special_tokens_mask else {}
    return tokenizer(list(texts), None if second is None else list(second), is_split_into_words=words,
                     padding=True, truncation=True, max_length=max_length, return_tensors="pt", **extra)


def text_batches(tokenizer, texts: Sequence, batch_size: int, *, words: bool = False,
                 max_length: int | None = None) -> Iterator[tuple[range, object]]:
    """``(rows, encoded)`` for consecutive chunks of ``batch_size`` texts, in order: ``rows`` the chunk's
    positions in ``texts``, ``encoded`` the chunk through :func:`encode_texts`."""
    for start in range(0, len(texts), batch_size):
        rows = range(start, min(start + batch_size, len(texts)))
        yield rows, encode_texts(tokenizer, texts[rows.start:rows.stop], words=words, max_length=max_length)
