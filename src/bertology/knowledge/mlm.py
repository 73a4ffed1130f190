"""Masked language models for LAMA and minimal pairs, as the one handle (``load_encoder(..., head="masked-lm")``)."""

from __future__ import annotations

import os

import torch

from bertology.models.encoders import Encoder, as_encoder, load_encoder


def load_masked_lm(name_or_path: str | os.PathLike, device: str | torch.device | None = None) -> Encoder:
    """The masked LM a hub id, folder or alias names, in eval mode: ``load_encoder(..., head="masked-lm")``,
    which refuses with one sentence a checkpoint without a masked-LM head (a bare encoder such as the embedded
    MiniLM sentence encoder) instead of silently scoring with a random head."""
    return load_encoder(name_or_path, device=device, head="masked-lm")


def masked_lm(model, loaded=None, device=None) -> Encoder:
    """The masked LM as a handle on ``device`` in eval mode (through :func:`as_encoder`): ``loaded`` (an
    :class:`Encoder`, or a ``(network, tokenizer)`` pair built in code, named by its config's source), or the
    masked LM ``model`` names (hub id, folder or alias; a checkpoint without the head is refused)."""
    network = loaded[0] if isinstance(loaded, tuple) else None
    name = (getattr(network.config, "_name_or_path", "") or type(network).__name__) if network is not None else None
    encoder = as_encoder(model if loaded is None else loaded, device=device, name=name, head="masked-lm")
    encoder.model.eval()
    return encoder



