"""The report's "Knowledge and geometry" section: what :func:`bertology.knowledge.section.knowledge_section`
computed, shown. Everything the reader sees is built here from the analyses' Results: the display tables
(formatted numbers: percent for accuracies), the figures and the sentences; :mod:`bertology.knowledge` only
computes.

The section's cache entry is one :class:`~bertology.results.Result` (:func:`bundle`): every table of every
analysis, named ``<analysis>.<table>``, with each analysis's ``meta`` in ``meta["analyses"]``;
:func:`unbundle` gives the analyses' Results back.
"""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from bertology.geometry.contextuality import plot_contextuality, reference_table, twin_beside
from bertology.knowledge.mlm_probe import plot_mlm_probe
from bertology.knowledge.numeracy import numeracy_table
from bertology.knowledge.section import knowledge_section
from bertology.knowledge.static import plot_static
from bertology.report.context import ReportContext
from bertology.report.document import Image, Section, Table, Text
from bertology.report.names import SECTION_TITLES
from bertology.results import Result, number, percent

#: Where each analysis's Result, and figure, is written under the section's folder.
FOLDERS = {"contextuality": "contextuality", "static": "static", "numeracy": "numeracy", "mlm_probe": "mlm-probe",
           "lama": "lama", "pairs": "pairs"}


def _fmt(value, digits: int = 3) -> str:
    return number(value, digits)


def bundle(results: dict[str, Result], notes: list[str], settings: dict) -> Result:
    """The analyses' Results as one (the cache entry): tables ``<analysis>.<table>``, their metas, the notes
    (what was skipped and why) and the settings the display needs."""
    tables = {f"{analysis}.{key}": frame for analysis, result in results.items() for key, frame in result.tables.items()}
    analyses = {analysis: {"name": result.name, "meta": result.meta, "tables": list(result.tables)}
                for analysis, result in results.items()}
    return Result("knowledge", tables, meta={"analyses": analyses, "notes": list(notes), "settings": dict(settings)})


def unbundle(result: Result) -> dict[str, Result]:
    """The analyses' Results inside a :func:`bundle` (in the order they ran)."""
    return {analysis: Result(part["name"], {key: result[f"{analysis}.{key}"] for key in part["tables"]},
                             meta=part["meta"])
            for analysis, part in result.meta["analyses"].items()}


def contextuality_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Adjusted self-similarity, intra-sentence similarity and MEV per layer, the anisotropy baseline, the
    untrained twin and kawine's bert-base-cased anisotropy (three decimals)."""
    table = reference_table(summary)
    model = table[table["weights"] == "trained"]
    return pd.DataFrame({
        "layer": model["layer"],
        "self-similarity adj.": model["self_similarity_adjusted"].map(_fmt),
        "twin": twin_beside(table, "self_similarity_adjusted").map(_fmt),
        "intra-sentence adj.": model["intra_sentence_similarity_adjusted"].map(_fmt),
        "MEV adj.": model["max_explainable_variance_adjusted"].map(_fmt),
        "anisotropy": model["anisotropy"].map(_fmt),
        "twin anisotropy": twin_beside(table, "anisotropy").map(_fmt),
        "bert-base-cased anisotropy": model["kawine_anisotropy"].map(_fmt),
    }).reset_index(drop=True)


def static_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Adjusted similarity to (a) the input embedding and (b) the type average per layer, beside the twin."""
    pivot = summary.pivot_table(index="layer", columns=["reference", "weights"], values="adjusted")
    absent = pd.Series(index=pivot.index, dtype=float)
    return pd.DataFrame({
        "layer": pivot.index.astype(int),
        "(a) input embedding": pivot[("input_embedding", "trained")].map(_fmt).to_numpy(),
        "twin": pivot.get(("input_embedding", "untrained"), absent).map(_fmt).to_numpy(),
        "(b) type average": pivot[("type_average", "trained")].map(_fmt).to_numpy(),
        "twin ": pivot.get(("type_average", "untrained"), absent).map(_fmt).to_numpy(),
    })


def mlm_probe_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Held-out top-1 and top-10 accuracy (%) and perplexity per layer, beside the twin."""
    trained, twin = summary[summary["weights"] == "trained"], summary[summary["weights"] == "untrained"]
    merged = trained.merge(twin, on="layer", suffixes=("", "_twin"), how="left")
    return pd.DataFrame({
        "layer": merged["layer"].astype(int), "top-1": merged["top1"].map(percent),
        "top-10": merged["top10"].map(percent), "perplexity": merged["perplexity"].map(lambda v: _fmt(v, 1)),
        "twin top-1": merged["top1_twin"].map(percent), "twin perplexity": merged["perplexity_twin"].map(
            lambda v: _fmt(v, 1))})


