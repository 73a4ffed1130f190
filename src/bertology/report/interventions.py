"""The report's "Whether it uses it" section: fine-tune on a task the package always has (BShift rebuilt from
the packaged EWT), check that the model learned it (its interval above the majority class), then Michel et al.'s head
importance, the pruning curve (importance order vs random orders) and the heads the attention section
flagged as parsers masked against random sets of as many heads, with an empirical p-value.

With a fine-tuned checkpoint (``bertology finetune`` output: the report's model itself, or the fine-tuned
side of ``--compare``) that checkpoint is used instead of fine-tuning. Everything is cached like the other
sections; the fine-tuned checkpoint is kept under ``<report>/finetune/``.
"""

from __future__ import annotations

import hashlib
import html
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bertology.attention.figures import plot_heatmap
from bertology.compare.compare import compare_models
from bertology.finetune import FinetuneConfig, TaskEvaluator, finetune, importance_batches, load_finetuned
from bertology.finetune.evaluation import learning_check  # noqa: F401 (public here too)
from bertology.finetune.names import CHECKPOINT_META
from bertology.intervention.importance import (
    flagged_heads,
    flagged_vs_random,
    head_importance,
    importance_frame,
    plot_pruning_curve,
    pruning_curve,
)
from bertology.report.context import ReportContext
from bertology.report.document import Figure, Section, Table, Text
from bertology.report.findings import FINETUNE_TASK_NAMES, learning_text
from bertology.report.names import SECTION_TITLES
from bertology.results import Result


@dataclass(frozen=True)
class InterventionSettings:
    """Sizes of the interventions section. ``default()`` fits the demo's budget on 2 CPU cores; ``quick()``
    (``--max-sentences``) keeps tests on tiny models to seconds."""

    task: str = "bshift"             # packaged: always at hand (a GLUE task when its data is found)
    train_examples: int | None = None  # fine-tuning sentences (None: all 5,254 of BShift's train split)
    epochs: float = 2.0
    lr: float = 1e-4                 # 2e-5 for 63 steps left MiniLM at chance; BENCHMARKS.md "interventions recipe"
    eval_examples: int = 400         # seeded subset of the dev split (1,016 for BShift) the metric is read on
    importance_examples: int = 256   # train examples for head importance (never the dev split)
    fractions: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75)
    random_orders: int = 3
    draws: int = 20                  # random head sets; 20 draws make p = 1/21 < 0.05 reachable
    seed: int = 0

    @classmethod
    def default(cls) -> "InterventionSettings":
        return cls()

    @classmethod
    def quick(cls) -> "InterventionSettings":
        return cls(train_examples=96, eval_examples=48, importance_examples=32, fractions=(0.0, 0.5),
                   random_orders=2, draws=5)


#: EWT dev sentences on which the model before and after fine-tuning are compared (CKA per layer).
CKA_SENTENCES = 200


def is_finetuned(path) -> bool:
    """Whether ``path`` is a checkpoint folder written by ``bertology finetune``."""
    try:
        return Path(path).is_dir() and (Path(path) / CHECKPOINT_META).is_file()
    except (TypeError, OSError):
        return False


def flagged_from_attention(best_heads: pd.DataFrame) -> list[tuple[int, int]]:
    """The heads the attention section flags as parsers: for each relation (not "all"), the head chosen on
    dev, kept when it beats the best fixed-offset baseline on dev (never chosen on test)."""
    rows = best_heads[best_heads["relation"] != "all"]
    if "baseline_accuracy" in rows.columns:
        rows = rows[rows["accuracy"] > rows["baseline_accuracy"]]
    return flagged_heads(rows) if not rows.empty else []


def _checkpoint_id(path: Path) -> str:
    meta = (path / "finetune.json").read_bytes()
    return hashlib.sha256(meta).hexdigest()[:12]


def _checkpoint(context: ReportContext, settings: InterventionSettings) -> Path:
    """The fine-tuned checkpoint the interventions read: the given one, else a brief fine-tuning run (reused
    from ``<report>/finetune`` when finished with the same recipe)."""
    if context.finetuned is not None:
        return Path(context.finetuned)
    # fused AdamW: the same update in one kernel per step (MiniLM on CPU: 8.5 ms a step against 59 ms for the
    # per-tensor loop, stored by benchmarks/perf/bench_adamw.py); its last digits differ from the per-tensor one's.
    config = FinetuneConfig(seeds=(settings.seed,), epochs=settings.epochs, lr=settings.lr,
                            max_train=settings.train_examples, device=context.device or "auto",
                            progress=context.progress, eval_each_epoch=False, fused=True)
    result = finetune(context.encoder, settings.task, config,
                      out_dir=context.out_dir / "finetune" / context.encoder.fingerprint)
    return Path(result["runs"]["checkpoint"].iloc[0])


