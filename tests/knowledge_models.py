"""Tiny models and corpora built in code for the knowledge and geometry tests (no network, no hub)."""

from __future__ import annotations

from pathlib import Path


def save_tiny_encoder(folder: Path, seed: int = 0) -> Path:
    """The tiny random BERT encoder with its tokenizer, saved as a model folder."""
    from bertology.models.tiny import tiny_encoder

    encoder = tiny_encoder("bert", seed=seed, attentions=False)
    encoder.model.save_pretrained(folder)
    encoder.tokenizer.save_pretrained(folder)
    return folder


def write_toy_corpus(path: Path) -> Path:
    """The tiny tokenizer's training sentences (4 x 8 sentences), one a line."""
    from bertology.models.tiny import training_corpus

    path.write_text("\n".join(training_corpus()) + "\n", encoding="utf-8")
    return path
