"""The on-disk activation store: chunked, streaming, resumable."""

from bertology.store.store import FORMAT_VERSION, POOLS, SENTENCE_POOLS, WORD_POOLS, Store

__all__ = ["FORMAT_VERSION", "POOLS", "SENTENCE_POOLS", "WORD_POOLS", "Store"]
