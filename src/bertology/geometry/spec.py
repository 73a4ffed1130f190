"""The settings of the contextuality measures in one frozen :class:`ContextualitySpec`, checked once when it is
made. :func:`bertology.geometry.contextuality.contextuality` takes it, or its fields as keywords; what to read
(the model, the corpus or its sentences) and where to run (device, cache folder, progress) are passed beside it.
Light (no numpy or torch). A bad value is one :class:`~bertology.errors.SettingError` naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bertology.errors import SettingError
from bertology.settings import check_layer_spelling, check_seeds, check_whole


@dataclass(frozen=True)
class ContextualitySpec:
    """Ethayarajh's measures, as :func:`~bertology.geometry.contextuality.contextuality` takes them.

    ``seeds``: each draws its sample of word types and sentences, and is its untrained twin's seed
    (``untrained``). ``layers``: ``None`` (all), a list or a spelling such as ``"0,3,6"``. A word type counts when
    it occurs ``min_count`` times (at least 2); ``max_pairs`` occurrence pairs per type (``None``: every pair);
    ``samples`` sentences for the anisotropy baseline (at least 2); the first ``max_sentences`` of the corpus
    (``None``: all).
    """

    seeds: Sequence[int] = (0, 1, 2)
    layers: str | Sequence[int] | None = None
    untrained: bool = True
    min_count: int = 5
    max_pairs: int | None = 1000
    samples: int = 1000
    max_sentences: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", check_seeds(self.seeds))
        check_layer_spelling(self.layers)
        if isinstance(self.min_count, bool) or self.min_count < 2:
            raise SettingError("min_count", self.min_count, "a word type needs at least 2 occurrences to compare")
        if isinstance(self.samples, bool) or self.samples < 2:
            raise SettingError("samples", self.samples, "the anisotropy baseline needs at least 2 sampled sentences")
        check_whole(self.max_pairs, "max_pairs", allow_none=True)
        check_whole(self.max_sentences, "max_sentences", allow_none=True)
