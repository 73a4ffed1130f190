"""``bertology readouts``: frozen-feature readouts on SQuAD 2.0 (the seed's experiment) and GLUE. A thin layer:
the work is in :mod:`bertology.readouts.squad` and :mod:`bertology.readouts.glue`.

``bertology heads`` and the options spelled after "head" (``--heads``, ``--classify-heads``, ``--head-epochs``,
``--head-lr``, ``--head-checkpoints``) are the old spellings: hidden, same behaviour, a one-line note on stderr;
they go in the release after next."""

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

app = typer.Typer(help="Frozen-feature readouts (BERT Vision): LP, AP, adapters, CNNs on all-layer activations.",
                  no_args_is_help=True)
#: The old spelling, ``bertology heads squad|glue``: the same commands, hidden from help (see module doc).
deprecated_app = typer.Typer(help="Deprecated spelling of `bertology readouts`.", no_args_is_help=True)


@deprecated_app.callback()
def _old_command_name() -> None:
    deprecation_note("`bertology heads`", "`bertology readouts`")


def deprecation_note(old: str, new: str) -> None:
    """One line on stderr for an old spelling that still works."""
    typer.echo(f"note: {old} is deprecated (it goes in the next release); use {new}", err=True)


def _renamed(value, old_value, new: str, old: str):
    """The value of option ``new`` given either as itself or as its old spelling ``old`` (with a note)."""
    if old_value is None:
        return value
    if value is not None:
        raise UsageError(f"{old} is the old spelling of {new}; give only {new}")
    deprecation_note(old, new)
    return old_value


def _old_option(name: str):
    return typer.Option(None, name, hidden=True, show_default=False)

QUICK_NOTE = ("--quick: a small run for smoke tests (few questions, short windows, two readouts); options given "
              "explicitly win")

#: The span readouts `readouts squad` trains by default (bertology.readouts.squad.DEFAULT_READOUTS, not imported here).
SQUAD_READOUTS = ("lp", "ap", "adapter-shared-386-skip", "adapter-independent-386", "adapter-shared-64",
               "adapter-independent-64", "stack", "cnn", "last")
SQUAD_DEFAULTS = {"--max-length": 384, "--stride": 128, "--batch-size": 16, "--finetune-batch-size": 16,
                  "--max-train-questions": None, "--max-eval-questions": None, "--readouts": ",".join(SQUAD_READOUTS),
                  "--classify-readouts": "lp", "--readout-epochs": 10, "--patience": 2}
SQUAD_QUICK = {**SQUAD_DEFAULTS, "--max-length": 128, "--stride": 32, "--batch-size": 8, "--finetune-batch-size": 8,
               "--max-train-questions": 64, "--max-eval-questions": 32, "--readouts": ",".join(SQUAD_READOUTS[:2]),
               "--readout-epochs": 2, "--patience": 1}
GLUE_READOUTS = "lp,ap,last,adapter-shared-64,adapter-shared-386-skip,cnn"
GLUE_DEFAULTS = {"--max-train": None, "--max-dev": None, "--epochs": 50, "--patience": 5, "--readouts": GLUE_READOUTS}
GLUE_QUICK = {"--max-train": 200, "--max-dev": 100, "--epochs": 1, "--patience": 1,
              "--readouts": ",".join(GLUE_READOUTS.split(",")[:2])}


def _sizes(given: dict, presets: dict) -> dict:
    """Each option's value: as given on the command line, else its preset (``--quick``'s or the default)."""
    return {option: presets[option] if value is None else value for option, value in given.items()}


def _say_quick(given: dict, sizes: dict) -> None:
    """One line: the values ``--quick`` ran with, and which were given (those win over ``--quick``)."""
    used = ", ".join(f"{option} {'all' if sizes[option] is None else sizes[option]}"
                     + (" (given)" if given[option] is not None else "") for option in given)
    Console().print(f"--quick: {used}", highlight=False, soft_wrap=True)


def _names(text: str, option: str) -> tuple[str, ...]:
    from bertology.readouts.names import check_readout_name

    names = tuple(check_readout_name(part, option) for part in text.split(",") if part.strip())
    if not names:
        raise UsageError(f"{option} {text!r}: expected comma-separated readout names")
    return names


