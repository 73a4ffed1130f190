"""``bertology compress``: a thin typer layer over :func:`bertology.compression.run.run_compression`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

import bertology.cli.options as options
from bertology.compression.names import DEFAULT_METHODS, FINETUNE_EPOCHS, FINETUNE_LR, parse_methods
from bertology.cli.options import check_model_source, check_positive, default_out, model_option, out_option, \
    progress_option, seed_option

console = Console()


def compress_command(
    model: str = model_option(),
    methods: str = typer.Option("default", "--methods", help="Comma-separated: int8-dynamic, int8-static, fp16, "
                                "bf16, magnitude:S, magnitude-layer:S (sparsity in [0, 1)), heads-importance:F, "
                                f"heads-random:F (fraction of heads), drop-top:K. default: {DEFAULT_METHODS}"),
    teacher: Optional[str] = typer.Option(None, "--teacher", callback=check_model_source,
                                          help="Measure --model (a student, e.g. a distilled model) against this "
                                               "teacher instead of against itself."),
    out: Optional[Path] = out_option("compress"),
    max_train: int = typer.Option(500, "--max-train", help="EWT train sentences the probes learn from."),
    max_dev: int = typer.Option(200, "--max-dev", help="EWT dev sentences that choose layers, L2 and heads."),
    max_test: int = typer.Option(300, "--max-test", help="EWT test sentences scored and timed."),
    rounds: int = typer.Option(3, "--rounds", help="Timed rounds of extract per model (after one warm-up)."),
    calibration: int = typer.Option(64, "--calibration", help="Train sentences that calibrate int8-static."),
    engine: Optional[str] = typer.Option(None, "--quantized-engine", help="PyTorch quantized engine (x86, fbgemm, "
                                         "onednn, qnnpack; default: the machine's)."),
    old_engine: Optional[str] = options.old_option("--engine"),
    structural_epochs: int = typer.Option(10, "--structural-epochs", help="Epochs of the structural probe."),
    min_relation_count: int = typer.Option(30, "--min-relation-count", help="Dev words a relation needs for its "
                                           "best parser head to be chosen and scored."),
    finetune: Optional[str] = typer.Option(None, "--finetune", help="Also fine-tune the original and every variant "
                                           "on this task (GLUE cola, sst2, mrpc, stsb, rte, or the packaged bshift) "
                                           "with one recipe and seed, and report dev-metric retention; int8, fp16 "
                                           "and bf16 are the fine-tuned original compressed afterwards."),
    finetune_max_train: Optional[int] = typer.Option(None, "--finetune-max-train", help="Training examples "
                                                     "(a seeded subset; default: all, the report's recipe)."),
    finetune_epochs: float = typer.Option(FINETUNE_EPOCHS, "--finetune-epochs", help="Fine-tuning epochs "
                                          f"(lr {FINETUNE_LR:g}, batch 32: the report's BShift recipe)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="GLUE root for --finetune (default "
                                            "$BERTOLOGY_DATA/glue)."),
    seed: int = seed_option(),
    progress: bool = progress_option(),
) -> None:
    """Compress a model by each method, write loadable checkpoints, and measure size, speed-up and retention
    (UPOS, structural UUAS, heads as parsers, anisotropy) beside the original, in one run."""
    chosen = parse_methods(methods)
    # --engine elsewhere is local|ray (where work runs); here it was PyTorch's quantized engine
    engine = options.renamed(engine, old_engine, "--quantized-engine", "--engine")
    for value, option in ((max_train, "--max-train"), (max_dev, "--max-dev"), (max_test, "--max-test"),
                          (rounds, "--rounds"), (calibration, "--calibration"),
                          (structural_epochs, "--structural-epochs"), (min_relation_count, "--min-relation-count")):
        check_positive(value, option, allow_none=False)
    if finetune is not None:
        from bertology.data.glue import glue_task

        finetune = glue_task(finetune).name  # an unknown task is one line before torch loads
        check_positive(finetune_max_train, "--finetune-max-train", allow_none=True)
        if not finetune_epochs > 0:
            from bertology.errors import UsageError

            raise UsageError(f"--finetune-epochs {finetune_epochs:g}: must be a positive number")
    from bertology.compression.measure import packaged_sets
    from bertology.compression.run import run_compression
    from bertology.results import percent

    out = out if out is not None else default_out("compress", Path(model).name)
    config = None
    if finetune is not None:
        from bertology.compression.finetuned import default_config

        config = default_config(max_train=finetune_max_train, epochs=finetune_epochs, progress=progress,
                                data_dir=str(data_dir) if data_dir is not None else None)
    from bertology.compression.spec import CompressionSpec
    from bertology.errors import SettingError

    try:
        spec = CompressionSpec(rounds=rounds, seed=seed, engine=engine, calibration_sentences=calibration,
                               structural_epochs=structural_epochs, min_relation_count=min_relation_count,
                               finetune_task=finetune, finetune_config=config)
    except SettingError as error:
        raise error.as_option({"calibration_sentences": "--calibration", "finetune_task": "--finetune",
                               "engine": "--quantized-engine"}) from None
    result = run_compression(model, chosen, out, spec, teacher=teacher,
                             sets=packaged_sets(max_train, max_dev, max_test), progress=progress)
    table = Table(title=f"compression of {result.meta['model']['name']} ({result.meta['measured_on']})")
    columns = ["method", "size MB", "x smaller", "x faster", "UPOS kept", "UUAS kept", "parser heads kept"]
    if finetune is not None:
        columns.append(f"{finetune} dev kept")
    for column in columns:
        table.add_column(column)
    for row in result["summary"].itertuples():
        def kept(measure: str) -> str:
            value = getattr(row, f"{measure}_retention")
            low, high = getattr(row, f"{measure}_ci_low"), getattr(row, f"{measure}_ci_high")
            if low != low:  # the original: no interval
                return percent(value)
            return f"{percent(value)} [{percent(low)}, {percent(high)}]"

        cells = [row.variant, f"{row.parameter_bytes / 1e6:.1f}", f"{row.compression:.2f}",
                 f"{row.speedup:.2f} [{row.speedup_min:.2f}-{row.speedup_max:.2f}]", kept("upos"), kept("uuas"),
                 kept("parser_heads")]
        if finetune is not None:
            scored_after = row.task_scoring == "original fine-tuned, then compressed"
            cells.append("" if row.task_retention != row.task_retention else kept("task") + (" *" if scored_after
                                                                                             else ""))
        table.add_row(*cells)
    console.print(table)
    if finetune is not None:
        check = result.meta["finetune"]["learning_check"]
        if not check["learned"]:
            console.print(f"{finetune}: the fine-tuned original ({check['value']:.3f}) does not beat the "
                          f"{check['baseline_name']} ({check['baseline']:.3f}): no task retention is read.")
        else:
            console.print(f"{finetune} dev: * = the fine-tuned original compressed afterwards (int8 weights do not "
                          "train; fp16/bf16 are not trained on a CPU); the others fine-tuned after compression.")
    console.print(f"tables, figure and checkpoints in {out}")
