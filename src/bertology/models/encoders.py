"""Loading encoders: a hub id, a local directory, or the embedded default; and their untrained twins."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlparse

import torch
from transformers.utils import logging as transformers_logging
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel

from bertology.errors import ModelError
from bertology.models.families import family
from bertology.models.checkpoints import load_checkpoint, needs_checkpoint_loader
from bertology.models.sources import ALIASES, resolve_model_source

transformers_logging.disable_progress_bar()
transformers_logging.set_verbosity_error()

def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Resolve and connect to the hub with a short timeout, so an offline machine fails in seconds."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = urlparse(endpoint).hostname or "huggingface.co"
    port = urlparse(endpoint).port or 443
    result: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    return bool(result and result[0])


def _from_pretrained(factory, source: str, display: str, **kwargs):
    """Load from the local cache first so an unreachable hub fails fast instead of retrying."""
    from safetensors import SafetensorError

    local = Path(source).exists()
    try:
        return factory.from_pretrained(source, local_files_only=True, **kwargs)
    except SafetensorError as error:
        raise ModelError(_damaged_weights_message(source, display, error, local)) from None
    except (OSError, ValueError) as first_error:
        if local or _offline() or not _hub_reachable():
            raise ModelError(_not_found_message(display, first_error, local)) from None
    try:
        return factory.from_pretrained(source, **kwargs)
    except SafetensorError as error:
        raise ModelError(_damaged_weights_message(source, display, error, local)) from None
    except (OSError, ValueError) as error:
        raise ModelError(_not_found_message(display, error, local)) from None


def load_weights_file(file: str | Path) -> dict:
    """The tensors of one ``.safetensors`` file; :class:`ModelError` naming it when it is damaged or cut short."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(file))
    except (SafetensorError, OSError) as error:
        reason = (str(error).splitlines() or [type(error).__name__])[0]
        raise ModelError(f"{file}: cannot read these weights ({reason}); the file is damaged or cut short: save or "
                         "copy the checkpoint again") from None


def _damaged_weights_message(source: str, display: str, error: Exception, local: bool) -> str:
    """One line for weights that safetensors cannot read: the folder, the file, what is wrong with it."""
    reason = (str(error).splitlines() or [type(error).__name__])[0]
    if not local:
        return (f"could not load model {display!r}: a weights file in its cache is damaged ({reason}); delete the "
                "model from the Hugging Face cache and download it again")
    from safetensors import SafetensorError, safe_open

    folder = Path(source)
    damaged = []
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except (SafetensorError, OSError):
            damaged.append(file.name)
    which = ", ".join(damaged) if damaged else "its .safetensors weights"
    return (f"{folder}: cannot load the model weights in {which} ({reason}); the file is damaged or cut short: "
            "save or copy the model folder again")


def _not_found_message(display: str, error: Exception, local: bool) -> str:
    if local:
        return f"could not load the model in {display!r}: {str(error).splitlines()[0]}"
    return (
        f"could not load model {display!r}: it is not a local directory, not an alias "
        f"({', '.join(sorted(ALIASES))}), and the hub could not be reached or has no such id. "
        "Offline, pass a local path instead: save the model once with "
        "`AutoModel.from_pretrained(id).save_pretrained(DIR)` (and its tokenizer) on a connected machine, "
        "then use --model DIR."
    )


#: Files that hold a tokenizer in a save_pretrained folder (any one of them is enough).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt",
                   "spiece.model", "sentencepiece.bpe.model", "spm.model", "tokenizer.model")


def check_tokenizer_matches(tokenizer, config, source: str) -> None:
    """Refuse a tokenizer far smaller than the model's embedding matrix.

    transformers loads a folder without tokenizer files as a bare tokenizer of a handful of special
    tokens, which turns every word into the unknown token without a word of warning. A model's own
    tokenizer has (about) as many tokens as the embeddings have rows.
    """
    rows = getattr(config, "vocab_size", None)
    size = len(tokenizer)
    if not rows or size >= rows / 2:
        return
    folder = Path(source)
    why = "the tokenizer does not belong to this model"
    if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        why = f"the folder has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...)"
    raise ModelError(
        f"{source}: the tokenizer has {size:,} tokens but the model's embeddings have {rows:,} rows: {why}, so "
        "most words would become the unknown token. Save the model's tokenizer beside it "
        "(AutoTokenizer.from_pretrained(ID).save_pretrained(DIR))"
    )


