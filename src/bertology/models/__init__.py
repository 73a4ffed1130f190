"""Models in one place: loading encoders (hub id, local directory, embedded alias) and untrained twins."""

from bertology.models.encoders import ALIASES, Encoder, fingerprint_model, load_encoder, untrained_model

__all__ = ["ALIASES", "Encoder", "fingerprint_model", "load_encoder", "untrained_model"]
