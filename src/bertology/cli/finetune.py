"""``bertology finetune``: GLUE fine-tuning with the Convexity variants; ``bertology finetune-table``.

Wire into the main CLI with ``app.command("finetune")(finetune_command)`` and
``app.command("finetune-table")(table_command)``; ``app`` here holds both for testing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from bertology.errors import DataError
from bertology.cli.options import (CommandApp, address_option, check_positive, check_scale, cpus_per_worker_option, default_out,
                               device_option, engine_option, gpus_per_worker_option, model_option, out_option,
                               progress_option, resolve_device, seed_list, seed_option, seeds_option, workers_option)

app = CommandApp(help="GLUE fine-tuning with the Convexity report's variants.", no_args_is_help=True)


def _split(values: list[str] | None) -> list[str]:
    return [part.strip() for value in values or [] for part in value.split(",") if part.strip()]


@app.command("finetune")
def finetune_command(
    model: str = model_option(),
    task: list[str] = typer.Option(..., "--task", "-t", help="GLUE cola, sst2, mrpc, stsb, rte (their data: --data-dir, $BERTOLOGY_DATA or online) "
                                                         "or bshift (built from the packaged EWT: always offline); "
                                                         "comma-separated or repeated."),
    out: Optional[Path] = out_option("finetune"),
    variant: list[str] = typer.Option(["baseline"], "--variant", "-v",
                                      help="baseline, drop-last:K, copy-last:K, extra-layer[:K], multi-objective:K, "
                                           "or parts joined by '+' (repeat for several)."),
    seeds: int = seeds_option(),
    seed: int = seed_option(),
    epochs: float = typer.Option(3.0, "--epochs", help="Epochs (fractions allowed)."),
    lr: float = typer.Option(2e-5, "--lr", help="Peak learning rate (AdamW, linear warm-up 10 % then decay)."),
    batch_size: int = typer.Option(32, "--batch-size", help="Training batch size."),
    max_length: int = typer.Option(128, "--max-length", help="Longest input in tokens; longer ones are truncated."),
    max_train: Optional[int] = typer.Option(None, "--max-train",
                                            help="Subsample the train set to N examples (same subset for every seed)."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Stop after N optimizer steps (smoke runs)."),
    checkpoint_every: int = typer.Option(100, "--checkpoint-every", help="Steps between the saved states an "
                                         "interrupted seed resumes from (0: none; a finished seed is always kept)."),
    device: str = device_option(),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="GLUE root (default: $BERTOLOGY_DATA/glue, else Hugging Face datasets nyu-mll/glue)."),
    eval_each_epoch: bool = typer.Option(True, "--eval-each-epoch/--final-eval-only",
                                         help="Score dev after every epoch (a curve in the JSON) or only at the end."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (default: torch's choice)."),
    engine: str = engine_option(),
    address: Optional[str] = address_option(),
    workers: Optional[int] = workers_option(),
    cpus_per_worker: float = cpus_per_worker_option(),
    gpus_per_worker: float = gpus_per_worker_option(),
    progress: bool = progress_option(),
) -> None:
    """Fine-tune MODEL on GLUE tasks (or the packaged bshift) for each variant and seed; print and save the table.

    Checkpoints go to OUT/<task>/<variant>/seed-<s>/, the tables (results, summary, table1; metrics as
    fractions) to OUT. A seed whose checkpoint is already in OUT is reused, so an interrupted run resumes.
    With --engine ray every task x variant x seed is one Ray task (--cpus-per-worker/--gpus-per-worker
    each); OUT and the GLUE data must be paths every node sees.
    """
    chosen_seeds = seed_list(seeds, seed)
    from bertology.data.glue import glue_task

    for name in _split(task):
        glue_task(name)  # an unknown task is one line before torch loads
    for value, option in ((batch_size, "--batch-size"), (max_length, "--max-length"), (max_train, "--max-train"),
                          (max_steps, "--max-steps"), (threads, "--threads")):
        check_positive(value, option)
    from bertology.errors import UsageError

    if max_length < 8:
        raise UsageError(f"--max-length {max_length}: must be at least 8 (tokens: the special ones and some text)")
    for value, option in ((epochs, "--epochs"), (lr, "--lr")):
        if value <= 0:
            raise UsageError(f"{option} {value}: must be a positive number")
    resolve_device(device)
    check_scale(engine, workers, cpus_per_worker, gpus_per_worker)
    if engine == "ray":
        from bertology.scale import require_ray

        require_ray()
    if threads:
        import torch

        torch.set_num_threads(threads)
    from bertology.training import Optimisation
    from bertology.finetune.table import render_table, variants_result
    from bertology.finetune.train import FinetuneConfig, collect_results, finetune
    from bertology.models import load_encoder

    console = Console()
    tasks, variants = _split(task), _split(variant) or ["baseline"]
    out = out if out is not None else default_out("finetune", Path(model).name)
    encoder = load_encoder(model)

    def report(result) -> None:
        runs = result["runs"].set_index("seed")
        for run_seed, frame in result["results"].groupby("seed", sort=False):
            scores = ", ".join(f"{row.metric} {row.value:.4f}" for row in frame.itertuples())
            run = runs.loc[run_seed]
            console.print(f"{result.meta['task']} {result.meta['variant']} seed {run_seed}: {scores}"
                          + (" (reused)" if run["reused"] else f" ({run['train_examples_per_second']:.1f} train ex/s)"))

    config = FinetuneConfig(seeds=chosen_seeds, epochs=epochs, max_length=max_length, max_train=max_train,
                            optimisation=Optimisation(lr=lr, batch_size=batch_size, max_steps=max_steps, device=device),
                            variant=variants[0], data_dir=str(data_dir.resolve()) if data_dir else None, progress=progress,
                            eval_each_epoch=eval_each_epoch, checkpoint_every=checkpoint_every)
    if engine == "ray":
        from bertology.scale import finetune_sweep_ray

        source = str(Path(model).resolve()) if Path(model).exists() else model
        finetune_sweep_ray(encoder, tasks, variants, config, out, load={"name_or_path": source}, address=address,
                           workers=workers, cpus_per_worker=cpus_per_worker, gpus_per_worker=gpus_per_worker,
                           on_result=report)
    else:
        for task_name in tasks:
            for variant_name in variants:
                report(finetune(encoder, task_name, dataclasses.replace(config, variant=variant_name), out))
    results = collect_results(out)
    results = results[results["base_fingerprint"] == encoder.fingerprint]
    table = variants_result(results)
    table.save(out)
    console.print(render_table(table["table1"]))
    console.print(f"wrote {out}/results, summary and table1 (.parquet + .csv; metrics as fractions) and the checkpoints")


@app.command("finetune-table")
def table_command(
    out: Path = typer.Argument(..., help="A folder written by `bertology finetune`."),
) -> None:
    """Rebuild the variants table (Convexity Table 1) from every checkpoint under OUT."""
    from bertology.finetune.names import CHECKPOINT_META

    if not out.is_dir():
        raise DataError(f"{out}: no such folder; expected one written by `bertology finetune`")
    if next(out.rglob(CHECKPOINT_META), None) is None:
        raise DataError(f"{out}: no fine-tuning checkpoints ({CHECKPOINT_META}) found")
    from bertology.finetune.table import render_table, variants_result
    from bertology.finetune.train import collect_results

    results = collect_results(out)
    if results.empty:
        raise DataError(f"{out}: no fine-tuning checkpoints (finetune.json) found")
    table = variants_result(results)
    table.save(out)
    Console().print(render_table(table["table1"]))