def lama_table(corpora: pd.DataFrame) -> pd.DataFrame:
    """P@1, P@10 and MRR (%) per LAMA corpus, beside the twin's P@1."""
    trained, twin = corpora[corpora["weights"] == "trained"], corpora[corpora["weights"] == "untrained"]
    merged = trained.merge(twin[["corpus", "p_at_1"]], on="corpus", suffixes=("", "_twin"), how="left")
    return pd.DataFrame({
        "corpus": merged["corpus"], "relations": merged["relations"], "facts": merged["facts"],
        "P@1": merged["p_at_1"].map(percent), "P@10": merged["p_at_10"].map(percent),
        "MRR": merged["mrr"].map(percent), "twin P@1": merged["p_at_1_twin"].map(percent)})


def pairs_table(paradigms: pd.DataFrame) -> pd.DataFrame:
    """Minimal-pair accuracy (%) per paradigm, beside the twin."""
    trained, twin = paradigms[paradigms["weights"] == "trained"], paradigms[paradigms["weights"] == "untrained"]
    merged = trained.merge(twin[["paradigm", "accuracy"]], on="paradigm", suffixes=("", "_twin"), how="left")
    return pd.DataFrame({
        "paradigm": merged["paradigm"], "pairs": merged["pairs"], "model": merged["accuracy"].map(percent),
        "twin": merged["accuracy_twin"].map(percent)})


def display_tables(results: dict[str, Result], settings: dict) -> dict[str, pd.DataFrame]:
    """Caption -> display table, for each analysis that ran (in reading order)."""
    tables = {}
    if "contextuality" in results:
        tables["Contextuality (adjusted = minus the anisotropy baseline)"] = contextuality_table(
            results["contextuality"]["summary"])
    if "static" in results:
        tables["Similarity to static embeddings (adjusted by random pairs)"] = static_table(results["static"]["summary"])
    if "numeracy" in results:
        meta = results["numeracy"].meta
        tables[f"Numeracy (Wallace et al. 2019): decoding the integers 0-{meta['top']} from each layer (ridge, "
               f"{meta['folds']}-fold out-of-fold predictions, {meta['test']} test numbers); split gap = mean "
               "absolute error of numbers WordPiece splits minus of whole ones, within each hundred"] = numeracy_table(
            results["numeracy"]["layers"])
    if "mlm_probe" in results:
        tables["MLM probe: held-out accuracy (%) and perplexity"] = mlm_probe_table(results["mlm_probe"]["summary"])
    if "lama" in results:
        tables[f"LAMA ({settings['lama_facts']} facts per relation; mean over relations, %)"] = lama_table(
            results["lama"]["corpora"])
    if "pairs" in results:
        tables["Minimal pairs: accuracy per paradigm (%)"] = pairs_table(results["pairs"]["paradigms"])
    return tables


def display_notes(results: dict[str, Result], settings: dict, notes: list[str]) -> list[str]:
    """The sentences under the section: the static-similarity shape, the MLM probe's setup and baseline,
    then ``notes`` (what was skipped and why)."""
    out = []
    if "static" in results:
        shape = results["static"].meta["u_shape"]["input_embedding"]
        out.append(f"Static similarity (a): {'a' if shape['u_shape'] else 'no'} U shape; minimum at layer "
                   f"{shape['minimum_layer']}.")
    if "mlm_probe" in results:
        result = results["mlm_probe"]
        base = result["baselines"].iloc[0]
        out.append(
            f"MLM probe: {result.meta['train_sentences']} training and {result.meta['eval_sentences']} held-out "
            f"sentences, {settings['mlm_probe_epochs']} epoch(s), input-embedding dropout "
            f"{result.meta['settings']['dropout']:g} "
            f"({'the predicted token only' if result.meta['settings'].get('corrupt') == 'target' else 'every token'}); "
            f"unigram baseline top-1 {percent(base['top1'])}%, perplexity {base['perplexity']:.0f}.")
    return out + list(notes)


