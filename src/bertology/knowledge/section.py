"""The computation behind the report's "Knowledge and geometry" section, within a small budget.

:func:`knowledge_section` runs the cheap versions of the six analyses (contextuality and static
similarity on a few hundred sentences, Wallace et al.'s numeracy probe, a one-epoch MLM probe, LAMA and minimal pairs when the model has
an MLM head and the data is there), saves each result under ``out`` and returns the Results and notes on
what was skipped. Everything shown (display tables, figures, sentences) is built by
:mod:`bertology.report.knowledge`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from bertology.errors import BertologyError, DataError, ModelError
from bertology.geometry.contextuality import contextuality
from bertology.models.encoders import as_encoder
from bertology.knowledge.lama import lama
from bertology.knowledge.mlm import load_masked_lm
from bertology.knowledge.mlm_probe import mlm_probe
from bertology.knowledge.numeracy import NumeracySpec, numeracy
from bertology.knowledge.pairs import minimal_pairs
from bertology.knowledge.spec import KnowledgeSectionSpec, LamaSpec, MLMProbeSpec
from bertology.knowledge.static import static_similarity
from bertology.results import Result
from bertology.runtime import resolve_device
from bertology.settings import spec_of


@dataclass
class KnowledgeSection:
    """``results``: the :class:`Result` of each analysis that ran (also saved under ``out``), in the order
    they ran; ``notes``: what was skipped and why; ``settings``: the sizes used (``lama_facts``,
    ``mlm_probe_epochs``...); ``seconds``: time per analysis. The report shows them
    (:mod:`bertology.report.knowledge`)."""

    results: dict[str, Result] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def knowledge_section(model="minilm", out: str | os.PathLike = "knowledge-section",
                      spec: KnowledgeSectionSpec | None = None, *, data=None, lama_data=None, pairs_data=None,
                      device: str | None = "auto", cache_dir=None, progress: bool = False,
                      **settings) -> KnowledgeSection:
    """Contextuality, static similarity and the MLM probe for ``model`` (an alias, folder, hub id or
    :class:`~bertology.models.Encoder`) on the first ``max_sentences`` sentences of ``data`` (default the
    packaged EWT dev), model vs untrained twin over ``seeds``; LAMA (``lama_facts`` facts per relation of
    ``lama_data``, default ``$BERTOLOGY_DATA/lama``) and minimal pairs (``pairs_data``, first ``pairs_max``
    pairs) when the model loads as a masked LM. Each Result is saved under ``out/<analysis>``. On MiniLM with
    the defaults: about 2-4 minutes on 2 CPU cores, most of it the MLM probe (``mlm_probe_sentences=0``
    skips it). The sizes are ``spec`` (:class:`~bertology.knowledge.spec.KnowledgeSectionSpec`), or its fields as
    keywords, checked once.
    """
    spec = spec_of(KnowledgeSectionSpec, spec, settings, "knowledge section")
    max_sentences, seeds, mlm_probe_sentences = spec.max_sentences, spec.seeds, spec.mlm_probe_sentences
    out = Path(out)
    section = KnowledgeSection(settings=spec.settings())
    encoder = as_encoder(model, device=None if device in (None, "auto") else device)
    common = dict(seeds=tuple(seeds), max_sentences=max_sentences, device=device, cache_dir=cache_dir,
                  progress=progress)

    started = time.perf_counter()
    result = contextuality(encoder, data, samples=min(1000, max_sentences), **common)
    section.results["contextuality"] = result
    result.save(out / "contextuality")
    section.seconds["contextuality"] = time.perf_counter() - started

    started = time.perf_counter()
    result = static_similarity(encoder, data, **common)
    section.results["static"] = result
    result.save(out / "static")
    section.seconds["static"] = time.perf_counter() - started

    started = time.perf_counter()
    try:
        result = numeracy(encoder, NumeracySpec(seed=seeds[0]), device=device, cache_dir=cache_dir,
                          progress=progress)
    except ModelError as error:  # a vocabulary without the digits: nothing to decode a number from
        section.notes.append(f"Numeracy: skipped; {error}.")
    else:
        section.results["numeracy"] = result
        result.save(out / "numeracy")
        section.seconds["numeracy"] = time.perf_counter() - started

    if mlm_probe_sentences:
        started = time.perf_counter()
        probe = MLMProbeSpec(seeds=tuple(seeds), epochs=spec.mlm_probe_epochs, batch_size=64,
                             max_sentences=mlm_probe_sentences, max_test=max(20, mlm_probe_sentences // 4))
        result = mlm_probe(encoder, data, None, probe, device=device, cache_dir=cache_dir, progress=progress)
        section.results["mlm_probe"] = result
        result.save(out / "mlm-probe")
        section.seconds["mlm_probe"] = time.perf_counter() - started

    _masked_lm_parts(section, model, out, lama_data, spec.lama_facts, pairs_data, spec.pairs_max, seeds, device,
                     progress)
    return section


def _masked_lm_parts(section, model, out, lama_data, lama_facts, pairs_data, pairs_max, seeds, device, progress):
    if not isinstance(model, (str, os.PathLike)):
        section.notes.append("LAMA and minimal pairs: skipped (give the model by name or folder to load its MLM head).")
        return
    try:
        loaded = load_masked_lm(model, resolve_device(device))
    except ModelError as error:
        section.notes.append(f"LAMA and minimal pairs: skipped; {error}.")
        return
    started = time.perf_counter()
    try:
        result = lama(model, lama_data, LamaSpec(max_facts=lama_facts, seeds=tuple(seeds)), device=device,
                      progress=progress, loaded=loaded)
    except DataError as error:
        section.notes.append(f"LAMA: skipped; {error}.")
    else:
        section.results["lama"] = result
        result.save(out / "lama")
        section.seconds["lama"] = time.perf_counter() - started
    started = time.perf_counter()
    try:
        result = minimal_pairs(model, pairs_data, max_pairs=pairs_max, seeds=tuple(seeds), device=device,
                               progress=progress, loaded=loaded)
    except BertologyError as error:
        section.notes.append(f"Minimal pairs: skipped; {error}.")
        return
    section.results["pairs"] = result
    result.save(out / "pairs")
    section.seconds["pairs"] = time.perf_counter() - started
