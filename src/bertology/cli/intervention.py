"""``bertology ablate ...``: head/layer ablation, Michel et al.'s importance and pruning, on GLUE checkpoints.

A thin layer: ``--model`` is a checkpoint written by ``bertology finetune`` (a folder with
``finetune.json``), scored by :class:`bertology.finetune.TaskEvaluator` (the task defaults to the one it
was fine-tuned on); the work is done by :mod:`bertology.intervention`. Layers are 1..L as in
``hidden_states`` (the numbering of ``probe --layers``), heads from 0, labels ``L4H5`` (what tables print).
Every command writes its tables (Parquet + CSV, metrics as fractions) to ``--out`` as well as printing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.table import Table

import bertology.cli.options as options
from bertology.errors import DataError
from bertology.cli.options import (address_option, check_positive, check_scale, cpus_per_worker_option, default_out,
                               device_option, engine_option, gpus_per_worker_option, heads_option, layers_option,
                               max_sentences_option, model_option, out_option, progress_option, resolve_device,
                               seed_list, seed_option, seeds_option, workers_option)

if TYPE_CHECKING:  # pandas is imported when a command runs
    import pandas as pd

app = options.CommandApp(help="Ablate heads and layers, rank heads by importance, prune (Michel et al. 2019).",
                         settings={"allow_mismatch": "--allow-task-mismatch"},
                         no_args_is_help=True)
console = Console()

CheckpointOpt = model_option(...)
TaskOpt = typer.Option(None, "--task", "-t", help="GLUE task (default: the checkpoint's)")
AllowMismatchOpt = typer.Option(False, "--allow-task-mismatch",
                                help="score on a --task other than the checkpoint's (same number of labels only)")
MaxDevOpt = typer.Option(None, "--max-dev", help="score on a seeded subset of this many dev examples")
OldMaxDevOpt = options.old_option("--max-examples")  # the glossary's subset sizes: --max-<split>
DataOpt = typer.Option(None, "--data-dir", help="GLUE root (default: $BERTOLOGY_DATA/glue, else Hugging Face datasets nyu-mll/glue)")
MaxTrainOpt = typer.Option(None, "--max-train", show_default=False,
                           help="train examples for head importance (default 2000; never the dev split)")
OldMaxTrainOpt = options.old_option("--importance-examples")
IMPORTANCE_EXAMPLES = 2000


def _max_dev(max_dev: Optional[int], old_max_dev: Optional[int]) -> Optional[int]:
    """``--max-dev`` (or its old spelling ``--max-examples``, with a note), checked."""
    return check_positive(options.renamed(max_dev, old_max_dev, "--max-dev", "--max-examples"), "--max-dev")


def _importance_examples(max_train: Optional[int], old_max_train: Optional[int]) -> int:
    """``--max-train`` (or its old spelling ``--importance-examples``, with a note), checked; default 2000."""
    max_train = options.renamed(max_train, old_max_train, "--max-train", "--importance-examples")
    return check_positive(max_train, "--max-train") or IMPORTANCE_EXAMPLES


def _setup(model: Path, task: Optional[str], max_dev: Optional[int], data_dir: Optional[Path], device: str,
           allow_task_mismatch: bool = False):
    """The checkpoint (on ``device``), its evaluator and a name for default output folders."""
    from bertology.finetune.evaluation import TaskEvaluator, checkpoint_name, checkpoint_task
    from bertology.finetune.model import load_finetuned, read_checkpoint_meta

    if Path(model).is_dir():  # --task against finetune.json before the model loads
        checkpoint_task(model, read_checkpoint_meta(model), task, allow_task_mismatch)
    loaded, tokenizer, meta = load_finetuned(model, device=resolve_device(device))
    evaluator = TaskEvaluator(checkpoint_task(model, meta, task, allow_task_mismatch), tokenizer,
                              max_examples=max_dev, data_dir=str(data_dir) if data_dir else None)
    return loaded, tokenizer, meta, evaluator, checkpoint_name(model, meta)


def _meta(model: Path, evaluator, **extra) -> dict:
    return {"checkpoint": str(model), **evaluator.describe(), **extra}


def _print_scores(evaluator, what: str, scores: pd.Series) -> None:
    table = Table(title=f"{evaluator.task} {evaluator.split} ({len(evaluator.data)} examples), {what}")
    for column in ("metric", "before", "after", "change"):
        table.add_column(column)
    table.add_row(evaluator.metric, f"{scores['baseline']:.4f}", f"{scores['metric']:.4f}", f"{scores['delta']:+.4f}")
    console.print(table)


@app.command("heads")
def heads_command(
    model: Path = CheckpointOpt,
    heads: str = heads_option(),
    task: Optional[str] = TaskOpt,
    allow_task_mismatch: bool = AllowMismatchOpt,
    out: Optional[Path] = out_option("ablate"),
    max_dev: Optional[int] = MaxDevOpt,
    old_max_dev: Optional[int] = OldMaxDevOpt,
    data_dir: Optional[Path] = DataOpt,
    device: str = device_option(),
):
    """The task metric before and after masking the given heads (e.g. --heads L4H5,L3H0 or L4)."""
    max_dev = _max_dev(max_dev, old_max_dev)
    from bertology.intervention.ablation import ablate_heads

    loaded, _, _, evaluator, name = _setup(model, task, max_dev, data_dir, device, allow_task_mismatch)
    result = ablate_heads(loaded, heads, evaluator)
    result.meta.update(_meta(model, evaluator, heads=heads))
    out = result.save(out if out is not None else default_out("ablate/heads", name, heads))
    masked = result["heads"]["head_label"].tolist()
    _print_scores(evaluator, f"{len(masked)} heads masked ({','.join(masked)})", result["scores"].iloc[0])
    console.print(f"wrote {out}")


@app.command("layers")
def layers_command(
    model: Path = CheckpointOpt,
    layers: str = layers_option("Layers to skip, 1..L as in hidden_states (the numbering of probe --layers): "
                                "2, 1,2, 1-3 or L2; 0 (the embeddings) cannot be skipped."),
    task: Optional[str] = TaskOpt,
    allow_task_mismatch: bool = AllowMismatchOpt,
    out: Optional[Path] = out_option("ablate"),
    max_dev: Optional[int] = MaxDevOpt,
    old_max_dev: Optional[int] = OldMaxDevOpt,
    data_dir: Optional[Path] = DataOpt,
    device: str = device_option(),
):
    """The task metric before and after skipping whole layers."""
    max_dev = _max_dev(max_dev, old_max_dev)
    if layers is None:
        raise DataError("--layers: which layers to skip? e.g. --layers 2 or --layers 1-3")
    from bertology.intervention.ablation import ablate_layers

    loaded, _, _, evaluator, name = _setup(model, task, max_dev, data_dir, device, allow_task_mismatch)
    result = ablate_layers(loaded, layers, evaluator)
    result.meta.update(_meta(model, evaluator, layers=layers))
    dropped = result["layers"]["layer"].tolist()
    out = result.save(out if out is not None else default_out("ablate/layers", name, "L" + "_".join(map(str, dropped))))
    what = f"layer{'s' if len(dropped) > 1 else ''} {', '.join(map(str, dropped))} skipped"
    _print_scores(evaluator, what, result["scores"].iloc[0])
    console.print(f"wrote {out}")


@app.command("table")
def table_command(
    model: list[Path] = model_option(...),
    task: Optional[str] = TaskOpt,
    allow_task_mismatch: bool = AllowMismatchOpt,
    out: Optional[Path] = out_option("ablate"),
    max_dev: Optional[int] = MaxDevOpt,
    old_max_dev: Optional[int] = OldMaxDevOpt,
    data_dir: Optional[Path] = DataOpt,
    device: str = device_option(),
    engine: str = engine_option(),
    address: Optional[str] = address_option(),
    workers: Optional[int] = workers_option(),
    cpus_per_worker: float = cpus_per_worker_option(),
    gpus_per_worker: float = gpus_per_worker_option(),
    progress: bool = progress_option(),
):
    """Michel et al.'s Table 1: the change when each head alone is masked (one --model per fine-tuning seed).

    With --engine ray each checkpoint x layer is one Ray task (checkpoints and GLUE data on paths every
    node sees); the table is the local one."""
    max_dev = _max_dev(max_dev, old_max_dev)
    from bertology.errors import UsageError
    from bertology.finetune.evaluation import checkpoint_task
    from bertology.finetune.model import read_checkpoint_meta
    from bertology.intervention.importance import single_head_ablation
    from bertology.results import MISSING, is_missing

    check_scale(engine, workers, cpus_per_worker, gpus_per_worker)
    if engine == "ray":
        from bertology.scale import require_ray

        require_ray()
    # Every checkpoint's task (finetune.json) against --task, and against each other, before anything loads.
    tasks = {str(path): checkpoint_task(path, read_checkpoint_meta(path), task, allow_task_mismatch) for path in model}
    if len(set(tasks.values())) > 1:
        raise UsageError("--model: the checkpoints were fine-tuned on different tasks ("
                         + ", ".join(f"{path}: {name}" for path, name in tasks.items())
                         + "); the table compares fine-tuning seeds of one task")
    task = next(iter(tasks.values()))
    models, seeds, evaluator, name = [], [], None, None
    for index, path in enumerate(model):
        if engine == "ray" and evaluator is not None:  # the workers load the checkpoints; the driver one
            meta = read_checkpoint_meta(path)
        else:
            loaded, _, meta, path_evaluator, path_name = _setup(path, task, max_dev, data_dir, device,
                                                                allow_task_mismatch)
            evaluator, name = evaluator or path_evaluator, name or path_name
            models.append(loaded)
        seeds.append(int(meta.get("seed", index)))
    if len(set(seeds)) != len(seeds):
        seeds = list(range(len(model)))
    if engine == "ray":
        from bertology.intervention.hooks import model_layout
        from bertology.scale.sweeps import single_head_ablation_ray

        result = single_head_ablation_ray(model, seeds, model_layout(models[0]).num_layers, task=task,
                                          max_examples=max_dev, data_dir=data_dir, address=address,
                                          workers=workers, cpus_per_worker=cpus_per_worker,
                                          gpus_per_worker=gpus_per_worker, allow_task_mismatch=allow_task_mismatch)
    else:
        result = single_head_ablation(models, evaluator, seeds=seeds, progress=progress)
    result.meta.update(_meta(model[0], evaluator, checkpoints=[str(p) for p in model]))
    out = result.save(out if out is not None else default_out("ablate/table", name, f"{len(models)}models"))
    summary = result["summary"]
    table = Table(title=f"{evaluator.task}: {evaluator.metric} change per masked head "
                        f"({len(models)} seeds, seed spread {summary['seed_spread'].iloc[0]:.4f})")
    for column in ("head", "change (mean)", "std", "p", "real"):
        table.add_column(column)
    for row in summary.sort_values("delta_mean").itertuples():
        table.add_row(row.head_label, f"{row.delta_mean:+.4f}", f"{row.delta_std:.4f}", f"{row.p_value:.3f}",
                      MISSING if is_missing(row.real) else str(bool(row.real)))
    console.print(table)
    console.print(f"wrote {out} (ablation: every seed x head; summary: per head)")


@app.command("importance")
def importance_command(
    model: Path = CheckpointOpt,
    task: Optional[str] = TaskOpt,
    allow_task_mismatch: bool = AllowMismatchOpt,
    out: Optional[Path] = out_option("ablate"),
    max_train: Optional[int] = MaxTrainOpt,
    old_max_train: Optional[int] = OldMaxTrainOpt,
    seeds: int = seeds_option(3, "How many random pruning orders (seeds from --seed)."),
    seed: int = seed_option(),
    recompute: bool = typer.Option(True, "--recompute/--no-recompute", help="recompute importance after each step"),
    max_dev: Optional[int] = MaxDevOpt,
    old_max_dev: Optional[int] = OldMaxDevOpt,
    data_dir: Optional[Path] = DataOpt,
    device: str = device_option(),
    progress: bool = progress_option(),
):
    """Head importance (expected sensitivity) and the pruning curve, importance vs random order."""
    max_dev = _max_dev(max_dev, old_max_dev)
    importance_examples = _importance_examples(max_train, old_max_train)
    random_seeds = seed_list(seeds, seed)
    from bertology.finetune.evaluation import importance_batches
    from bertology.intervention.importance import head_importance, plot_pruning_curve, pruning_curve

    loaded, tokenizer, meta, evaluator, name = _setup(model, task, max_dev, data_dir, device, allow_task_mismatch)
    batches = importance_batches(evaluator.task, tokenizer, importance_examples,
                                 data_dir=str(data_dir) if data_dir else None)
    scores = head_importance(loaded, batches, progress=progress)
    result = pruning_curve(loaded, evaluator, batches, random_seeds=random_seeds, recompute=recompute,
                           importance=scores, progress=progress)
    result.meta.update(_meta(model, evaluator, importance_examples=importance_examples))
    out = out if out is not None else default_out("ablate/importance", name)
    plot_pruning_curve(result, out / "pruning_curve.png", metric_name=f"{evaluator.task} {evaluator.metric}",
                       title=f"{meta.get('base_model', model.name)}: heads pruned ({evaluator.task} {evaluator.split})")
    result.figures["pruning_curve"] = out / "pruning_curve.png"
    result.save(out)
    summary = result["curve"].groupby(["order", "fraction"])["metric"].mean().unstack(0)
    console.print(summary.to_string(float_format=lambda v: f"{v:.4f}"))
    console.print(f"wrote {out} (importance, curve, pruned, pruning_curve.png)")


@app.command("prune")
def prune_command(
    model: Path = CheckpointOpt,
    fraction: float = typer.Option(0.5, "--fraction", help="share of heads to prune, least important first"),
    out: Path = typer.Option(..., "--out", "-o", help="folder for the pruned checkpoint (new or empty); "
                                                      "its tables go to OUT/prune"),
    task: Optional[str] = TaskOpt,
    allow_task_mismatch: bool = AllowMismatchOpt,
    max_train: Optional[int] = MaxTrainOpt,
    old_max_train: Optional[int] = OldMaxTrainOpt,
    max_dev: Optional[int] = MaxDevOpt,
    old_max_dev: Optional[int] = OldMaxDevOpt,
    data_dir: Optional[Path] = DataOpt,
    device: str = device_option(),
    progress: bool = progress_option(),
):
    """Prune the least important heads for real (smaller weights) and save the checkpoint."""
    max_dev = _max_dev(max_dev, old_max_dev)
    importance_examples = _importance_examples(max_train, old_max_train)
    if not 0.0 <= fraction <= 1.0:
        raise DataError(f"--fraction {fraction}: expected a value between 0 and 1")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DataError(f"--out {out}: exists and is not empty; choose a new output folder")
    from bertology.finetune.evaluation import importance_batches
    from bertology.finetune.model import save_checkpoint
    from bertology.intervention.ablation import prune_by_importance

    loaded, tokenizer, meta, evaluator, _ = _setup(model, task, max_dev, data_dir, device, allow_task_mismatch)
    batches = importance_batches(evaluator.task, tokenizer, importance_examples,
                                 data_dir=str(data_dir) if data_dir else None)
    result = prune_by_importance(loaded, evaluator, batches, fraction, progress=progress)
    pruned = result["pruned"]["head_label"].tolist()
    after = result["before_after"].set_index("stage").loc["after"]
    meta = dict(meta, pruned_from=str(model), pruned_fraction=fraction, pruned_heads=pruned,
                pruned_metric=float(after["metric"]))
    save_checkpoint(loaded.cpu(), tokenizer, out, meta)
    result.meta.update(_meta(model, evaluator, pruned_checkpoint=str(out)))
    result.save(out / "prune")
    table = Table(title=f"pruned {len(pruned)} of {result.meta['n_heads']} heads ({evaluator.task} {evaluator.metric}; "
                        f"latency on one batch of {result.meta['latency_batch']}, torch {result.meta['torch']}, "
                        f"{result.meta['threads']} threads)")
    for column in ("", "metric", "parameters", "latency (ms)"):
        table.add_column(column)
    for row in result["before_after"].itertuples():
        table.add_row(row.stage, f"{row.metric:.4f}", f"{row.parameters:,}", f"{row.latency_s * 1000:.1f}")
    console.print(table)
    console.print(f"wrote {out} (tables in {out / 'prune'})")


@app.command("flagged")
def flagged_command(
    model: Path = CheckpointOpt,
    task: Optional[str] = TaskOpt,
    allow_task_mismatch: bool = AllowMismatchOpt,
    table: Optional[Path] = typer.Option(None, "--table", help="best-heads table (.csv or .parquet) with integer "
                                         "layer/head columns or head_label, as `bertology attention parse` writes "
                                         "it; default: computed on UD EWT dev"),
    heads: Optional[str] = heads_option(None, help="or the flagged heads directly, as tables print them: L4H5,L3H0"),
    draws: int = typer.Option(10, "--draws", help="random draws of as many heads"),
    seed: int = seed_option(),
    max_sentences: int = max_sentences_option("Use only the first N sentences of each UD EWT split when computing the "
                                                    "table", default=300),
    min_count: int = typer.Option(100, "--min-count", help="relations with fewer words are not flagged"),
    out: Optional[Path] = out_option("ablate"),
    max_dev: Optional[int] = MaxDevOpt,
    old_max_dev: Optional[int] = OldMaxDevOpt,
    data_dir: Optional[Path] = DataOpt,
    device: str = device_option(),
    progress: bool = progress_option(),
):
    """Are the heads the attention analysis flags used? Mask them vs as many random heads."""
    max_dev = _max_dev(max_dev, old_max_dev)
    check_positive(draws, "--draws")
    check_positive(min_count, "--min-count", allow_none=False)
    check_positive(max_sentences, "--max-sentences")
    seed_list(1, seed)  # checks --seed
    import pandas as pd

    from bertology.intervention.ablation import attention_best_heads
    from bertology.intervention.importance import flagged_heads, flagged_vs_random
    from bertology.models import Encoder

    loaded, tokenizer, meta, evaluator, name = _setup(model, task, max_dev, data_dir, device, allow_task_mismatch)
    best_heads = None
    if heads is not None:
        chosen = heads
    elif table is not None:
        best_heads = _read_table(table)
        chosen = flagged_heads(best_heads)
    else:
        encoder = Encoder.from_model(getattr(loaded, "backbone", loaded), tokenizer, name=str(model))
        best_heads = attention_best_heads(encoder, max_sentences=max_sentences, min_count=min_count,
                                          progress=progress)
        chosen = flagged_heads(best_heads)
    if not chosen:
        raise DataError(f"no head is flagged: no relation has {min_count} words in {max_sentences} UD dev sentences "
                        "(or the table is empty); raise --max-sentences or lower --min-count")
    result = flagged_vs_random(loaded, chosen, evaluator, n_draws=draws, seed=seed, progress=progress)
    if best_heads is not None:
        result.tables["best_heads"] = pd.DataFrame(best_heads).reset_index(drop=True)
    result.meta.update(_meta(model, evaluator, table=str(table) if table else None))
    out = result.save(out if out is not None else default_out("ablate/flagged", name, f"seed{seed}"))
    summary = result["summary"].iloc[0]
    flagged = result["masked"][result["masked"]["condition"] == "flagged"]["head_label"].tolist()
    console.print(f"flagged heads: {','.join(flagged)}")
    report = Table(title=f"{evaluator.task} {evaluator.metric}: flagged vs {draws} random draws of "
                         f"{int(summary['n_masked'])} heads (seed {seed})")
    for column in ("baseline", "flagged change", "random change (mean ± std)", "P(random hurts as much)"):
        report.add_column(column)
    report.add_row(f"{summary['baseline']:.4f}", f"{summary['flagged_delta']:+.4f}",
                   f"{summary['random_delta_mean']:+.4f} ± {summary['random_delta_std']:.4f}",
                   f"{summary['p_random_as_harmful']:.3f}")
    console.print(report)
    console.print(f"wrote {out} (runs, masked, summary)")


def _read_table(path: Path) -> pd.DataFrame:
    import pandas as pd

    if not path.is_file():
        raise DataError(f"--table {path}: no such file")
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    if path.suffix == ".csv":
        return pd.read_csv(path)
    raise DataError(f"--table {path}: expected a .csv or .parquet file")
