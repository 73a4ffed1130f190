"""The one model handle: :func:`load_encoder` loads an encoder (a hub id, a local directory, or the embedded
default), bare or with a head (masked LM, classification, QA), as an :class:`Encoder`, whose
:meth:`~Encoder.forward` serves every use; and the untrained twins.

Length: the one loader and the one handle on purpose (docs/ARCHITECTURE.md: nothing else loads a model);
what is separable lives beside it (``families.py``, ``layout.py``, ``sources.py``, ``batching.py``, ``texts.py``)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import threading
import warnings
from dataclasses import dataclass, field
from typing import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlparse

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from transformers.utils import logging as transformers_logging
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel

from bertology.errors import BertologyWarning, ModelError, SettingError, UsageError
from bertology.models.auto import auto_class, build_model, check_head, head_of_class, saved_class
from bertology.models.families import family
from bertology.models.layout import config_depth, config_heads, config_hidden
from bertology.models.checkpoints import load_checkpoint, needs_checkpoint_loader
from bertology.models.sources import ALIASES, resolve_model_source
from bertology.runtime import seeded

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


def load_model_config(folder: str | os.PathLike):
    """The config of a ``save_pretrained`` folder; :class:`ModelError` naming the folder when it has none or it
    cannot be read."""
    return _from_pretrained(AutoConfig, str(folder), str(folder))


def load_saved_model(folder: str | os.PathLike, cls=None, attn_implementation: str = "sdpa") -> PreTrainedModel:
    """The model of a ``save_pretrained`` folder as the class it was saved from (``cls``, default
    :func:`~bertology.models.auto.saved_class` of its config), head included; damaged weights are a
    :class:`ModelError` naming the file."""
    cls = cls if cls is not None else saved_class(load_model_config(folder))
    return _from_pretrained(cls, str(folder), str(folder), attn_implementation=attn_implementation)


def load_weights_file(file: str | Path) -> dict:
    """The tensors of one ``.safetensors`` file; :class:`ModelError` naming it when it is damaged or cut short."""
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
        "then use model= DIR."
    )


#: The largest difference from the eager model's last hidden states that :meth:`Encoder.compiled` accepts.
COMPILE_TOLERANCE = 1e-3
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
        text = backend.to_str()
        # Kept beside the tokenizer for its definition as it is now: hashing a 30k vocabulary every time a
        # store is planned cost more than extracting a small corpus (issue 31). Each call's truncation and
        # padding settings change the text, not the fingerprint: the few texts seen are all kept (one kept text
        # was missed whenever a call in between had set them, and the vocabulary hashed again, 70-500 ms).
        known = getattr(tokenizer, "_bertology_fingerprints", None)
        if known is not None and text in known:
            return known[text]
        definition = json.loads(text)
        for per_call in ("truncation", "padding"):  # set by each call's padding=/truncation=, not the vocabulary
            definition.pop(per_call, None)
        fingerprint = hashlib.sha256(json.dumps(definition, sort_keys=True).encode()).hexdigest()[:16]
        with contextlib.suppress(AttributeError, TypeError):
            known = {} if known is None or len(known) >= 8 else known
            known[text] = fingerprint
            tokenizer._bertology_fingerprints = known
        return fingerprint
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
    """The one model handle: a BERT-family model (bare, or with the ``head`` :func:`load_encoder` put on it)
    with its fast tokenizer, a display name and a fingerprint.

    ``model`` is the whole transformers model (``BertForMaskedLM`` for ``head="masked-lm"``); ``body`` its
    encoder without the head (what hooks, probes and a fine-tuning wrapper take).
    """

    model: PreTrainedModel
    tokenizer: object
    name: str
    source: str | None = None
    untrained_seed: int | None = None
    head: str | None = None
    _fingerprint: str | None = field(default=None, repr=False)
    _compiled: object = field(default=None, repr=False)

    @classmethod
    def from_model(cls, model: PreTrainedModel, tokenizer=None, name: str = "model",
                   head: str | None = None) -> "Encoder":
        """A handle on a model built or loaded in code, switched to eval mode. ``tokenizer``: a fast one (word
        alignment needs it), or ``None`` for models fed token ids directly (toy models). ``head``: the one
        the model carries (default: read from its class name, ``BertForMaskedLM`` -> ``"masked-lm"``)."""
        if tokenizer is not None and not getattr(tokenizer, "is_fast", False):
            raise ModelError(f"{name}: a fast tokenizer is needed for word alignment (got {type(tokenizer).__name__})")
        model.eval()
        head = check_head(head) if head is not None else head_of_class(type(model).__name__)
        return cls(model=model, tokenizer=tokenizer, name=name, head=head)

    @classmethod
    def of(cls, model, name: str | None = None) -> "Encoder":
        """``model`` itself when it is an :class:`Encoder`; else a handle on the module as it is (its mode and
        device untouched, no tokenizer): for code given a module built elsewhere, such as a fine-tuned
        classifier or a toy model, so that it too runs through :meth:`forward`."""
        if isinstance(model, Encoder):
            return model
        return cls(model=model, tokenizer=None, name=name or type(model).__name__,
                   head=head_of_class(type(model).__name__))

    @property
    def body(self):
        """The encoder without its head (the model itself for a bare encoder): ``hidden_states`` only."""
        return getattr(self.model, "base_model", self.model)

    @property
    def head_module(self):
        """The masked-LM head as a module (``cls`` in BERT, ``lm_head`` in RoBERTa, the modules its family's
        ``mlm_head`` names in order elsewhere: ModernBERT's ``head`` then ``decoder``), or ``None`` when the model
        exposes none: what :meth:`head_logits` applies to hidden states."""
        names = family(getattr(self.config, "model_type", "")).mlm_head
        if names and all(isinstance(getattr(self.model, n, None), torch.nn.Module) for n in names):
            modules = [getattr(self.model, n) for n in names]
            return modules[0] if len(modules) == 1 else torch.nn.Sequential(*modules)
        for name in ("cls", "lm_head"):
            module = getattr(self.model, name, None)
            if module is not None:
                return module
        return None

    def head_logits(self, states: torch.Tensor) -> torch.Tensor:
        """The masked-LM head applied to ``states`` (``[..., hidden]``, any layer's: a logit lens)."""
        head = self.head_module
        if head is None:
            raise SettingError("layers", None, f"{self.name}: per-layer scores apply the model's masked-LM head to "
                               f"each layer, and this {type(self.model).__name__} exposes no 'cls' or 'lm_head' "
                               "module; leave layers= out", shown="")
        # states from an inference pass stay there: autograd cannot record a head applied to them
        with torch.inference_mode() if states.is_inference() else contextlib.nullcontext():
            return head(states)

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
        return config_depth(self.config)

    @property
    def num_heads(self) -> int:
        return config_heads(self.config)

    @property
    def hidden_size(self) -> int:
        return config_hidden(self.config)

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
    def _token_types(self) -> bool:
        """Whether the model takes ``token_type_ids`` (a ModernBERT saved with a BERT tokenizer gets none)."""
        config = getattr(self.model, "config", None)
        return config is None or family(getattr(config, "model_type", "")).token_types

    @property
    def attention_implementation(self) -> str:
        return getattr(self.config, "_attn_implementation", None) or "eager"

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device: str | torch.device) -> "Encoder":
        """Move the model to ``device`` (in place, as ``nn.Module.to``); returns the handle. The one way a
        capability moves a model: nothing outside :mod:`bertology.models` calls ``.model.to(...)``."""
        self.model.to(device)
        return self

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
                attentions: bool = False, logits: bool = False, grad: bool = False, body: bool = False,
                model=None) -> "ForwardOutput":
        """The one forward pass, for inference and training alike: ``inputs`` (``input_ids``,
        ``attention_mask``, ...; moved to the model's device) through the model, returning only what was
        asked for.

        * ``hidden_states``: tuple of ``L + 1`` tensors ``[batch, tokens, hidden]``; index ``l`` is layer ``l``
          in the one numbering (0 = embeddings).
        * ``attentions``: tuple of ``L`` tensors ``[batch, heads, tokens, tokens]``; ``attentions[l - 1]`` is
          layer ``l``. Eager attention is switched on for this call and the previous implementation restored.
        * ``logits``: the head's scores: ``[batch, tokens, vocabulary]`` (masked LM), ``[batch, labels]``
          (classification), ``[batch, tokens, 2]`` (QA: start, end); ``None`` for a bare encoder.
        * ``loss``: the head's own loss when ``inputs`` hold ``labels`` (or QA's ``start_positions``).

        Runs under ``torch.inference_mode`` unless ``grad`` (training, gradients to inputs or gates).
        ``body`` runs the encoder without its head (hidden states only; apply the masked-LM head to the
        positions that need it with :meth:`head_logits`). ``model`` replaces ``self.model`` for the call (a
        compiled or wrapped version of it).
        """
        run = model if model is not None else (self.body if body else self.model)
        device = self.device
        batch = {key: value.to(device) if hasattr(value, "to") else value for key, value in inputs.items()
                 if key != "token_type_ids" or self._token_types}
        switch = self.eager_attention() if attentions else contextlib.nullcontext()
        grad_mode = contextlib.nullcontext() if grad else torch.inference_mode()
        with switch, grad_mode:
            output = run(**batch, **_output_flags(run, hidden_states, attentions))
        found_attentions = getattr(output, "attentions", None) if attentions else None
        if attentions and (not found_attentions or any(a is None for a in found_attentions)):
            raise ModelError(f"{self.name}: the model returned no attention weights")
        return ForwardOutput(
            hidden_states=tuple(output.hidden_states) if hidden_states else None,
            attentions=tuple(found_attentions) if attentions else None,
            logits=_logits_of(output) if logits else None,
            loss=None if isinstance(output, torch.Tensor) else getattr(output, "loss", None),
        )

    def compiled(self):
        """The model through ``torch.compile`` with dynamic shapes, compiled on first use and kept.

        The compiled model is checked once against the eager one on a short sentence: where they disagree (a
        compiler that generates kernels for other CPU instructions than the ones torch dispatches to, as
        ``ATEN_CPU_CAPABILITY=avx2`` on an AVX-512 host does with torch 2.13, gives vectors of 1e15), the eager
        model is used instead, with one warning, rather than wrong vectors."""
        if self._compiled is None:
            compiled = torch.compile(self.model, dynamic=True)
            difference = self._compile_difference(compiled)
            if difference is None or difference > COMPILE_TOLERANCE:
                warnings.warn(f"torch.compile gave {self.name} other outputs than the eager model on a check "
                              f"sentence (largest difference {difference}); running it uncompiled",
                              BertologyWarning, stacklevel=2)
                compiled = self.model
            self._compiled = compiled
        return self._compiled

    def _compile_difference(self, compiled) -> float | None:
        """The largest absolute difference between ``compiled``'s and the eager model's last hidden states on a
        check sentence (None where the compiled one fails or gives non-finite values)."""
        inputs = self.tokenizer(["a short sentence to check the compiled model"], return_tensors="pt")
        inputs = {k: v.to(self.device) for k, v in inputs.items() if k in ("input_ids", "attention_mask",
                                                                          "token_type_ids")}
        if not self._token_types:
            inputs.pop("token_type_ids", None)
        with torch.inference_mode():
            want = self.model(**inputs, output_hidden_states=True).hidden_states[-1]
            try:
                got = compiled(**inputs, output_hidden_states=True).hidden_states[-1]
            except Exception:  # noqa: BLE001 - a compiler error: run eager, with the warning
                return None
        if not bool(torch.isfinite(got).all()):
            return None
        return float((got.float() - want.float()).abs().max())

    def untrained(self, seed: int = 0) -> "Encoder":
        """The untrained twin: same config, head and tokenizer, every weight (the head's too) re-initialised
        from ``seed``, on the same device."""
        model = untrained_model(self.config, seed, attn_implementation=self.attention_implementation, head=self.head)
        return Encoder(model=model.to(self.device), tokenizer=self.tokenizer,
                       name=f"{self.name} (untrained, seed {seed})", source=self.source, untrained_seed=seed,
                       head=self.head)

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
            "head": self.head,
        }


