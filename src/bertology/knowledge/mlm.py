"""Masked language models for LAMA and minimal pairs: loading one (or saying clearly why not), its twin."""

from __future__ import annotations

import os

import torch
from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer, PreTrainedModel

from bertology.errors import ModelError
from bertology.models.encoders import _from_pretrained, resolve_model_source


def _missing_head_keys(model: PreTrainedModel, missing: list[str]) -> list[str]:
    """Missing weights outside the encoder: the MLM head was not in the checkpoint."""
    prefix = f"{model.base_model_prefix}."
    return sorted(key for key in missing if not key.startswith(prefix))


def load_masked_lm(name_or_path: str | os.PathLike, device: str | torch.device | None = None):
    """``(model, tokenizer)`` of a masked LM by hub id, folder or alias, in eval mode.

    Raises :class:`ModelError` with one sentence when the checkpoint has no masked-LM head (a bare encoder
    such as the embedded MiniLM sentence encoder) instead of silently scoring with a random head.
    """
    display, source = resolve_model_source(name_or_path)
    config = _from_pretrained(AutoConfig, source, display)
    tokenizer = _from_pretrained(AutoTokenizer, source, display)
    if tokenizer.mask_token is None:
        raise ModelError(f"{display}: its tokenizer has no mask token, so it cannot be used as a masked LM")
    try:
        model, info = _from_pretrained(AutoModelForMaskedLM, source, display, output_loading_info=True)
    except ValueError as error:  # an architecture with no masked-LM class at all
        raise ModelError(f"{display} ({config.model_type}) has no masked-LM variant in transformers: "
                         f"{str(error).splitlines()[0]}") from None
    missing = _missing_head_keys(model, list(info.get("missing_keys", [])))
    if missing:
        raise ModelError(
            f"{display} has no masked-LM head (the checkpoint holds only the encoder; missing {missing[0]}"
            f"{' and more' if len(missing) > 1 else ''}), so it cannot fill in [MASK]; pass a masked LM "
            "instead, e.g. --model bert-base-cased or a folder saved from AutoModelForMaskedLM")
    model.eval()
    if device is not None:
        model.to(device)
    return model, tokenizer


def untrained_masked_lm(model: PreTrainedModel, seed: int) -> PreTrainedModel:
    """The untrained twin of a masked LM: same config, weights re-initialised from ``seed``."""
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        twin = AutoModelForMaskedLM.from_config(model.config)
    finally:
        torch.random.set_rng_state(state)
    return twin.eval().to(next(model.parameters()).device)


def masked_lm(model, loaded=None, device=None):
    """``(network, tokenizer, name)``: ``loaded`` (a ``(network, tokenizer)`` pair) moved to ``device`` in eval
    mode, or the masked LM ``model`` names (hub id, folder or alias) loaded there."""
    if loaded is None:
        network, tokenizer = load_masked_lm(model, device)
        return network, tokenizer, model_name(model)
    network, tokenizer = loaded
    network.to(device).eval()
    return network, tokenizer, getattr(network.config, "_name_or_path", "") or type(network).__name__


def model_name(name_or_path: str | os.PathLike) -> str:
    return resolve_model_source(name_or_path)[0]