def draw_figures(results: dict[str, Result], out: str | Path, name: str) -> dict[str, Path]:
    """Caption -> PNG (with its siblings) of the contextuality, static-similarity and MLM-probe figures,
    written under ``out/<analysis folder>/``."""
    out = Path(out)
    figures = {}
    if "contextuality" in results:
        figures["Contextuality per layer (Ethayarajh 2019)"] = plot_contextuality(
            results["contextuality"]["summary"], out / FOLDERS["contextuality"] / "contextuality.png",
            title=f"{name}: contextuality per layer")
    if "static" in results:
        figures["Similarity to static embeddings (Convexity report)"] = plot_static(
            results["static"]["summary"], out / FOLDERS["static"] / "static_similarity.png",
            title=f"{name}: similarity to static embeddings")
    if "mlm_probe" in results:
        result = results["mlm_probe"]
        figures["MLM probe per layer (Convexity report)"] = plot_mlm_probe(
            result["summary"], result["baselines"], out / FOLDERS["mlm_probe"] / "mlm_probe.png",
            title=f"{name}: MLM probe per layer")
    return figures


def knowledge(context: ReportContext) -> Section:
    """Contextuality, similarity to static embeddings and the MLM probe (and LAMA/minimal pairs when the
    model has an MLM head): :func:`bertology.knowledge.section.knowledge_section` within a small budget."""
    quick = context.max_sentences is not None
    sentences = min(400, context.max_sentences or 400)
    # "mlm_probe_corrupt": the MLM probe's input dropout corrupts the predicted token only (knowledge.mlm_probe's
    # default since it replaced all-token dropout), so results cached before are not reused
    settings = {"sentences": sentences, "mlm_probe_sentences": 0 if quick else 300, "seeds": list(context.seeds[:1]),
                "mlm_probe_corrupt": "target"}
    folder = context.out_dir / "knowledge"
    # "twin_column": the tables name the model and its twin in `weights` (it was `encoder`): older entries are
    # recomputed, not read with the old column
    # "numeracy": the section runs Wallace et al.'s decoding probe too (entries from before it are recomputed)
    key = {**context.model_key, **settings, "twin_column": "weights", "numeracy": 1}

    def compute() -> Result:
        built = knowledge_section(context.encoder, folder, max_sentences=sentences, seeds=context.seeds[:1],
                                  mlm_probe_sentences=settings["mlm_probe_sentences"], device=context.device,
                                  cache_dir=context.store_dir, progress=context.progress)
        return bundle(built.results, built.notes, built.settings)

    cached = context.cache.get_or_compute("knowledge", key, compute)
    results = unbundle(cached)
    section = Section("knowledge", SECTION_TITLES["knowledge"],
                      note=f"On the first {sentences} EWT dev sentences, the model beside its untrained twin (seed "
                           f"{context.seeds[0]}). " + ("The MLM probe is skipped in quick runs (--max-sentences); "
                                                       "bertology knowledge mlm-probe runs it. " if quick else "")
                           + "docs/knowledge.md has the full-size numbers and every choice.")
    # The data behind the figures and the contextuality finding: each analysis's summary, by its folder's name.
    numbers = {FOLDERS[analysis]: result["summary"] for analysis, result in results.items() if "summary" in result}
    # and every analysis's tables as "<analysis>.<table>", for the claims (bertology.claims) that read them
    context.results["knowledge"] = {**numbers, **{f"{analysis}.{key}": frame for analysis, result in results.items()
                                                  for key, frame in result.tables.items()}}
    for caption, table in display_tables(results, cached.meta["settings"]).items():
        anchor = ("knowledge-contextuality" if caption.startswith("Contextuality") else
                  "knowledge-numeracy" if caption.startswith("Numeracy") else "")
        section.add(Table(table, caption, id=anchor))
    for caption, path in draw_figures(results, folder, context.encoder.name).items():
        section.add(Image(Path(path), caption, data=numbers.get(Path(path).parent.name)))
    for note in display_notes(results, cached.meta["settings"], cached.meta["notes"]):
        section.add(Text(html.escape(note)))
    return section
