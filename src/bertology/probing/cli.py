"""``bertology probe``: layer-wise probing with its baselines; prints Table 2, writes CSV, Parquet, plot."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer

from bertology.errors import DataError

app = typer.Typer(help="Layer-wise classification probes with honest baselines.", no_args_is_help=True)


def _write_atomic(frame, path: Path, kind: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    if kind == "csv":
        frame.to_csv(tmp, index=False)
    else:
        frame.to_parquet(tmp, index=False)
    os.replace(tmp, path)


def _parse_layers(text: Optional[str]) -> Optional[list[int]]:
    if text is None:
        return None
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise DataError(f"--layers {text!r}: expected comma-separated layer numbers, e.g. 0,3,6") from None


@app.command("probe")
def probe(
    model: str = typer.Option("minilm", help="Encoder: alias (minilm), local folder or hub id."),
    tasks: str = typer.Option("senteval", help="Comma-separated: senteval (all ten), ud (upos,xpos,deprel), "
                              "upos, xpos, deprel, ner, structural, or SentEval names (BShift, tree_depth...)."),
    treebank: Optional[Path] = typer.Option(None, help="UD treebank folder with train/dev/test CoNLL-U "
                                            "(default: the shared UD English EWT)."),
    seeds: int = typer.Option(3, help="Number of seeds (0..N-1); mean and std are reported."),
    out: Path = typer.Option(Path("probe-results"), help="Output folder."),
    probe_kind: str = typer.Option("linear", "--probe", help="linear (logistic regression) or mlp."),
    max_sentences: Optional[int] = typer.Option(None, help="Read at most N sentences per split (fast runs)."),
    max_train: Optional[int] = typer.Option(None, help="Training examples per task (default 4000 words/arcs, "
                                            "2000 entity spans, 1000 SentEval sentences)."),
    max_eval: Optional[int] = typer.Option(None, help="Dev and test examples per task (default 1000 / 500 / 300)."),
    layers: Optional[str] = typer.Option(None, help="Comma-separated layers (0 = embeddings); default all."),
    device: str = typer.Option("cpu", help="cpu, cuda or auto."),
    cache_dir: Optional[Path] = typer.Option(None, help="Where extracted stores are cached "
                                             "(default $BERTOLOGY_CACHE or ~/.cache/bertology)."),
    untrained: bool = typer.Option(True, help="Also probe the untrained twin (one per seed)."),
    control: bool = typer.Option(True, help="Also train on control tasks (selectivity)."),
    scalar_mix: bool = typer.Option(True, help="Also fit a scalar mix over all layers."),
    progress: bool = typer.Option(True, help="Show progress bars."),
) -> None:
    """Probe every layer of MODEL on TASKS; print the Table 2 layout and write results.csv, results.parquet,
    layer_curves.png/.svg and summary.csv into OUT."""
    from rich.console import Console

    from bertology.probing.experiment import run_probing
    from bertology.probing.report import plot_layer_curves, summarize, table2, table2_rich

    if seeds < 1:
        raise DataError(f"--seeds {seeds}: expected at least 1 (3 or more for a spread)")
    results = run_probing(
        model=model, tasks=tasks, treebank=treebank, seeds=tuple(range(seeds)), layers=_parse_layers(layers),
        probe=probe_kind, max_train=max_train, max_eval=max_eval, max_sentences=max_sentences,
        untrained=untrained, control=control, scalar_mix=scalar_mix, cache_dir=cache_dir,
        device=None if device == "auto" else device, progress=progress,
    )
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(results, out / "results.csv", "csv")
    _write_atomic(results, out / "results.parquet", "parquet")
    _write_atomic(summarize(results), out / "summary.csv", "csv")
    table = table2(results, with_std=True)
    _write_atomic(table.reset_index(), out / "table2.csv", "csv")
    plot_layer_curves(results, out / "layer_curves.png")
    datasets = results.attrs.get("datasets", {})
    tmp = out / ".datasets.json.tmp"
    tmp.write_text(json.dumps(datasets, indent=1, default=str))
    os.replace(tmp, out / "datasets.json")
    console = Console()
    console.print(table2_rich(results))
    for name, info in datasets.items():
        sizes = ", ".join(f"{s}={info[s]}" for s in ("train", "dev", "test") if s in info)
        notes = "; ".join(info.get("notes", []))
        console.print(f"[dim]{name}: {sizes}{(' - ' + notes) if notes else ''}[/dim]")
    console.print(f"wrote {out}/results.csv, results.parquet, summary.csv, table2.csv, layer_curves.png/.svg")
