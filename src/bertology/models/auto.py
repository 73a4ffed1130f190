"""The transformers classes behind each head of :func:`bertology.models.load_encoder`, in one place.

This module (with :mod:`bertology.models.encoders` and :mod:`bertology.models.checkpoints`) is the only code
that names a transformers model class: every capability gets its model through the handle
(``load_encoder(..., head=...)``, :meth:`~bertology.models.encoders.Encoder.untrained`, :func:`build_model`).
"""

from __future__ import annotations

import transformers

from bertology.errors import UsageError

#: ``head`` -> the transformers Auto class that loads or builds a model with that head (``None``: the bare
#: encoder).
AUTO_CLASSES = {None: "AutoModel", "masked-lm": "AutoModelForMaskedLM",
                "classification": "AutoModelForSequenceClassification", "qa": "AutoModelForQuestionAnswering"}
HEADS = tuple(head for head in AUTO_CLASSES if head is not None)
#: The end of a transformers class name -> the head it carries (``BertForMaskedLM`` -> ``"masked-lm"``).
_CLASS_SUFFIXES = {"ForMaskedLM": "masked-lm", "ForSequenceClassification": "classification",
                   "ForQuestionAnswering": "qa"}


def check_head(head: str | None) -> str | None:
    if head not in AUTO_CLASSES:
        raise UsageError(f"head={head!r}: expected None (the bare encoder) or one of {', '.join(HEADS)}")
    return head


def auto_class(head: str | None = None):
    """The transformers Auto class for ``head``."""
    return getattr(transformers, AUTO_CLASSES[check_head(head)])


def head_of_class(class_name: str) -> str | None:
    """The head a transformers class name carries (``None`` for a bare encoder or an unknown class)."""
    for suffix, head in _CLASS_SUFFIXES.items():
        if class_name.endswith(suffix):
            return head
    return None


def saved_class(config):
    """The class a ``save_pretrained`` folder was written from (``config.architectures``), else ``AutoModel``:
    a folder re-loads as the model it was, head included."""
    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    return transformers.AutoModel


def build_model(config, head: str | None = None, attn_implementation: str | None = None, *, cls=None):
    """A model of ``config`` with ``head`` (or of class ``cls``), its weights drawn from torch's global generator
    as it stands (seed it first, or use :func:`~bertology.models.encoders.untrained_model`)."""
    factory = cls if cls is not None else auto_class(head)
    kwargs = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    if hasattr(factory, "_from_config"):  # a concrete class (BertForMaskedLM); Auto classes have from_config
        return factory._from_config(config, **kwargs)
    return factory.from_config(config, **kwargs)