def _finetuned_model(context: ReportContext, settings: InterventionSettings):
    """(GlueModel, tokenizer, meta, where) for the interventions: the given checkpoint, else a brief
    fine-tuning run (reused from ``<report>/finetune`` when finished with the same recipe)."""
    device = context.device or "auto"
    if context.finetuned is not None:
        model, tokenizer, meta = load_finetuned(context.finetuned, device=device)
        return model, tokenizer, meta, f"the fine-tuned checkpoint {context.finetuned}"
    checkpoint = _checkpoint(context, settings)
    model, tokenizer, meta = load_finetuned(checkpoint, device=device)
    return model, tokenizer, meta, (f"{context.encoder.name} fine-tuned here for {settings.epochs:g} epoch on "
                                    f"{meta.get('n_train', settings.train_examples):,} {settings.task} training "
                                    f"sentences (seed {settings.seed}, learning rate {settings.lr:g}; Devlin et "
                                    "al.'s recipe otherwise)")


def compute_interventions(context: ReportContext, settings: InterventionSettings,
                          flagged: list[tuple[int, int]]) -> dict[str, pd.DataFrame]:
    """Importance, pruning curve and flagged-vs-random tables (fractions) for the report."""
    model, tokenizer, meta, where = _finetuned_model(context, settings)
    task = meta.get("task") or settings.task
    evaluator = TaskEvaluator(task, tokenizer, max_examples=settings.eval_examples, seed=settings.seed)
    check = learning_check(model, evaluator)
    batches = importance_batches(task, tokenizer, settings.importance_examples, seed=settings.seed)
    scores = head_importance(model, batches, progress=context.progress)
    curve = pruning_curve(model, evaluator, fractions=settings.fractions, importance=scores, recompute=False,
                          random_seeds=tuple(range(settings.seed, settings.seed + settings.random_orders)),
                          progress=context.progress)
    tables = {"importance": importance_frame(scores), "curve": curve["curve"], "check": check,
              "setup": pd.DataFrame([{"task": task, "metric": evaluator.metric, "split": evaluator.split,
                                      "eval_examples": len(evaluator.data), "model": where,
                                      "dev_metric_full": float((meta.get("metrics") or {}).get(evaluator.metric,
                                                                                               np.nan)),
                                      **{k: str(v) for k, v in asdict(settings).items()}}])}
    if flagged:
        versus = flagged_vs_random(model, flagged, evaluator, n_draws=settings.draws, seed=settings.seed,
                                   progress=context.progress)
        summary = versus["summary"].assign(task=task, metric=evaluator.metric)
        tables.update({"flagged_runs": versus["runs"], "flagged_masked": versus["masked"],
                       "flagged_summary": summary})
    return tables


