"""A read-only view of some sentences of one or more stores of the same model and settings.

:func:`bertology.extraction.shared.shared_store` answers a request for sentences with the stores that already
hold them (a section that needs a subset of a corpus reads it from the store of the corpus): a
:class:`StoreView` lists, for each requested sentence, the store and position it comes from, and reads what
the analyses read of a :class:`~bertology.store.store.Store` (``layer``, ``offsets``, ``words``, ``tokens``,
``sentence_rows``, ``sentence_vectors``) from those stores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

import numpy as np

from bertology.errors import StoreError
from bertology.store.names import SENTENCE_POOLS
from bertology.store.store import Store


class ViewPart(NamedTuple):
    """What a shard says of itself to a reader streaming a store: its position and its sentences."""

    index: int
    start: int
    stop: int


class StoreView:
    """Sentences ``picks[i] = (s, j)``: sentence ``j`` of ``stores[s]``, in the order asked for; ``layers``
    (default: those every store holds)."""

    def __init__(self, stores: Sequence[Store], picks: Sequence[tuple[int, int]], layers: Sequence[int] | None = None):
        if not stores or not picks:
            raise StoreError("a store view needs at least one store and one sentence")
        self.stores, self.picks = list(stores), [(int(s), int(j)) for s, j in picks]
        common = sorted(set.intersection(*(set(store.layers) for store in self.stores)))
        self._layers = list(layers) if layers is not None else common
        missing = set(self._layers) - set(common)
        if missing:
            raise StoreError(f"{self.path}: layers {sorted(missing)} not in every store of the view")
        first = self.stores[0]
        self.index = first.index
        counts = np.asarray([self.stores[s].offsets[j + 1] - self.stores[s].offsets[j] for s, j in self.picks],
                            dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.row_counts = counts

    @property
    def path(self) -> Path:
        return self.stores[0].path

    @property
    def layers(self) -> list[int]:
        return list(self._layers)

    @property
    def pool(self) -> str:
        return self.stores[0].pool

    @property
    def dim(self) -> int:
        return self.stores[0].dim

    @property
    def n_sentences(self) -> int:
        return len(self.picks)

    def __len__(self) -> int:
        return self.n_sentences

    @property
    def word_counts(self) -> np.ndarray:
        return np.asarray([self.stores[s].word_counts[j] for s, j in self.picks], dtype=np.int64)

    def words(self, i: int) -> tuple[str, ...]:
        s, j = self.picks[i]
        return self.stores[s].words(j)

    def tokens(self, i: int) -> tuple[str, ...]:
        s, j = self.picks[i]
        return self.stores[s].tokens(j)

    def __repr__(self) -> str:
        return f"StoreView({len(self.stores)} store(s), sentences={self.n_sentences}, layers={self.layers})"

    def _check_layer(self, layer: int) -> None:
        if layer not in self._layers:
            raise StoreError(f"{self.path}: layer {layer} not in store (has {self._layers})")

    def layer(self, layer: int) -> np.ndarray:
        """The rows of one layer for the view's sentences, in its order: [rows, dim] float32."""
        self._check_layer(layer)
        out = np.empty((int(self.offsets[-1]), self.dim), dtype=np.float32)
        for s, store in enumerate(self.stores):
            mine = [i for i, (t, _) in enumerate(self.picks) if t == s]
            if not mine:
                continue
            source = np.concatenate([np.arange(store.offsets[self.picks[i][1]], store.offsets[self.picks[i][1] + 1])
                                     for i in mine])
            target = np.concatenate([np.arange(self.offsets[i], self.offsets[i + 1]) for i in mine])
            out[target] = store.layer(layer)[source]
        return out

    @property
    def shards(self) -> list[ViewPart]:
        """A view reads as one part holding every sentence (it has no shards of its own)."""
        return [ViewPart(0, 0, self.n_sentences)]

    def iter_layer(self, layer: int) -> Iterator[tuple[ViewPart, np.ndarray]]:
        """One layer in one part (:attr:`shards`)."""
        yield self.shards[0], self.layer(layer)

    def sentence_rows(self, i: int, layer: int) -> np.ndarray:
        self._check_layer(layer)
        s, j = self.picks[i]
        return self.stores[s].sentence_rows(j, layer)

    def sentence_vectors(self, layer: int, how: str = "mean") -> np.ndarray:
        rows = self.layer(layer)
        if self.pool in SENTENCE_POOLS:
            return rows
        if how == "first":
            return rows[self.offsets[:-1]]
        if how != "mean":
            raise StoreError(f"sentence_vectors: how={how!r}, expected 'mean' or 'first'")
        return np.add.reduceat(rows, self.offsets[:-1], axis=0) / self.row_counts[:, None]