def _output_flags(run, hidden_states: bool, attentions: bool) -> dict:
    """The output switches for a call: all of them for a transformers model; for another module (a wrapper
    such as a fine-tuning classifier) only those switched on, since it may set the others itself."""
    if isinstance(run, PreTrainedModel) or isinstance(getattr(run, "_orig_mod", None), PreTrainedModel):
        return {"output_hidden_states": hidden_states, "output_attentions": attentions, "return_dict": True}
    flags = {"output_hidden_states": True} if hidden_states else {}
    return {**flags, "output_attentions": True} if attentions else flags


def _logits_of(output) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):  # a module that returns its scores as they are
        return output
    start = getattr(output, "start_logits", None)
    if start is not None:
        return torch.stack((start, output.end_logits), dim=-1)
    return getattr(output, "logits", None)


@dataclass(frozen=True)
class ForwardOutput:
    """What :meth:`Encoder.forward` returns; fields not asked for are ``None``."""

    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    logits: torch.Tensor | None = None
    loss: torch.Tensor | None = None

    def layer(self, layer: int) -> torch.Tensor:
        """Hidden states of ``layer`` (0 = embeddings)."""
        return self.hidden_states[layer]

    def attention(self, layer: int) -> torch.Tensor:
        """Attention weights of transformer layer ``layer`` (1..L)."""
        if layer < 1:
            raise ModelError(f"layer {layer} has no attention; attention layers are 1-{len(self.attentions)}")
        return self.attentions[layer - 1]


