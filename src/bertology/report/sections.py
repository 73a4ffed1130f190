"""The report's sections, in the order a reader thinks: tokenization, probing, attention, interventions (whether
the model uses it), knowledge and geometry. The findings at the top are generated from their tables
(:mod:`bertology.report.findings`)."""

from __future__ import annotations

import textwrap


import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bertology.extraction import encode_sentences
from bertology.report.context import ReportContext
from bertology.report.names import SECTION_TITLES
from bertology.report.document import Figure, Link, Section, Table
from bertology.report.findings import best_layer, probing_scores
from bertology.report.names import SECTION_NAMES
from bertology.results import MISSING, Result, number, percent
from bertology.attention.figures import plot_heatmap, plot_pattern_proportions
from bertology.attention.parsing import run_attention_analysis
from bertology.attention.patterns import pattern_analysis
from bertology.attention.stats import STATISTICS, statistic_matrix
from bertology.attention.viewer import view_attention, write_html
from bertology.probing.experiment import run_probing
from bertology.probing.report import plot_layer_curves, table2
from bertology.probing.spec import ProbingSpec
from bertology.probing.structural import summarize_structural
from bertology.probing.tasks import STRUCTURAL, task_names
from bertology.report.compression import compression as compression_section
from bertology.report.interventions import interventions as interventions_section
from bertology.report.knowledge import knowledge as knowledge_section
from bertology.report.languages import languages as languages_section
from bertology.tasks import TABLE2_COLUMNS, TASK_NAMES


