"""``bertology compress --finetune TASK``: the original and every compressed variant fine-tuned with one recipe
and seed (:func:`bertology.finetune.finetune`, the package's only training loop) and scored on the task's dev
split; retention = compressed / original with a paired bootstrap over the dev examples.

* Variants whose weights train in float32 (head pruning, dropped layers, magnitude sparsity, a student) are
  fine-tuned from their compressed weights. Magnitude-pruned weights keep their zeros while they train: each
  pruned matrix is multiplied by its mask before every forward pass (a hook on the module, so the loop is the
  shared one), so the checkpoint written has the sparsity the method gave.
* Variants whose weights cannot be trained (int8: PyTorch's int8 layers have no gradients) or are impractical to
  train on a CPU (fp16/bf16: no loss scaling, half-precision AdamW loses small updates) are scored the way such
  models are deployed: the fine-tuned original (the student, with ``--teacher``) compressed by the method
  afterwards. The ``scoring`` column says which of the two each row is.
* A fine-tuned original that does not beat its baseline (the majority class; a correlation of 0) is not read:
  :func:`bertology.finetune.evaluation.learning_check`, and every task retention of the run is left empty.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from bertology.compression.measure import ratio_interval
from bertology.compression.methods import Variant, compress, prunable_weights
from bertology.compression.names import FINETUNE_EPOCHS, FINETUNE_LR, FINETUNE_MAX_TRAIN
from bertology.data.glue import glue_task
from bertology.finetune import (
    FinetuneConfig,
    GlueModel,
    TaskEvaluator,
    encode_examples,
    evaluate,
    finetune,
    load_finetuned,
    read_examples,
)
from bertology.finetune.evaluation import learning_check
from bertology.finetune.metrics import glue_metric
from bertology.models import Encoder
from bertology.probing.summary import bootstrap_accuracies

#: Methods applied after fine-tuning (to the fine-tuned original) rather than before it.
POST_TRAINING = ("int8-dynamic", "int8-static", "fp16", "bf16")
TRAINED = "fine-tuned after compression"
COMPRESSED_AFTER = "original fine-tuned, then compressed"
TASK_COLUMNS = ["variant", "task", "metric", "value", "n_dev", "scoring", "retention", "ci_low", "ci_high",
                "checkpoint", "note"]


def default_config(**overrides):
    """The recipe of the report's BShift fine-tuning (InterventionSettings: 2 epochs, lr 1e-4, all training
    sentences), one seed; ``overrides`` are :class:`~bertology.finetune.FinetuneConfig` fields."""
    settings = dict(seeds=(0,), epochs=FINETUNE_EPOCHS, lr=FINETUNE_LR, max_train=FINETUNE_MAX_TRAIN,
                    eval_each_epoch=False)
    settings.update(overrides)
    return FinetuneConfig(**settings)


def _keep_zeros(module: torch.nn.Module, _inputs) -> None:
    with torch.no_grad():
        module.weight.mul_(module.compression_mask)


@contextmanager
def sparsity_kept(model: torch.nn.Module):
    """While inside, each prunable matrix's zeros stay zero through training (its mask applied before every
    forward pass). The mask is a non-persistent buffer, so ``deepcopy`` (the fine-tuning copies its backbone)
    carries it and ``save_pretrained`` does not write it."""
    handles, modules = [], []
    linears = {id(m.weight): m for m in model.modules() if isinstance(m, torch.nn.Linear)}
    for weight in prunable_weights(model).values():
        module = linears[id(weight)]
        module.register_buffer("compression_mask", (weight != 0).to(weight.dtype), persistent=False)
        handles.append(module.register_forward_pre_hook(_keep_zeros))
        modules.append(module)
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for module in modules:
            del module._buffers["compression_mask"]


def _scores(model, tokenizer, task: str, config) -> tuple[np.ndarray, np.ndarray, float]:
    """Dev predictions, labels and the headline metric (``evaluate``, the shared scorer)."""
    spec = glue_task(task)
    data = encode_examples(tokenizer, read_examples(spec.name, "dev", config.data_dir), config.max_length)
    scores = evaluate(model, tokenizer, data, metric=spec.name, batch_size=config.eval_batch_size, device="cpu",
                      return_predictions=True)
    return np.asarray(scores["predictions"]), np.asarray(data.labels), float(scores[spec.main_metric])


def _finetuned(encoder: Encoder, task: str, config, folder: Path):
    """``encoder`` fine-tuned by :func:`~bertology.finetune.finetune` (a finished checkpoint in ``folder`` is
    reused), loaded on the CPU: ``(model, tokenizer, checkpoint)``."""
    result = finetune(encoder, task, config, out_dir=folder)
    checkpoint = result["runs"]["checkpoint"].iloc[0]
    model, tokenizer, _ = load_finetuned(checkpoint, device="cpu")
    return model, tokenizer, checkpoint


def _compressed_after(finetuned, tokenizer, variant: Variant, *, calibration, engine, seed):
    """The fine-tuned model with its backbone compressed by ``variant``'s method and its classifiers as they were
    trained (cast to the backbone's dtype for fp16/bf16)."""
    backbone = Encoder(model=finetuned.backbone, tokenizer=tokenizer, name="fine-tuned", source=None)
    compressed = compress(backbone, variant.method, calibration=calibration, seed=seed, engine=engine)
    model = GlueModel(compressed.encoder.model, finetuned.num_labels, finetuned.variant,
                      objective_layers=list(finetuned.objective_layers))
    model.classifiers.load_state_dict(finetuned.classifiers.state_dict())
    if variant.method.name in ("fp16", "bf16"):
        model.classifiers.to(next(compressed.encoder.model.parameters()).dtype)
    return model.eval()


def paired_metric_boot(task: str, predictions: Sequence[np.ndarray], labels: np.ndarray, n_boot: int,
                       seed: int) -> np.ndarray:
    """Bootstrap of the task's headline metric for each model's dev ``predictions``, all on the same resamples
    of the dev examples: ``[models, n_boot]``. Accuracy goes through
    :func:`bertology.probing.summary.bootstrap_accuracies` (the helper the other retentions use); a metric that
    is not a mean over examples (Matthews, F1, correlations) is recomputed on each resample."""
    spec = glue_task(task)
    if spec.main_metric == "accuracy":
        correct = np.stack([np.asarray(p).astype(int) == labels.astype(int) for p in predictions])
        return bootstrap_accuracies(correct, n_boot=n_boot, seed=seed)
    rng = np.random.default_rng(seed)
    n = len(labels)
    out = np.empty((len(predictions), n_boot))
    for b in range(n_boot):
        index = rng.integers(0, n, n)
        for m, p in enumerate(predictions):
            out[m, b] = glue_metric(spec.name, np.asarray(p)[index], labels[index])[spec.main_metric]
    return out


def task_retention(reference: Encoder, variants: Sequence[Variant], task: str, config, folder: str | Path, *,
                   source: Encoder | None = None, source_label: str | None = None, calibration: Sequence[dict] = (),
                   engine: str | None = None, seed: int = 0, n_boot: int = 1000) -> tuple[pd.DataFrame, dict]:
    """Fine-tune ``reference`` and each of ``variants`` on ``task`` with ``config`` (its ``seeds`` set to
    ``(seed,)``), score them on the dev split, and return ``(table, check)``: one row per model (``original``
    first) with :data:`TASK_COLUMNS`, and the original's learning check (a dict).

    Post-training methods (:data:`POST_TRAINING`) compress the fine-tuned ``source`` (default: the fine-tuned
    ``reference``; with a teacher, the student, whose variant is labelled ``source_label``)."""
    spec = glue_task(task)
    config = dataclasses.replace(config, seeds=(seed,))
    folder = Path(folder)
    finetuned: dict[str, tuple] = {}
    model, tokenizer, checkpoint = _finetuned(reference, spec.name, config, folder / "original")
    finetuned["original"] = (model, tokenizer, checkpoint)
    evaluator = TaskEvaluator(spec.name, tokenizer, data_dir=config.data_dir)
    check = learning_check(model, evaluator).iloc[0].to_dict()
    predictions, labels, value = _scores(model, tokenizer, spec.name, config)
    rows = [{"variant": "original", "task": spec.name, "metric": spec.main_metric, "value": value,
             "n_dev": len(labels), "scoring": "fine-tuned", "checkpoint": str(checkpoint)}]
    outputs = [predictions]
    trained = [v for v in variants if v.method is None or v.method.name not in POST_TRAINING]
    later = [v for v in variants if v.method is not None and v.method.name in POST_TRAINING]
    for variant in trained:
        sparse = variant.method is not None and variant.method.name.startswith("magnitude")
        with sparsity_kept(variant.encoder.model) if sparse else _nothing():
            model, tokenizer, checkpoint = _finetuned(variant.encoder, spec.name, config, folder / variant.label)
        finetuned[variant.label] = (model, tokenizer, checkpoint)
        predictions, _, value = _scores(model, tokenizer, spec.name, config)
        rows.append({"variant": variant.label, "task": spec.name, "metric": spec.main_metric, "value": value,
                     "n_dev": len(labels), "scoring": TRAINED, "checkpoint": str(checkpoint)})
        outputs.append(predictions)
    start, start_tokenizer, _ = finetuned[source_label] if source_label in finetuned else finetuned["original"]
    for variant in later:
        model = _compressed_after(start, start_tokenizer, variant, calibration=calibration, engine=engine, seed=seed)
        predictions, _, value = _scores(model, start_tokenizer, spec.name, config)
        rows.append({"variant": variant.label, "task": spec.name, "metric": spec.main_metric, "value": value,
                     "n_dev": len(labels), "scoring": COMPRESSED_AFTER, "checkpoint": None})
        outputs.append(predictions)
    boot = paired_metric_boot(spec.name, outputs, labels, n_boot, seed)
    learned = bool(check["learned"])
    note = "" if learned else (f"not read: the fine-tuned original ({check['value']:.3f}) does not beat the "
                               f"{check['baseline_name']} ({check['baseline']:.3f})")
    for index, row in enumerate(rows):
        if index == 0:
            row.update(retention=1.0 if learned else np.nan, ci_low=np.nan, ci_high=np.nan, note=note)
            continue
        low, high = ratio_interval(boot[0], boot[index])
        ratio = row["value"] / value if value else np.nan
        row.update(retention=ratio if learned else np.nan, ci_low=low if learned else np.nan,
                   ci_high=high if learned else np.nan, note=note)
    # the rows' order follows the variants' order
    order = {label: i for i, label in enumerate(["original", *[v.label for v in variants]])}
    table = pd.DataFrame(rows, columns=TASK_COLUMNS).sort_values("variant", key=lambda s: s.map(order))
    check = {k: (v.item() if hasattr(v, "item") else v) for k, v in check.items()}
    return table.reset_index(drop=True), check


@contextmanager
def _nothing():
    yield
