"""``bertology probe``: layer-wise probing with its baselines; prints Table 2, writes the result tables and plot."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bertology import options

app = typer.Typer(help="Layer-wise classification probes with honest baselines.", no_args_is_help=True)


@app.command("probe")
def probe(
    model: str = options.model_option(),
    tasks: str = typer.Option("senteval", help="Comma-separated: senteval (all ten), ud (upos,xpos,deprel), "
                              "upos, xpos, deprel, ner, structural, any registered task "
                              "(bertology.probing.register_task), or SentEval names (BShift, tree_depth...)."),
    treebank: Optional[Path] = typer.Option(None, help="UD treebank folder with train/dev/test CoNLL-U "
                                            "(default: the shared UD English EWT)."),
    seeds: int = options.seeds_option(),
    seed: int = options.seed_option(),
    out: Optional[Path] = options.out_option("probe"),
    probe_kind: str = typer.Option("linear", "--probe", help="linear (logistic regression) or mlp."),
    max_sentences: Optional[int] = options.max_sentences_option(),
    max_train: Optional[int] = typer.Option(None, help="Training examples per task (default 4000 words/arcs, "
                                            "2000 entity spans, 1000 SentEval sentences)."),
    max_eval: Optional[int] = typer.Option(None, help="Dev and test examples per task (default 1000 / 500 / 300)."),
    layers: Optional[str] = options.layers_option(),
    device: str = options.device_option(),
    cache_dir: Optional[Path] = typer.Option(None, help="Where extracted stores are cached "
                                             "(default $BERTOLOGY_CACHE or ~/.cache/bertology)."),
    untrained: bool = typer.Option(True, help="Also probe the untrained twin (one per seed)."),
    control: bool = typer.Option(True, help="Also train on control tasks (selectivity)."),
    scalar_mix: bool = typer.Option(True, help="Also fit a scalar mix over all layers."),
    progress: bool = options.progress_option(),
) -> None:
    """Probe every layer of MODEL on TASKS; print the Table 2 layout and write the tables (results, summary,
    table2, datasets as Parquet + CSV), meta.json and layer_curves.png/.svg into OUT."""
    from rich.console import Console

    from bertology.probing.experiment import run_probing
    from bertology.probing.report import plot_layer_curves, table2_rich

    for value, name in ((max_sentences, "--max-sentences"), (max_train, "--max-train"), (max_eval, "--max-eval")):
        options.check_positive(value, name)
    seed_values = options.seed_list(seeds, seed)
    options.parse_layers(layers)  # syntax now; the range is checked once the model's depth is known
    out = out if out is not None else options.default_out(
        "probe", Path(model).name or model, tasks, treebank.name if treebank is not None else None)
    options.resolve_device(device)
    result = run_probing(
        model=model, tasks=tasks, treebank=treebank, seeds=seed_values, layers=layers, probe=probe_kind,
        max_train=max_train, max_eval=max_eval, max_sentences=max_sentences, untrained=untrained,
        control=control, scalar_mix=scalar_mix, cache_dir=cache_dir, device=device, progress=progress,
    )
    result.save(out)
    plot_layer_curves(result, out / "layer_curves.png")
    console = Console()
    console.print(table2_rich(result))
    for row in result["datasets"].itertuples():
        sizes = f"train={row.train} ({row.train_used} used per seed), dev={row.dev}, test={row.test} {row.unit}"
        notes = "; ".join(row.notes)
        console.print(f"[dim]{row.task}: {sizes}{(' - ' + notes) if notes else ''}[/dim]")
    console.print(f"wrote {out}/: results, summary, table2, datasets (.parquet, .csv), meta.json, "
                  "layer_curves.png/.svg")
