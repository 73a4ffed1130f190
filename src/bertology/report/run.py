"""`bertology report`: run the battery on a model and write one self-contained HTML report."""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd
import matplotlib.pyplot as plt
import numpy as np
from rich.console import Console

from bertology import __version__
from bertology.data import default_corpus, read_conllu
from bertology.errors import MissingData, OutputError
from bertology.files import write_text
from bertology.models import Encoder, as_encoder
from bertology.probing.report import summarize
from bertology.report import names
from bertology.report import sections as report_sections
from bertology.report.cache import ResultCache
from bertology.report.claims import claims_section
from bertology.report.names import SECTION_TITLES
from bertology.report.context import CORPUS_NOTE, ReportContext, SectionBuilder, safe_name, setup_notes
from bertology.report.document import Columns, Figure, Image, Section, Table, Text, render
from bertology.runtime import resolve_device
from bertology.compare import compare_models, plot_comparison
from bertology.report.findings import findings, findings_frame, findings_html
from bertology.report.interventions import is_finetuned
from bertology.tasks import TABLE2_COLUMNS

__all__ = ["ReportContext", "ReportOutcome", "ResultCache", "build_comparison", "build_report", "default_sections",
           "run_report", "section_names"]


@dataclass
class ReportOutcome:
    """What a report run wrote and what did not run: ``failed`` and ``skipped`` map a section id to why
    (``skipped``: by design, e.g. data that is not at hand offline; ``failed``: anything else)."""

    path: Path
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    #: the checklist ("The Primer, checked"): one row per claim (bertology.claims), and the tables it read
    claims: pd.DataFrame | None = None
    results: dict = field(default_factory=dict)
    #: seconds each section took, in reading order (also in the page's header)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed


def default_sections() -> list[tuple[str, SectionBuilder]]:
    """The sections in reading order, as ``(id, builder)`` (read at call time, so a test may replace them)."""
    return report_sections.SECTIONS


def section_names() -> list[str]:
    return [name for name, _ in default_sections()]


def check_sections(sections: Sequence[str] | None) -> list[str] | None:
    """The requested section ids, or :class:`UsageError` naming the unknown ones and the valid ones (the
    sections of :func:`default_sections` now; :mod:`bertology.report.names` checks them without torch)."""
    return names.check_sections(sections, section_names())


def make_context(encoder: Encoder, name: str, out: str | Path, fresh: bool, seeds: Sequence[int],
                 max_sentences: int | None, progress: bool, device: str | None) -> ReportContext:
    out_dir = Path(out) / name
    dev = read_conllu(default_corpus("ewt-dev"))
    test = read_conllu(default_corpus("ewt-test"))
    if max_sentences:
        dev, test = dev[:max_sentences], test[:max_sentences]
    return ReportContext(encoder=encoder, model_name=name, out_dir=out_dir,
                         cache=ResultCache(out_dir / "results", fresh=fresh), dev=dev, test=test,
                         seeds=tuple(seeds), max_sentences=max_sentences, progress=progress, device=device)


def findings_section(context: ReportContext) -> Section | None:
    """The findings generated from the sections' tables (:func:`bertology.report.findings.findings`)."""
    items = findings(context.results)
    context.findings = items
    if not items:
        return None
    section = Section("findings", "Findings", note="Generated from the result tables below: each number with its "
                      "baseline and its 95% interval (or the range named), linked to its table or figure. Best "
                      "layers are chosen on dev and scored on test.")
    section.add(Text(findings_html(items)))
    section.add(Table(findings_frame(items), "Every finding with its numbers (fractions) and source.",
                      id="findings-table", collapsed=True))
    return section


