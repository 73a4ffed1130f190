"""``bertology finetune``: GLUE fine-tuning with the Convexity variants; ``bertology finetune-table``.

Wire into the main CLI with ``app.command("finetune")(finetune_command)`` and
``app.command("finetune-table")(table_command)``; ``app`` here holds both for testing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from bertology.errors import DataError

app = typer.Typer(help="GLUE fine-tuning with the Convexity report's variants.", no_args_is_help=True)


def _split(values: list[str] | None) -> list[str]:
    return [part.strip() for value in values or [] for part in value.split(",") if part.strip()]


def _seeds(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise DataError(f"--seeds {text!r}: expected whole numbers separated by commas, e.g. 0,1,2") from None


@app.command("finetune")
def finetune_command(
    model: str = typer.Option("minilm", "--model", "-m", help="Alias (minilm), local directory or hub id."),
    task: list[str] = typer.Option(..., "--task", "-t", help="cola, sst2, mrpc, stsb, rte (comma-separated or repeated)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for checkpoints and the result tables."),
    variant: list[str] = typer.Option(["baseline"], "--variant", "-v",
                                      help="baseline, drop-last:K, copy-last:K, extra-layer[:K], multi-objective:K, "
                                           "or parts joined by '+' (repeat for several)."),
    seeds: str = typer.Option("0,1,2", "--seeds", help="Comma-separated seeds."),
    epochs: float = typer.Option(3.0, "--epochs", help="Epochs (fractions allowed)."),
    lr: float = typer.Option(2e-5, "--lr", help="Peak learning rate (AdamW, linear warm-up 10 % then decay)."),
    batch_size: int = typer.Option(32, "--batch-size", help="Training batch size."),
    max_length: int = typer.Option(128, "--max-length", help="Longest input in tokens; longer ones are truncated."),
    max_train: Optional[int] = typer.Option(None, "--max-train",
                                            help="Subsample the train set to N examples (same subset for every seed)."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Stop after N optimizer steps (smoke runs)."),
    device: str = typer.Option("auto", "--device", help="auto (cuda if available), cpu, cuda, cuda:1 ..."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="GLUE root (default: shared/data/glue)."),
    eval_each_epoch: bool = typer.Option(True, "--eval-each-epoch/--final-eval-only",
                                         help="Score dev after every epoch (a curve in the JSON) or only at the end."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (default: torch's choice)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Fine-tune MODEL on GLUE tasks for each variant and seed; print and save the variants table.

    A seed whose checkpoint is already in OUT is reused, so an interrupted run resumes.
    """
    from bertology.finetune.table import render_table, variants_table, write_tables
    from bertology.finetune.train import FinetuneConfig, collect_results, finetune
    from bertology.models import load_encoder

    if threads:
        import torch

        torch.set_num_threads(threads)
    console = Console()
    tasks, variants = _split(task), _split(variant) or ["baseline"]
    encoder = load_encoder(model)
    for task_name in tasks:
        for variant_name in variants:
            config = FinetuneConfig(seeds=_seeds(seeds), epochs=epochs, lr=lr, batch_size=batch_size,
                                    max_length=max_length, max_train=max_train, max_steps=max_steps,
                                    variant=variant_name, device=device,
                                    data_dir=str(data_dir) if data_dir else None, progress=progress,
                                    eval_each_epoch=eval_each_epoch)
            result = finetune(encoder, task_name, config, out)
            for run in result.runs:
                scores = ", ".join(f"{k} {v:.4f}" for k, v in run.metrics.items())
                console.print(f"{result.task} {result.variant} seed {run.seed}: {scores}"
                              + (" (reused)" if run.reused else f" ({run.train_examples_per_second:.1f} train ex/s)"))
    results = collect_results(out)
    results = results[results["base_fingerprint"] == encoder.fingerprint]
    written = write_tables(results, out)
    console.print(render_table(variants_table(results)))
    console.print(f"wrote {', '.join(str(p) for p in written.values())}")


@app.command("finetune-table")
def table_command(
    out: Path = typer.Argument(..., help="A folder written by `bertology finetune`."),
) -> None:
    """Rebuild the variants table (Convexity Table 1) from every checkpoint under OUT."""
    from bertology.finetune.table import render_table, variants_table, write_tables
    from bertology.finetune.train import collect_results

    results = collect_results(out)
    if results.empty:
        raise DataError(f"{out}: no fine-tuning checkpoints (finetune.json) found")
    write_tables(results, out)
    Console().print(render_table(variants_table(results)))
