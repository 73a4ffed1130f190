"""`bertology report`: run the battery on a model and write one self-contained HTML report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from bertology import __version__
from bertology.data import Sentence, default_corpus, read_conllu
from bertology.extraction import corpus_hash
from bertology.models import Encoder, load_encoder
from bertology.report.cache import ResultCache
from bertology.report.document import Section, render, write_atomic

CORPUS_NOTE = ("UD English EWT r2.16 dev and test (CC BY-SA 4.0, Silveira et al. 2014; "
               "shipped inside bertology, see resources/ATTRIBUTION.md)")


@dataclass
class ReportContext:
    """What every section needs: the model (and its untrained twin), the corpus, a cache and settings."""

    encoder: Encoder
    model_name: str
    out_dir: Path
    cache: ResultCache
    dev: list[Sentence]
    test: list[Sentence]
    seeds: tuple[int, ...]
    max_sentences: int | None
    progress: bool = True
    device: str | None = None
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    attention_sentences: int = 600
    attention_probe_epochs: int = 10
    pattern_sentences: int = 40
    probe_caps: dict = field(default_factory=lambda: {"max_train": None, "max_eval": None, "structural_epochs": 30,
                                                            "max_iter": 100})

    @property
    def model_key(self) -> dict:
        return {"fingerprint": self.encoder.fingerprint, "corpus": corpus_hash(self.dev + self.test),
                "seeds": list(self.seeds), "max_sentences": self.max_sentences, "version": __version__}

    @property
    def store_dir(self) -> Path:
        return self.out_dir / "stores"

    @property
    def treebank_files(self) -> list[Path]:
        return [default_corpus("ewt-dev"), default_corpus("ewt-test")]

    @property
    def treebank_dir(self) -> Path:
        return default_corpus("ewt-dev").parent


SectionBuilder = Callable[[ReportContext], "Section | None"]


def default_sections() -> list[tuple[str, SectionBuilder]]:
    from bertology.report import sections

    return sections.SECTIONS


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-") or "model"


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


def run_sections(context: ReportContext, sections: Sequence[str] | None = None) -> list[Section]:
    built: list[Section] = []
    for section_id, builder in default_sections():
        if sections and section_id not in sections:
            continue
        started = time.perf_counter()
        section = builder(context)
        context.timings[section_id] = time.perf_counter() - started
        if context.progress:
            from rich.console import Console

            Console(stderr=True).print(f"[bold]report[/] {section_id}: {context.timings[section_id]:.0f} s")
        if section is not None:
            built.append(section)
    return built


def model_header(context: ReportContext) -> dict:
    description = context.encoder.describe()
    return {
        "model": f"{description['name']} ({description['model_type']})",
        "fingerprint": description["fingerprint"],
        "architecture": f"{description['num_layers']} layers, {description['num_heads']} heads, "
                        f"hidden size {description['hidden_size']}, {description['num_parameters']:,} parameters",
    }


def _resolve(model, encoder: Encoder | None, device: str | None) -> tuple[Encoder, str]:
    encoder = encoder or load_encoder(model, device=device)
    return encoder, safe_name(encoder.name if encoder.name != "model" else str(model))


def build_report(
    model: str = "minilm",
    out: str | Path = "reports",
    fresh: bool = False,
    seeds: Sequence[int] = (0, 1, 2),
    max_sentences: int | None = None,
    sections: Sequence[str] | None = None,
    progress: bool = True,
    device: str | None = None,
    encoder: Encoder | None = None,
) -> Path:
    """Run every available section on ``model`` and write ``<out>/<model>/index.html``; return its path."""
    started = time.perf_counter()
    encoder, name = _resolve(model, encoder, device)
    context = make_context(encoder, name, out, fresh, seeds, max_sentences, progress, device)
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
    html = render(f"bertology report: {encoder.name}", header, built, context.notes + SETUP_NOTES)
    index = context.out_dir / "index.html"
    write_atomic(index, html)
    return index


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
    from bertology.report.document import Columns, Table

    started = time.perf_counter()
    encoder_a, name_a = _resolve(model_a, encoder_a, device)
    if encoder_b is None and str(model_b) == "untrained":
        encoder_b = encoder_a.untrained(0)
    encoder_b, name_b = _resolve(model_b, encoder_b, device)
    contexts = [make_context(e, n, out, fresh, seeds, max_sentences, progress, device)
                for e, n in ((encoder_a, name_a), (encoder_b, name_b))]
    built = [run_sections(c, sections) for c in contexts]
    combined: list[Section] = []
    for section_a, section_b in zip(*built):
        combined.append(Section(section_a.id, section_a.title, note=section_a.note, blocks=[
            Columns([(encoder_a.name, section_a.blocks), (encoder_b.name, section_b.blocks)])]))
    differences = Section("differences", "Differences", note=f"{encoder_a.name} minus {encoder_b.name}.")
    probing = [_probing_means(c) for c in contexts]
    if all(p is not None for p in probing):
        merged = probing[0].merge(probing[1], on=["task", "layer"], suffixes=(" A", " B"))
        merged["A - B"] = merged["accuracy A"] - merged["accuracy B"]
        differences.add(Table(merged, "Probe test accuracy (%, mean over seeds) per task and layer, and the difference.",
                              float_format="{:.1f}", max_rows=120))
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
    html = render(f"bertology comparison: {encoder_a.name} vs {encoder_b.name}", header, combined,
                  SETUP_NOTES)
    index = Path(out) / f"compare-{name_a}-vs-{safe_name(name_b)}" / "index.html"
    write_atomic(index, html)
    return index


def _probing_means(context: ReportContext) -> pd.DataFrame | None:
    frames = [pd.read_parquet(p) for p in context.cache.root.glob("probing-*/results.parquet")]
    if not frames:
        return None
    results = frames[-1]
    rows = results[(results["baseline"] == "none") & (results["split"] == "test") & (results["metric"] == "accuracy")
                   & results["layer"].notna()]
    means = rows.groupby(["task", "layer"])["value"].mean().mul(100).rename("accuracy").reset_index()
    means["layer"] = means["layer"].astype(int)
    return means


def _model_comparison(contexts, encoder_a: Encoder, encoder_b: Encoder) -> list:
    """Per-layer CKA, attention cosine per head and weight change (bertology.compare)."""
    from bertology.compare import compare_models, plot_comparison
    from bertology.report.document import Image, Table

    key = {"a": encoder_a.fingerprint, "b": encoder_b.fingerprint, "n": 300}
    cache = contexts[0].cache
    tables = cache.get_or_compute(f"compare-{encoder_b.fingerprint}", key, lambda: compare_models(
        encoder_a, encoder_b, contexts[0].dev[:300], progress=contexts[0].progress).tables)
    folder = cache.path(f"compare-{encoder_b.fingerprint}", key) / "figures"
    paths = plot_comparison(tables, folder, title=f"{encoder_a.name} vs {encoder_b.name}")
    blocks: list = [Image(p, f"bertology compare: {Path(p).stem.replace('_', ' ')}.") for p in paths]
    if "cka" in tables:
        blocks.append(Table(tables["cka"], "Linear CKA per layer between the two models' representations "
                                           "(1 = identical up to rotation and scale).", max_rows=30))
    return blocks


SETUP_NOTES = [
    "Corpus: UD English EWT instead of the papers' corpora (SentEval's Toronto Books sentences, Clark's "
    "Wikipedia/WSJ, Hewitt and Manning's PTB); SentEval's ten tasks are rebuilt from the treebank "
    "(docs/tasks.md lists each deviation).",
    "Probes: training sets capped (bertology probe's defaults: 4,000 words or arcs and 1,000 for dev/test for "
    "token tasks, 1,000 sentences and 300 for dev/test per SentEval task) so the battery runs in minutes "
    "on 2 CPU cores; structural probes train on the same UD sentences (about 250), far fewer than Hewitt and "
    "Manning's 40k PTB sentences, so their UUAS is well below a full run's (docs/structural_probes.md); L2 chosen on dev per layer; the layer shown as best is chosen on dev, never on test; "
    "one untrained twin (seed 0) serves all probe seeds, as the Convexity report's single untrained BERT.",
    "Control tasks (Hewitt and Liang 2019) are run for the word- and arc-level tasks; the sentence-level "
    "SentEval tasks have none in the report (bertology probe can run them).",
    "Sentence representations for SentEval tasks are the mean of the layer's word vectors; the papers used "
    "[CLS]/pooled or mean representations of BERT-base.",
    "Attention: word-level maps (Clark et al.'s conversion) on single sentences; heads and offsets selected on "
    "dev and scored on test, where Clark et al. selected and reported on the same data.",
    "Pattern types: the shipped CNN (trained on 512 hand-labelled maps, 0.80 held-out accuracy; "
    "docs/attention_patterns.md) classifies token-level maps, as Kovaleva et al. did with their CNN.",
]
