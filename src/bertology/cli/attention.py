"""``bertology attention stats|parse|patterns|view``: a thin typer layer over :mod:`bertology.attention`.

Options are the shared ones of :mod:`bertology.cli.options`; layers and heads are in the one numbering
(:mod:`bertology.numbering`). Tables are written as Parquet + CSV with accuracies as fractions; the
console shows them in percent.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.table import Table

import bertology.cli.options as options
from bertology.errors import UsageError
from bertology.cli.options import (check_positive, data_option, default_out, device_option, layers_option,
                               max_sentences_option, model_option, out_option, parse_layers, progress_option,
                               resolve_device, seed_list, seed_option, seeds_option)

if TYPE_CHECKING:  # pandas is imported when a command runs
    import pandas as pd

app = options.CommandApp(help="Attention analysis: Clark et al.'s head statistics, heads as parsers, Kovaleva pattern types, viewer.",
                  no_args_is_help=True)
console = Console()


def _rich_table(df: pd.DataFrame, title: str, percent_columns: tuple[str, ...] = (), digits: int = 3) -> Table:
    import pandas as pd

    from bertology.results import MISSING, is_missing, number, percent

    table = Table(title=title)
    for column in df.columns:
        table.add_column(str(column), justify="right" if pd.api.types.is_numeric_dtype(df[column]) else "left")
    for row in df.itertuples(index=False):
        cells = []
        for column, value in zip(df.columns, row):
            if is_missing(value):
                cells.append(MISSING)
            elif column in percent_columns:
                cells.append(percent(value))
            elif isinstance(value, float):
                cells.append(number(value, digits))
            else:
                cells.append(str(value))
        table.add_row(*cells)
    return table


def _load(model: str, device: str, untrained_seed: Optional[int] = None):
    from bertology.models import load_encoder

    return load_encoder(model, untrained_seed=untrained_seed, device=resolve_device(device))


@app.command("stats")
def stats_command(
    model: str = model_option(),
    data: Path = data_option(..., help="Corpus: .conllu[.gz], .txt (one sentence a line) or .tsv."),
    out: Optional[Path] = out_option("attention-stats"),
    max_sentences: Optional[int] = max_sentences_option(),
    layers: Optional[str] = layers_option("Transformer layers to look at: all, 3,6, 1-4, L3 or last (default all)."),
    untrained_seed: Optional[int] = typer.Option(None, "--untrained-seed", help="Use the untrained twin from this seed."),
    max_words: Optional[int] = typer.Option(
        None, "--max-words", show_default=False,
        help="Skip sentences of more than N words (counted in meta.json). Default: a sentence over 512 words is "
             "refused (its word-level maps take 4 x heads x layers x (words+2)^2 bytes)."),
    device: str = device_option(),
    progress: bool = progress_option(),
) -> None:
    """Clark et al.'s per-head statistics (attention to [CLS]/[SEP]/punctuation/self/neighbours, entropies, distance)."""
    import pandas as pd

    from bertology.attention.figures import plot_head_statistics
    from bertology.attention.stats import STATISTICS, encoder_head_statistics, statistic_matrix
    from bertology.data import read_corpus

    from bertology.files import staged_dir
    from bertology.cli.options import check_seed

    max_sentences = check_positive(max_sentences, "--max-sentences")
    max_words = check_positive(max_words, "--max-words")
    check_seed(untrained_seed, "--untrained-seed")
    sentences = read_corpus(data)[:max_sentences]
    encoder = _load(model, device, untrained_seed)
    chosen = parse_layers(layers, encoder.num_layers, transformer_only=True)
    out = out or default_out("attention-stats", model, Path(data).stem)
    result = encoder_head_statistics(encoder, sentences, layers=chosen, progress=progress, max_words=max_words,
                                     source=str(data))
    if result.meta["skipped_sentences"]:
        console.print(f"note: {result.meta['skipped_sentences']} sentence(s) of more than {max_words} words skipped "
                      "(--max-words)", highlight=False)
    with staged_dir(out) as staged:  # tables and figures appear together or not at all (a full disk)
        result.save(staged)
        figures = plot_head_statistics(result, staged / "figures", model_name=encoder.name)

    per_layer = pd.DataFrame({name: statistic_matrix(result, name).mean(axis=1) for name in STATISTICS})
    per_layer = per_layer.rename_axis("layer").reset_index()
    console.print(_rich_table(per_layer, f"{encoder.name}: head statistics, mean over heads "
                                         f"({len(sentences)} sentences; uniform entropy "
                                         f"{result.meta['uniform_entropy']:.2f} nats)"))
    console.print(f"wrote {len(result.tables)} tables and {len(figures)} figures to {out}")


