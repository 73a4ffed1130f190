"""``bertology ablate ...``: head/layer ablation, Michel et al.'s importance and pruning, on GLUE checkpoints.

``--model`` is a checkpoint written by ``bertology finetune`` (a folder with ``finetune.json``); the task
defaults to the one it was fine-tuned on. Layers and heads are numbered from 0 (Clark's and Michel's
papers print them from 1).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from bertology.errors import DataError, ModelError

app = typer.Typer(help="Ablate heads and layers, rank heads by importance, prune (Michel et al. 2019).",
                  no_args_is_help=True)
console = Console()


# --------------------------------------------------------------------------------------------------
# Checkpoints and GLUE evaluation (the metric comes from bertology.finetune)


def load_task_model(path: str | Path, device: str | None = None):
    """A fine-tuning checkpoint as ``(model, tokenizer, meta)``; pruned checkpoints get their shapes rebuilt."""
    from bertology.finetune.model import load_finetuned

    path = Path(path)
    if not path.is_dir():
        raise ModelError(f"{path}: no such checkpoint folder (expected the output of `bertology finetune`)")
    return load_finetuned(path, device=device)


@dataclass
class TaskEvaluator:
    """``evaluate_fn(model) -> float``: the task's main GLUE metric on a fixed, pre-tokenised split."""

    task: str
    tokenizer: object
    split: str = "dev"
    max_examples: Optional[int] = None
    data_dir: Optional[str] = None
    batch_size: int = 128

    def __post_init__(self):
        from bertology.data.glue import glue_task, read_glue
        from bertology.finetune.batching import encode_examples

        self.spec = glue_task(self.task)
        examples = read_glue(self.spec.name, self.split, self.data_dir)
        if self.max_examples is not None:
            examples = _seeded_subset(examples, self.max_examples)
        self.data = encode_examples(self.tokenizer, examples)
        self.metric = self.spec.main_metric

    def __call__(self, model) -> float:
        from bertology.finetune import evaluate

        scores = evaluate(model, self.tokenizer, self.data, metric=self.spec.name, batch_size=self.batch_size)
        return float(scores[self.metric])


def _seeded_subset(items: list, n: int, seed: int = 0) -> list:
    if n < 1:
        raise DataError(f"max examples {n}: expected at least 1")
    if n >= len(items):
        return items
    keep = np.sort(np.random.default_rng(seed).choice(len(items), size=n, replace=False))
    return [items[i] for i in keep]


def importance_batches(task: str, tokenizer, n_examples: int = 2000, batch_size: int = 32,
                       data_dir: str | None = None, seed: int = 0) -> list[dict]:
    """Labelled batches from the *train* split (importance is never computed on the split we report)."""
    from bertology.data.glue import read_glue
    from bertology.finetune.batching import collate, encode_examples

    examples = _seeded_subset(read_glue(task, "train", data_dir), n_examples, seed)
    data = encode_examples(tokenizer, examples)
    order = np.argsort(data.lengths, kind="stable")  # similar lengths together: less padding
    return [collate(data, order[i:i + batch_size].tolist()) for i in range(0, len(order), batch_size)]