def _fractions(text: str, option: str, allow_zero: bool = False) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"{option} {text!r}: expected fractions of an epoch separated by commas, e.g. 0.3,1") from None
    if not values or min(values) < 0 or (not allow_zero and min(values) == 0):
        least = "0 (the pretrained encoder) or above" if allow_zero else "above 0"
        raise UsageError(f"{option} {text!r}: expected fractions of an epoch {least}, e.g. 0.3,1")
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
    out: Optional[Path] = out_option("readouts-squad"),
    data: Optional[Path] = data_option(help="SQuAD v2.0 JSON to split by article (default: the shared dev subset)."),
    train_file: Optional[Path] = typer.Option(None, "--train-file", help="Official-style train JSON (with --eval-file)."),
    eval_file: Optional[Path] = typer.Option(None, "--eval-file", help="Evaluation JSON (with --train-file)."),
    readouts: Optional[str] = typer.Option(None, "--readouts", show_default=False,
                                           help=f"Span readouts to train, comma-separated (default "
                                                f"{','.join(SQUAD_READOUTS)}; the first two with --quick)."),
    classify_readouts: Optional[str] = typer.Option(None, "--classify-readouts", show_default=False,
                                                    help="Readouts for the answerable-or-not framing ('' for none; "
                                                         "default lp)."),
    checkpoints: str = typer.Option("0,0.3,1", "--checkpoints",
                                    help="Checkpoints: 0 = the pretrained encoder, frozen and never fine-tuned; others "
                                         "are fractions of a fine-tuning epoch."),
    readout_checkpoints: Optional[str] = typer.Option(None, "--readout-checkpoints", show_default=False,
                                                      help="The checkpoints readouts train on (default: every one of "
                                                           "--checkpoints)."),
    mode: str = typer.Option("squad2", "--mode", help="squad2: every question, no-answer included; answerable: only "
                                                      "questions with an answer (SQuAD 1.1-style), training windows "
                                                      "without the answer dropped."),
    eval_share: float = typer.Option(0.25, "--eval-share", help="Share of the articles held for evaluation."),
    heldout_share: float = typer.Option(0.2, "--heldout-share",
                                        help="Share of the training articles held out for early stopping and the "
                                             "no-answer threshold."),
    curve: str = typer.Option("", "--curve", help="Extra fractions to score the encoder at (Figure 1), e.g. 0.1,0.2,...,1."),
    seeds: int = seeds_option(default=1, help="How many readout seeds (from --seed)."),
    seed: int = seed_option(),
    max_length: Optional[int] = typer.Option(None, "--max-length", show_default=False,
                                             help="Window length in tokens (question + context; default 384, 128 with "
                                                  "--quick)."),
    stride: Optional[int] = typer.Option(None, "--stride", show_default=False,
                                         help="Overlap in tokens between the windows of a long context (default 128, "
                                              "32 with --quick)."),
    max_train_questions: Optional[int] = typer.Option(None, "--max-train-questions",
                                                      help="A seeded subset of the train questions (64 with --quick)."),
    max_eval_questions: Optional[int] = typer.Option(None, "--max-eval-questions",
                                                     help="A seeded subset of the evaluation questions (32 with "
                                                          "--quick)."),
    readout_epochs: Optional[int] = typer.Option(None, "--readout-epochs", show_default=False,
                                                 help="Most epochs per readout (default 10, 2 with --quick; the seed: "
                                                      "1)."),
    patience: Optional[int] = typer.Option(None, "--patience", show_default=False,
                                           help="Stop a readout after this many epochs without a better held-out F1 "
                                                "(default 2, 1 with --quick; 0: no early stopping)."),
    standardise: bool = typer.Option(True, "--standardise/--no-standardise",
                                     help="Standardise each layer's features with the training activations' "
                                          "mean/std (stored with the readout)."),
    readout_lr: Optional[float] = typer.Option(None, "--readout-lr", show_default=False,
                                               help="Readout learning rate (AdamW, warm-up then linear decay; default "
                                                    "1e-3)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", show_default=False,
                                             help="Windows per readout training batch (default 16, 8 with --quick)."),
    finetune_lr: float = typer.Option(5e-5, "--finetune-lr", help="Encoder fine-tuning learning rate."),
    finetune_batch_size: Optional[int] = typer.Option(None, "--finetune-batch-size", show_default=False,
                                                      help="Windows per fine-tuning batch (default 16, 8 with --quick)."),
    quick: bool = typer.Option(False, "--quick", help=QUICK_NOTE),
    device: str = device_option(),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (default: torch's choice)."),
    progress: bool = progress_option(),
    heads: Optional[str] = _old_option("--heads"),
    classify_heads: Optional[str] = _old_option("--classify-heads"),
    head_checkpoints: Optional[str] = _old_option("--head-checkpoints"),
    head_epochs: Optional[int] = _old_option("--head-epochs"),
    head_lr: Optional[float] = _old_option("--head-lr"),
) -> None:
    """The seed's experiment: fine-tune part of an epoch and a full one, train every readout on each
    checkpoint's frozen all-layer activations, score with the official SQuAD 2.0 rules, one table.

    Scores on the shared subset are not comparable to official SQuAD numbers (dev subset split by article).
    Every step resumes: run the same command again after an interruption.
    """
    readouts = _renamed(readouts, heads, "--readouts", "--heads")
    classify_readouts = _renamed(classify_readouts, classify_heads, "--classify-readouts", "--classify-heads")
    readout_checkpoints = _renamed(readout_checkpoints, head_checkpoints, "--readout-checkpoints", "--head-checkpoints")
    readout_epochs = _renamed(readout_epochs, head_epochs, "--readout-epochs", "--head-epochs")
    readout_lr = _renamed(readout_lr, head_lr, "--readout-lr", "--head-lr")
    readout_lr = 1e-3 if readout_lr is None else readout_lr
    readout_checkpoints = readout_checkpoints or ""
    _threads(threads)
    given = {"--max-length": max_length, "--stride": stride, "--batch-size": batch_size,
             "--finetune-batch-size": finetune_batch_size, "--max-train-questions": max_train_questions,
             "--max-eval-questions": max_eval_questions, "--readouts": readouts,
             "--classify-readouts": classify_readouts, "--readout-epochs": readout_epochs, "--patience": patience}
    sizes = _sizes(given, SQUAD_QUICK if quick else SQUAD_DEFAULTS)
    max_length, stride, batch_size = sizes["--max-length"], sizes["--stride"], sizes["--batch-size"]
    finetune_batch_size = sizes["--finetune-batch-size"]
    readouts, classify_readouts = sizes["--readouts"], sizes["--classify-readouts"]
    max_train_questions, max_eval_questions = sizes["--max-train-questions"], sizes["--max-eval-questions"]
    readout_epochs, patience = sizes["--readout-epochs"], sizes["--patience"]
    if patience < 0:
        raise UsageError(f"--patience {patience}: expected a whole number of at least 0 (0: no early stopping)")
    for value, option in ((max_length, "--max-length"), (readout_epochs, "--readout-epochs"),
                          (batch_size, "--batch-size"), (finetune_batch_size, "--finetune-batch-size")):
        check_positive(value, option, allow_none=False)
    check_positive(max_train_questions, "--max-train-questions")
    check_positive(max_eval_questions, "--max-eval-questions")
    if stride < 0:
        raise UsageError(f"--stride {stride}: expected a whole number of at least 0")
    for value, option in ((readout_lr, "--readout-lr"), (finetune_lr, "--finetune-lr")):
        if value <= 0:
            raise UsageError(f"{option} {value}: expected a positive learning rate")
    span_readouts = _names(readouts, "--readouts")
    classify = _names(classify_readouts, "--classify-readouts") if classify_readouts.strip() else ()
    fractions = _fractions(checkpoints, "--checkpoints", allow_zero=True)
    on_readouts = (_fractions(readout_checkpoints, "--readout-checkpoints", allow_zero=True)
                   if readout_checkpoints.strip() else None)
    if on_readouts is not None and not set(on_readouts) <= set(fractions):
        raise UsageError(f"--readout-checkpoints {readout_checkpoints!r}: expected some of --checkpoints "
                         f"{checkpoints!r}")
    tuned_fractions = tuple(f for f in fractions if f > 0)
    curve_points = _fractions(curve, "--curve") if curve.strip() else ()
    run_device = _device(device)
    if quick:
        _say_quick(given, sizes)
    from bertology.training import Optimisation
    from bertology.readouts.finetune_qa import QAFinetuneConfig
    from bertology.readouts.squad import SquadReadoutsConfig, run_squad_readouts, summary_table
    from bertology.readouts.tables import squad_table
    from bertology.readouts.train import ReadoutTrainConfig

    config = SquadReadoutsConfig(
        readouts=span_readouts, classify_readouts=classify, seeds=seed_list(seeds, seed), max_length=max_length,
        stride=stride, max_train_questions=max_train_questions, max_eval_questions=max_eval_questions, mode=mode,
        eval_share=eval_share, heldout_share=heldout_share, pretrained=0 in fractions, readout_checkpoints=on_readouts,
        finetune=QAFinetuneConfig(checkpoints=tuned_fractions, evaluate_at=curve_points, progress=progress,
                                  optimisation=Optimisation(lr=finetune_lr, batch_size=finetune_batch_size, seed=seed,
                                                            device=run_device))
        if tuned_fractions else None,
        readout=ReadoutTrainConfig(epochs=readout_epochs, patience=patience or None, standardise=standardise,
                                   optimisation=Optimisation(lr=readout_lr, batch_size=batch_size)),
        device=run_device,
        progress=progress)
    out = out or default_out("readouts-squad", model, "quick" if quick else None)
    result = run_squad_readouts(model, out, config, data=data, train_path=train_file, eval_path=eval_file)
    console = Console()
    console.print(squad_table(summary_table(result["scores"]),
                              f"{result.meta['model']['name']} on SQuAD 2.0 ({result['scores']['n_eval_questions'].iloc[0]}"
                              " evaluation questions; not comparable to official SQuAD numbers)"))
    console.print(f"wrote {out}")


