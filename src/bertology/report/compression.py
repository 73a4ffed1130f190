"""The report's "Compression" section: :func:`bertology.compression.run_compression` on the report's model, run
only when asked (``bertology report --sections compression``): a dozen variants do not fit the default report's
10-minute budget, so the default report only says how to add it."""

from __future__ import annotations

import pandas as pd

from bertology.compression import EvalSets, run_compression
from bertology.report.context import ReportContext
from bertology.report.document import Image, Section, Table, Text
from bertology.report.names import SECTION_TITLES
from bertology.results import Result

#: The methods the section compares: one of each kind, the strongest setting of the docs' table (a model of
#: fewer than 3 layers drops 1).
REPORT_METHODS = "int8-dynamic,fp16,magnitude:0.5,heads-importance:0.5,heads-random:0.5,drop-top:{drop}"
#: At most this many EWT sentences train the probes, choose on dev and are scored (--max-sentences caps the
#: report's corpus, and so these).
REPORT_SENTENCES = (300, 150, 200)


def compression(context: ReportContext) -> Section:
    """Size, speed-up and retention of UPOS, UUAS and parser heads per compression method (docs/compression.md)."""
    section = Section("compression", SECTION_TITLES["compression"],
                      note="What quantization, pruning and layer dropping cost the model, in the Primer's layout "
                           "(x smaller, % of the original's score kept, x faster; docs/compression.md).")
    if "compression" not in (context.sections or ()):
        section.add(Text("<p>Not part of the default report (it compresses and measures several models, beyond the "
                         "report's time budget). <code>bertology report --sections compression</code> adds it; "
                         "<code>bertology compress</code> runs every method with its checkpoints.</p>"))
        return section
    # the report's own sentences: a third of its EWT dev sentences choose layers, L2 and heads, the rest train
    # the probes; its EWT test sentences are scored and timed
    usable = [s for s in context.dev if 1 < len(s) <= 60]
    choose = min(REPORT_SENTENCES[1], max(2, len(usable) // 3))
    sets = EvalSets(usable[choose:choose + REPORT_SENTENCES[0]], usable[:choose],
                    [s for s in context.test if 1 < len(s) <= 60][:REPORT_SENTENCES[2]])
    sizes = (len(sets.train), len(sets.dev), len(sets.test))
    methods = REPORT_METHODS.format(drop=max(1, min(2, context.encoder.num_layers - 1)))
    # rev 2: the probe-retention column's probe is the exact linear probe (the default)
    # rev 3: the exact probe chooses L2 on the dev cross-entropy and polishes the choice in float64
    key = {**context.model_key, "methods": methods, "sentences": list(sizes), "rev": 3}
    folder = context.cache.path("compression", key).with_name("compression-run")

    def compute() -> dict[str, pd.DataFrame]:
        result = run_compression(context.encoder, methods, folder, sets=sets, rounds=2,
                                 seed=context.seeds[0], min_relation_count=max(5, sizes[1] // 10),
                                 progress=context.progress)
        return Result("compression", {name: result[name] for name in ("summary", "layers", "baselines")})

    tables = context.cache.get_or_compute("compression", key, compute).tables
    context.results["compression"] = tables
    summary = tables["summary"]
    shown = pd.DataFrame({
        "method": summary["variant"],
        "MB": (summary["parameter_bytes"] / 1e6).round(1),
        "x smaller": summary["compression"].round(2),
        "x faster": [f"{s:.2f} [{lo:.2f}, {hi:.2f}]" for s, lo, hi in
                     zip(summary["speedup"], summary["speedup_min"], summary["speedup_max"])],
        **{f"{name} kept": [_kept(row, measure) for _, row in summary.iterrows()]
           for name, measure in (("UPOS", "upos"), ("UUAS", "uuas"), ("parser heads", "parser_heads"))},
    })
    base = dict(zip(tables["baselines"]["measure"], tables["baselines"]["value"]))
    section.add(Text(f"<p>UD English EWT: probes trained on {sizes[0]} dev sentences, layers, L2 and heads chosen on "
                     f"{sizes[1]} others, scored and timed on {sizes[2]} test sentences; seed "
                     f"{context.seeds[0]}. Kept = compressed / original at each model's best layer (parser heads: "
                     "mean over relations of the best head's accuracy), with a 95% paired bootstrap interval over "
                     "test sentences. Original scores beside their baselines: UPOS "
                     f"{100 * summary['upos'].iloc[0]:.1f}% (majority tag {100 * base['upos_majority']:.1f}%), UUAS "
                     f"{100 * summary['uuas'].iloc[0]:.1f}% (linear chain {100 * base['uuas_linear_chain']:.1f}%), "
                     f"parser heads {100 * summary['parser_heads'].iloc[0]:.1f}% (best offset "
                     f"{100 * base['parser_heads_offset']:.1f}%). Speed-up: extract's tokens/s, median over 2 "
                     "interleaved rounds after a warm-up, on this machine as it was loaded.</p>"))
    section.add(Table(shown, "Compression in the Primer's layout (Table 1)", data=summary, id="compression-table"))
    figure = folder / "layers.png"
    if figure.is_file():
        section.add(Image(figure, "Per layer: UPOS, UUAS, anisotropy and self-similarity, original (black) vs each "
                                  "variant", data=tables["layers"]))
    return section


def _kept(row, measure: str) -> str:
    value, low, high = row[f"{measure}_retention"], row[f"{measure}_ci_low"], row[f"{measure}_ci_high"]
    if pd.isna(value):
        return ""
    if pd.isna(low):
        return f"{100 * value:.1f}%"
    return f"{100 * value:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"