def _write_csv(frame: pd.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    frame.to_csv(tmp, index=False)
    os.replace(tmp, path)
    return path


def _setup(model: Path, task: Optional[str], max_examples: Optional[int], data_dir: Optional[str]):
    loaded, tokenizer, meta = load_task_model(model)
    task = task or meta.get("task")
    if not task:
        raise DataError(f"{model}: checkpoint does not record its task; pass --task")
    evaluator = TaskEvaluator(task, tokenizer, max_examples=max_examples, data_dir=data_dir)
    return loaded, tokenizer, meta, evaluator


def _parse_ints(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise DataError(f"{what} {text!r}: expected comma-separated integers, e.g. 0,1,2") from None


# --------------------------------------------------------------------------------------------------
# Commands

ModelOpt = typer.Option(..., "--model", help="fine-tuning checkpoint folder (bertology finetune)")
TaskOpt = typer.Option(None, "--task", help="GLUE task (default: the checkpoint's)")
MaxOpt = typer.Option(None, "--max-examples", help="score on a seeded subset of this many dev examples")
DataOpt = typer.Option(None, "--data-dir", help="GLUE root (default: shared/data/glue)")


@app.command("heads")
def heads_command(
    model: Path = ModelOpt,
    heads: str = typer.Option(..., "--heads", help="heads to mask, 0-based LAYER-HEAD, e.g. 3-5,4-1 (3-* = all of layer 3)"),
    task: Optional[str] = TaskOpt,
    max_examples: Optional[int] = MaxOpt,
    data_dir: Optional[str] = DataOpt,
):
    """The task metric before and after masking the given heads."""
    from bertology.intervention.hooks import mask_heads

    loaded, _, _, evaluate_fn = _setup(model, task, max_examples, data_dir)
    before = evaluate_fn(loaded)
    with mask_heads(loaded, heads) as masked:
        after = evaluate_fn(loaded)
    _print_before_after(evaluate_fn, f"{len(masked)} heads masked", before, after)


@app.command("layers")
def layers_command(
    model: Path = ModelOpt,
    layers: str = typer.Option(..., "--layers", help="0-based layers to skip, e.g. 2,3"),
    task: Optional[str] = TaskOpt,
    max_examples: Optional[int] = MaxOpt,
    data_dir: Optional[str] = DataOpt,
):
    """The task metric before and after skipping whole layers."""
    from bertology.intervention.hooks import drop_layers

    loaded, _, _, evaluate_fn = _setup(model, task, max_examples, data_dir)
    before = evaluate_fn(loaded)
    with drop_layers(loaded, _parse_ints(layers, "--layers")) as dropped:
        after = evaluate_fn(loaded)
    _print_before_after(evaluate_fn, f"layers {dropped} skipped", before, after)


def _print_before_after(evaluate_fn: TaskEvaluator, what: str, before: float, after: float) -> None:
    table = Table(title=f"{evaluate_fn.task} {evaluate_fn.split} ({len(evaluate_fn.data)} examples), {what}")
    for column in ("metric", "before", "after", "change"):
        table.add_column(column)
    table.add_row(evaluate_fn.metric, f"{before:.4f}", f"{after:.4f}", f"{after - before:+.4f}")
    console.print(table)


@app.command("table")
def table_command(
    model: list[Path] = typer.Option(..., "--model", help="checkpoint per fine-tuning seed (repeat --model)"),
    task: Optional[str] = TaskOpt,
    out: Path = typer.Option(Path("single_head_ablation.csv"), "--out", help="CSV of every seed x head"),
    max_examples: Optional[int] = MaxOpt,
    data_dir: Optional[str] = DataOpt,
):
    """Michel et al.'s Table 1: the change when each head alone is masked, with the seed spread."""
    from bertology.intervention.importance import single_head_ablation, summarize_single_head

    models, seeds, evaluate_fn = [], [], None
    for index, path in enumerate(model):
        loaded, tokenizer, meta, evaluator = _setup(path, task, max_examples, data_dir)
        task = task or evaluator.task
        evaluate_fn = evaluate_fn or evaluator
        models.append(loaded)
        seeds.append(int(meta.get("seed", index)))
    if len(set(seeds)) != len(seeds):
        seeds = list(range(len(models)))
    raw = single_head_ablation(models, evaluate_fn, seeds=seeds, progress=True)
    summary = summarize_single_head(raw)
    _write_csv(raw, out)
    summary_path = _write_csv(summary, out.with_name(out.stem + "_summary.csv"))
    table = Table(title=f"{evaluate_fn.task}: {evaluate_fn.metric} change per masked head "
                        f"({len(models)} seeds, seed spread {summary['seed_spread'].iloc[0]:.4f})")
    for column in ("layer", "head", "change (mean)", "std", "p", "real"):
        table.add_column(column)
    for row in summary.sort_values("delta_mean").itertuples():
        table.add_row(str(row.layer), str(row.head), f"{row.delta_mean:+.4f}", f"{row.delta_std:.4f}",
                      f"{row.p_value:.3f}", str(row.real))
    console.print(table)
    console.print(f"wrote {out} and {summary_path}")


@app.command("importance")
def importance_command(
    model: Path = ModelOpt,
    task: Optional[str] = TaskOpt,
    out: Path = typer.Option(Path("importance"), "--out", help="folder for importance.csv, pruning_curve.csv/.png"),
    importance_examples: int = typer.Option(2000, "--importance-examples", help="train examples for I_h"),
    random_seeds: str = typer.Option("0,1,2", "--random-seeds", help="seeds of the random pruning orders"),
    recompute: bool = typer.Option(True, "--recompute/--no-recompute", help="recompute I_h after each step"),
    max_examples: Optional[int] = MaxOpt,
    data_dir: Optional[str] = DataOpt,
):
    """Head importance (expected sensitivity) and the pruning curve, importance vs random order."""
    from bertology.intervention.importance import head_importance, importance_frame, plot_pruning_curve, pruning_curve

    loaded, tokenizer, meta, evaluate_fn = _setup(model, task, max_examples, data_dir)
    batches = importance_batches(evaluate_fn.task, tokenizer, importance_examples, data_dir=data_dir)
    scores = head_importance(loaded, batches, progress=True)
    curve = pruning_curve(loaded, evaluate_fn, batches, random_seeds=_parse_ints(random_seeds, "--random-seeds"),
                          recompute=recompute, importance=scores, progress=True)
    curve.insert(0, "task", evaluate_fn.task)
    curve.insert(1, "metric_name", evaluate_fn.metric)
    out.mkdir(parents=True, exist_ok=True)
    _write_csv(importance_frame(scores), out / "importance.csv")
    _write_csv(curve, out / "pruning_curve.csv")
    plot_pruning_curve(curve, out / "pruning_curve.png", metric_name=f"{evaluate_fn.task} {evaluate_fn.metric}",
                       title=f"{meta.get('base_model', model.name)}: heads pruned ({evaluate_fn.task} {evaluate_fn.split})")
    summary = curve.groupby(["order", "fraction"])["metric"].mean().unstack(0)
    console.print(summary.to_string(float_format=lambda v: f"{v:.4f}"))
    console.print(f"wrote {out / 'importance.csv'}, {out / 'pruning_curve.csv'}, {out / 'pruning_curve.png'}")


@app.command("prune")
def prune_command(
    model: Path = ModelOpt,
    fraction: float = typer.Option(0.5, "--fraction", help="share of heads to prune, least important first"),
    out: Path = typer.Option(..., "--out", help="folder for the pruned checkpoint (new or empty)"),
    task: Optional[str] = TaskOpt,
    importance_examples: int = typer.Option(2000, "--importance-examples", help="train examples for I_h"),
    max_examples: Optional[int] = MaxOpt,
    data_dir: Optional[str] = DataOpt,
):
    """Prune the least important heads for real (smaller weights) and save the checkpoint."""
    import torch

    from bertology.finetune.model import save_checkpoint
    from bertology.intervention.hooks import model_layout
    from bertology.intervention.importance import head_importance
    from bertology.intervention.pruning import count_parameters, measure_latency, prune_heads

    if not 0.0 <= fraction <= 1.0:
        raise DataError(f"--fraction {fraction}: expected a value between 0 and 1")
    if out.exists() and any(out.iterdir()):
        raise DataError(f"{out}: exists and is not empty; choose a new output folder")
    loaded, tokenizer, meta, evaluate_fn = _setup(model, task, max_examples, data_dir)
    batches = importance_batches(evaluate_fn.task, tokenizer, importance_examples, data_dir=data_dir)
    scores = head_importance(loaded, batches, progress=True)
    layout = model_layout(loaded)
    remaining = sorted(layout.all_heads(), key=lambda lh: (scores[lh], lh))
    chosen = remaining[: int(round(fraction * len(remaining)))]
    probe = {k: v for k, v in batches[len(batches) // 2].items() if k != "labels"}
    before = {"metric": evaluate_fn(loaded), "parameters": count_parameters(loaded),
              "latency_s": measure_latency(loaded, probe, repeats=10)["median_s"]}
    prune_heads(loaded, chosen)
    after = {"metric": evaluate_fn(loaded), "parameters": count_parameters(loaded),
             "latency_s": measure_latency(loaded, probe, repeats=10)["median_s"]}
    meta = dict(meta, pruned_from=str(model), pruned_fraction=fraction,
                pruned_heads=[f"{l}-{h}" for l, h in chosen], pruned_metric=after["metric"])
    save_checkpoint(loaded, tokenizer, out, meta)
    table = Table(title=f"pruned {len(chosen)} of {len(remaining)} heads ({evaluate_fn.task} {evaluate_fn.metric}; "
                        f"latency on one batch of {probe['input_ids'].shape[0]}, torch {torch.__version__}, "
                        f"{torch.get_num_threads()} threads)")
    for column in ("", "metric", "parameters", "latency (ms)"):
        table.add_column(column)
    for name, row in (("before", before), ("after", after)):
        table.add_row(name, f"{row['metric']:.4f}", f"{row['parameters']:,}", f"{row['latency_s'] * 1000:.1f}")
    console.print(table)
    console.print(f"wrote {out}")


@app.command("flagged")
def flagged_command(
    model: Path = ModelOpt,
    task: Optional[str] = TaskOpt,
    table: Optional[Path] = typer.Option(None, "--table", help="best-heads CSV (1-based layer/head columns, "
                                         "e.g. from `bertology attention`); default: computed on UD EWT dev"),
    heads: Optional[str] = typer.Option(None, "--heads", help="or the flagged heads directly, 0-based, e.g. 3-5,4-1"),
    draws: int = typer.Option(10, "--draws", help="random draws of as many heads"),
    seed: int = typer.Option(0, "--seed"),
    max_sentences: int = typer.Option(300, "--max-sentences", help="UD sentences when computing the table"),
    min_count: int = typer.Option(100, "--min-count", help="relations with fewer words are not flagged"),
    out: Optional[Path] = typer.Option(None, "--out", help="CSV of every draw"),
    max_examples: Optional[int] = MaxOpt,
    data_dir: Optional[str] = DataOpt,
):
    """Are the heads the attention analysis flags used? Mask them vs as many random heads."""
    from bertology.intervention.importance import flagged_heads, flagged_vs_random, summarize_flagged

    loaded, tokenizer, meta, evaluate_fn = _setup(model, task, max_examples, data_dir)
    if heads:
        chosen = heads
    elif table is not None:
        if not table.is_file():
            raise DataError(f"{table}: no such file")
        chosen = flagged_heads(pd.read_csv(table))
    else:
        from bertology.attention.parsing import run_attention_analysis
        from bertology.models import Encoder

        encoder = Encoder.from_model(loaded.backbone if hasattr(loaded, "backbone") else loaded, tokenizer,
                                     name=str(model))
        encoder.with_attentions()
        try:
            results = run_attention_analysis(encoder, max_sentences=max_sentences, max_train_sentences=max_sentences,
                                             statistics=False, min_count=min_count,
                                             probe_seeds=(), progress=True)
        finally:
            encoder.model.set_attn_implementation("sdpa")
        chosen = flagged_heads(results["best_heads"])
        if not chosen:
            raise DataError(f"no relation has {min_count} words in {max_sentences} UD dev sentences, so no head is "
                            "flagged; raise --max-sentences or lower --min-count")
    result = flagged_vs_random(loaded, chosen, evaluate_fn, n_draws=draws, seed=seed, progress=True)
    summary = summarize_flagged(result)
    if out is not None:
        _write_csv(result, out)
    flagged_row = result[result["condition"] == "flagged"].iloc[0]
    console.print(f"flagged heads (0-based): {flagged_row['heads']}")
    report = Table(title=f"{evaluate_fn.task} {evaluate_fn.metric}: flagged vs {draws} random draws of "
                         f"{summary['n_masked']} heads (seed {seed})")
    for column in ("baseline", "flagged change", "random change (mean ± std)", "P(random hurts as much)"):
        report.add_column(column)
    report.add_row(f"{summary['baseline']:.4f}", f"{summary['flagged_delta']:+.4f}",
                   f"{summary['random_delta_mean']:+.4f} ± {summary['random_delta_std']:.4f}",
                   f"{summary['p_random_as_harmful']:.3f}")
    console.print(report)