def interventions(context: ReportContext) -> Section:
    """Fine-tune (or take the given checkpoint), then importance, pruning curve and flagged vs random heads."""
    settings = InterventionSettings.quick() if context.max_sentences else InterventionSettings.default()
    attention = context.results.get("attention")
    flagged = flagged_from_attention(attention["best_heads"]) if attention and "best_heads" in attention else []
    source = ({"checkpoint": str(context.finetuned), "checkpoint_id": _checkpoint_id(context.finetuned)}
              if context.finetuned is not None else {"base": context.encoder.fingerprint})
    # rev 2: the learning check (the fine-tuned metric's interval against its baseline), BShift by default
    key = {**context.model_key, **source, "settings": asdict(settings), "flagged": flagged, "rev": 2}
    tables = context.cache.get_or_compute("interventions", key, lambda: Result(
        "interventions", compute_interventions(context, settings, flagged))).tables
    context.results["interventions"] = tables
    setup = tables["setup"].iloc[0]
    task_name = FINETUNE_TASK_NAMES.get(setup["task"], setup["task"]).split(" (")[0]
    section = Section("interventions", SECTION_TITLES["interventions"],
                      note=f"On {setup['model']}. The metric is {task_name} {setup['metric']} on a seeded subset of "
                           f"{int(setup['eval_examples'])} {setup['split']} examples; head importance (Michel et al. "
                           f"2019, expected |dL/dξ| per head, normalised per layer) on {settings.importance_examples} "
                           "training examples, never on the split scored. Heads are masked (their context zeroed), "
                           "not sliced; numbers in percent.")
    check = tables["check"].iloc[0]
    if not bool(check["learned"]):
        section.add(Text(f"<div class='status'><p><strong>{html.escape(learning_text(check))}</strong></p><p>A longer "
                         "run (`bertology finetune`, more examples or epochs) or a checkpoint that learned the task "
                         "(`bertology report -m CHECKPOINT`) is needed before heads can be ranked.</p></div>"))
        section.add(Table(tables["check"], "The fine-tuned model's metric against what a model that learned nothing "
                                           "reaches.", id="interventions-check", float_format="{:.3f}"))
        return section
    section.add(Text(f"<p>{html.escape(learning_text(check))}</p>"))
    # What fine-tuning changed per layer (linear CKA, the model before vs after; bertology.compare), only for a model
    # that learned its task, for the claim that the final layers are the most task-specific (bertology.claims)
    cka_key = {**key, "cka_sentences": CKA_SENTENCES}
    cka = context.cache.get_or_compute("finetune-cka", cka_key, lambda: Result("finetune-cka", {"cka": compare_models(
        context.encoder, _checkpoint(context, settings), context.dev, max_sentences=CKA_SENTENCES,
        seed=settings.seed, device=context.device or "auto")["cka"]})).tables["cka"]
    context.results["compare"] = {"cka": cka}
    importance = tables["importance"]
    matrix = importance.pivot(index="layer", columns="head", values="importance")
    def importance_map():
        fig, ax = plt.subplots(figsize=(1.6 + 0.42 * matrix.shape[1], 1.4 + 0.42 * matrix.shape[0]))
        plot_heatmap(matrix, "Head importance (Michel et al. 2019), normalised per layer", "importance",
                     ax=ax, annotate=False, cmap="magma")
        fig.tight_layout()
        return fig

    section.add(Figure(importance_map, "Head importance per layer (rows) and head (columns) on the fine-tuned model; the values "
                            "are in the CSV.", id="interventions-importance", data=importance))
    curve = tables["curve"]
    def pruning():
        fig = plot_pruning_curve(curve, metric_name=f"{task_name} {setup['metric']}",
                                 title=f"Heads masked: importance order vs random orders ({task_name})")
        ax = fig.axes[0]
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{100 * v:.0f}"))
        ax.set_ylabel(f"{task_name} {setup['metric']} (%)")
        return fig

    section.add(Figure(pruning, "Metric vs share of heads masked: least important first (Michel et al.) against random "
                            "orders (mean ± std over seeds).", id="interventions-pruning", data=curve,
                       narrow=True))
    if "flagged_summary" in tables:
        summary = tables["flagged_summary"].iloc[0]
        runs = tables["flagged_runs"]
        masked = tables["flagged_masked"]
        heads = masked[masked["condition"] == "flagged"]["head_label"].tolist()
        random = runs[runs["condition"] == "random"]["delta"].to_numpy(dtype=float)

        def versus():
            fig, ax = plt.subplots(figsize=(6, 3))
            ax.hist(100 * random, bins=min(12, max(3, len(random))), color="#9aa5b8", label="random head sets")
            ax.axvline(100 * summary["flagged_delta"], color="C3", lw=2, label="flagged heads")
            ax.set_xlabel(f"change in {task_name} {setup['metric']} (points)")
            ax.set_ylabel("random draws")
            ax.set_title(f"Masking {int(summary['n_masked'])} flagged heads vs {len(random)} random sets")
            ax.legend(fontsize=8)
            fig.tight_layout()
            return fig

        shown = pd.DataFrame([{
            "heads masked": ", ".join(heads), "baseline": summary["baseline"], "flagged_delta": summary["flagged_delta"],
            "random_delta_mean": summary["random_delta_mean"], "random_delta_std": summary["random_delta_std"],
            "n_draws": int(summary["n_draws"]), "p": summary["p_random_as_harmful"]}])
        real = summary["p_random_as_harmful"] < 0.05
        section.add(Table(shown, "The heads the attention section flags as parsers (best head per relation chosen on "
                                 "dev, beating its fixed-offset baseline there) masked together, against random sets "
                                 "of as many other heads. Changes in points; p = share of random draws (+1) that hurt "
                                 "at least as much (one-sided empirical p-value; one test, and the heads were chosen "
                                 "on treebank attention, not on this task's data, so it needs no correction for that "
                                 "selection): "
                                 + ("the flagged heads matter more than random ones." if real else
                                    "no evidence that the flagged heads matter more than random ones."),
                          id="interventions-flagged", float_format="{:.3f}", data=runs,
                          percent=("baseline", "flagged_delta", "random_delta_mean", "random_delta_std"),
                          headers={"baseline": f"{setup['metric']} with every head (%)",
                                   "flagged_delta": "change, flagged (points)",
                                   "random_delta_mean": "change, random (mean, points)",
                                   "random_delta_std": "std (points)", "n_draws": "random draws",
                                   "p": "empirical p"}))
        section.add(Figure(versus, "Change in the metric when the flagged heads are masked (red) against the random "
                                   "head sets (histogram).", id="interventions-flagged-figure", data=runs, narrow=True))
    else:
        section.add(Text("<p class='note'>No flagged heads: the attention section did not run (or flagged none), so "
                         "the flagged-vs-random test is skipped.</p>"))
    tokens = cka[cka["representation"] == "tokens"][["layer", "cka"]]
    section.add(Table(tokens, f"What fine-tuning changed per layer: linear CKA between the model before and after "
                              f"fine-tuning on {min(CKA_SENTENCES, len(context.dev))} EWT dev sentences (all tokens; 1 "
                              "= the same up to rotation and scale; bertology compare).", id="interventions-cka",
                      float_format="{:.3f}", data=cka))
    if settings.draws < 19 or int(setup["eval_examples"]) < 500:
        section.add(Text(f"<p class='note'>Underpowered by the budget: the metric is read on "
                         f"{int(setup['eval_examples'])} examples (a 95% interval of about "
                         f"±{100 * 1.96 * np.sqrt(0.25 / int(setup['eval_examples'])):.1f} points at worst) and the "
                         f"test uses {settings.draws} random draws; `bertology ablate importance` and `bertology "
                         f"ablate flagged` run the full sizes.</p>"))
    return section
