"""Extraction: word-aligned hidden states and word-level attentions into a store."""

from bertology.extraction.alignment import (
    EncodedSentence, encode_sentences, plan_windows, word_groups, word_level_attention,
)
from bertology.extraction.pipeline import ExtractionStats, corpus_hash, extract

__all__ = ["EncodedSentence", "ExtractionStats", "corpus_hash", "encode_sentences", "extract", "plan_windows",
           "word_groups",
           "word_level_attention"]