@app.command("parse")
def parse_command(
    model: str = model_option(),
    treebank: Optional[Path] = typer.Option(
        None, "--treebank", help="UD folder with *-ud-{train,dev,test}.conllu[.gz] (default: the packaged UD English EWT)."),
    old_treebank: Optional[Path] = options.old_option("-t"),
    out: Optional[Path] = out_option("attention-parse"),
    max_eval: Optional[int] = typer.Option(None, "--max-eval", help="Use only the first N sentences of dev and of "
                                           "test (default all)."),
    max_train: Optional[int] = typer.Option(None, "--max-train", show_default=False,
                                            help="Use only the first N train sentences, the probe's (default 2000)."),
    old_max_sentences: Optional[int] = options.old_option("--max-sentences"),
    old_max_train: Optional[int] = options.old_option("--max-train-sentences"),
    seeds: int = seeds_option(3, "Attention-only probe runs (seeds SEED..SEED+N-1); 0 skips the probe."),
    seed: int = seed_option(),
    epochs: int = typer.Option(20, "--epochs", help="Probe training epochs."),
    min_count: int = typer.Option(100, "--min-count", help="Relations with fewer dev words are left out of Table 1."),
    layers: Optional[str] = layers_option("Transformer layers whose heads are scored: all, 3,6, 1-4, L3 or last."),
    untrained: bool = typer.Option(False, "--untrained/--no-untrained", help="Repeat everything on the untrained twin "
                                   "(seed --seed)."),
    old_control: Optional[bool] = options.old_option("--control"),
    statistics: bool = typer.Option(True, "--statistics/--no-statistics", help="Also compute head statistics on dev."),
    compare_clark: bool = typer.Option(False, "--compare-clark", help="Print ours beside Clark et al.'s Table 1."),
    device: str = device_option(),
    progress: bool = progress_option(),
) -> None:
    """Heads as dependency parsers (Clark et al. Table 1) and the attention-only probe."""
    from bertology.attention.figures import write_parse_figures
    from bertology.attention.parsing import run_attention_analysis
    from bertology.attention.spec import AttentionParseSpec

    # `-t` was --treebank here and --task elsewhere: it means --task(s) only, once this spelling goes
    # --control was the twin here; elsewhere it means control tasks (probe --control)
    untrained = bool(options.renamed(untrained or None, old_control, "--untrained", "--control"))
    treebank = options.check_exists(options.renamed(treebank, old_treebank, "--treebank", "-t"), "--treebank")
    # the subset sizes' old spellings: --max-sentences is the corpus read before it is split everywhere else
    max_eval = check_positive(options.renamed(max_eval, old_max_sentences, "--max-eval", "--max-sentences"),
                              "--max-eval")
    max_train = check_positive(options.renamed(max_train, old_max_train, "--max-train", "--max-train-sentences"),
                               "--max-train")
    epochs = check_positive(epochs, "--epochs")
    min_count = check_positive(min_count, "--min-count", allow_none=False)
    probe_seeds = seed_list(seeds, seed) if seeds != 0 else ()
    encoder = _load(model, device)
    chosen = parse_layers(layers, encoder.num_layers, transformer_only=True)
    out = out or default_out("attention-parse", model)
    sizes = {"max_eval": max_eval, **({"max_train": max_train} if max_train is not None else {})}  # else the spec's
    spec = AttentionParseSpec(**sizes, probe_seeds=probe_seeds, probe_epochs=epochs, statistics=statistics,
                              untrained=untrained, untrained_seed=seed, min_count=min_count, layers=chosen)
    result = run_attention_analysis(encoder, treebank, spec, progress=progress)
    result.save(out)
    figures = write_parse_figures(result, out / "figures")

    for model_name, best in result["best_heads"].groupby("model", sort=False):
        columns = ["relation", "count", "direction", "head_label", "accuracy", "baseline_offset", "baseline_accuracy",
                   "held_out_accuracy", "held_out_baseline_accuracy"]
        console.print(_rich_table(best[columns], f"{model_name}: best head per relation (selected on dev; "
                                                 "held out = test), accuracy %",
                                  percent_columns=("accuracy", "baseline_accuracy", "held_out_accuracy",
                                                   "held_out_baseline_accuracy")))
    summary = result["probe_summary"]
    shown = summary[["model", "method", "uas", "uas_std", "uas_no_punct", "n_seeds", "head_label", "offset"]]
    shown = shown.rename(columns={"uas_std": "± std", "uas_no_punct": "uas no punct", "n_seeds": "seeds",
                                  "head_label": "head"})
    console.print(_rich_table(shown, "attention-only probe vs baselines: UAS % on test (mean ± std over seeds)",
                              percent_columns=("uas", "± std", "uas no punct")))
    if compare_clark:
        for model_name, clark in result["clark"].groupby("model", sort=False):
            shown = clark[["paper_relation", "relation", "paper_head_label", "head_label", "paper_accuracy", "accuracy",
                           "paper_baseline_accuracy", "baseline_accuracy", "count"]]
            shown = shown.rename(columns={"paper_relation": "Clark", "relation": "UD", "paper_head_label": "head",
                                          "head_label": "our head", "paper_accuracy": "acc", "accuracy": "our acc",
                                          "paper_baseline_accuracy": "offset", "baseline_accuracy": "our offset",
                                          "count": "words"})
            console.print(_rich_table(shown, f"{model_name} vs Clark et al. (2019) Table 1 (bert-base, WSJ, Stanford "
                                             "Dependencies): accuracy % of the best head and of the best fixed offset",
                                      percent_columns=("acc", "our acc", "offset", "our offset")))
        console.print("Clark's heads are shown in our numbering (the paper's 8-11 is L8H10); relations map to UD as "
                      "in bertology.attention.parsing.STANFORD_TO_UD; prep/pobj have no same-attachment UD "
                      "counterpart. See docs/attention.md.")
    console.print(f"wrote {len(result.tables)} tables and {len(figures)} figures to {out}")


