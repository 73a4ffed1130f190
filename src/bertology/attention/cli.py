"""``bertology attention ...``: a thin typer layer over :mod:`bertology.attention`.

Each command is a plain function registered on ``app``; more commands (``patterns``, ``view``) are
added the same way.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="Attention analysis: Clark et al.'s head statistics, heads as parsers, Kovaleva pattern types, viewer.",
                  no_args_is_help=True)
console = Console()


def write_table(df: pd.DataFrame, out_dir: Path, name: str) -> list[Path]:
    """``name.csv`` and ``name.parquet`` in ``out_dir``, each written to a temporary file then renamed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for suffix, write in ((".csv", lambda p: df.to_csv(p, index=False)),
                          (".parquet", lambda p: df.to_parquet(p, index=False))):
        target = out_dir / f"{name}{suffix}"
        handle, tmp = tempfile.mkstemp(dir=out_dir, suffix=suffix)
        os.close(handle)
        try:
            write(tmp)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        paths.append(target)
    return paths


def _rich_table(df: pd.DataFrame, title: str, percent: tuple[str, ...] = (), digits: int = 3) -> Table:
    table = Table(title=title)
    for column in df.columns:
        table.add_column(str(column), justify="right" if pd.api.types.is_numeric_dtype(df[column]) else "left")
    for row in df.itertuples(index=False):
        cells = []
        for column, value in zip(df.columns, row):
            if isinstance(value, float):
                if pd.isna(value):
                    cells.append("–")
                elif column in percent:
                    cells.append(f"{100 * value:.1f}")
                else:
                    cells.append(f"{value:.{digits}f}")
            else:
                cells.append(str(value))
        table.add_row(*cells)
    return table