@app.command("glue")
def glue_command(
    task: str = typer.Option(..., "--task", "-t", help="cola, sst2, mrpc, stsb or rte."),
    model: str = model_option(),
    out: Optional[Path] = out_option("readouts-glue"),
    readouts: Optional[str] = typer.Option(None, "--readouts", show_default=False,
                                           help=f"Readouts to train, comma-separated (default {GLUE_READOUTS}; the "
                                                "first two with --quick)."),
    pool: str = typer.Option("cls", "--pool", help="Sentence vector per layer: cls or mean (a model without [CLS], "
                                                   "such as GPT-2: mean)."),
    seeds: int = seeds_option(default=3),
    seed: int = seed_option(),
    max_train: Optional[int] = typer.Option(None, "--max-train",
                                            help="Subsample train to N examples (the same draw as `finetune "
                                                 "--max-train`; 200 with --quick)."),
    max_dev: Optional[int] = typer.Option(None, "--max-dev", help="Use only the first N dev examples (100 with --quick)."),
    epochs: Optional[int] = typer.Option(None, "--epochs", show_default=False,
                                         help="Most epochs per readout (default 50, 1 with --quick)."),
    patience: Optional[int] = typer.Option(None, "--patience", show_default=False,
                                           help="Stop a readout after this many epochs without a lower held-out loss "
                                                "(default 5, 1 with --quick; 0: no early stopping)."),
    heldout_share: float = typer.Option(0.1, "--heldout-share",
                                        help="Share of the training examples held out (seeded) for early stopping; "
                                             "0: none."),
    standardise: bool = typer.Option(True, "--standardise/--no-standardise",
                                     help="Standardise each layer's features with the training mean/std."),
    references: bool = typer.Option(True, "--references/--no-references",
                                    help="Add scikit-learn logistic regressions (C by cross-validation) on the same "
                                         "features: the last layer, the mean of layers, all layers."),
    lr: float = typer.Option(1e-3, "--lr", help="Readout learning rate."),
    batch_size: int = typer.Option(32, "--batch-size", help="Examples per batch."),
    finetune_dir: Optional[Path] = typer.Option(None, "--finetune-dir",
                                                help="A `bertology finetune` output folder: its rows join the table."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="GLUE root (default: $BERTOLOGY_DATA/glue, else Hugging Face datasets nyu-mll/glue)."),
    quick: bool = typer.Option(False, "--quick", help="A small run for smoke tests (200 train, 100 dev, 2 readouts, 1 "
                                                      "epoch); options given explicitly win."),
    device: str = device_option(),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (default: torch's choice)."),
    engine: str = engine_option(),
    address: Optional[str] = address_option(),
    workers: Optional[int] = workers_option(),
    cpus_per_worker: float = cpus_per_worker_option(),
    gpus_per_worker: float = gpus_per_worker_option(),
    progress: bool = progress_option(),
    heads: Optional[str] = _old_option("--heads"),
) -> None:
    """Readouts on frozen all-layer [CLS]/mean vectors for a GLUE task, beside the fine-tuning numbers.

    With --engine ray the activations are extracted here, then every readout x seed is one Ray task reading
    them from OUT (a folder every node sees)."""
    from bertology.data.glue import glue_task

    readouts = _renamed(readouts, heads, "--readouts", "--heads")
    _threads(threads)
    check_scale(engine, workers, cpus_per_worker, gpus_per_worker)
    runner = None
    if engine == "ray":
        from bertology.scale import require_ray

        require_ray()
        from bertology.scale.sweeps import glue_readouts_runner

        runner = glue_readouts_runner(address=address, workers=workers, cpus_per_worker=cpus_per_worker,
                                      gpus_per_worker=gpus_per_worker)
    spec = glue_task(task)
    given = {"--max-train": max_train, "--max-dev": max_dev, "--epochs": epochs, "--patience": patience,
             "--readouts": readouts}
    sizes = _sizes(given, GLUE_QUICK if quick else GLUE_DEFAULTS)
    max_train, max_dev, epochs = sizes["--max-train"], sizes["--max-dev"], sizes["--epochs"]
    patience = sizes["--patience"]
    if patience < 0:
        raise UsageError(f"--patience {patience}: expected a whole number of at least 0 (0: no early stopping)")
    for value, option in ((epochs, "--epochs"), (batch_size, "--batch-size")):
        check_positive(value, option, allow_none=False)
    check_positive(max_train, "--max-train")
    check_positive(max_dev, "--max-dev")
    if lr <= 0:
        raise UsageError(f"--lr {lr}: expected a positive learning rate")
    if pool not in ("cls", "mean"):
        raise UsageError(f"--pool {pool!r}: expected cls or mean")
    names = _names(sizes["--readouts"], "--readouts")
    if finetune_dir is not None and not finetune_dir.is_dir():
        raise UsageError(f"--finetune-dir {finetune_dir}: not a folder; expected a `bertology finetune` output folder")
    run_device = _device(device)
    if quick:
        _say_quick(given, sizes)
    from bertology.training import Optimisation
    from bertology.readouts.glue import GlueReadoutsConfig, run_glue_readouts
    from bertology.readouts.tables import glue_table
    from bertology.readouts.train import ReadoutTrainConfig

    config = GlueReadoutsConfig(readouts=names, seeds=seed_list(seeds, seed), pool=pool, max_train=max_train,
                                max_dev=max_dev, data_dir=str(data_dir) if data_dir else None,
                                heldout_share=heldout_share, references=references,
                                readout=ReadoutTrainConfig(epochs=epochs, patience=patience or None,
                                                           standardise=standardise,
                                                           optimisation=Optimisation(lr=lr, batch_size=batch_size)),
                                device=run_device,
                                progress=progress)
    out = out or default_out("readouts-glue", model, spec.name, pool, "quick" if quick else None)
    result = run_glue_readouts(model, spec.name, out, config, finetune_dir=finetune_dir, runner=runner)
    console = Console()
    console.print(glue_table(result["scores"], f"{result.meta['model']['name']} on GLUE {spec.name} dev: frozen readouts "
                                               "vs fine-tuning"))
    console.print(f"wrote {out}")


deprecated_app.command("squad")(squad_command)
deprecated_app.command("glue")(glue_command)