def run_sections(context: ReportContext, sections: Sequence[str] | None = None) -> list[Section]:
    """Build the sections (in reading order) and put the findings generated from their tables first.

    Each section runs on its own: one that cannot run becomes a box saying what did not run, why and the
    command that runs it (``context.skipped`` when its data is not at hand, ``context.failed`` otherwise),
    and the others still run. Finished sections are cached first, so a rerun computes only what is missing."""
    sections = check_sections(sections)
    context.sections = sections
    built: list[Section] = []
    for section_id, builder in default_sections():
        if sections and section_id not in sections:
            continue
        started = time.perf_counter()
        try:
            section = builder(context)
        except MissingData as error:
            context.skipped[section_id] = str(error)
            section = unavailable_section(context, section_id, str(error), failed=False)
        except OutputError:  # a full disk or a read-only folder is the run's, not the section's: it stops here, with
            raise            # every finished part cached whole and an earlier index.html left as it was
        except Exception as error:  # noqa: BLE001 (one section's failure, out of memory included, must not cost the others)
            context.failed[section_id] = f"{type(error).__name__}: {error}"
            section = unavailable_section(context, section_id, context.failed[section_id], failed=True)
        context.timings[section_id] = time.perf_counter() - started
        if context.progress:
            Console(stderr=True).print(f"[bold]report[/] {section_id}: {context.timings[section_id]:.0f} s"
                                       + (" (failed)" if section_id in context.failed else
                                          " (skipped)" if section_id in context.skipped else ""))
        if section is not None:
            built.append(section)
    findings = findings_section(context)
    checklist = claims_section(context, built)  # first: the Primer's claims judged on the tables below
    return [checklist] + ([findings] if findings is not None else []) + built


def unavailable_section(context: ReportContext, section_id: str, why: str, failed: bool) -> Section:
    """The box standing in for a section that did not run: what, why, and the command that runs it."""
    title = SECTION_TITLES.get(section_id, section_id)
    command = f"bertology report -m {context.model_name} --sections {section_id}"
    kind = "failed" if failed else "skipped"
    section = Section(section_id, title)
    section.add(Text(f"<div class='status {kind}'><p><strong>This section did not run ({kind}).</strong> "
                     f"{html.escape(why)}</p><p>Once that is fixed, <code>{html.escape(command)}</code> runs it "
                     "(finished sections are reused).</p></div>"))
    return section


def model_header(context: ReportContext) -> dict:
    description = context.encoder.describe()
    return {
        "model": f"{description['name']} ({description['model_type']})",
        "fingerprint": description["fingerprint"],
        "architecture": f"{description['num_layers']} layers, {description['num_heads']} heads, "
                        f"hidden size {description['hidden_size']}, {description['num_parameters']:,} parameters",
    }


def finetuned_checkpoint(*candidates) -> Path | None:
    """The first of ``candidates`` that is a ``bertology finetune`` checkpoint folder, else None."""
    for candidate in candidates:
        if candidate is not None and is_finetuned(candidate):
            return Path(candidate)
    return None


def report_handle(model, encoder: Encoder | None, device: str | None) -> tuple[Encoder, str]:
    """The handle a report runs on (``encoder`` when given, else ``model`` loaded on ``device``) and the
    report's folder name for it (the handle's name, or ``model`` for a module built in code)."""
    if encoder is None:
        encoder = as_encoder(model, device=str(resolve_device(device)))
    return encoder, safe_name(encoder.name if encoder.name != "model" else str(model))


def run_report(
    model: str = "minilm",
    out: str | Path = "reports",
    fresh: bool = False,
    seeds: Sequence[int] = (0, 1, 2),
    max_sentences: int | None = None,
    sections: Sequence[str] | None = None,
    progress: bool = True,
    device: str | None = None,
    encoder: Encoder | None = None,
    finetuned: str | Path | None = None,
    languages: Sequence[str | Path] | None = None,
) -> ReportOutcome:
    """Run every available section on ``model`` and write ``<out>/<model>/index.html``; return where it is
    and which sections failed or were skipped (:class:`ReportOutcome`).

    ``seeds``: the probe seeds (``bertology report --seeds N --seed S`` gives S..S+N-1); ``sections``: ids
    from :func:`section_names` (default all); ``device``: ``"auto"``, ``"cpu"``, ``"cuda"``. The
    interventions section fine-tunes ``model`` briefly unless ``finetuned`` names a checkpoint written by
    ``bertology finetune`` (or ``model`` is one). ``languages``: CoNLL-U treebanks of several languages (files
    or folders) for the languages section, which otherwise only says how to add it.
    """
    sections = check_sections(sections)
    started = time.perf_counter()
    encoder_given = encoder
    encoder, name = report_handle(model, encoder, device)
    context = make_context(encoder, name, out, fresh, seeds, max_sentences, progress, device)
    context.finetuned = finetuned_checkpoint(model if encoder_given is None else None, finetuned)
    context.languages = [Path(p) for p in languages] if languages else None
    built = run_sections(context, sections)
    header = {
        **model_header(context),
        "corpus": f"{CORPUS_NOTE}: {len(context.dev):,} dev + {len(context.test):,} test sentences",
        "seeds": ", ".join(map(str, seeds)),
        "bertology": __version__,
        "run time": f"{time.perf_counter() - started:.0f} s "
                    f"(reused {len(context.cache.hits)} finished parts, computed {len(context.cache.misses)}; "
                    + ", ".join(f"{k} {v:.0f} s" for k, v in context.timings.items()) + ")",
        "generated": time.strftime("%Y-%m-%d %H:%M"),
    }
    page = render(f"bertology report: {encoder.name}", header, built, context.notes + setup_notes(),
                  render_cache=context.cache.root / "figures")
    path = write_text(context.out_dir / "index.html", page)
    return ReportOutcome(path, failed=dict(context.failed), skipped=dict(context.skipped), claims=context.claims,
                         results=context.results, timings=dict(context.timings))


