"""Extraction: word-aligned hidden states and word-level attentions into a store."""

from bertology._lazy import lazy_exports
from bertology.extraction.spec import MAX_ATTENTION_WORDS, MAX_UNKNOWN_FRACTION, ExtractionSpec

# The rest is imported on first use (bertology._lazy): the spec is light, so settings are checked before torch loads.
__getattr__ = lazy_exports(__name__, {
    "alignment": ("EncodedSentence", "encode_sentences", "plan_windows", "word_groups", "word_level_attention"),
    "pipeline": ("as_sentences", "check_output", "corpus_hash", "extract", "plan_extraction"),
})

__all__ = ["EncodedSentence", "ExtractionSpec", "MAX_ATTENTION_WORDS", "MAX_UNKNOWN_FRACTION", "as_sentences",
           "check_output", "corpus_hash", "encode_sentences", "extract", "plan_extraction", "plan_windows",
           "word_groups", "word_level_attention"]
