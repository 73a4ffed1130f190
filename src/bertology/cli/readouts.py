"""``bertology readouts``: frozen-feature readouts on SQuAD 2.0 (the seed's experiment) and GLUE. A thin layer:
the options make a spec (:mod:`bertology.readouts.spec`: the defaults, the ``--quick`` presets and every check),
the work is in :mod:`bertology.readouts.squad` and :mod:`bertology.readouts.glue`.

``bertology heads`` and the options spelled after "head" (``--heads``, ``--classify-heads``, ``--head-epochs``,
``--head-lr``, ``--head-checkpoints``) are the old spellings: hidden, same behaviour, a one-line note on stderr;
they go in the release after next. So are the splits' names before train/dev/test (docs/ARCHITECTURE.md's
glossary): squad's ``--eval-file``, ``--eval-share``, ``--heldout-share``, ``--max-train-questions`` and
``--max-eval-questions`` (now ``--test-file``, ``--test-share``, ``--dev-share``, ``--max-train``, ``--max-test``)
and glue's ``--heldout-share`` (now ``--early-stopping-share``: GLUE's dev split is the one scored there)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

import bertology.cli.options as options
from bertology.errors import UsageError
from bertology.cli.options import (
    address_option, check_positive, check_scale, cpus_per_worker_option, data_option, default_out, device_option,
    engine_option, gpus_per_worker_option, model_option, out_option, progress_option, seed_list, seed_option,
    seeds_option, workers_option,
)
from bertology.readouts.spec import GLUE_PRESETS, SQUAD_PRESETS, GlueReadoutsSpec, SquadReadoutsSpec

#: The specs' defaults, which the options show (the sizes --quick shrinks are None there: their presets).
SQUAD, GLUE = SquadReadoutsSpec(), GlueReadoutsSpec()

#: The library's SQuAD file keywords, named by the options that give them.
FILE_OPTIONS = {"train_path": "--train-file", "test_path": "--test-file"}
app = options.CommandApp(help="Frozen-feature readouts (BERT Vision): LP, AP, adapters, CNNs on all-layer activations.",
                         no_args_is_help=True, settings=FILE_OPTIONS)
#: The old spelling, ``bertology heads squad|glue``: the same commands, hidden from help (see module doc).
deprecated_app = options.CommandApp(help="Deprecated spelling of `bertology readouts`.", no_args_is_help=True,
                                    settings=FILE_OPTIONS)


@deprecated_app.callback()
def _old_command_name() -> None:
    options.deprecation_note("`bertology heads`", "`bertology readouts`")


QUICK_NOTE = ("--quick: a small run for smoke tests (few questions, short windows, two readouts); options given "
              "explicitly win")


def _preset(presets: dict, name: str, unit: str = "") -> str:
    """``default 384, 128 with --quick``: a preset size in a help text, from the spec's presets."""
    default, quick = (",".join(v) if isinstance(v, tuple) else "all" if v is None else f"{v}{unit}"
                      for v in presets[name])
    return f"default {default}, {quick} with --quick"


