"""``bertology knowledge ...``: a thin typer layer over :mod:`bertology.knowledge`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from bertology import options

app = typer.Typer(help="What the model knows: static similarity, the MLM probe, LAMA, minimal pairs.",
                  no_args_is_help=True)
console = Console()

DATA_HELP = "Corpus (.conllu[.gz], .txt, SentEval .txt/.tsv); default the packaged UD English EWT dev."


@app.callback()
def knowledge() -> None:
    """What the model knows (the Convexity report, Petroni et al., BLiMP)."""


def _data_name(data: Optional[Path], default: str = "ewt-dev") -> str:
    return data.name.split(".")[0] if data else default


def _number(value, digits: int = 3) -> str:
    return "–" if value is None or value != value else f"{value:.{digits}f}"


@app.command("static")
def static_command(
    model: str = options.model_option(),
    data: Optional[Path] = options.data_option(help=DATA_HELP),
    out: Optional[Path] = options.out_option("knowledge/static"),
    seeds: int = options.seeds_option(),
    seed: int = options.seed_option(),
    layers: Optional[str] = options.layers_option(),
    device: str = options.device_option(),
    max_sentences: Optional[int] = options.max_sentences_option(help="Use only the first N sentences."),
    min_count: int = typer.Option(5, "--min-count", help="Occurrences a token type needs."),
    untrained: bool = typer.Option(True, "--untrained/--no-untrained", help="Also measure the untrained "
                                   "twin (one per seed)."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Where stores are cached."),
    progress: bool = options.progress_option(),
) -> None:
    """Cosine of each layer's token vectors with (a) the token's input embedding and (b) its type's average
    over contexts (Bommasani et al. 2020), raw and adjusted by random pairs; model vs untrained twin."""
    from bertology.knowledge.static import plot_static, static_similarity
    from bertology.runtime import seed_list

    options.check_positive(min_count, "--min-count")
    chosen_seeds = seed_list(seeds, seed)
    out = out or options.default_out("knowledge/static", Path(model).name, _data_name(data))
    result = static_similarity(model, data, seeds=chosen_seeds, layers=layers, untrained=untrained,
                               min_count=min_count, max_sentences=max_sentences, device=device,
                               cache_dir=cache_dir, progress=progress)
    result.figures["static"] = plot_static(result["summary"], Path(out) / "static_similarity.png",
                                           title=f"{result.meta['model']['name']}: similarity to static embeddings")
    result.save(out)
    summary = result["summary"]
    view = Table(title=f"similarity to static embeddings, {result.meta['model']['name']} (adjusted = minus "
                 f"random pairs; mean over {len(chosen_seeds)} seed(s))")
    view.add_column("layer", justify="right")
    columns = [(r, e) for r in ("input_embedding", "type_average") for e in ("trained", "untrained")]
    for reference, encoder in columns:
        view.add_column(f"{'(a) input emb.' if reference == 'input_embedding' else '(b) type avg.'} "
                        f"{'model' if encoder == 'trained' else 'twin'}", justify="right")
    for layer in sorted(summary["layer"].unique()):
        cells = [str(int(layer))]
        for reference, encoder in columns:
            part = summary[(summary["layer"] == layer) & (summary["reference"] == reference)
                           & (summary["encoder"] == encoder)]
            cells.append(_number(part["adjusted"].iloc[0]) if len(part) else "–")
        view.add_row(*cells)
    console.print(view)
    for reference, shape in result.meta["u_shape"].items():
        verdict = "U shape" if shape.get("u_shape") else "no U shape"
        console.print(f"{reference}: {verdict} (minimum at layer {shape.get('minimum_layer')})")
    console.print(f"results in {out} (layers, summary; static_similarity.png)")
