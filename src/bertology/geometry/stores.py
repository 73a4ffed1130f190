"""Corpora and cached stores for the geometry and knowledge commands: extract once, stream layers after.

Stores are the cache's shared ones (:mod:`bertology.extraction.shared`): keyed by the encoder's fingerprint
(weights, config and tokenizer), the settings (pooling, dtype, an optional tag such as the input-embedding
dropout of the MLM probe) and the sentences, so a second run of any command (or another command, or a
report section) on the same model and text reads the store instead of running the model again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from bertology.data import default_corpus, read_corpus
from bertology.data.sentence import Sentence
from bertology.errors import DataError
from bertology.extraction.shared import shared_store
from bertology.models.encoders import Encoder, as_encoder
from bertology.numbering import parse_layers
from bertology.runtime import resolve_device
from bertology.settings import cache_root, check_whole
from bertology.store.store import Store
from bertology.store.view import StoreView


def load_sentences(data: str | os.PathLike | None = None, max_sentences: int | None = None,
                   sentences: Sequence[Sentence] | None = None) -> tuple[list[Sentence], Path | None]:
    """The sentences of ``data`` (any format :func:`bertology.data.read_corpus` reads; default the packaged
    UD English EWT dev), the first ``max_sentences`` of them when given, and the path read; ``sentences``
    given directly are used instead (their path is ``None``)."""
    if sentences is not None:
        sentences = list(sentences)
        return (sentences[:max_sentences] if max_sentences else sentences), None
    path = Path(data) if data is not None else default_corpus("ewt-dev")
    check_whole(max_sentences, "max_sentences", allow_none=True)
    sentences = read_corpus(path)
    if max_sentences is not None:
        sentences = sentences[:max_sentences]
    return sentences, path


@dataclass(frozen=True)
class EncoderRun:
    """What every sentence-level analysis of one encoder starts from: its seeds, sentences, device, handle and
    chosen layers, checked once."""

    seeds: tuple[int, ...]
    sentences: list[Sentence]
    input_path: Path | None
    device: str
    encoder: Encoder
    layers: list[int] | None


def prepare_run(model, data=None, sentences: Sequence[Sentence] | None = None, *, seeds: Sequence[int],
                layers=None, max_sentences: int | None = None, device: str | None = "auto") -> EncoderRun:
    """Check ``seeds``, read the sentences (:func:`load_sentences`), resolve the device, get the handle
    (:func:`bertology.models.as_encoder`) and parse ``layers`` against it."""
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise DataError("no seeds given; expected at least one")
    sentences, input_path = load_sentences(data, max_sentences, sentences)
    run_device = str(resolve_device(device))
    encoder = as_encoder(model, device=run_device)
    return EncoderRun(seeds, sentences, input_path, run_device, encoder, parse_layers(layers, encoder.num_layers))


def cached_store(encoder: Encoder, sentences: Sequence[Sentence], *, pool: str = "word-mean",
                 cache_dir: str | os.PathLike | None = None, input_path: str | os.PathLike | None = None,
                 tag: str = "", device: str | None = None, progress: bool = False, dtype: str = "float16",
                 hook=None) -> Store | StoreView:
    """Every layer of ``encoder`` on ``sentences`` pooled by ``pool``, from the cache's shared stores
    (:func:`bertology.extraction.shared.shared_store`: extracted once per model, corpus and settings, whichever
    command or report section asks first).

    ``hook`` is a context manager factory applied around the extraction (used to perturb the model, in
    which case ``tag`` must name the perturbation so the store is not mistaken for a clean one).
    """
    return shared_store(encoder, sentences, cache_root(cache_dir), pool=pool, dtype=dtype, tag=tag, hook=hook,
                        device=device, progress=progress, input_path=input_path)