def untrained_model(config, seed: int, attn_implementation: str = "sdpa", head: str | None = None) -> PreTrainedModel:
    """Re-initialise a model of ``config`` (with ``head``) from ``seed``: same seed, same weights. Torch's
    global generator is left as it was."""
    with seeded(seed):
        model = build_model(config, head, attn_implementation)
    return model.eval()


def load_encoder(
    name_or_path: str | os.PathLike = "minilm",
    untrained_seed: int | None = None,
    attentions: bool = False,
    device: str | None = None,
    *,
    head: str | None = None,
    num_labels: int | None = None,
) -> Encoder:
    """Load an encoder by alias (``minilm``), local directory or hub id, as the one handle.

    ``head``: ``None`` (the bare encoder), ``"masked-lm"`` (the checkpoint must hold its masked-LM head: a
    bare encoder such as MiniLM is refused, not given a random head), ``"classification"`` (``num_labels``
    outputs; the checkpoint's own classifier when it is one, else a new one from torch's generator) or
    ``"qa"`` (start and end scores). ``untrained_seed`` gives the untrained twin (head included);
    ``attentions=True`` selects eager attention, the only implementation that returns attention weights in
    transformers 5.
    """
    check_head(head)
    if num_labels is not None and head != "classification":
        raise UsageError(f"num_labels={num_labels}: applies to head='classification', not head={head!r}")
    display, source = resolve_model_source(name_or_path)
    attn = "eager" if attentions else "sdpa"
    config = _from_pretrained(AutoConfig, source, display)
    if head == "classification":
        config = _classification_config(config, num_labels, display)
    # A masked LM scores plain sentences: its tokenizer loads as saved (no prefix space added for word lists).
    prefix = head != "masked-lm" and family(config.model_type).prefix_space
    tokenizer = _from_pretrained(AutoTokenizer, source, display, **({"add_prefix_space": True} if prefix else {}))
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(f"{display}: no fast tokenizer available; word alignment needs one")
    if head == "masked-lm" and tokenizer.mask_token is None:
        raise ModelError(f"{display}: its tokenizer has no mask token, so it cannot be used as a masked LM")
    check_tokenizer_matches(tokenizer, config, source)
    fingerprint = None
    if untrained_seed is None and needs_checkpoint_loader(config):  # heads really removed, or int8 layers
        model, fingerprint = load_checkpoint(source, config, attn, fingerprint_tokenizer(tokenizer), head=head)
    elif untrained_seed is None:
        model = _load_with_head(source, display, config, head, attn)
    else:
        model = untrained_model(config, untrained_seed, attn_implementation=attn, head=head)
        display = f"{display} (untrained, seed {untrained_seed})"
    model.eval()
    if device:
        model.to(device)
    return Encoder(model=model, tokenizer=tokenizer, name=display, source=source, untrained_seed=untrained_seed,
                   head=head, _fingerprint=fingerprint)


