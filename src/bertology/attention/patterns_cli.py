"""CLI commands ``patterns`` and ``view`` (wired into ``bertology attention`` by the main CLI)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bertology.errors import DataError

app = typer.Typer(help="Kovaleva pattern types and the attention viewer.", no_args_is_help=True)


def _inputs(corpus: str, glue: Optional[str], limit: int) -> tuple[list, list[str], str]:
    if glue:
        from bertology.data.glue import read_glue

        examples = read_glue(glue, "dev")[:limit]
        texts = [(e.text_a, e.text_b) if e.text_b else e.text_a for e in examples]
        return texts, [e.id for e in examples], f"GLUE {glue} dev"
    from bertology.data import default_corpus, read_corpus

    path = default_corpus(corpus) if corpus in ("ewt-dev", "ewt-test") else Path(corpus)
    sentences = read_corpus(path)[:limit]
    return [" ".join(s.words) for s in sentences], [s.id for s in sentences], str(corpus)


@app.command("patterns")
def patterns(
    model: str = typer.Option("minilm", help="model alias, local directory or hub id"),
    corpus: str = typer.Option("ewt-dev", help="ewt-dev, ewt-test or a corpus file (.conllu/.txt/.tsv)"),
    glue: Optional[str] = typer.Option(None, help="use GLUE dev instead (rte/mrpc give [CLS] A [SEP] B [SEP] pairs)"),
    limit: int = typer.Option(200, min=1, help="number of sentences (or pairs)"),
    compare_untrained: bool = typer.Option(True, help="also classify the untrained twin (seed 0) for comparison"),
    classifier: str = typer.Option("cnn", help="cnn (shipped) or rules"),
    max_length: int = typer.Option(128, min=8, help="truncate inputs to this many tokens"),
    out: Path = typer.Option(Path("attention_patterns"), help="output folder"),
) -> None:
    """Kovaleva et al. (2019) pattern types of every head: per-map table, per-layer shares and a figure."""
    import pandas as pd
    from rich.console import Console

    from bertology.attention.patterns import (
        compare_pattern_proportions,
        pattern_types,
        plot_pattern_proportions,
        token_attention_maps,
    )
    from bertology.models import load_encoder

    if classifier not in ("cnn", "rules"):
        raise DataError(f"--classifier {classifier!r}: expected cnn or rules")
    texts, ids, source = _inputs(corpus, glue, limit)
    encoders = {model: load_encoder(model, attentions=True)}
    if compare_untrained:
        encoders[f"{model} (untrained)"] = load_encoder(model, untrained_seed=0, attentions=True)
    tables = {}
    for name, encoder in encoders.items():
        maps = token_attention_maps(encoder, texts, ids=ids, max_length=max_length)
        tables[name] = pattern_types(maps, classifier=classifier, progress=True).assign(model=name, source=source)
    out.mkdir(parents=True, exist_ok=True)
    all_types = pd.concat(tables.values(), ignore_index=True)
    from bertology.attention.cli import write_table

    write_table(all_types, out, "pattern_types")
    proportions = compare_pattern_proportions(tables)
    write_table(proportions.astype({"layer": str}), out, "pattern_proportions")
    plot_pattern_proportions(tables, out / "pattern_proportions.png", title=f"Attention pattern types ({source})")
    console = Console()
    overall = proportions[proportions["layer"] == "all"].pivot(index="model", columns="type", values="proportion")
    console.print(overall.round(3).to_string())
    console.print(f"wrote {out / 'pattern_types.csv'}, {out / 'pattern_proportions.csv'} (and .parquet), "
                  f"{out / 'pattern_proportions.png'}")


@app.command("view")
def view(
    model: str = typer.Option("minilm", help="model alias, local directory or hub id"),
    text: str = typer.Option(..., help="the text to show (words split on whitespace)"),
    out: Path = typer.Option(Path("attention.html"), help="HTML file to write"),
    level: str = typer.Option("word", help="word (Clark et al. word-level maps) or subword"),
) -> None:
    """Write a self-contained HTML attention viewer (head view + model view) for one text."""
    from bertology.attention.viewer import LEVELS, view_attention, write_html
    from bertology.models import load_encoder

    if level not in LEVELS:
        raise DataError(f"--level {level!r}: expected word or subword")
    encoder = load_encoder(model, attentions=True)
    path = write_html(view_attention(encoder, text, level), out)
    typer.echo(f"wrote {path}")