def tokenization(context: ReportContext) -> Section:
    """Fertility: subwords per word, overall and by part of speech; the most split words."""

    def compute() -> dict[str, pd.DataFrame]:
        sentences = context.dev + context.test
        encoded = encode_sentences(context.encoder.tokenizer, sentences, context.encoder.max_length)
        rows = []
        for sentence, enc in zip(sentences, encoded):
            counts = np.bincount(enc.word_index, minlength=enc.n_words)
            for word, upos, pieces in zip(sentence.words, sentence.upos or [None] * len(counts), counts):
                rows.append((word, upos, int(pieces)))
        words = pd.DataFrame(rows, columns=["word", "upos", "subwords"])
        by_upos = (words.groupby("upos")["subwords"].agg(["mean", "count"])
                   .rename(columns={"mean": "subwords per word", "count": "words"})
                   .sort_values("subwords per word", ascending=False).reset_index())
        # Real words only: URLs and runs of symbols split into many pieces but say little about the vocabulary.
        lexical = words[words["word"].str.fullmatch(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")]
        split = (lexical.groupby("word")["subwords"].agg(["max", "size"])
                 .rename(columns={"max": "subwords", "size": "occurrences"})
                 .sort_values(["subwords", "occurrences"], ascending=False).head(25).reset_index())
        histogram = words["subwords"].clip(upper=8).value_counts().sort_index().rename_axis("subwords")
        summary = pd.DataFrame({
            "statistic": ["words", "subword tokens", "fertility (subwords per word)", "share of words split",
                          "sentences over the max length (windowed)"],
            "value": [f"{len(words):,}", f"{int(words['subwords'].sum()):,}", f"{words['subwords'].mean():.3f}",
                      f"{(words['subwords'] > 1).mean():.1%}", f"{sum(len(e.segments) > 1 for e in encoded):,}"],
        })
        return Result("tokenization", {"summary": summary, "by_upos": by_upos, "most_split": split,
                                       "histogram": histogram.reset_index(name="words")})

    tables = context.cache.get_or_compute("tokenization", {**context.model_key, "rev": 2}, compute).tables
    section = Section("tokenization", SECTION_TITLES["tokenization"],
                      note="How the model's tokenizer cuts the corpus into subwords. Word vectors elsewhere in "
                           "this report average a word's subwords.")
    section.add(Table(tables["summary"], "Corpus-level tokenization statistics."))
    hist = tables["histogram"]

    def fertility():
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.bar(hist["subwords"].astype(str).str.replace("8", "8+"), hist["words"], color="#2a5db0")
        ax.set_yscale("log")  # one-piece words outnumber the rest by two orders of magnitude
        ax.set_xlabel("subword tokens per word")
        ax.set_ylabel("words in corpus (log scale)")
        ax.set_title("Fertility: subword tokens per word")
        return fig

    section.add(Figure(fertility, "Distribution of subword tokens per word (8 = 8 or more; log scale).",
                       id="tokenization-fertility", data=hist, narrow=True))
    context.results["tokenization"] = tables
    section.add(Table(tables["by_upos"], "Fertility by universal part of speech (gold UPOS).", float_format="{:.2f}"))
    section.add(Table(tables["most_split"], "The most split words (alphabetic words only).", max_rows=25))
    return section


def attention(context: ReportContext) -> Section:
    """Clark et al.'s head statistics and heads as parsers; Kovaleva et al.'s pattern types; the viewer."""
    limit = context.max_sentences or context.attention_sentences
    key = {**context.model_key, "attention_sentences": limit, "probe_epochs": context.attention_probe_epochs}

    def compute() -> dict[str, pd.DataFrame]:
        result = run_attention_analysis(
            context.encoder, treebank=context.treebank_dir, max_eval=limit, max_train=limit,
            probe_seeds=context.seeds, probe_epochs=context.attention_probe_epochs, statistics=True,
            untrained=False, min_count=min(100, max(10, limit // 20)), progress=context.progress)
        texts = [" ".join(s.words) for s in context.dev[: context.pattern_sentences]]
        patterns = pattern_analysis(context.encoder, texts, untrained_seeds=(0,), classifier="cnn", max_length=128)
        return Result("attention", {**result.tables, "patterns": patterns["types"],
                                    "pattern_overall": patterns["overall"]}, meta=result.meta)

    tables = context.cache.get_or_compute("attention", key, compute).tables
    context.results["attention"] = tables
    section = Section("attention", SECTION_TITLES["attention"],
                      note=f"Word-level attention (Clark et al. 2019: summed over the attended word's subwords, "
                           f"averaged over the attending word's) on up to {limit} EWT sentences per split. "
                           "Layers are hidden_states layers (1 = the first transformer layer), heads count from 0; "
                           "L4H5 is head 5 of layer 4, the label every --heads option accepts.")
    stats = tables["statistics"]
    present = [name for name in STATISTICS if name in set(stats["statistic"])]
    n = len(present)
    def statistics_grid():
        columns = 3
        rows = (n + columns - 1) // columns
        fig, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.4 * rows), squeeze=False)
        for ax, name in zip(axes.ravel(), present):
            is_attention = name.startswith("attn_")
            label = ("mean attention weight" if is_attention else
                     "entropy (nats)" if name.startswith("entropy") else "distance (words)")
            plot_heatmap(statistic_matrix(stats, name), _wrap(STATISTICS[name].capitalize(), 42), label, ax=ax,
                         annotate=False, vmin=0.0 if is_attention else None, vmax=1.0 if is_attention else None)
        for ax in axes.ravel()[n:]:
            ax.axis("off")
        fig.tight_layout()
        return fig

    if n:
        section.add(Figure(statistics_grid, "Clark et al. head statistics per layer (rows) and head (columns), averaged over "
                                "the dev sentences: attention to [CLS], [SEP], punctuation, self, next/previous "
                                "word, entropies (nats) and mean attention distance (words). The values are in "
                                "the CSV.", id="attention-statistics",
                           data=stats[["layer", "head", "head_label", "statistic", "value", "n_sentences"]]))
    best = tables["best_heads"]
    show = [c for c in ("relation", "direction", "head_label", "accuracy", "baseline_accuracy", "baseline_offset",
                        "count", "held_out_accuracy", "held_out_baseline_accuracy", "held_out_count")
            if c in best.columns]
    section.add(Table(best[show], "Heads as parsers (Clark et al. Table 1): for each relation, the head whose "
                                  "most-attended word is the dependency's other end most often, selected on dev, "
                                  "beside the best fixed-offset baseline; the test columns score the same choice "
                                  "on test. Accuracies in percent.", max_rows=30, id="attention-parsers",
                      percent=("accuracy", "baseline_accuracy", "held_out_accuracy", "held_out_baseline_accuracy"),
                      headers=PARSER_HEADERS, data=best))
    summary = tables["probe_summary"]
    section.add(Table(summary, "Clark et al.'s attention-only probe (UAS on test, %; mean and std over seeds) "
                               "beside the best single head and the best fixed offset.", id="attention-probe",
                      percent=("uas", "uas_std", "uas_no_punct"),
                      headers={"uas": "UAS (%)", "uas_std": "UAS std", "uas_no_punct": "UAS without punctuation (%)",
                               "n_seeds": "seeds", "head_label": "head"}))
    section.add(Figure(lambda: plot_pattern_proportions(tables["patterns"]), "Kovaleva et al. pattern types per layer "
                       "(shipped CNN classifier on token-level maps of EWT sentences), the model beside its "
                       "untrained twin.", id="attention-patterns-figure", data=tables["patterns"]))
    overall = tables["pattern_overall"][["model", "type", "count", "proportion"]]
    section.add(Table(overall, "Overall share of each pattern type (%) among the head maps classified.",
                      id="attention-patterns", percent=("proportion",), headers={"proportion": "share (%)",
                                                                                "count": "head maps"}))
    sample = next((s for s in context.dev if 8 <= len(s) <= 20), context.dev[0])
    viewer = context.out_dir / "attention_view.html"
    write_html(view_attention(context.encoder, " ".join(sample.words)), viewer)
    section.add(Link(viewer.name, "Open the attention viewer", f"for the sentence \"{' '.join(sample.words)}\" "
                                  "(head view and all layers x heads; works offline)."))
    return section


PARSER_HEADERS = {
    "head_label": "head", "accuracy": "dev accuracy (%)", "baseline_accuracy": "offset baseline, dev (%)",
    "baseline_offset": "best offset", "count": "dev words", "held_out_accuracy": "test accuracy (%)",
    "held_out_baseline_accuracy": "offset baseline, test (%)", "held_out_count": "test words",
}


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width))


def probing(context: ReportContext) -> Section:
    """The Convexity report's Table 2 on SentEval tasks built from EWT, token/edge probes, structural probes."""
    tasks = report_probing_tasks()
    caps = context.probe_caps
    # rev 2: probing results as a Result (fractions, nullable layer/seed, a component column)
    # rev 3: intervals (summary ci_low/ci_high), sizes used (datasets n_train/n_dev/n_test), quick sizes
    # rev 4: SentEval tasks from the pooled 50/10/40 re-split of the treebank (run_probing's default)
    # rev 5: exact linear probes, bootstrap training resamples per seed
    # rev 6: the edge tasks by arc length (table arc_length), the position task
    # rev 7: the exact linear probe is the default and walks the L2 grid as a regularisation path
    # rev 8: the exact probe chooses L2 on the dev cross-entropy and polishes the choice in float64
    # rev 9: the point fit on every training example gives the number, the bootstrap seeds its spread
    # rev 10-11: tried, then withdrawn: bootstrap seeds without (all of) the float64 polish
    # rev 13: every dev and test example, training sets capped per level (no quick sizes outside --max-sentences)
    key = {**context.model_key, "tasks": tasks, "caps": caps, "rev": 13}
    result = context.cache.get_or_compute("probing", key, lambda: run_probing_for_report(context, tasks, caps))
    tables = result.tables
    results = tables["results"]
    context.results["probing"] = dict(tables)
    scores = probing_scores(context.results["probing"])
    context.results["probing"]["scores"] = scores  # the findings read the same numbers
    classification = results[results["probe"] != "structural"]
    structural = results[results["probe"] == "structural"]
    section = Section("probing", SECTION_TITLES["probing"],
                      note="Linear probes (multinomial logistic regression, L2 chosen on dev per layer) on every "
                           "layer; numbers are test accuracy in percent of the probe fitted on every training example, "
                           "with a 95% interval that adds the spread of probes fitted on bootstrap resamples of the "
                           "training set (one per seed) to the test-set sampling. The best layer is chosen "
                           "on dev and shown in bold only when its dev accuracy lies outside the runner-up's 95% "
                           "interval and its test interval is above the majority class; otherwise the last rows "
                           "say which layers are indistinguishable. In parentheses: the difference from the same "
                           "probe on the untrained twin (re-initialised weights, seed 0), as in the Convexity "
                           "report's Table 2. Layer 0 is the embedding layer. The CSV holds every number as a "
                           "fraction with its interval.")
    senteval = classification[classification["task"].isin(TASK_NAMES)]
    model = result.meta.get("model")
    if not senteval.empty:
        numbers = _rows_of(tables["table2"], senteval)
        section.add(_marked_table2(numbers, scores, "Table 2 layout: SentEval "
                                   "probing tasks rebuilt from UD English EWT, its sentences re-split 50/10/40 (see docs/tasks.md for each task's "
                                   "deviations), accuracy % [95% CI] (delta vs untrained twin; ns = the delta's 95% "
                                   "interval holds 0, so its sign is not established); * = underpowered (CI wider "
                                   "than ±1.5 points or a split under 200); bold = best layer (see the note).",
                                   "probing-senteval"))
        section.add(Figure(lambda: plot_layer_curves(numbers, None, model), "SentEval tasks: accuracy per layer (mean ± std "
                           "over seeds) beside the majority class (dashed) and the untrained twin.",
                           id="probing-senteval-figure", data=_curve_data(scores, senteval)))
    tokens = classification[~classification["task"].isin(TASK_NAMES)]
    if not tokens.empty:
        token_numbers = _rows_of(tables["table2"], tokens)
        section.add(_marked_table2(token_numbers, scores, "Token and edge probes (UPOS, "
                                   "XPOS, dependency label of the arc): accuracy % [95% CI] (delta vs untrained twin; "
                                   "ns = its interval holds 0); * = underpowered; bold = best layer.",
                                   "probing-tokens"))
        best = _with_compression(token_numbers[token_numbers["best_on_dev"] == True], tables["summary"])  # noqa: E712
        cols = [c for c in ("task", "layer", "mean", "std", "untrained", "control", "selectivity", "majority")
                if c in best.columns]
        mdl = [c for c in ("compression", "compression_control", "compression_untrained") if c in best.columns]
        section.add(Table(best[cols + mdl], "At the layer chosen on dev: accuracy (%) beside the untrained twin, "
                                            "the control task (Hewitt and Liang 2019) and selectivity = accuracy - "
                                            "control accuracy (percentage points); with MDL measured, its "
                                            "compression (Voita and Titov 2020: uniform / online codelength of the "
                                            "training labels, first seed) of the task, its control task and the twin.", id="probing-selectivity",
                          percent=[c for c in cols if c not in ("task", "layer")],
                          headers={"mean": "accuracy (%)", "std": "std (seeds)", "untrained": "untrained twin (%)",
                                   "control": "control task (%)", "selectivity": "selectivity (points)",
                                   "majority": "majority (%)", "compression": "compression (task)",
                                   "compression_control": "compression (control)",
                                   "compression_untrained": "compression (twin)"}))
        section.add(Figure(lambda: plot_layer_curves(token_numbers, None, model), "Token and edge probes per layer with their baselines.",
                           id="probing-tokens-figure", data=_curve_data(scores, tokens)))
        arcs = _arcs_at_chosen_layer(tables.get("arc_length"), tables["table2"])
        if arcs is not None:
            section.add(Table(arcs, "Dependency labels by arc length (words between dependent and head), test, at the "
                                    "layer chosen on dev: accuracy % [95% CI] beside the untrained twin and the "
                                    "majority class in the same arcs; drop = adjacent arcs' accuracy minus this "
                                    "bin's, in points [95% CI] (bootstrap of each bin's arcs pooled over seeds). "
                                    "Long arcs carry other labels than short ones, so read the drop beside the "
                                    "twin's and the majority's.", id="probing-arcs",
                              data=tables["arc_length"]))
    if not structural.empty:
        summary = summarize_structural(structural)
        test = summary[(summary["split"] == "test")]
        chosen = summary[(summary["split"] == "dev") & summary["best_on_dev"]][["task", "baseline", "metric", "layer"]]
        best = test.merge(chosen, on=["task", "baseline", "metric", "layer"])

        def cell(r) -> str:
            rate = r["metric"] in ("uuas", "root_acc")
            fmt = (lambda v: percent(v)) if rate else (lambda v: number(v))
            spread = "" if pd.isna(r["std"]) else f" ± {fmt(r['std'])}"
            return f"{fmt(r['mean'])}{spread} (layer {_layer_text(r['layer'])})"

        best["value"] = best.apply(cell, axis=1)
        pivot = best.pivot_table(index=["task", "baseline"], columns="metric", values="value",
                                 aggfunc="first").reset_index()
        section.add(Table(pivot, "Structural probes (Hewitt and Manning 2019), test split, mean ± std over seeds "
                                 "at the layer chosen on dev: UUAS and root accuracy (%) exclude punctuation; "
                                 "DSpr./NSpr. are Spearman correlations averaged over sentence lengths 5-50. "
                                 "Baselines: untrained twin and the linear chain (distance |i - j|).",
                          id="probing-structural", data=best.drop(columns=["value"]),
                          headers={"uuas": "UUAS (%)", "root_acc": "root accuracy (%)", "dspr": "DSpr.",
                                   "nspr": "NSpr."}))
        section.add(Figure(lambda: _structural_curves(test), "Structural probes per layer beside their baselines.",
                           id="probing-structural-figure", data=test))
    return section


def _arcs_at_chosen_layer(arcs: pd.DataFrame | None, numbers: pd.DataFrame) -> pd.DataFrame | None:
    """Each edge task's accuracy by arc length at its layer chosen on dev (the probing ``arc_length`` table),
    formatted: one row per task and bin; None when the run has no such table."""
    if arcs is None or arcs.empty:
        return None
    shown = []
    for task, rows in arcs.groupby("task", sort=False):
        chosen = numbers[(numbers["task"] == task) & (numbers["best_on_dev"] == True)]  # noqa: E712
        if chosen.empty:
            continue
        at = rows[rows["layer"] == int(chosen["layer"].iloc[0])]
        by = {baseline: part.set_index("bin") for baseline, part in at.groupby("baseline")}
        if "none" not in by:
            continue
        for label, row in by["none"].iterrows():
            other = {b: (percent(by[b].loc[label, "accuracy"]) if b in by and label in by[b].index else "–")
                     for b in ("untrained", "majority")}
            shown.append({"task": task, "layer": int(row["layer"]), "arc length": label, "arcs": int(row["arcs"]),
                          "accuracy (%)": f"{percent(row['accuracy'])} [{percent(row['ci_low'])}, "
                                          f"{percent(row['ci_high'])}]",
                          "untrained twin (%)": other["untrained"], "majority (%)": other["majority"],
                          "drop (points)": "–" if row["drop_ci_low"] == row["drop_ci_high"] == 0 else
                          f"{100 * row['drop']:+.1f} [{100 * row['drop_ci_low']:+.1f}, {100 * row['drop_ci_high']:+.1f}]"})
    return pd.DataFrame(shown) if shown else None


def _with_compression(rows: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (task, layer) with the MDL compression of the task, its control and the twin at that layer, when
    the run measured it (metric ``compression``, split ``train``); rounded to two decimals for the table."""
    found = summary[(summary["metric"] == "compression") & (summary["split"] == "train")]
    if found.empty or rows.empty:
        return rows
    out = rows.copy()
    for baseline, column in (("none", "compression"), ("control", "compression_control"),
                             ("untrained", "compression_untrained")):
        values = found[found["baseline"] == baseline].set_index(["task", "layer"])["mean"]
        out[column] = [round(float(values.get((t, l), float("nan"))), 2) for t, l in zip(out["task"], out["layer"])]
    return out


def _task_column(task: str, metric: str) -> str:
    name = TABLE2_COLUMNS.get(task, task)
    return name if metric == "accuracy" else f"{name} [{metric}]"


def _rows_of(numbers: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
    """The rows of a ``table2`` frame for the tasks of ``results``, in the order those tasks were run."""
    order = {task: i for i, task in enumerate(dict.fromkeys(results["task"]))}
    rows = numbers[numbers["task"].isin(order)]
    return rows.iloc[rows["task"].map(order).argsort(kind="stable")].reset_index(drop=True)


def _marked_table2(numbers: pd.DataFrame, scores: pd.DataFrame, caption: str, anchor: str) -> Table:
    """Table 2 (layers x tasks, "acc [95% CI] (delta)") of the rows of the probing ``table2`` frame of some
    tasks, with the best layer in bold where it may be marked, and rows saying where it is not: the layers
    indistinguishable from it, or that it is at chance."""
    display = table2(numbers)
    bold = set()
    best_row, ci_row = {}, {}
    positions = {layer: i for i, layer in enumerate(display.index)}
    tasks = list(dict.fromkeys(numbers["task"]))
    test = scores[scores["split"] == "test"]
    for task in tasks:
        rows = test[test["task"] == task]
        if rows.empty:
            continue
        name = _task_column(task, rows["metric"].iloc[0])
        column = next((c for c in display.columns if str(c).rstrip("*") == name), None)  # "*": underpowered
        if column is None:
            continue
        choice = best_layer(scores, task)
        if choice["layer"] is None:
            continue
        at = rows[rows["layer"] == choice["layer"]].iloc[0]
        ci_row[column] = f"{percent(at['ci_low'])}–{percent(at['ci_high'])}" if not pd.isna(at["ci_low"]) else MISSING
        if choice["marked"]:
            bold.add((positions[choice["layer"]], column))
            best_row[column] = str(choice["layer"])
        elif choice["at_chance"]:
            best_row[column] = f"{choice['layer']} (at chance)"
        else:
            tied = choice["indistinguishable"]
            best_row[column] = (f"{tied[0]}–{tied[-1]}" if tied == list(range(tied[0], tied[-1] + 1))
                                else ",".join(map(str, tied))) + " (indistinguishable)"
    extra = pd.DataFrame([best_row, ci_row], index=["best layer (dev)", "95% CI at that layer (test)"])
    display = pd.concat([display, extra.reindex(columns=display.columns).fillna("")])
    display.index.name = "layer"
    frame = display.reset_index()
    data = scores[scores["task"].isin(tasks)].drop(columns=["component"], errors="ignore")
    return Table(frame, caption, id=anchor, bold=bold, data=data)


def _curve_data(scores: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
    columns = [c for c in ("task", "split", "layer", "metric", "mean", "std", "n_seeds", "ci_low", "ci_high",
                           "untrained", "control", "majority") if c in scores.columns]
    return scores[scores["task"].isin(set(results["task"])) & (scores["split"] == "test")][columns]


def report_probing_tasks() -> list[str]:
    """The ten SentEval tasks, every registered treebank task (upos, xpos, deprel and any task added with
    :func:`bertology.probing.register_task`), and the structural probes."""
    return list(TASK_NAMES) + list(task_names(source="ud")) + [STRUCTURAL]


def report_probing_spec(context: ReportContext, tasks: list[str], caps: dict):
    """The report's probing settings (:class:`~bertology.probing.spec.ProbingSpec`): every dev and test example,
    training sets capped per level (:data:`~bertology.report.context.REPORT_MAX_TRAIN`; a quick run,
    ``--max-sentences``, takes the quick sizes capped further), one untrained twin for every seed, control tasks
    for word, arc and span tasks, no scalar mix."""
    max_train, max_eval = caps["max_train"], caps["max_eval"]
    quick = bool(context.max_sentences)
    if quick:  # a quick run: cap the examples too (the caps count words, arcs or sentences)
        max_train, max_eval = context.max_sentences, min(context.max_sentences, max(20, context.max_sentences // 2))
    return ProbingSpec(tasks=tuple(tasks), treebank=context.treebank_dir, seeds=tuple(context.seeds),
                       max_train=max_train, max_eval=max_eval, max_sentences=context.max_sentences, quick=quick,
                       twin_per_seed=False, control="token", scalar_mix=False,
                       probe_options={"max_iter": caps["max_iter"]},
                       structural_options={"epochs": caps["structural_epochs"]})


def run_probing_for_report(context: ReportContext, tasks: list[str], caps: dict):
    """:func:`bertology.probing.run_probing` with the report's spec (:func:`report_probing_spec`); its Result."""
    return run_probing(context.encoder, report_probing_spec(context, tasks, caps),
                       cache_dir=context.store_dir, progress=context.progress,
                       device=context.device or "auto")


def _layer_text(layer) -> str:
    return "-" if pd.isna(layer) else str(int(layer))


def _structural_curves(summary: pd.DataFrame):
    metrics = [m for m in ("uuas", "dspr", "root_acc", "nspr") if m in set(summary["metric"])]
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.4 * len(metrics), 2.8), squeeze=False)
    styles = {"none": ("o-", "C0", "encoder"), "untrained": ("s-", "C1", "untrained twin"),
              "linear-chain": ("--", "grey", "linear chain")}
    for ax, metric in zip(axes[0], metrics):
        part = summary[summary["metric"] == metric]
        for task, marker in (("structural-distance", None), ("structural-depth", None)):
            if metric in ("uuas", "dspr") and task != "structural-distance":
                continue
            if metric in ("root_acc", "nspr") and task != "structural-depth":
                continue
            for baseline, (style, color, label) in styles.items():
                rows = part[(part["task"] == task) & (part["baseline"] == baseline)].sort_values("layer")
                if rows.empty:
                    continue
                if rows["layer"].isna().all():
                    ax.axhline(rows["mean"].iloc[0], ls="--", color=color, label=label)
                else:
                    ax.plot(rows["layer"].astype(float), rows["mean"], style, color=color, ms=3, label=label)
        ax.set_title(metric.replace("_", " "))
        ax.set_xlabel("layer")
        ax.set_ylabel(metric.replace("_", " "))
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def knowledge(context: ReportContext) -> Section:
    """Contextuality, static similarity, the MLM probe, LAMA and minimal pairs:
    :func:`bertology.report.knowledge.knowledge`."""
    return knowledge_section(context)


def interventions(context: ReportContext) -> Section:
    """Whether the model uses what the probes find: :func:`bertology.report.interventions.interventions`."""
    return interventions_section(context)


def languages(context: ReportContext) -> Section:
    """Several languages, when the report is given treebanks: :func:`bertology.report.languages.languages`."""
    return languages_section(context)


def compression(context: ReportContext) -> Section:
    """Compression, only when asked (``--sections compression``): :func:`bertology.report.compression.compression`."""
    return compression_section(context)


#: ``(id, builder)`` in reading order: the ids are :data:`bertology.report.names.SECTION_NAMES` (light, for the
#: command line), each the name of its builder above.
SECTIONS = [(name, globals()[name]) for name in SECTION_NAMES]