@app.command("stats")
def stats_command(
    model: str = typer.Option("minilm", "--model", "-m", help="Alias, local model folder or hub id."),
    data: Path = typer.Option(..., "--data", "-d", help="Corpus: .conllu[.gz], .txt (one sentence a line) or .tsv."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder (tables and figures)."),
    max_sentences: Optional[int] = typer.Option(None, "--max-sentences", help="Use only the first N sentences."),
    untrained_seed: Optional[int] = typer.Option(None, "--untrained-seed", help="Use the untrained twin from this seed."),
) -> None:
    """Clark et al.'s per-head statistics (attention to [CLS]/[SEP]/punctuation/self/neighbours, entropies, distance)."""
    from bertology.attention.figures import plot_head_statistics
    from bertology.attention.stats import head_statistics, statistic_matrix, STATISTICS
    from bertology.data import read_corpus
    from bertology.extraction import extract
    from bertology.models import load_encoder

    sentences = read_corpus(data)[:max_sentences]
    encoder = load_encoder(model, untrained_seed=untrained_seed, attentions=True)
    with tempfile.TemporaryDirectory(prefix="bertology-attention-") as tmp:
        store = extract(encoder, sentences, Path(tmp) / "stats.store", attentions=True)
        stats = head_statistics(store.iter_attentions(), sentences, progress=True, total=len(sentences),
                                layers=store.attention_layers)
    stats.insert(0, "model", encoder.name)
    written = write_table(stats, out, "head_statistics")
    written += plot_head_statistics(stats, out / "figures", model_name=encoder.name)

    per_layer = pd.DataFrame({"layer": range(1, encoder.num_layers + 1)})
    for name in STATISTICS:
        per_layer[name] = statistic_matrix(stats, name).mean(axis=1)
    console.print(_rich_table(per_layer, f"{encoder.name}: head statistics, mean over heads "
                                         f"({len(sentences)} sentences; uniform entropy "
                                         f"{stats.attrs['uniform_entropy']:.2f} nats)"))
    console.print(f"wrote {len(written)} files to {out}")


@app.command("parse")
def parse_command(
    model: str = typer.Option("minilm", "--model", "-m", help="Alias, local model folder or hub id."),
    treebank: Optional[Path] = typer.Option(
        None, "--treebank", "-t", help="UD folder with *-ud-{train,dev,test}.conllu[.gz] (default: shared ud_english_ewt)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder (tables and figures)."),
    max_sentences: Optional[int] = typer.Option(None, "--max-sentences", help="Cap dev and test at N sentences."),
    max_train_sentences: int = typer.Option(2000, "--max-train-sentences", help="Cap the probe's training set."),
    seeds: int = typer.Option(3, "--seeds", help="Attention-only probe runs (seeds 0..N-1)."),
    epochs: int = typer.Option(20, "--epochs", help="Probe training epochs."),
    min_count: int = typer.Option(100, "--min-count", help="Relations with fewer dev words are left out of Table 1."),
    control: bool = typer.Option(False, "--control", help="Repeat everything on the untrained twin (seed 0)."),
    statistics: bool = typer.Option(True, "--statistics/--no-statistics", help="Also compute head statistics on dev."),
    compare_clark: bool = typer.Option(False, "--compare-clark", help="Print ours beside Clark et al.'s Table 1."),
) -> None:
    """Heads as dependency parsers (Clark et al. Table 1) and the attention-only probe."""
    from bertology.attention.figures import plot_head_statistics, plot_relation_heatmaps
    from bertology.attention.parsing import probe_summary, run_attention_analysis

    results = run_attention_analysis(
        model, treebank, max_sentences=max_sentences, max_train_sentences=max_train_sentences,
        probe_seeds=tuple(range(seeds)), probe_epochs=epochs, statistics=statistics, control=control,
        min_count=min_count,
    )
    written = []
    if out is not None:
        for name, frame in results.items():
            written += write_table(frame, out, f"attention_{name}")
        summary = probe_summary(results["probe"])
        written += write_table(summary, out, "attention_probe_summary")
        for model_name, heads in results["heads"].groupby("model", sort=False):
            figures = out / "figures" / _slug(model_name)
            dev = heads[heads["split"] == "dev"]
            relations = [r for r in ("det", "obj", "nsubj", "amod", "nmod:poss", "aux", "case", "mark", "all")
                         if r in set(dev["relation"])]
            written += plot_relation_heatmaps(dev, relations, figures, model_name=model_name)
            if "statistics" in results:
                stats = results["statistics"]
                written += plot_head_statistics(stats[stats["model"] == model_name], figures, model_name=model_name)

    for model_name, best in results["best_heads"].groupby("model", sort=False):
        columns = ["relation", "count", "direction", "best_head", "accuracy", "baseline_offset", "baseline_accuracy",
                   "held_out_accuracy", "held_out_baseline_accuracy"]
        console.print(_rich_table(best[columns], f"{model_name}: best head per relation (selected on dev; "
                                                 "held out = test), accuracy %",
                                  percent=("accuracy", "baseline_accuracy", "held_out_accuracy",
                                           "held_out_baseline_accuracy")))
    summary = probe_summary(results["probe"])
    console.print(_rich_table(summary, "attention-only probe vs baselines: UAS % on test (mean ± std over seeds)",
                              percent=("uas", "uas_std", "uas_no_punct")))
    if compare_clark:
        for model_name, clark in results["clark"].groupby("model", sort=False):
            columns = ["clark_relation", "ud_relation", "clark_head", "our_head", "clark_direction", "our_direction",
                       "clark_accuracy", "our_accuracy", "clark_baseline_accuracy", "our_baseline_accuracy",
                       "clark_baseline_offset", "our_baseline_offset", "our_count"]
            shown = clark[columns].copy()
            for column in ("our_baseline_offset", "our_count"):
                shown[column] = shown[column].map(lambda v: "–" if pd.isna(v) else str(int(v)))
            console.print(_rich_table(shown, f"{model_name} vs Clark et al. (2019) Table 1 (bert-base, WSJ, "
                                             "Stanford Dependencies): accuracy %", digits=1))
        console.print("Clark's relations map to UD as in bertology.attention.parsing.STANFORD_TO_UD; prep/pobj have "
                      "no same-attachment UD counterpart. See docs/attention.md.")
    if out is not None:
        console.print(f"wrote {len(written)} files to {out}")


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text).strip("_") or "model"


def _register_pattern_commands() -> None:
    from bertology.attention.patterns_cli import patterns, view

    app.command("patterns", help="Kovaleva et al.'s attention pattern types per layer (and vs a second model).")(patterns)
    app.command("view", help="Write a self-contained HTML attention viewer (canvas, works offline).")(view)


_register_pattern_commands()
