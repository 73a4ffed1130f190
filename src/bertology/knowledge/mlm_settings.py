"""The MLM probe's settings and their checks, in a module that imports nothing heavy, so that
``bertology knowledge mlm-probe`` refuses a bad option before torch loads."""

from __future__ import annotations

from bertology.errors import SettingError
from bertology.settings import check_seeds

#: Publishable defaults and the ``--quick`` ones.
DEFAULTS = {"epochs": 2, "batch_size": 128, "lr": 2e-3, "dropout": 0.9, "seeds": 3}
QUICK = {"epochs": 1, "max_sentences": 400, "max_test": 100, "seeds": 1}
#: ``tied``: the decoder is the model's own frozen input-embedding matrix plus a trained bias per layer
#: (BERT's arrangement); ``untied``: a trained ``dim x vocab`` decoder per layer.
DECODERS = ("tied", "untied")
#: What the input dropout corrupts: ``target``, only the predicted token (its own copy of the sentence, the
#: context clean, as ``[MASK]`` does); ``all``, every token's embedding, the context included.
CORRUPT = ("target", "all")


def check_mlm_probe_settings(seeds, epochs, batch_size, lr: float, dropout: float, decoder: str,
                             corrupt: str) -> tuple[int, ...]:
    """The seeds as a tuple, or a :class:`SettingError` naming the setting that is out of range
    (:meth:`SettingError.as_option` names the option: ``--epochs 0: expected a whole number of at least 1``).
    :class:`bertology.knowledge.spec.MLMProbeSpec` checks its fields with it."""
    seeds = check_seeds(seeds)
    for value, setting in ((epochs, "epochs"), (batch_size, "batch_size")):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise SettingError(setting, value, "expected a whole number of at least 1", shown=str(value))
    if not lr > 0:
        raise SettingError("lr", lr, "expected a positive learning rate", shown=str(lr))
    if not 0.0 <= dropout < 1.0:
        raise SettingError("dropout", dropout, "expected a rate in [0, 1)", shown=str(dropout))
    if decoder not in DECODERS:
        raise SettingError("decoder", decoder, f"expected one of {', '.join(DECODERS)}")
    if corrupt not in CORRUPT:
        raise SettingError("corrupt", corrupt, f"expected one of {', '.join(CORRUPT)}")
    return seeds
