"""``bertology heads``: frozen-feature heads on SQuAD 2.0 (the seed's experiment) and GLUE. A thin layer:
the work is in :mod:`bertology.heads.squad` and :mod:`bertology.heads.glue`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from bertology.errors import UsageError
from bertology.options import (
    address_option, check_positive, check_scale, cpus_per_worker_option, data_option, default_out, device_option,
    engine_option, gpus_per_worker_option, model_option, out_option, progress_option, seed_list, seed_option,
    seeds_option, workers_option,
)

app = typer.Typer(help="Frozen-feature heads (BERT Vision): LP, AP, adapters, CNNs on all-layer activations.",
                  no_args_is_help=True)

QUICK_NOTE = "--quick: a small run for smoke tests (few questions, short windows, two heads)"


def _names(text: str, option: str) -> tuple[str, ...]:
    from bertology.heads.catalog import check_head_name

    names = tuple(check_head_name(part) for part in text.split(",") if part.strip())
    if not names:
        raise UsageError(f"{option} {text!r}: expected comma-separated head names")
    return names


def _fractions(text: str, option: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"{option} {text!r}: expected fractions of an epoch separated by commas, e.g. 0.3,1") from None
    if not values or min(values) <= 0:
        raise UsageError(f"{option} {text!r}: expected fractions of an epoch above 0, e.g. 0.3,1")
    return values


def _threads(threads: Optional[int]) -> None:
    if threads is not None:
        import torch

        torch.set_num_threads(check_positive(threads, "--threads"))


def _device(device: str) -> str:
    from bertology.runtime import resolve_device

    return str(resolve_device(device))


@app.command("squad")
def squad_command(
    model: str = model_option(),
    out: Optional[Path] = out_option("heads-squad"),
    data: Optional[Path] = data_option(help="SQuAD v2.0 JSON to split by article (default: the shared dev subset)."),
    train_file: Optional[Path] = typer.Option(None, "--train-file", help="Official-style train JSON (with --eval-file)."),
    eval_file: Optional[Path] = typer.Option(None, "--eval-file", help="Evaluation JSON (with --train-file)."),
    heads: str = typer.Option(",".join(("lp", "ap", "adapter-shared-386-skip", "adapter-independent-386",
                                        "adapter-shared-64", "adapter-independent-64", "stack", "cnn", "last")),
                              "--heads", help="Span heads to train, comma-separated."),
    classify_heads: str = typer.Option("lp", "--classify-heads",
                                       help="Heads for the answerable-or-not framing ('' for none)."),
    checkpoints: str = typer.Option("0.3,1", "--checkpoints", help="Fine-tuning fractions of an epoch to train heads on."),
    curve: str = typer.Option("", "--curve", help="Extra fractions to score the encoder at (Figure 1), e.g. 0.1,0.2,...,1."),
    seeds: int = seeds_option(default=1, help="How many head seeds (from --seed)."),
    seed: int = seed_option(),
    max_length: int = typer.Option(384, "--max-length", help="Window length in tokens (question + context)."),
    stride: int = typer.Option(128, "--stride", help="Overlap in tokens between the windows of a long context."),
    max_train_questions: Optional[int] = typer.Option(None, "--max-train-questions",
                                                      help="A seeded subset of the train questions."),
    max_eval_questions: Optional[int] = typer.Option(None, "--max-eval-questions",
                                                     help="A seeded subset of the evaluation questions."),
    head_epochs: int = typer.Option(1, "--head-epochs", help="Epochs per head (the seed: 1)."),
    head_lr: float = typer.Option(1e-3, "--head-lr", help="Head learning rate (AdamW, warm-up then linear decay)."),
    batch_size: int = typer.Option(16, "--batch-size", help="Windows per head training batch."),
    finetune_lr: float = typer.Option(5e-5, "--finetune-lr", help="Encoder fine-tuning learning rate."),
    finetune_batch_size: int = typer.Option(16, "--finetune-batch-size", help="Windows per fine-tuning batch."),
    quick: bool = typer.Option(False, "--quick", help=QUICK_NOTE),
    device: str = device_option(),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (default: torch's choice)."),
    progress: bool = progress_option(),
) -> None:
    """The seed's experiment: fine-tune part of an epoch and a full one, train every head on each
    checkpoint's frozen all-layer activations, score with the official SQuAD 2.0 rules, one table.

    Scores on the shared subset are not comparable to official SQuAD numbers (dev subset split by article).
    Every step resumes: run the same command again after an interruption.
    """
    from bertology.heads.finetune_qa import QAFinetuneConfig
    from bertology.heads.squad import SquadHeadsConfig, run_squad_heads, summary_table
    from bertology.heads.tables import squad_table
    from bertology.heads.train import HeadTrainConfig

    _threads(threads)
    for value, option in ((max_length, "--max-length"), (head_epochs, "--head-epochs"), (batch_size, "--batch-size"),
                          (finetune_batch_size, "--finetune-batch-size")):
        check_positive(value, option, allow_none=False)
    check_positive(max_train_questions, "--max-train-questions")
    check_positive(max_eval_questions, "--max-eval-questions")
    if stride < 0:
        raise UsageError(f"--stride {stride}: expected a whole number of at least 0")
    for value, option in ((head_lr, "--head-lr"), (finetune_lr, "--finetune-lr")):
        if value <= 0:
            raise UsageError(f"{option} {value}: expected a positive learning rate")
    span_heads = _names(heads, "--heads")
    classify = _names(classify_heads, "--classify-heads") if classify_heads.strip() else ()
    fractions = _fractions(checkpoints, "--checkpoints")
    curve_points = _fractions(curve, "--curve") if curve.strip() else ()
    if quick:
        max_train_questions = min(max_train_questions or 64, 64)
        max_eval_questions = min(max_eval_questions or 32, 32)
        max_length, stride, batch_size, finetune_batch_size = min(max_length, 128), min(stride, 32), 8, 8
        span_heads, classify = span_heads[:2], classify[:1]
    run_device = _device(device)
    config = SquadHeadsConfig(
        heads=span_heads, classify_heads=classify, seeds=seed_list(seeds, seed), max_length=max_length, stride=stride,
        max_train_questions=max_train_questions, max_eval_questions=max_eval_questions,
        finetune=QAFinetuneConfig(checkpoints=fractions, evaluate_at=curve_points, lr=finetune_lr,
                                  batch_size=finetune_batch_size, seed=seed, device=run_device, progress=progress),
        head=HeadTrainConfig(epochs=head_epochs, lr=head_lr, batch_size=batch_size), device=run_device,
        progress=progress)
    out = out or default_out("heads-squad", model, "quick" if quick else None)
    result = run_squad_heads(model, out, config, data=data, train_path=train_file, eval_path=eval_file)
    console = Console()
    console.print(squad_table(summary_table(result["scores"]),
                              f"{result.meta['model']['name']} on SQuAD 2.0 ({result['scores']['n_eval_questions'].iloc[0]}"
                              " evaluation questions; not comparable to official SQuAD numbers)"))
    console.print(f"wrote {out}")


@app.command("glue")
def glue_command(
    task: str = typer.Option(..., "--task", "-t", help="cola, sst2, mrpc, stsb or rte."),
    model: str = model_option(),
    out: Optional[Path] = out_option("heads-glue"),
    heads: str = typer.Option("lp,ap,last,adapter-shared-64,adapter-shared-386-skip,cnn", "--heads",
                              help="Heads to train, comma-separated."),
    pool: str = typer.Option("cls", "--pool", help="Sentence vector per layer: cls or mean."),
    seeds: int = seeds_option(default=3),
    seed: int = seed_option(),
    max_train: Optional[int] = typer.Option(None, "--max-train",
                                            help="Subsample train to N examples (the same draw as `finetune --max-train`)."),
    max_dev: Optional[int] = typer.Option(None, "--max-dev", help="Use only the first N dev examples."),
    epochs: int = typer.Option(3, "--epochs", help="Epochs per head."),
    lr: float = typer.Option(1e-3, "--lr", help="Head learning rate."),
    batch_size: int = typer.Option(32, "--batch-size", help="Examples per batch."),
    finetune_dir: Optional[Path] = typer.Option(None, "--finetune-dir",
                                                help="A `bertology finetune` output folder: its rows join the table."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="GLUE root (default: shared/data/glue)."),
    quick: bool = typer.Option(False, "--quick", help="A small run for smoke tests (200 train, 100 dev, 2 heads)."),
    device: str = device_option(),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (default: torch's choice)."),
    engine: str = engine_option(),
    address: Optional[str] = address_option(),
    workers: Optional[int] = workers_option(),
    cpus_per_worker: float = cpus_per_worker_option(),
    gpus_per_worker: float = gpus_per_worker_option(),
    progress: bool = progress_option(),
) -> None:
    """Heads on frozen all-layer [CLS]/mean vectors for a GLUE task, beside the fine-tuning numbers.

    With --engine ray the activations are extracted here, then every head x seed is one Ray task reading
    them from OUT (a folder every node sees)."""
    from bertology.data.glue import glue_task
    from bertology.heads.glue import GlueHeadsConfig, run_glue_heads
    from bertology.heads.tables import glue_table
    from bertology.heads.train import HeadTrainConfig

    _threads(threads)
    check_scale(engine, workers, cpus_per_worker, gpus_per_worker)
    runner = None
    if engine == "ray":
        from bertology.scale import require_ray

        require_ray()
        from bertology.scale.sweeps import glue_heads_runner

        runner = glue_heads_runner(address=address, workers=workers, cpus_per_worker=cpus_per_worker,
                                   gpus_per_worker=gpus_per_worker)
    spec = glue_task(task)
    for value, option in ((epochs, "--epochs"), (batch_size, "--batch-size")):
        check_positive(value, option, allow_none=False)
    check_positive(max_train, "--max-train")
    check_positive(max_dev, "--max-dev")
    if lr <= 0:
        raise UsageError(f"--lr {lr}: expected a positive learning rate")
    if pool not in ("cls", "mean"):
        raise UsageError(f"--pool {pool!r}: expected cls or mean")
    names = _names(heads, "--heads")
    if finetune_dir is not None and not finetune_dir.is_dir():
        raise UsageError(f"--finetune-dir {finetune_dir}: not a folder; expected a `bertology finetune` output folder")
    if quick:
        max_train, max_dev, names, epochs = min(max_train or 200, 200), min(max_dev or 100, 100), names[:2], 1
    run_device = _device(device)
    config = GlueHeadsConfig(heads=names, seeds=seed_list(seeds, seed), pool=pool, max_train=max_train, max_dev=max_dev,
                             data_dir=str(data_dir) if data_dir else None,
                             head=HeadTrainConfig(epochs=epochs, lr=lr, batch_size=batch_size), device=run_device,
                             progress=progress)
    out = out or default_out("heads-glue", model, spec.name, pool, "quick" if quick else None)
    result = run_glue_heads(model, spec.name, out, config, finetune_dir=finetune_dir, runner=runner)
    console = Console()
    console.print(glue_table(result["scores"], f"{result.meta['model']['name']} on GLUE {spec.name} dev: frozen heads "
                                               "vs fine-tuning"))
    console.print(f"wrote {out}")
