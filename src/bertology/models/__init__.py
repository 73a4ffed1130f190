"""Models in one place: the one handle (:func:`load_encoder` -> :class:`Encoder`, bare or with a head), the
transformers classes behind it, and untrained twins."""

from bertology._lazy import lazy_exports

# Imported on first use (bertology._lazy), so that checking a --model (models.sources) does not load torch.
__getattr__ = lazy_exports(__name__, {"encoders": ("Encoder", "as_encoder", "fingerprint_model", "load_encoder",
                                                   "untrained_model"),
                                      "sources": ("ALIASES",),
                                      "auto": ("HEADS", "build_model")})

__all__ = ["ALIASES", "HEADS", "Encoder", "as_encoder", "build_model", "fingerprint_model", "load_encoder", "untrained_model"]
