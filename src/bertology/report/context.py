"""What every report section needs (the model, the corpus, a cache, settings) and the notes beside it.

The layer below both :mod:`bertology.report.run` (which drives the sections) and
:mod:`bertology.report.sections` (which builds them), so neither imports the other's internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bertology import __version__
from bertology.attention.pattern_resources import classifier_evaluation
from bertology.data import Sentence, default_corpus
from bertology.extraction import corpus_hash
from bertology.models import Encoder
from bertology.report.cache import ResultCache

#: The report's probe training sets per level (examples: words, arcs, spans, sentences); every dev and test
#: example is used (intervals as narrow as the packaged data allows), and the caps on word and arc training
#: sets (the quick sizes; bertology probe's defaults are 20,000 and 10,000) keep the four fits per probe (the
#: point fit and three bootstrap seeds, each for the task, its control task and the untrained twin) within a
#: 2-core budget: a dependency-label fit costs about linearly in its training arcs.
REPORT_MAX_TRAIN = {"token": 4000, "edge": 4000, "span": 2000, "sentence": None}

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
    probe_caps: dict = field(default_factory=lambda: {"max_train": dict(REPORT_MAX_TRAIN), "max_eval": None,
                                                            "structural_epochs": 30, "max_iter": 100})
    #: section id -> its result tables, filled as sections run; the findings are generated from them
    results: dict = field(default_factory=dict)
    #: a fine-tuned checkpoint (``bertology finetune`` output) the interventions use instead of fine-tuning
    finetuned: Path | None = None
    #: the findings generated from ``results`` (:mod:`bertology.report.findings`), set when the report is built
    findings: list = field(default_factory=list)
    #: section id -> why it did not run: ``failed`` (an error) and ``skipped`` (by design: data not at hand)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    #: treebanks of several languages (files or folders) for the languages section; None leaves it out
    languages: list[Path] | None = None
    #: the section ids asked for (``--sections``; None: the default report), for sections run only when asked
    sections: list[str] | None = None
    #: the checklist of claims judged on ``results`` (:mod:`bertology.report.claims`), set when the report is built
    claims: object = None

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


SectionBuilder = Callable[[ReportContext], "object | None"]


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-") or "model"


def setup_notes() -> list[str]:
    """The setup notes and deviations printed under every report."""
    patterns = classifier_evaluation()
    return [
        "Corpus: UD English EWT instead of the papers' corpora (SentEval's Toronto Books sentences, Clark's "
        "Wikipedia/WSJ, Hewitt and Manning's PTB); SentEval's ten tasks are rebuilt from the treebank "
        "(docs/tasks.md lists each deviation).",
        "Probes: every dev and test example of the packaged data (UD EWT's dev and test files for word and arc "
        "tasks; the SentEval tasks built from all of EWT's sentences re-split 50/10/40); training sets capped at "
        "4,000 words (UPOS, XPOS) and 4,000 arcs (dependency labels) to fit four fits per probe into a 2-core "
        "budget (bertology probe trains on 20,000 and 10,000), and every SentEval training sentence; a quick run (--max-sentences) "
        "takes bertology probe's --quick sizes, capped further. Starred columns are underpowered: an interval "
        "wider than ±1.5 points with that data, or a split under 200; "
        "structural probes train on the same UD sentences (about 250), far fewer than Hewitt and "
        "Manning's 40k PTB sentences, so their UUAS is well below a full run's (docs/structural_probes.md); L2 chosen on dev per layer; the layer shown as best is chosen on dev, never on test; "
        "one untrained twin (seed 0) serves all probe seeds, as the Convexity report's single untrained BERT.",
        "Control tasks (Hewitt and Liang 2019) are run for the word- and arc-level tasks; the sentence-level "
        "SentEval tasks have none in the report (bertology probe can run them).",
        "Sentence representations for SentEval tasks are the mean of the layer's word vectors; the papers used "
        "[CLS]/pooled or mean representations of BERT-base.",
        "Attention: word-level maps (Clark et al.'s conversion) on single sentences; heads and offsets selected on "
        "dev and scored on test, where Clark et al. selected and reported on the same data.",
        f"Pattern types: the shipped CNN ({patterns['n_maps']} hand-labelled maps: trained on "
        f"{patterns['n_train']}, {100 * patterns['test_accuracy']:.0f}% accuracy on the {patterns['n_test']} held out; "
        "docs/attention_patterns.md) classifies token-level maps, as Kovaleva et al. did with their CNN.",
    ]