def build_report(model: str = "minilm", out: str | Path = "reports", **options) -> Path:
    """:func:`run_report` returning the report's path (``index.html``); the sections that failed or were
    skipped are boxes in the report."""
    return run_report(model, out, **options).path


def build_comparison(
    model_a: str = "minilm",
    model_b: str = "untrained",
    out: str | Path = "reports",
    fresh: bool = False,
    seeds: Sequence[int] = (0, 1, 2),
    max_sentences: int | None = None,
    sections: Sequence[str] | None = None,
    progress: bool = True,
    device: str | None = None,
    encoder_a: Encoder | None = None,
    encoder_b: Encoder | None = None,
) -> Path:
    """Two models side by side; ``model_b="untrained"`` is ``model_a``'s untrained twin (seed 0).

    Writes ``<out>/compare-<a>-vs-<b>/index.html``; each model's own results are cached under its own
    report folder, so a comparison reuses (and feeds) the single-model reports.
    """
    sections = check_sections(sections)
    started = time.perf_counter()
    encoder_a, name_a = report_handle(model_a, encoder_a, device)
    if encoder_b is None and str(model_b) == "untrained":
        encoder_b = encoder_a.untrained(0)
    encoder_b, name_b = report_handle(model_b, encoder_b, device)
    contexts = [make_context(e, n, out, fresh, seeds, max_sentences, progress, device)
                for e, n in ((encoder_a, name_a), (encoder_b, name_b))]
    # Interventions: a fine-tuned side (B, typically) serves both; otherwise each side is fine-tuned briefly.
    tuned_b = finetuned_checkpoint(model_b if str(model_b) != "untrained" else None)
    contexts[0].finetuned = finetuned_checkpoint(model_a) or tuned_b
    contexts[1].finetuned = tuned_b
    built = [{section.id: section for section in run_sections(c, sections)} for c in contexts]
    combined: list[Section] = []
    for section_id, section_a in built[0].items():
        section_b = built[1].get(section_id)
        groups = [(encoder_a.name, section_a.blocks)] + ([(encoder_b.name, section_b.blocks)] if section_b else [])
        combined.append(Section(section_a.id, section_a.title, note=section_a.note, blocks=[Columns(groups)]))
    differences = Section("differences", "Differences", note=f"{encoder_a.name} minus {encoder_b.name}.")
    probing = [_probing_means(c) for c in contexts]
    if all(p is not None for p in probing):
        merged = probing[0].merge(probing[1], on=["task", "layer"], suffixes=(" A", " B"))
        merged["A - B"] = merged["accuracy A"] - merged["accuracy B"]
        differences.add(Figure(lambda: _difference_heatmap(merged, encoder_a.name, encoder_b.name),
                               f"Probe test accuracy, {encoder_a.name} minus {encoder_b.name} (points; probes fitted "
                               "on every training example) per task and layer.", id="differences-probing", data=merged))
        differences.add(Table(merged, "Probe test accuracy (%, probes fitted on every training example) per task and layer, and the "
                              "difference.",
                              float_format="{:.1f}", max_rows=200, collapsed=True, id="differences-probing-table"))
    if encoder_a.tokenizer.get_vocab() == encoder_b.tokenizer.get_vocab():
        differences.blocks.extend(_model_comparison(contexts, encoder_a, encoder_b))
    if differences.blocks:
        combined.append(differences)
    header = {}
    for label, context in zip("AB", contexts):
        for key, value in model_header(context).items():
            header[f"{label}: {key}"] = value
    header.update({
        "corpus": f"{CORPUS_NOTE}: {len(contexts[0].dev):,} dev + {len(contexts[0].test):,} test sentences",
        "seeds": ", ".join(map(str, seeds)), "bertology": __version__,
        "run time": f"{time.perf_counter() - started:.0f} s", "generated": time.strftime("%Y-%m-%d %H:%M"),
    })
    html = render(f"bertology comparison: {encoder_a.name} vs {encoder_b.name}", header, combined, setup_notes(),
                  render_cache=contexts[0].cache.root / "figures")
    return write_text(Path(out) / f"compare-{name_a}-vs-{safe_name(name_b)}" / "index.html", html)


