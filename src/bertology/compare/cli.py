"""``bertology compare BEFORE AFTER``: what fine-tuning changed, per layer and head.

Wire into the main CLI with ``app.command("compare")(compare_command)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="Compare a model with its fine-tuned version.", no_args_is_help=True)


@app.command("compare")
def compare_command(
    before: str = typer.Argument(..., help="The base model: alias (minilm), directory or hub id."),
    after: str = typer.Argument(..., help="Its fine-tuned version, e.g. a checkpoint folder of `bertology finetune`."),
    data: Optional[Path] = typer.Option(None, "--data", help="Sentences (.conllu, .txt, SentEval .tsv); "
                                                            "default: the packaged UD EWT dev."),
    out: Path = typer.Option(Path("compare-out"), "--out", "-o", help="Folder for CSV/Parquet tables and plots."),
    max_sentences: int = typer.Option(300, "--max-sentences", help="Use at most N sentences (a seeded sample)."),
    batch_size: int = typer.Option(16, "--batch-size"),
    device: Optional[str] = typer.Option(None, "--device", help="cpu, cuda, ... (default: cuda if available)."),
) -> None:
    """Linear CKA per layer, attention cosine per head and relative weight change per layer."""
    from bertology.compare.compare import compare_models, plot_comparison, write_comparison
    from bertology.data import default_corpus, read_corpus

    sentences = read_corpus(data if data is not None else default_corpus())
    if len(sentences) > max_sentences:
        keep = np.sort(np.random.default_rng(0).choice(len(sentences), max_sentences, replace=False))
        sentences = [sentences[i] for i in keep]
    results = compare_models(before, after, sentences, batch_size=batch_size, device=device, progress=True)
    written = write_comparison(results, out)
    plots = plot_comparison(results, out, title=f"{Path(before).name} vs {Path(after).name}")
    table = Table(title=f"{before} -> {after} ({len(sentences)} sentences)")
    for column in ("layer", "CKA tokens", "CKA [CLS]", "attention cosine (mean over heads)", "weight change"):
        table.add_column(column, justify="right")
    cka = results["cka"].pivot(index="layer", columns="representation", values="cka")
    attention = results["attention"].groupby("layer")["cosine"].mean()
    weights = results["weights_by_layer"].set_index("layer")["rel_change"]
    for layer in cka.index:
        table.add_row(str(layer), f"{cka.loc[layer, 'tokens']:.3f}", f"{cka.loc[layer, 'cls']:.3f}",
                      f"{attention.get(layer, float('nan')):.3f}", f"{weights.get(str(layer), float('nan')):.4f}")
    console = Console()
    console.print(table)
    console.print(f"wrote {len(written)} tables and {len(plots)} plots to {out}")
