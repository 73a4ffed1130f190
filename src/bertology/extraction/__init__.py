"""Extraction: word-aligned hidden states and word-level attentions into a store."""

from bertology.extraction.alignment import (
    EncodedSentence, encode_sentences, plan_windows, word_groups, word_level_attention,
)
from bertology.extraction.pipeline import (
    MAX_ATTENTION_WORDS, MAX_UNKNOWN_FRACTION, as_sentences, check_output, corpus_hash,
    extract,
)

__all__ = ["EncodedSentence", "MAX_ATTENTION_WORDS", "MAX_UNKNOWN_FRACTION", "as_sentences", "check_output", "corpus_hash",
           "encode_sentences", "extract", "plan_windows", "word_groups", "word_level_attention"]