def _difference_heatmap(merged: pd.DataFrame, name_a: str, name_b: str):
    """Tasks (rows) x layers (columns) of A - B in points, diverging colours centred on 0, numbers printed."""
    grid = merged.pivot(index="task", columns="layer", values="A - B")
    order = [t for t in dict.fromkeys(merged["task"])]
    grid = grid.reindex(order)
    limit = float(np.nanmax(np.abs(grid.to_numpy()))) or 1.0
    fig, ax = plt.subplots(figsize=(2.5 + 0.7 * grid.shape[1], 1.2 + 0.36 * grid.shape[0]))
    image = ax.imshow(grid.to_numpy(), cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
    ax.set_xticks(range(grid.shape[1]), [str(int(c)) for c in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [TABLE2_COLUMNS.get(t, t) for t in grid.index])
    ax.set_xlabel("layer (0 = embeddings)")
    for (row, column), value in np.ndenumerate(grid.to_numpy()):
        if np.isfinite(value):
            ax.text(column, row, f"{value:+.1f}", ha="center", va="center", fontsize=8,
                    color="white" if abs(value) > 0.6 * limit else "black")
    fig.colorbar(image, ax=ax).set_label(f"{name_a} − {name_b} (points)")
    ax.set_title(f"Probe accuracy: {name_a} minus {name_b}")
    fig.tight_layout()
    return fig


def _probing_means(context: ReportContext) -> pd.DataFrame | None:
    frames = [pd.read_parquet(p) for p in context.cache.root.glob("probing-*/results.parquet")]
    if not frames:
        return None
    summary = summarize(frames[-1])  # the reported number: the point fit where the run made one
    rows = summary[(summary["baseline"] == "none") & (summary["split"] == "test") & (summary["metric"] == "accuracy")
                   & summary["layer"].notna() & summary["component"].isna()]
    means = rows[["task", "layer"]].assign(accuracy=rows["mean"].mul(100)).reset_index(drop=True)
    means["layer"] = means["layer"].astype(int)
    return means


def _model_comparison(contexts, encoder_a: Encoder, encoder_b: Encoder) -> list:
    """Per-layer CKA, attention cosine per head and weight change (bertology.compare)."""
    key = {"a": encoder_a.fingerprint, "b": encoder_b.fingerprint, "n": 300}
    cache = contexts[0].cache
    tables = cache.get_or_compute(f"compare-{encoder_b.fingerprint}", key, lambda: compare_models(
        encoder_a, encoder_b, contexts[0].dev[:300], progress=contexts[0].progress)).tables
    folder = cache.path(f"compare-{encoder_b.fingerprint}", key) / "figures"
    paths = plot_comparison(tables, folder, title=f"{encoder_a.name} vs {encoder_b.name}")
    blocks: list = [Image(p, f"bertology compare: {Path(p).stem.replace('_', ' ')}.") for p in paths]
    if "cka" in tables:
        blocks.append(Table(tables["cka"], "Linear CKA per layer between the two models' representations "
                                           "(1 = identical up to rotation and scale).", max_rows=30))
    return blocks
