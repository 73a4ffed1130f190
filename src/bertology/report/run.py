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
    attention_sentences: int = 600
    attention_probe_epochs: int = 10
    pattern_sentences: int = 40
    probe_caps: dict = field(default_factory=lambda: {"max_train": 1000, "max_eval": 300, "structural_epochs": 15})

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
    encoder = encoder or load_encoder(model, device=device)
    name = safe_name(encoder.name if encoder.name != "model" else str(model))
    out_dir = Path(out) / name
    dev = read_conllu(default_corpus("ewt-dev"))
    test = read_conllu(default_corpus("ewt-test"))
    if max_sentences:
        dev, test = dev[:max_sentences], test[:max_sentences]
    context = ReportContext(encoder=encoder, model_name=name, out_dir=out_dir,
                            cache=ResultCache(out_dir / "results", fresh=fresh), dev=dev, test=test,
                            seeds=tuple(seeds), max_sentences=max_sentences, progress=progress, device=device)
    built: list[Section] = []
    for section_id, builder in default_sections():
        if sections and section_id not in sections:
            continue
        section = builder(context)
        if section is not None:
            built.append(section)
    description = encoder.describe()
    header = {
        "model": f"{description['name']} ({description['model_type']})",
        "fingerprint": description["fingerprint"],
        "architecture": f"{description['num_layers']} layers, {description['num_heads']} heads, "
                        f"hidden size {description['hidden_size']}, {description['num_parameters']:,} parameters",
        "corpus": f"{CORPUS_NOTE}: {len(dev):,} + {len(test):,} sentences",
        "seeds": ", ".join(map(str, seeds)),
        "bertology": __version__,
        "run time": f"{time.perf_counter() - started:.0f} s "
                    f"(reused {len(context.cache.hits)} finished parts, computed {len(context.cache.misses)})",
        "generated": time.strftime("%Y-%m-%d %H:%M"),
    }
    html = render(f"bertology report: {description['name']}", header, built, context.notes)
    index = out_dir / "index.html"
    write_atomic(index, html)
    return index