def fingerprint_tokenizer(tokenizer) -> str:
    """A short hash of the tokenizer's full definition (vocabulary, normaliser, specials)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        definition = json.loads(backend.to_str())
        for per_call in ("truncation", "padding"):  # set by each call's padding=/truncation=, not the vocabulary
            definition.pop(per_call, None)
        text = json.dumps(definition, sort_keys=True)
    else:
        text = json.dumps(tokenizer.get_vocab(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def tokenizer_types(tokenizer) -> str:
    """The type definition that follows a tokenizer: ``"lower"`` when it cannot tell case apart (an
    uncased tokenizer gives "Apple" and "apple" the same pieces), else ``"exact"``."""
    try:
        pieces = [tokenizer(w, add_special_tokens=False)["input_ids"] for w in ("Apple", "apple", "THE", "the")]
    except Exception:  # noqa: BLE001 - a tokenizer without the call interface: keep forms exact
        return "exact"
    return "lower" if pieces[0] == pieces[1] and pieces[2] == pieces[3] else "exact"


def fingerprint_model(model: PreTrainedModel, tokenizer=None) -> str:
    """A short hash of the config, every weight and (when given) the tokenizer: the same model and
    tokenizer always give the same fingerprint; a different tokenizer gives a different one."""
    digest = hashlib.sha256()
    if tokenizer is not None:
        digest.update(fingerprint_tokenizer(tokenizer).encode())
    config = model.config.to_dict()
    for volatile in ("_name_or_path", "transformers_version", "attn_implementation", "_attn_implementation",
                     "_attn_implementation_autoset", "output_attentions", "output_hidden_states",
                     "torch_dtype", "dtype", "architectures"):
        config.pop(volatile, None)
    digest.update(json.dumps(config, sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu").contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


@dataclass
class Encoder:
    """A BERT-family encoder with its fast tokenizer, a display name and a fingerprint."""

    model: PreTrainedModel
    tokenizer: object
    name: str
    source: str | None = None
    untrained_seed: int | None = None
    _fingerprint: str | None = field(default=None, repr=False)
    _compiled: object = field(default=None, repr=False)

    @classmethod
    def from_model(cls, model: PreTrainedModel, tokenizer, name: str = "model") -> "Encoder":
        if not getattr(tokenizer, "is_fast", False):
            raise ModelError(f"{name}: a fast tokenizer is needed for word alignment (got {type(tokenizer).__name__})")
        model.eval()
        return cls(model=model, tokenizer=tokenizer, name=name)

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = fingerprint_model(self.model, self.tokenizer)
        return self._fingerprint

    @property
    def config(self):
        return self.model.config

    @property
    def num_layers(self) -> int:
        config = self.config
        return int(getattr(config, "num_hidden_layers", None) or getattr(config, "n_layers"))

    @property
    def num_heads(self) -> int:
        config = self.config
        return int(getattr(config, "num_attention_heads", None) or getattr(config, "n_heads"))

    @property
    def hidden_size(self) -> int:
        config = self.config
        return int(getattr(config, "hidden_size", None) or getattr(config, "dim"))

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def max_length(self) -> int:
        """Most tokens (specials included) one forward pass may take."""
        positions = getattr(self.config, "max_position_embeddings", None) or 512
        positions -= family(self.config.model_type).position_offset
        tokenizer_max = getattr(self.tokenizer, "model_max_length", None) or positions
        return int(min(positions, tokenizer_max))

    @property
    def attention_implementation(self) -> str:
        return getattr(self.config, "_attn_implementation", None) or "eager"

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @contextlib.contextmanager
    def eager_attention(self) -> Iterator["Encoder"]:
        """Eager attention inside the block (the only implementation that returns attention weights in
        transformers 5); whatever implementation was there before is restored on exit."""
        before = self.attention_implementation
        if before != "eager":
            self.model.set_attn_implementation("eager")
        try:
            yield self
        finally:
            if before != "eager":
                self.model.set_attn_implementation(before)

    def forward(self, inputs: Mapping[str, torch.Tensor], *, hidden_states: bool = True,
                attentions: bool = False, logits: bool = False, grad: bool = False, model=None) -> "ForwardOutput":
        """The one forward pass: ``inputs`` (``input_ids``, ``attention_mask``, ...; moved to the model's
        device) through the model, returning only what was asked for.

        * ``hidden_states``: tuple of ``L + 1`` tensors ``[batch, tokens, hidden]``; index ``l`` is layer ``l``
          in the one numbering (0 = embeddings).
        * ``attentions``: tuple of ``L`` tensors ``[batch, heads, tokens, tokens]``; ``attentions[l - 1]`` is
          layer ``l``. Eager attention is switched on for this call and the previous implementation restored.
        * ``logits``: the model's ``logits`` (a model with a head; ``None`` for a bare encoder).

        Runs under ``torch.inference_mode`` unless ``grad``. ``model`` replaces ``self.model`` for the call
        (a compiled or wrapped version of it).
        """
        run = model if model is not None else self.model
        device = self.device
        batch = {key: value.to(device) if hasattr(value, "to") else value for key, value in inputs.items()}
        switch = self.eager_attention() if attentions else contextlib.nullcontext()
        grad_mode = contextlib.nullcontext() if grad else torch.inference_mode()
        with switch, grad_mode:
            output = run(**batch, output_hidden_states=hidden_states, output_attentions=attentions, return_dict=True)
        found_attentions = getattr(output, "attentions", None) if attentions else None
        if attentions and (not found_attentions or any(a is None for a in found_attentions)):
            raise ModelError(f"{self.name}: the model returned no attention weights")
        return ForwardOutput(
            hidden_states=tuple(output.hidden_states) if hidden_states else None,
            attentions=tuple(found_attentions) if attentions else None,
            logits=getattr(output, "logits", None) if logits else None,
        )

    def compiled(self):
        """The model through ``torch.compile`` with dynamic shapes, compiled on first use and kept."""
        if self._compiled is None:
            self._compiled = torch.compile(self.model, dynamic=True)
        return self._compiled

    def untrained(self, seed: int = 0) -> "Encoder":
        """The untrained twin: same config and tokenizer, weights re-initialised from ``seed``."""
        model = untrained_model(self.config, seed, attn_implementation=self.attention_implementation)
        return Encoder(model=model, tokenizer=self.tokenizer, name=f"{self.name} (untrained, seed {seed})",
                       source=self.source, untrained_seed=seed)

    def describe(self) -> dict:
        return {
            "name": self.name,
            "source": self.source,
            "model_type": self.config.model_type,
            "fingerprint": self.fingerprint,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_size": self.hidden_size,
            "num_parameters": self.num_parameters,
            "untrained_seed": self.untrained_seed,
        }


@dataclass(frozen=True)
class ForwardOutput:
    """What :meth:`Encoder.forward` returns; fields not asked for are ``None``."""

    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    logits: torch.Tensor | None = None

    def layer(self, layer: int) -> torch.Tensor:
        """Hidden states of ``layer`` (0 = embeddings)."""
        return self.hidden_states[layer]

    def attention(self, layer: int) -> torch.Tensor:
        """Attention weights of transformer layer ``layer`` (1..L)."""
        if layer < 1:
            raise ModelError(f"layer {layer} has no attention; attention layers are 1-{len(self.attentions)}")
        return self.attentions[layer - 1]


def untrained_model(config, seed: int, attn_implementation: str = "sdpa") -> PreTrainedModel:
    """Re-initialise a model of ``config`` from ``seed``: same seed, same weights."""
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = AutoModel.from_config(config, attn_implementation=attn_implementation)
    finally:
        torch.random.set_rng_state(generator_state)
    return model.eval()


def load_encoder(
    name_or_path: str | os.PathLike = "minilm",
    untrained_seed: int | None = None,
    attentions: bool = False,
    device: str | None = None,
) -> Encoder:
    """Load an encoder by alias (``minilm``), local directory or hub id.

    ``untrained_seed`` gives the untrained twin; ``attentions=True`` selects eager attention, the only
    implementation that returns attention weights in transformers 5.
    """
    display, source = resolve_model_source(name_or_path)
    attn = "eager" if attentions else "sdpa"
    config = _from_pretrained(AutoConfig, source, display)
    tokenizer_kwargs = {"add_prefix_space": True} if family(config.model_type).prefix_space else {}
    tokenizer = _from_pretrained(AutoTokenizer, source, display, **tokenizer_kwargs)
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(f"{display}: no fast tokenizer available; word alignment needs one")
    check_tokenizer_matches(tokenizer, config, source)
    fingerprint = None
    if untrained_seed is None and needs_checkpoint_loader(config):  # heads really removed, or int8 layers
        model, fingerprint = load_checkpoint(source, config, attn, fingerprint_tokenizer(tokenizer))
    elif untrained_seed is None:
        model = _from_pretrained(AutoModel, source, display, attn_implementation=attn)
    else:
        model = untrained_model(config, untrained_seed, attn_implementation=attn)
        display = f"{display} (untrained, seed {untrained_seed})"
    model.eval()
    if device:
        model.to(device)
    return Encoder(model=model, tokenizer=tokenizer, name=display, source=source, untrained_seed=untrained_seed,
                   _fingerprint=fingerprint)
