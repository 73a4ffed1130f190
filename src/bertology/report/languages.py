"""The report's "Languages" section: :func:`bertology.languages.run_languages` on the treebanks the report was
given (``bertology report --languages DIR``); without treebanks it only says how to add it."""

from __future__ import annotations

import html

from bertology.languages import display_tables, run_languages, save_figures
from bertology.languages.treebanks import treebank_files
from bertology.report.context import ReportContext
from bertology.report.document import Image, Section, Table, Text
from bertology.report.names import SECTION_TITLES
from bertology.results import Result
from bertology.store.store import file_sha256

#: Probe sizes in the report (examples per language and for English): smaller than ``bertology languages``'
#: defaults (5,000 / 2,000), so the section stays within minutes beside the others.
REPORT_MAX_TRAIN = 2000
REPORT_MAX_DEV = 1000


def languages(context: ReportContext) -> Section:
    """Language identity, centroids, parallel sentence retrieval, zero-shot UPOS transfer and the tokenizer per
    language, model vs untrained twin (docs/languages.md)."""
    section = Section("languages", SECTION_TITLES["languages"],
                      note="What the model knows about which language it reads and how its English UPOS probe "
                           "transfers, per layer, beside its untrained twin (docs/languages.md).")
    if not context.languages:
        section.add(Text("<p>This report was given no treebanks of other languages. <code>bertology report "
                         "--languages DIR</code> (CoNLL-U treebanks of two or more languages, e.g. UD's parallel "
                         "PUD treebanks) adds language identity, language centroids, parallel sentence retrieval "
                         "and the zero-shot transfer of English probes here; <code>bertology languages</code> "
                         "runs them alone.</p>"))
        return section
    files = treebank_files(context.languages)
    # rev 2: the tables' ``encoder`` column became ``baseline`` (none/untrained/majority); the numbers are the same
    # rev 3: the exact linear probe is the default
    # rev 4: the exact probe chooses L2 on the dev cross-entropy and polishes the choice in float64
    key = {**context.model_key, "treebanks": [file_sha256(p) for p in files], "max_train": REPORT_MAX_TRAIN,
           "max_dev": REPORT_MAX_DEV, "rev": 4}

    def compute():
        result = run_languages(context.encoder, context.languages, seeds=context.seeds, tasks=("upos",),
                               max_sentences=context.max_sentences, max_train=REPORT_MAX_TRAIN,
                               max_dev=REPORT_MAX_DEV, device=context.device, progress=context.progress)
        return result

    tables = context.cache.get_or_compute("languages", key, compute).tables
    result = Result("languages", tables, meta={"model": context.model_name})
    context.results["languages"] = tables
    figures = save_figures(result, context.cache.path("languages", key) / "figures", context.model_name)
    shown = display_tables(result)
    codes = ", ".join(tables["languages"]["language"])
    section.add(Text(f"<p>Languages: {html.escape(codes)} ({int(tables['languages']['sentences'].sum()):,} "
                     f"sentences). Probes: linear, {REPORT_MAX_TRAIN:,} training words per language and for English "
                     f"(UD English EWT), seeds {', '.join(map(str, context.seeds))}; test splits whole; 95% "
                     "intervals from the bootstrap over test examples pooled over seeds; * marks the layer chosen "
                     "on dev (retrieval: on the non-test queries).</p>"))
    absent = tables["absent"]
    if len(absent):
        items = "".join(f"<li>{html.escape(str(r.measure))}{' (' + html.escape(r.language) + ')' if isinstance(r.language, str) else ''}: "
                        f"{html.escape(str(r.reason))}</li>" for r in absent.itertuples())
        section.add(Text(f"<p>Left out:</p><ul>{items}</ul>"))
    section.add(Table(shown["identity"], "Language identity: test accuracy (%) of a linear probe on mean-pooled "
                      "sentence vectors, [95% interval].", id="languages-identity", data=tables["identity_summary"]))
    section.add(Image(figures["identity"], "Language identity per layer, model vs untrained twin."))
    section.add(Image(figures["projection"], "Language centroids (X) and a sample of sentences on the first two "
                      "principal components, per layer (Libovický et al. 2019, Figure 7)."))
    if "retrieval" in shown:
        section.add(Table(shown["retrieval"], "Parallel sentence retrieval accuracy @1 (%), mean over ordered "
                          "language pairs, test queries among all of the other language's sentences; raw and "
                          "after subtracting each language's centroid.", id="languages-retrieval",
                          data=tables["retrieval_summary"]))
        section.add(Image(figures["retrieval_matrix"], "Retrieval accuracy @1 per language pair at the best layer."))
    if "transfer_upos" in shown:
        section.add(Table(shown["transfer_upos"], "UPOS: the probe trained within the language vs the one trained on "
                          "English (zero-shot), each at the layer chosen on its own dev; ratio = zero-shot / "
                          "in-language.", id="languages-transfer", data=tables["transfer_best"]))
        section.add(Image(figures["transfer_upos"], "UPOS per layer and language: in-language vs zero-shot."))
    section.add(Table(shown["tokenizer"], "The tokenizer per language.", id="languages-tokenizer",
                      data=tables["tokenizer"]))
    if "tasks" in shown:
        section.add(Table(shown["tasks"], "SentEval tasks built from each language's treebank (test sentences), "
                          "or absent where its annotation cannot support them.", id="languages-tasks",
                          data=tables["tasks"], collapsed=True))
    return section