def _say_quick(spec) -> None:
    """One line: the values ``--quick`` ran with, and which were given (those win over ``--quick``)."""
    shown = {tuple: ",".join, type(None): lambda _: "all"}
    used = ", ".join(f"{spec.option(name)} {shown.get(type(value), str)(value)}" + (" (given)" if given else "")
                     for name, (value, given) in spec.presets().items())
    Console().print(f"--quick: {used}", highlight=False, soft_wrap=True)


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
    train_file: Optional[Path] = typer.Option(None, "--train-file", help="Official-style train JSON (with --test-file; "
                                                                         "its articles also give the dev split)."),
    test_file: Optional[Path] = typer.Option(None, "--test-file", help="Test JSON, only scored (with --train-file)."),
    readouts: Optional[str] = typer.Option(None, "--readouts", show_default=False,
                                           help=f"Span readouts to train, comma-separated "
                                                f"({_preset(SQUAD_PRESETS, 'readouts')})."),
    classify_readouts: Optional[str] = typer.Option(None, "--classify-readouts", show_default=False,
                                                    help="Readouts for the answerable-or-not framing ('' for none; "
                                                         f"{_preset(SQUAD_PRESETS, 'classify_readouts')})."),
    checkpoints: str = typer.Option(",".join(f"{c:g}" for c in SQUAD.checkpoints), "--checkpoints",
                                    help="Checkpoints: 0 = the pretrained encoder, frozen and never fine-tuned; others "
                                         "are fractions of a fine-tuning epoch."),
    readout_checkpoints: Optional[str] = typer.Option(None, "--readout-checkpoints", show_default=False,
                                                      help="The checkpoints readouts train on (default: every one of "
                                                           "--checkpoints)."),
    mode: str = typer.Option(SQUAD.mode, "--mode", help="squad2: every question, no-answer included; answerable: only "
                                                        "questions with an answer (SQuAD 1.1-style), training windows "
                                                        "without the answer dropped."),
    test_share: Optional[float] = typer.Option(None, "--test-share", show_default=False,
                                               help="Share of the articles in the test split, only scored (default "
                                                    f"{SQUAD.test_share:g})."),
    dev_share: Optional[float] = typer.Option(None, "--dev-share", show_default=False,
                                              help="Share of the other articles in the dev split: early stopping and "
                                                   f"the no-answer threshold (default {SQUAD.dev_share:g})."),
    curve: str = typer.Option("", "--curve", help="Extra fractions to score the encoder at (Figure 1), e.g. 0.1,0.2,...,1."),
    seeds: int = seeds_option(default=len(SQUAD.seeds), help="How many readout seeds (from --seed)."),
    seed: int = seed_option(),
    max_length: Optional[int] = typer.Option(None, "--max-length", show_default=False,
                                             help="Window length in tokens (question + context; "
                                                  f"{_preset(SQUAD_PRESETS, 'max_length')})."),
    stride: Optional[int] = typer.Option(None, "--stride", show_default=False,
                                         help="Overlap in tokens between the windows of a long context "
                                              f"({_preset(SQUAD_PRESETS, 'stride')})."),
    max_train: Optional[int] = typer.Option(None, "--max-train", show_default=False,
                                            help="A seeded subset of N train questions "
                                                 f"({_preset(SQUAD_PRESETS, 'max_train')})."),
    max_test: Optional[int] = typer.Option(None, "--max-test", show_default=False,
                                           help="A seeded subset of N test questions "
                                                f"({_preset(SQUAD_PRESETS, 'max_test')})."),
    readout_epochs: Optional[int] = typer.Option(None, "--readout-epochs", show_default=False,
                                                 help="Most epochs per readout "
                                                      f"({_preset(SQUAD_PRESETS, 'readout_epochs')}; the seed: 1)."),
    patience: Optional[int] = typer.Option(None, "--patience", show_default=False,
                                           help="Stop a readout after this many epochs without a better dev F1 "
                                                f"({_preset(SQUAD_PRESETS, 'patience')}; 0: no early stopping)."),
    standardise: bool = typer.Option(SQUAD.standardise, "--standardise/--no-standardise",
                                     help="Standardise each layer's features with the training activations' "
                                          "mean/std (stored with the readout)."),
    readout_lr: Optional[float] = typer.Option(None, "--readout-lr", show_default=False,
                                               help="Readout learning rate (AdamW, warm-up then linear decay; default "
                                                    f"{SQUAD.readout_lr:g})."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", show_default=False,
                                             help="Windows per readout training batch "
                                                  f"({_preset(SQUAD_PRESETS, 'batch_size')})."),
    finetune_lr: float = typer.Option(SQUAD.finetune_lr, "--finetune-lr", help="Encoder fine-tuning learning rate."),
    finetune_batch_size: Optional[int] = typer.Option(None, "--finetune-batch-size", show_default=False,
                                                      help="Windows per fine-tuning batch "
                                                           f"({_preset(SQUAD_PRESETS, 'finetune_batch_size')})."),
    quick: bool = typer.Option(False, "--quick", help=QUICK_NOTE),
    device: str = device_option(),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (default: torch's choice)."),
    progress: bool = progress_option(),
    heads: Optional[str] = options.old_option("--heads"),
    classify_heads: Optional[str] = options.old_option("--classify-heads"),
    head_checkpoints: Optional[str] = options.old_option("--head-checkpoints"),
    head_epochs: Optional[int] = options.old_option("--head-epochs"),
    head_lr: Optional[float] = options.old_option("--head-lr"),
    eval_file: Optional[Path] = options.old_option("--eval-file"),
    eval_share: Optional[float] = options.old_option("--eval-share"),
    heldout_share: Optional[float] = options.old_option("--heldout-share"),
    max_train_questions: Optional[int] = options.old_option("--max-train-questions"),
    max_eval_questions: Optional[int] = options.old_option("--max-eval-questions"),
) -> None:
    """The seed's experiment: fine-tune part of an epoch and a full one, train every readout on each
    checkpoint's frozen all-layer activations, score with the official SQuAD 2.0 rules, one table.

    Scores on the shared subset are not comparable to official SQuAD numbers (dev subset split by article into
    train, dev and test).
    Every step resumes: run the same command again after an interruption.
    """
    readouts = options.renamed(readouts, heads, "--readouts", "--heads")
    classify_readouts = options.renamed(classify_readouts, classify_heads, "--classify-readouts", "--classify-heads")
    readout_checkpoints = options.renamed(readout_checkpoints, head_checkpoints, "--readout-checkpoints", "--head-checkpoints")
    readout_epochs = options.renamed(readout_epochs, head_epochs, "--readout-epochs", "--head-epochs")
    readout_lr = options.renamed(readout_lr, head_lr, "--readout-lr", "--head-lr")
    test_file = options.renamed(test_file, eval_file, "--test-file", "--eval-file")
    test_share = options.renamed(test_share, eval_share, "--test-share", "--eval-share")
    dev_share = options.renamed(dev_share, heldout_share, "--dev-share", "--heldout-share")
    max_train = options.renamed(max_train, max_train_questions, "--max-train", "--max-train-questions")
    max_test = options.renamed(max_test, max_eval_questions, "--max-test", "--max-eval-questions")
    spec = SquadReadoutsSpec(readouts=readouts, classify_readouts=classify_readouts, checkpoints=checkpoints,
                 readout_checkpoints=readout_checkpoints, mode=mode,
                 test_share=SQUAD.test_share if test_share is None else test_share,
                 dev_share=SQUAD.dev_share if dev_share is None else dev_share,
                 curve=curve, seeds=seed_list(seeds, seed), max_length=max_length, stride=stride,
                 max_train=max_train, max_test=max_test,
                 readout_epochs=readout_epochs, patience=patience, standardise=standardise,
                 readout_lr=SQUAD.readout_lr if readout_lr is None else readout_lr, batch_size=batch_size,
                 finetune_lr=finetune_lr, finetune_batch_size=finetune_batch_size, quick=quick)
    _threads(threads)
    run_device = _device(device)
    if quick:
        _say_quick(spec)
    from bertology.readouts.squad import SquadReadoutsConfig, run_squad_readouts, summary_table
    from bertology.readouts.tables import squad_table

    out = out or default_out("readouts-squad", model, "quick" if quick else None)
    result = run_squad_readouts(model, out, SquadReadoutsConfig.from_spec(spec, run_device, progress), data=data,
                                train_path=train_file, test_path=test_file)
    console = Console()
    console.print(squad_table(summary_table(result["scores"]),
                              f"{result.meta['model']['name']} on SQuAD 2.0 ({result['scores']['n_test'].iloc[0]}"
                              " test questions; not comparable to official SQuAD numbers)"))
    console.print(f"wrote {out}")


