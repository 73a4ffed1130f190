"""``bertology compare BEFORE AFTER``: what fine-tuning changed, per layer and head.

Wire into the main CLI with ``app.command("compare")(compare_command)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from bertology.cli.options import (CommandApp, check_positive, data_option, default_out, device_option, max_sentences_option,
                               out_option, progress_option, resolve_device, seed_option)

app = CommandApp(help="Compare a model with its fine-tuned version.", no_args_is_help=True)


@app.command("compare")
def compare_command(
    before: str = typer.Argument(..., help="The base model: alias (minilm), directory or hub id."),
    after: str = typer.Argument(..., help="Its fine-tuned version, e.g. a checkpoint folder of `bertology finetune`."),
    data: Optional[Path] = data_option(help="Sentences (.conllu, .txt, SentEval .tsv); default: the packaged "
                                            "UD EWT dev."),
    out: Optional[Path] = out_option("compare"),
    max_sentences: int = max_sentences_option("Use at most N sentences (a subset drawn by --seed).", default=300),
    seed: int = seed_option(),
    batch_size: int = typer.Option(16, "--batch-size", help="Sentences per forward pass."),
    device: str = device_option(),
    progress: bool = progress_option(),
) -> None:
    """Linear CKA per layer, attention cosine per head and relative weight change per layer."""
    from bertology.data import default_corpus, read_corpus

    check_positive(max_sentences, "--max-sentences")
    check_positive(batch_size, "--batch-size")
    sentences = read_corpus(data if data is not None else default_corpus())  # before torch loads
    resolve_device(device)
    from bertology.compare.compare import compare_models, plot_comparison

    result = compare_models(before, after, sentences, batch_size=batch_size, max_sentences=max_sentences,
                            seed=seed, device=device, progress=progress)
    out = out if out is not None else default_out("compare", before, after)
    for path in plot_comparison(result, out, title=f"{Path(before).name} vs {Path(after).name}"):
        result.figures[path.stem] = path
    result.save(out)
    table = Table(title=f"{before} -> {after} ({result.meta['n_sentences']} sentences)")
    for column in ("layer", "CKA tokens", "CKA [CLS]", "attention cosine (mean over heads)", "weight change"):
        table.add_column(column, justify="right")
    cka = result["cka"].pivot(index="layer", columns="representation", values="cka")
    attention = result["attention"].groupby("layer")["cosine"].mean()
    by_layer = result["weights_by_layer"]
    weights = by_layer[by_layer["layer"].notna()].set_index("layer")["rel_change"]
    for layer in cka.index:
        table.add_row(str(layer), f"{cka.loc[layer, 'tokens']:.3f}", f"{cka.loc[layer, 'cls']:.3f}",
                      f"{attention.get(layer, float('nan')):.3f}", f"{weights.get(layer, float('nan')):.4f}")
    for row in by_layer[by_layer["layer"].isna()].itertuples():
        table.add_row(str(row.component), "", "", "", f"{row.rel_change:.4f}")
    console = Console()
    console.print(table)
    console.print(f"wrote {len(result.tables)} tables and {len(result.figures)} plots to {out}")