@app.command("patterns")
def patterns_command(
    model: str = model_option(),
    data: str = data_option("ewt-dev", help="ewt-dev, ewt-test, ewt-train or a corpus file (.conllu/.txt/.tsv)."),
    glue: Optional[str] = typer.Option(None, "--glue", help="Use a GLUE dev set instead (rte/mrpc give "
                                       "[CLS] A [SEP] B [SEP] pairs)."),
    max_sentences: int = max_sentences_option("Use only the first N sentences (or pairs).", default=200),
    untrained: bool = typer.Option(True, "--untrained/--no-untrained", help="Also classify the untrained twin(s)."),
    seeds: int = seeds_option(1, "How many untrained twins (seeds SEED..SEED+N-1)."),
    seed: int = seed_option(),
    classifier: str = typer.Option("cnn", "--classifier", help="cnn (shipped) or rules."),
    max_length: int = typer.Option(128, "--max-length", help="Truncate inputs to this many tokens (at least 8)."),
    layers: Optional[str] = layers_option("Transformer layers to classify: all, 3,6, 1-4, L3 or last."),
    out: Optional[Path] = out_option("attention-patterns"),
    device: str = device_option(),
    progress: bool = progress_option(),
) -> None:
    """Kovaleva et al. (2019) pattern types of every head: per-map table, per-layer shares and a figure."""
    from bertology.attention.choices import CLASSIFIERS

    if classifier not in CLASSIFIERS:
        raise UsageError(f"--classifier {classifier!r}: expected one of {', '.join(CLASSIFIERS)}")
    max_sentences = check_positive(max_sentences, "--max-sentences")
    if max_length < 8:
        raise UsageError(f"--max-length {max_length}: expected at least 8 tokens")
    twin_seeds = seed_list(seeds, seed) if untrained else ()
    from bertology.attention.figures import plot_pattern_proportions
    from bertology.attention.patterns import pattern_analysis, pattern_inputs

    texts, ids, source = pattern_inputs(data, glue, max_sentences)
    encoder = _load(model, device)
    chosen = parse_layers(layers, encoder.num_layers, transformer_only=True)
    out = out or default_out("attention-patterns", model, f"glue-{glue}" if glue else Path(data).stem)
    result = pattern_analysis(encoder, texts, ids=ids, untrained_seeds=twin_seeds, classifier=classifier,
                              layers=chosen, max_length=max_length, source=source, progress=progress)
    result.save(out)
    figure = out / "pattern_proportions.png"
    plot_pattern_proportions(result["types"], figure, title=f"Attention pattern types ({source})")
    overall = result["overall"].pivot(index="model", columns="type", values="proportion")
    overall = overall.reindex(index=list(dict.fromkeys(result["overall"]["model"]))).reset_index()
    console.print(_rich_table(overall, f"share of heads per pattern type, % ({source}, {len(texts)} inputs)",
                              percent_columns=tuple(c for c in overall.columns if c != "model")))
    console.print(f"wrote {len(result.tables)} tables and {figure.name} to {out}")


@app.command("view")
def view_command(
    model: str = model_option(),
    text: str = typer.Option(..., "--text", help="The text to show (words split on whitespace)."),
    out: Optional[Path] = out_option("attention-view"),
    level: str = typer.Option("word", "--level", help="word (Clark et al. word-level maps) or subword."),
    layers: Optional[str] = layers_option("Transformer layers to show: all, 3,6, 1-4, L3 or last."),
    device: str = device_option(),
) -> None:
    """Write a self-contained HTML attention viewer (head view + model view) for one text: OUT/attention_view.html."""
    from bertology.attention.viewer import LEVELS, view_attention, write_html

    if level not in LEVELS:
        raise UsageError(f"--level {level!r}: expected one of {', '.join(LEVELS)}")
    encoder = _load(model, device)
    chosen = parse_layers(layers, encoder.num_layers, transformer_only=True)
    out = out or default_out("attention-view", model)
    path = write_html(view_attention(encoder, text, level, layers=chosen), Path(out) / "attention_view.html")
    console.print(f"wrote {path}")