def _classification_config(config, num_labels: int | None, display: str):
    """``config`` with ``num_labels`` outputs; without it, the checkpoint must be a classifier already."""
    if num_labels is None:
        if head_of_class((getattr(config, "architectures", None) or [""])[0]) != "classification":
            raise UsageError(f"{display}: head='classification' needs num_labels (the checkpoint is not a "
                             "classifier, so it does not say how many outputs)")
        return config
    if not isinstance(num_labels, int) or num_labels < 1:
        raise UsageError(f"num_labels={num_labels!r}: expected a whole number >= 1 (1 = regression)")
    config.num_labels = num_labels
    return config


def _load_with_head(source: str, display: str, config, head: str | None, attn: str) -> PreTrainedModel:
    """The checkpoint's weights in a model with ``head``; a masked LM whose checkpoint lacks the head's weights is
    refused (it would fill in [MASK] with a random head)."""
    if head is None:
        return _from_pretrained(auto_class(None), source, display, attn_implementation=attn)
    kwargs = {"config": config} if head == "classification" else {}
    try:
        model, info = _from_pretrained(auto_class(head), source, display, output_loading_info=True,
                                       attn_implementation=attn, **kwargs)
    except ValueError as error:  # an architecture with no class for this head at all
        raise ModelError(f"{display} ({config.model_type}) has no {head} variant in transformers: "
                         f"{str(error).splitlines()[0]}") from None
    if head == "masked-lm":
        prefix = f"{model.base_model_prefix}."
        missing = sorted(key for key in info.get("missing_keys", []) if not key.startswith(prefix))
        if missing:
            raise ModelError(
                f"{display} has no masked-LM head (the checkpoint holds only the encoder; missing {missing[0]}"
                f"{' and more' if len(missing) > 1 else ''}), so it cannot fill in [MASK]; pass a masked LM "
                "instead as model=, e.g. bert-base-cased or a folder saved from AutoModelForMaskedLM")
    return model