@app.command("glue")
def glue_command(
    task: str = typer.Option(..., "--task", "-t", help="cola, sst2, mrpc, stsb or rte."),
    model: str = model_option(),
    out: Optional[Path] = out_option("readouts-glue"),
    readouts: Optional[str] = typer.Option(None, "--readouts", show_default=False,
                                           help=f"Readouts to train, comma-separated "
                                                f"({_preset(GLUE_PRESETS, 'readouts')})."),
    pool: str = typer.Option(GLUE.pool, "--pool", help="Sentence vector per layer: cls or mean (a model without [CLS], "
                                                       "such as GPT-2: mean)."),
    seeds: int = seeds_option(default=len(GLUE.seeds)),
    seed: int = seed_option(),
    max_train: Optional[int] = typer.Option(None, "--max-train",
                                            help="Subsample train to N examples (the same draw as `finetune "
                                                 f"--max-train`; {_preset(GLUE_PRESETS, 'max_train')})."),
    max_dev: Optional[int] = typer.Option(None, "--max-dev", help="Use only the first N dev examples "
                                                                  f"({_preset(GLUE_PRESETS, 'max_dev')})."),
    epochs: Optional[int] = typer.Option(None, "--epochs", show_default=False,
                                         help=f"Most epochs per readout ({_preset(GLUE_PRESETS, 'epochs')})."),
    patience: Optional[int] = typer.Option(None, "--patience", show_default=False,
                                           help="Stop a readout after this many epochs without a lower early-stopping loss "
                                                f"({_preset(GLUE_PRESETS, 'patience')}; 0: no early stopping)."),
    early_stopping_share: Optional[float] = typer.Option(
        None, "--early-stopping-share", show_default=False,
        help=f"Share of the training examples held out (seeded) for early stopping (default "
             f"{GLUE.early_stopping_share:g}; 0: none). Not called dev: GLUE's dev split is the one scored."),
    standardise: bool = typer.Option(GLUE.standardise, "--standardise/--no-standardise",
                                     help="Standardise each layer's features with the training mean/std."),
    references: bool = typer.Option(GLUE.references, "--references/--no-references",
                                    help="Add scikit-learn logistic regressions (C by cross-validation) on the same "
                                         "features: the last layer, the mean of layers, all layers."),
    lr: float = typer.Option(GLUE.lr, "--lr", help="Readout learning rate."),
    batch_size: int = typer.Option(GLUE.batch_size, "--batch-size", help="Examples per batch."),
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
    heads: Optional[str] = options.old_option("--heads"),
    heldout_share: Optional[float] = options.old_option("--heldout-share"),
) -> None:
    """Readouts on frozen all-layer [CLS]/mean vectors for a GLUE task, beside the fine-tuning numbers.

    With --engine ray the activations are extracted here, then every readout x seed is one Ray task reading
    them from OUT (a folder every node sees)."""
    from bertology.data.glue import glue_task

    readouts = options.renamed(readouts, heads, "--readouts", "--heads")
    early_stopping_share = options.renamed(early_stopping_share, heldout_share, "--early-stopping-share",
                                           "--heldout-share")
    _threads(threads)
    check_scale(engine, workers, cpus_per_worker, gpus_per_worker)
    runner = None
    if engine == "ray":
        from bertology.scale import require_ray

        require_ray()
        from bertology.scale.sweeps import glue_readouts_runner

        runner = glue_readouts_runner(address=address, workers=workers, cpus_per_worker=cpus_per_worker,
                                      gpus_per_worker=gpus_per_worker)
    task_spec = glue_task(task)
    spec = GlueReadoutsSpec(readouts=readouts, pool=pool, seeds=seed_list(seeds, seed), max_train=max_train,
                 max_dev=max_dev, epochs=epochs, patience=patience,
                 early_stopping_share=GLUE.early_stopping_share if early_stopping_share is None else early_stopping_share,
                 standardise=standardise, references=references, lr=lr, batch_size=batch_size, quick=quick)
    if finetune_dir is not None and not finetune_dir.is_dir():
        raise UsageError(f"--finetune-dir {finetune_dir}: not a folder; expected a `bertology finetune` output folder")
    run_device = _device(device)
    if quick:
        _say_quick(spec)
    from bertology.readouts.glue import GlueReadoutsConfig, run_glue_readouts
    from bertology.readouts.tables import glue_table

    config = GlueReadoutsConfig.from_spec(spec, str(data_dir) if data_dir else None, run_device, progress)
    out = out or default_out("readouts-glue", model, task_spec.name, pool, "quick" if quick else None)
    result = run_glue_readouts(model, task_spec.name, out, config, finetune_dir=finetune_dir, runner=runner)
    console = Console()
    console.print(glue_table(result["scores"], f"{result.meta['model']['name']} on GLUE {task_spec.name} dev: frozen "
                                               "readouts vs fine-tuning"))
    console.print(f"wrote {out}")


deprecated_app.command("squad")(squad_command)
deprecated_app.command("glue")(glue_command)
