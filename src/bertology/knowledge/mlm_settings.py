"""The MLM probe's settings and their checks, in a module that imports nothing heavy, so that
``bertology knowledge mlm-probe`` refuses a bad option before torch loads."""

from __future__ import annotations

from bertology.errors import DataError, UsageError

#: Publishable defaults and the ``--quick`` ones.
DEFAULTS = {"epochs": 2, "batch_size": 128, "lr": 2e-3, "dropout": 0.9, "seeds": 3}
QUICK = {"epochs": 1, "max_sentences": 400, "max_eval_sentences": 100, "seeds": 1}
#: ``tied``: the decoder is the model's own frozen input-embedding matrix plus a trained bias per layer
#: (BERT's arrangement); ``untied``: a trained ``dim x vocab`` decoder per layer.
DECODERS = ("tied", "untied")
#: What the input dropout corrupts: ``target``, only the predicted token (its own copy of the sentence, the
#: context clean, as ``[MASK]`` does); ``all``, every token's embedding, the context included.
CORRUPT = ("target", "all")


def check_mlm_probe_settings(seeds, epochs, batch_size, lr: float, dropout: float, decoder: str,
                             corrupt: str) -> tuple[int, ...]:
    """The seeds as a tuple, or the one-line error naming the option that is out of range."""
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise DataError("no seeds given; expected at least one")
    for value, option in ((epochs, "--epochs"), (batch_size, "--batch-size")):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise UsageError(f"{option} {value}: expected a whole number of at least 1")
    if not lr > 0:
        raise UsageError(f"--lr {lr}: expected a positive learning rate")
    if not 0.0 <= dropout < 1.0:
        raise UsageError(f"--dropout {dropout}: expected a rate in [0, 1)")
    if decoder not in DECODERS:
        raise UsageError(f"--decoder {decoder!r}: expected one of {', '.join(DECODERS)}")
    if corrupt not in CORRUPT:
        raise UsageError(f"--corrupt {corrupt!r}: expected one of {', '.join(CORRUPT)}")
    return seeds
