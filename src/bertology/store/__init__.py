"""The on-disk activation store: chunked, streaming, resumable."""

from bertology._lazy import lazy_exports
from bertology.store.names import FORMAT_VERSION, POOLS, SENTENCE_POOLS, WORD_POOLS

# Store (torch) is imported on first use, so that extraction settings are checked before torch loads.
__getattr__ = lazy_exports(__name__, {"store": ("Store",), "writer": ("StoreWriter",)})

__all__ = ["FORMAT_VERSION", "POOLS", "SENTENCE_POOLS", "StoreWriter", "WORD_POOLS", "Store"]
