"""How the model's tokenizer cuts each language: the report's tokenization statistics, per language."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from bertology.data.sentence import Sentence
from bertology.extraction import encode_sentences

COLUMNS = ["language", "sentences", "words", "subwords", "fertility", "unk_token_share", "unk_word_share",
           "split_word_share", "windowed_sentences"]


def tokenizer_row(tokenizer, sentences: Sequence[Sentence], max_length: int, language: str) -> dict:
    """One language's row: ``fertility`` (subword tokens per word), ``unk_token_share`` (share of subword
    tokens that are the unknown token), ``unk_word_share`` (share of words that are nothing but unknown
    tokens), ``split_word_share`` (share of words cut into two or more subwords), all fractions, and how many
    sentences needed more than one window of the model."""
    encoded = encode_sentences(tokenizer, list(sentences), max_length)
    unk_id = tokenizer.unk_token_id
    words = sum(e.n_words for e in encoded)
    subwords = sum(e.n_tokens for e in encoded)
    unk_tokens = sum(int(np.sum(np.asarray(e.token_ids) == unk_id)) for e in encoded) if unk_id is not None else 0
    split = sum(int((np.bincount(e.word_index, minlength=e.n_words) > 1).sum()) for e in encoded)
    return {"language": language, "sentences": len(encoded), "words": words, "subwords": subwords,
            "fertility": subwords / words, "unk_token_share": unk_tokens / subwords if subwords else 0.0,
            "unk_word_share": sum(e.unk_words for e in encoded) / words, "split_word_share": split / words,
            "windowed_sentences": sum(len(e.segments) > 1 for e in encoded)}