def as_encoder(model: "str | os.PathLike | Encoder | torch.nn.Module | tuple", *,
               device: str | torch.device | None = None, tokenizer=None, name: str | None = None,
               head: str | None = None) -> Encoder:
    """The one way from whatever a caller passes as a model to the handle: an :class:`Encoder` as given (moved
    to ``device`` when one is named), a module built in code with its ``tokenizer`` or a ``(module, tokenizer)``
    pair (a fine-tuned ``GlueModel`` is taken by its encoder; in eval mode, on ``device`` when named), or an
    alias, folder or hub id loaded by :func:`load_encoder` (with ``head``).

    ``name``: the handle's name for a module (default ``"model"``); ``head``: the head a loaded model must
    carry, or the one a module carries when its class name does not say (``"masked-lm"``...)."""
    if isinstance(model, Encoder):
        return model.to(device) if device is not None else model
    if isinstance(model, tuple) and len(model) == 2 and isinstance(model[0], torch.nn.Module):
        model, tokenizer = model
    if isinstance(model, torch.nn.Module):
        name = name or "model"
        if tokenizer is None:
            raise ModelError(f"{name}: an in-memory model needs its tokenizer")
        encoder = Encoder.from_model(getattr(model, "backbone", model), tokenizer, name=name, head=head)
        return encoder.to(device) if device is not None else encoder
    return load_encoder(model, device=device, head=head)

