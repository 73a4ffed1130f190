"""The settings of Clark et al.'s attention analysis in one frozen :class:`AttentionParseSpec`, checked once when
it is made. :func:`bertology.attention.parsing.run_attention_analysis` takes it, or its fields as keywords; what
to read (the model, the treebank) and where to run (work folder, device, progress) are passed beside it. Light
(no numpy or torch). A bad value is one :class:`~bertology.errors.SettingError` naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bertology.settings import check_layer_spelling, check_whole


@dataclass(frozen=True)
class AttentionParseSpec:
    """What :func:`~bertology.attention.parsing.run_attention_analysis` runs; every field has the library's default.

    ``max_eval`` caps dev and test, each, and ``max_train`` the probe's training split, in sentences (``None``: all;
    the glossary's subset sizes: ``max_sentences``/``max_train_sentences``, their old names, still work in
    :func:`~bertology.attention.parsing.run_attention_analysis`, with a deprecation warning).
    ``probe_seeds``: one attention-only probe per seed (none: no probe), trained ``probe_epochs`` epochs.
    ``statistics``: also the head statistics on dev. ``untrained``: everything again on the untrained twin
    (``untrained_seed``; the glossary's one word for it: ``control`` means control tasks). ``min_count``: dev words a relation needs in the best-head table. ``layers``: the
    transformer layers whose heads are looked at (``None``: all).
    """

    max_eval: int | None = None
    max_train: int | None = 2000
    probe_seeds: Sequence[int] = (0, 1, 2)
    probe_epochs: int = 20
    statistics: bool = True
    untrained: bool = False
    min_count: int = 100
    layers: Sequence[int] | None = None
    untrained_seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "probe_seeds", tuple(int(seed) for seed in self.probe_seeds))
        check_whole(self.max_eval, "max_eval", allow_none=True)
        check_whole(self.max_train, "max_train", allow_none=True)
        check_whole(self.probe_epochs, "probe_epochs")
        check_whole(self.min_count, "min_count", least=0)
        check_layer_spelling(self.layers)
