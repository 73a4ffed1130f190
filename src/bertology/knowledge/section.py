"""The report's "Knowledge and geometry" section, computed within a small budget.

:func:`knowledge_section` runs the cheap versions of the five analyses (contextuality and static
similarity on a few hundred sentences, a one-epoch MLM probe, LAMA and minimal pairs when the model has
an MLM head and the data is there), saves each result and figure under ``out`` and returns display-ready
tables, figure paths and one-line notes. The report package renders it; nothing here writes HTML.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd

from bertology.errors import BertologyError, DataError, ModelError
from bertology.results import Result, percent


@dataclass
class KnowledgeSection:
    """``tables``: title -> small DataFrame (numbers already formatted for display: percent for accuracies);
    ``figures``: title -> PNG path; ``notes``: sentences for the reader (what was skipped and why, the
    setup); ``results``: the full :class:`Result` of each analysis (also saved under ``out``);
    ``seconds``: time per analysis."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    results: dict[str, Result] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def _fmt(value, digits: int = 3) -> str:
    return "–" if value is None or pd.isna(value) else f"{value:.{digits}f}"


def knowledge_section(model="minilm", out: str | os.PathLike = "knowledge-section", *, data=None,
                      max_sentences: int = 400, seeds: Sequence[int] = (0,), mlm_probe_sentences: int = 300,
                      mlm_probe_epochs: int = 1, lama_data=None, lama_facts: int = 50, pairs_data=None,
                      pairs_max: int = 200, device: str | None = "auto", cache_dir=None,
                      progress: bool = False) -> KnowledgeSection:
    """Contextuality, static similarity and the MLM probe for ``model`` (an alias, folder, hub id or
    :class:`~bertology.models.Encoder`) on the first ``max_sentences`` sentences of ``data`` (default the
    packaged EWT dev), model vs untrained twin over ``seeds``; LAMA (``lama_facts`` facts per relation of
    ``lama_data``, default ``$BERTOLOGY_DATA/lama``) and minimal pairs (``pairs_data``, first ``pairs_max``
    pairs) when the model loads as a masked LM. On MiniLM with the defaults: about 2-4 minutes on 2 CPU
    cores, most of it the MLM probe (``mlm_probe_sentences=0`` skips it).
    """
    from bertology.geometry.contextuality import contextuality, plot_contextuality, reference_table
    from bertology.geometry.stores import as_encoder
    from bertology.knowledge.mlm_probe import mlm_probe, plot_mlm_probe
    from bertology.knowledge.static import plot_static, static_similarity

    out = Path(out)
    section = KnowledgeSection()
    encoder = as_encoder(model, device=None if device in (None, "auto") else device)
    name = encoder.name
    common = dict(seeds=tuple(seeds), max_sentences=max_sentences, device=device, cache_dir=cache_dir,
                  progress=progress)

    started = time.perf_counter()
    result = contextuality(encoder, data, samples=min(1000, max_sentences), **common)
    section.results["contextuality"] = result
    section.figures["Contextuality per layer (Ethayarajh 2019)"] = plot_contextuality(
        result["summary"], out / "contextuality" / "contextuality.png", title=f"{name}: contextuality per layer")
    result.save(out / "contextuality")
    table = reference_table(result["summary"])
    section.tables["Contextuality (adjusted = minus the anisotropy baseline)"] = pd.DataFrame({
        "layer": table["layer"],
        "self-similarity adj.": table["self_similarity_adjusted"].map(_fmt),
        "twin": table["untrained_self_similarity_adjusted"].map(_fmt),
        "intra-sentence adj.": table["intra_sentence_similarity_adjusted"].map(_fmt),
        "MEV adj.": table["max_explainable_variance_adjusted"].map(_fmt),
        "anisotropy": table["anisotropy"].map(_fmt),
        "twin anisotropy": table["untrained_anisotropy"].map(_fmt),
        "bert-base-cased anisotropy": table["kawine_anisotropy"].map(_fmt),
    })
    section.seconds["contextuality"] = time.perf_counter() - started

    started = time.perf_counter()
    result = static_similarity(encoder, data, **common)
    section.results["static"] = result
    section.figures["Similarity to static embeddings (Convexity report)"] = plot_static(
        result["summary"], out / "static" / "static_similarity.png", title=f"{name}: similarity to static embeddings")
    result.save(out / "static")
    summary = result["summary"]
    pivot = summary.pivot_table(index="layer", columns=["reference", "encoder"], values="adjusted")
    absent = pd.Series(index=pivot.index, dtype=float)
    section.tables["Similarity to static embeddings (adjusted by random pairs)"] = pd.DataFrame({
        "layer": pivot.index.astype(int),
        "(a) input embedding": pivot[("input_embedding", "trained")].map(_fmt).to_numpy(),
        "twin": pivot.get(("input_embedding", "untrained"), absent).map(_fmt).to_numpy(),
        "(b) type average": pivot[("type_average", "trained")].map(_fmt).to_numpy(),
        "twin ": pivot.get(("type_average", "untrained"), absent).map(_fmt).to_numpy(),
    })
    shape = result.meta["u_shape"]["input_embedding"]
    section.notes.append(f"Static similarity (a): {'a' if shape['u_shape'] else 'no'} U shape; minimum at layer "
                         f"{shape['minimum_layer']}.")
    section.seconds["static"] = time.perf_counter() - started

    if mlm_probe_sentences:
        started = time.perf_counter()
        result = mlm_probe(encoder, data, seeds=tuple(seeds), epochs=mlm_probe_epochs, batch_size=64,
                           max_sentences=mlm_probe_sentences, max_eval_sentences=max(20, mlm_probe_sentences // 4),
                           device=device, cache_dir=cache_dir, progress=progress)
        section.results["mlm_probe"] = result
        section.figures["MLM probe per layer (Convexity report)"] = plot_mlm_probe(
            result["summary"], result["baselines"], out / "mlm-probe" / "mlm_probe.png",
            title=f"{name}: MLM probe per layer")
        result.save(out / "mlm-probe")
        summary = result["summary"]
        trained, twin = summary[summary["encoder"] == "trained"], summary[summary["encoder"] == "untrained"]
        merged = trained.merge(twin, on="layer", suffixes=("", "_twin"), how="left")
        section.tables["MLM probe: held-out accuracy (%) and perplexity"] = pd.DataFrame({
            "layer": merged["layer"].astype(int), "top-1": merged["top1"].map(percent),
            "top-10": merged["top10"].map(percent), "perplexity": merged["perplexity"].map(lambda v: _fmt(v, 1)),
            "twin top-1": merged["top1_twin"].map(percent), "twin perplexity": merged["perplexity_twin"].map(
                lambda v: _fmt(v, 1))})
        base = result["baselines"].iloc[0]
        section.notes.append(
            f"MLM probe: {result.meta['train_sentences']} training and {result.meta['eval_sentences']} held-out "
            f"sentences, {mlm_probe_epochs} epoch(s), input-embedding dropout {result.meta['settings']['dropout']:g} "
            f"({'the predicted token only' if result.meta['settings'].get('corrupt') == 'target' else 'every token'}); "
            f"unigram baseline top-1 {percent(base['top1'])}%, perplexity {base['perplexity']:.0f}.")
        section.seconds["mlm_probe"] = time.perf_counter() - started

    _masked_lm_parts(section, model, out, lama_data, lama_facts, pairs_data, pairs_max, seeds, device, progress)
    return section


def _masked_lm_parts(section, model, out, lama_data, lama_facts, pairs_data, pairs_max, seeds, device, progress):
    from bertology.knowledge.lama import lama
    from bertology.knowledge.mlm import load_masked_lm
    from bertology.knowledge.pairs import minimal_pairs
    from bertology.runtime import resolve_device

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
        result = lama(model, lama_data, max_facts=lama_facts, seeds=tuple(seeds), device=device, progress=progress,
                      loaded=loaded)
    except DataError as error:
        section.notes.append(f"LAMA: skipped; {error}.")
    else:
        section.results["lama"] = result
        result.save(out / "lama")
        corpora = result["corpora"]
        trained, twin = corpora[corpora["encoder"] == "trained"], corpora[corpora["encoder"] == "untrained"]
        merged = trained.merge(twin[["corpus", "p_at_1"]], on="corpus", suffixes=("", "_twin"), how="left")
        section.tables[f"LAMA ({lama_facts} facts per relation; mean over relations, %)"] = pd.DataFrame({
            "corpus": merged["corpus"], "relations": merged["relations"], "facts": merged["facts"],
            "P@1": merged["p_at_1"].map(percent), "P@10": merged["p_at_10"].map(percent),
            "MRR": merged["mrr"].map(percent), "twin P@1": merged["p_at_1_twin"].map(percent)})
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
    paradigms = result["paradigms"]
    trained, twin = paradigms[paradigms["encoder"] == "trained"], paradigms[paradigms["encoder"] == "untrained"]
    merged = trained.merge(twin[["paradigm", "accuracy"]], on="paradigm", suffixes=("", "_twin"), how="left")
    section.tables["Minimal pairs: accuracy per paradigm (%)"] = pd.DataFrame({
        "paradigm": merged["paradigm"], "pairs": merged["pairs"], "model": merged["accuracy"].map(percent),
        "twin": merged["accuracy_twin"].map(percent)})
    section.seconds["pairs"] = time.perf_counter() - started
