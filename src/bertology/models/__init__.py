"""Models in one place: loading encoders (hub id, local directory, embedded alias) and untrained twins."""

from bertology._lazy import lazy_exports

# Imported on first use (bertology._lazy), so that checking a --model (models.sources) does not load torch.
__getattr__ = lazy_exports(__name__, {"encoders": ("Encoder", "fingerprint_model", "load_encoder",
                                                   "untrained_model"),
                                      "sources": ("ALIASES",)})

__all__ = ["ALIASES", "Encoder", "fingerprint_model", "load_encoder", "untrained_model"]
