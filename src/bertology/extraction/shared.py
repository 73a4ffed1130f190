"""One extraction per model and corpus: the stores every analysis shares.

:func:`shared_store` is how probing, geometry, knowledge, languages and the report get a model's vectors for
some sentences. The stores live in one folder of the cache (``<cache>/stores``), each named by the model's
fingerprint, the settings that change the vectors (pool, dtype, attentions, precision, long-sentence policy,
a perturbation's tag) and the hash of its sentences. A request is answered from the stores of the same model
and settings that already hold its sentences (a section that needs a subset of a corpus, or of its layers,
reads it from the store of the corpus); only the sentences none holds are extracted, once, into a store of
their own. Nothing is extracted twice for one model and setting, whichever section asks first.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable, Sequence

from bertology.data.sentence import Sentence
from bertology.errors import DataError, StoreError
from bertology.extraction.pipeline import as_sentences, corpus_hash, extract
from bertology.extraction.spec import ExtractionSpec
from bertology.models.encoders import Encoder
from bertology.store.store import Store
from bertology.store.view import StoreView

#: The settings a shared store is keyed by besides the model, the sentences and the layers.
_KEYED = ("pool", "dtype", "attentions", "autocast", "long_policy")


def store_prefix(encoder: Encoder, spec: ExtractionSpec, tag: str = "") -> str:
    """The name every shared store of ``encoder`` under ``spec``'s settings (and ``tag``) begins with."""
    settings = {name: getattr(spec, name) for name in _KEYED}
    settings["tag"] = tag
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:10]
    return f"shared-{encoder.fingerprint}-{digest}"


def shared_store(encoder: Encoder, sentences: Sequence[Sentence | str], cache: str | os.PathLike,
                 spec: ExtractionSpec | None = None, *, tag: str = "", hook: Callable | None = None,
                 device: str | None = None, progress: bool = False, input_path: str | os.PathLike | None = None,
                 **settings) -> Store | StoreView:
    """The vectors of ``encoder`` for ``sentences`` under ``spec`` (or its fields as keywords), from the shared
    stores in ``<cache>/stores``: a :class:`Store` when one store holds exactly these sentences, else a
    :class:`~bertology.store.view.StoreView` of the stores that hold them (the sentences none held are
    extracted first, into a store of their own). A store with more layers than asked serves fewer.

    ``hook``: a context manager factory applied around an extraction (a perturbed model), in which case ``tag``
    must name the perturbation, so its vectors are never taken for the clean model's; such a store serves only
    the same request again (a random perturbation gives the same words other vectors each time)."""
    spec = ExtractionSpec.of(spec, **settings)
    sentences = as_sentences(sentences)
    if not sentences:
        raise DataError("no sentences to analyse; expected at least one")
    if hook is not None and not tag:
        raise ValueError("a perturbed extraction needs a tag naming the perturbation")
    layers = spec.layer_list(encoder.num_layers)
    folder = Path(cache) / "stores"
    prefix = store_prefix(encoder, spec, tag)
    layer_key = "all" if spec.layers is None else "-".join(map(str, layers))
    if hook is not None:
        # A perturbed model (input dropout) gives the same words other vectors in another request: its stores
        # are reused only for the same request, never stitched from others.
        with hook():
            return extract(encoder, sentences, folder / f"{prefix}-{corpus_hash(sentences)}-L{layer_key}", spec,
                           progress=progress, device=device, input_path=str(input_path) if input_path else None)
    stores, where = _held(folder, prefix, layers)
    missing = [s for s in sentences if tuple(s.words) not in where]
    if len(missing) == len(sentences):  # nothing held: the request's own store, as it was asked for
        unique = sentences
    else:
        unique = list({tuple(s.words): s for s in missing}.values())
    if missing:
        out = folder / f"{prefix}-{corpus_hash(unique)}-L{layer_key}"
        new = extract(encoder, unique, out, spec, progress=progress, device=device,
                      input_path=str(input_path) if input_path else None)
        stores.append(new)
        for j in range(new.n_sentences):
            where.setdefault(new.words(j), (len(stores) - 1, j))
    picks = [where[tuple(s.words)] for s in sentences]
    used = sorted({s for s, _ in picks})
    for s in used:  # verified on every reuse, as extract does: a damaged shard is recomputed (one warning line)
        if stores[s].verify():
            store = stores[s]
            again = [Sentence(words=store.words(j), id=store.sentence_ids[j]) for j in range(store.n_sentences)]
            stores[s] = extract(encoder, again, store.path, ExtractionSpec.of(spec, layers=store.layers),
                                progress=progress, device=device)
    if len(used) == 1:
        store = stores[used[0]]
        if [j for _, j in picks] == list(range(store.n_sentences)) and store.layers == layers:
            return store
    renumber = {s: k for k, s in enumerate(used)}
    return StoreView([stores[s] for s in used], [(renumber[s], j) for s, j in picks], layers=layers)


def _held(folder: Path, prefix: str, layers: Sequence[int]) -> tuple[list[Store], dict[tuple[str, ...], tuple[int, int]]]:
    """The complete shared stores named ``prefix-*`` holding every one of ``layers``, and for each word sequence
    they hold, which store and sentence. Incomplete or unreadable stores are left for their own rerun."""
    stores: list[Store] = []
    where: dict[tuple[str, ...], tuple[int, int]] = {}
    if not folder.is_dir():
        return stores, where
    for path in sorted(folder.glob(f"{prefix}-*")):
        try:
            store = Store.open(path)
        except (StoreError, OSError, ValueError, KeyError):
            continue
        if not store.complete or not set(layers) <= set(store.layers):
            continue
        stores.append(store)
        for j in range(store.n_sentences):
            where.setdefault(store.words(j), (len(stores) - 1, j))
    return stores, where
