"""The settings of the knowledge experiments, each in one frozen spec checked once when it is made:
:class:`MLMProbeSpec` (:func:`bertology.knowledge.mlm_probe.mlm_probe`), :class:`LamaSpec`
(:func:`bertology.knowledge.lama.lama`) and :class:`KnowledgeSectionSpec`
(:func:`bertology.knowledge.section.knowledge_section`). Each function takes its spec, or the spec's fields as
keywords; what to read (the model, the data) and where to run (device, cache folder, progress) are passed beside
it. A bad value is one :class:`~bertology.errors.SettingError` naming the field (``as_option()`` names the
command-line option). Light (no numpy or torch): ``bertology knowledge`` builds the specs before torch loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bertology.knowledge.mlm_settings import DEFAULTS, check_mlm_probe_settings
from bertology.settings import check_layer_spelling, check_seeds, check_whole


@dataclass(frozen=True)
class MLMProbeSpec:
    """The MLM probe's settings; every field has the library's default (the publishable one, :data:`DEFAULTS`).

    ``seeds``: each draws its own input-embedding dropout, head initialisation and batch order, and is its
    untrained twin's seed (``untrained``). ``layers``: ``None`` (all), a list or a spelling such as ``"0,3,6"``.
    ``dropout``: the input dropout rate, in [0, 1); ``corrupt``: ``target`` (the predicted token only) or ``all``.
    ``epochs``, ``batch_size``, ``lr``: the heads' training; ``decoder``: ``tied`` or ``untied``. The first
    ``max_sentences`` of the training text (read before every fifth sentence is held out, when there is no held-out
    text) and the first ``max_test`` of the held-out text (``None``: all; ``max_eval_sentences``, its old name,
    still works in :func:`~bertology.knowledge.mlm_probe.mlm_probe` with a deprecation warning).
    ``autocast``: bfloat16 autocast.
    """

    seeds: Sequence[int] = (0, 1, 2)
    layers: str | Sequence[int] | None = None
    untrained: bool = True
    dropout: float = DEFAULTS["dropout"]
    corrupt: str = "target"
    epochs: int = DEFAULTS["epochs"]
    batch_size: int = DEFAULTS["batch_size"]
    lr: float = DEFAULTS["lr"]
    decoder: str = "tied"
    max_sentences: int | None = None
    max_test: int | None = None
    autocast: bool = False

    def __post_init__(self) -> None:
        seeds = check_mlm_probe_settings(self.seeds, self.epochs, self.batch_size, self.lr, self.dropout,
                                         self.decoder, self.corrupt)
        object.__setattr__(self, "seeds", seeds)
        check_layer_spelling(self.layers)
        check_whole(self.max_sentences, "max_sentences", allow_none=True)
        check_whole(self.max_test, "max_test", allow_none=True)


@dataclass(frozen=True)
class LamaSpec:
    """LAMA's settings. ``corpora`` (``None``: every corpus of the folder) and ``relations`` (``None``: all) of a
    LAMA folder, or the ``template`` (with [X] and [Y]) of a single relation file; at most ``max_facts`` facts per
    relation (``None``: all). ``layers``: per-layer scores through the model's own MLM head (a logit lens;
    ``None`` or ``"last"``: only the model's output). ``seeds`` of the untrained twins (``untrained``);
    ``batch_size`` sentences per forward pass."""

    corpora: str | Sequence[str] | None = None
    relations: Sequence[str] | None = None
    template: str | None = None
    max_facts: int | None = None
    layers: str | Sequence[int] | None = None
    seeds: Sequence[int] = (0,)
    untrained: bool = True
    batch_size: int = 32

    def __post_init__(self) -> None:
        if self.untrained:
            object.__setattr__(self, "seeds", check_seeds(self.seeds))
        check_layer_spelling(self.layers)
        check_whole(self.max_facts, "max_facts", allow_none=True)
        check_whole(self.batch_size, "batch_size")


@dataclass(frozen=True)
class KnowledgeSectionSpec:
    """The report's knowledge section within its budget: the first ``max_sentences`` sentences for
    contextuality and static similarity, ``seeds`` of the untrained twins (the first also numeracy's), the MLM
    probe on ``mlm_probe_sentences`` sentences (0 skips it) for ``mlm_probe_epochs``, ``lama_facts`` facts per
    LAMA relation and the first ``pairs_max`` minimal pairs."""

    max_sentences: int = 400
    seeds: Sequence[int] = (0,)
    mlm_probe_sentences: int = 300
    mlm_probe_epochs: int = 1
    lama_facts: int = 50
    pairs_max: int = 200

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", check_seeds(self.seeds))
        for name in ("max_sentences", "mlm_probe_epochs", "lama_facts", "pairs_max"):
            check_whole(getattr(self, name), name)
        check_whole(self.mlm_probe_sentences, "mlm_probe_sentences", least=0)

    def settings(self) -> dict:
        """The sizes the section records (:attr:`~bertology.knowledge.section.KnowledgeSection.settings`)."""
        return {"max_sentences": self.max_sentences, "mlm_probe_sentences": self.mlm_probe_sentences,
                "mlm_probe_epochs": self.mlm_probe_epochs, "lama_facts": self.lama_facts,
                "pairs_max": self.pairs_max, "seeds": list(self.seeds)}
