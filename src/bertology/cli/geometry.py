"""``bertology geometry ...``: a thin typer layer over :mod:`bertology.geometry`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

import bertology.cli.options as options

app = options.CommandApp(help="Geometry of the representations: contextuality and anisotropy per layer.",
                  no_args_is_help=True)


@app.callback()
def geometry() -> None:
    """Geometry of the representations (Ethayarajh 2019)."""


def max_pairs_value(max_pairs: int) -> Optional[int]:
    """``--max-pairs 0`` means every pair."""
    options.check_count(max_pairs, "--max-pairs")
    return None if max_pairs == 0 else max_pairs


@app.command("contextuality")
def contextuality_command(
    model: str = options.model_option(),
    data: Optional[Path] = options.data_option(help="Corpus (.conllu[.gz], .txt, SentEval .txt/.tsv); "
                                               "default the packaged UD English EWT dev."),
    out: Optional[Path] = options.out_option("geometry/contextuality"),
    seeds: int = options.seeds_option(),
    seed: int = options.seed_option(),
    layers: Optional[str] = options.layers_option(),
    device: str = options.device_option(),
    max_sentences: Optional[int] = options.max_sentences_option(help="Use only the first N sentences."),
    min_count: int = typer.Option(5, "--min-count", help="Occurrences a word type needs (kawine: 5)."),
    max_pairs: int = typer.Option(1000, "--max-pairs", help="Pairs sampled per word type and for the "
                                  "anisotropy baseline (kawine: 1000); 0 = every pair, computed exactly."),
    samples: int = typer.Option(1000, "--samples", help="Sentences sampled for intra-sentence similarity "
                                "and the random words (kawine: 1000)."),
    untrained: bool = typer.Option(True, "--untrained/--no-untrained", help="Also measure the untrained "
                                   "twin (one per seed)."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Where stores are cached (default "
                                             "$BERTOLOGY_CACHE or ~/.cache/bertology)."),
    progress: bool = options.progress_option(),
) -> None:
    """Self-similarity, intra-sentence similarity, maximum explainable variance and the anisotropy
    baseline per layer (Ethayarajh 2019), raw and baseline-adjusted, model vs untrained twin."""
    from rich.console import Console
    from rich.table import Table

    from bertology.runtime import seed_list

    options.check_positive(min_count, "--min-count")
    options.check_positive(samples, "--samples")
    chosen_seeds = seed_list(seeds, seed)
    max_pairs_value(max_pairs)  # these checked before anything heavy loads
    options.parse_layers(layers)
    options.check_cache_dir(cache_dir)
    options.check_exists(data, "--data", corpus=True)
    options.resolve_device(device)
    from bertology.geometry.spec import ContextualitySpec

    # a bad setting is a SettingError naming the field: options.speaking_options names the option
    spec = ContextualitySpec(seeds=chosen_seeds, layers=layers, untrained=untrained, min_count=min_count,
                             max_pairs=max_pairs_value(max_pairs), samples=samples, max_sentences=max_sentences)
    from bertology.geometry.contextuality import contextuality, plot_contextuality, reference_table, twin_beside
    from bertology.results import number

    out = out or options.default_out("geometry/contextuality", Path(model).name,
                                     data.name.split(".")[0] if data else "ewt-dev")
    result = contextuality(model, data, spec, device=device, cache_dir=cache_dir, progress=progress)
    figure = plot_contextuality(result["summary"], Path(out) / "contextuality.png",
                                title=f"{result.meta['model']['name']}: contextuality per layer")
    result.figures["contextuality"] = figure
    result.save(out)
    table = reference_table(result["summary"])
    table = table[table["weights"] == "trained"].assign(
        twin_self_similarity_adjusted=twin_beside(table, "self_similarity_adjusted"),
        twin_anisotropy=twin_beside(table, "anisotropy"))
    view = Table(title=f"contextuality of {result.meta['model']['name']} (mean over {len(chosen_seeds)} "
                 "seed(s); adj. = minus the baseline)")
    columns = [("layer", "layer"), ("self-sim adj.", "self_similarity_adjusted"),
               ("twin", "twin_self_similarity_adjusted"),
               ("intra-sent. adj.", "intra_sentence_similarity_adjusted"),
               ("MEV adj.", "max_explainable_variance_adjusted"), ("anisotropy", "anisotropy"),
               ("twin", "twin_anisotropy"), ("bert-base-cased anisotropy", "kawine_anisotropy")]
    for header, _ in columns:
        view.add_column(header, justify="right")
    for _, row in table.iterrows():
        view.add_row(*[str(int(row[c])) if c == "layer" else number(row[c])
                       for _, c in columns])
    console = Console()
    console.print(view)
    console.print(f"results in {out} (layers, summary, types; contextuality.png)")
