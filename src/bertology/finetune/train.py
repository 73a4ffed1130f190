"""GLUE fine-tuning (Devlin et al. 2019 recipe) and dev-set evaluation.

Recipe: AdamW (weight decay 0.01, none on biases and LayerNorm), linear warm-up over the first 10 % of
steps then linear decay to 0, gradient clipping at 1.0, 3 epochs, batch 32, lr 2e-5 (the lecture slides:
"1-3 epochs, batch size 2-32, learning rate 2e-5 - 5e-5"). The dev score reported is the one after the
last epoch: choosing the best epoch on dev would select on the split we report.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from bertology.data.glue import GlueExample, glue_task
from bertology.finetune.examples import read_examples
from bertology.errors import DataError, ModelError, SettingError
from bertology.files import atomic_path, exclusive
from bertology.finetune.batching import EncodedExamples, collate, encode_examples, evaluation_batches
from bertology.training import Optimisation, Optimiser, embeds_optimisation, train_steps, training_batches
from bertology.finetune.metrics import glue_metric
from bertology.finetune.model import (CHECKPOINT_META, GlueModel, build_glue_model, read_checkpoint_meta,
                                      save_checkpoint)
from bertology.finetune.variants import parse_variant
from bertology.models.encoders import Encoder, as_encoder
from bertology.results import Result, tidy
from bertology.runtime import resolve_device, seeded, seeded_subset


@embeds_optimisation
@dataclass
class FinetuneConfig:
    """Hyper-parameters of one fine-tuning run (the same for every seed).

    ``optimisation``: Devlin et al.'s recipe (:class:`~bertology.training.Optimisation`; its ``seed`` is
    replaced by each of ``seeds``); its fields are also keywords and attributes of the config
    (``FinetuneConfig(lr=1e-4).lr``)."""

    seeds: tuple[int, ...] = (0, 1, 2)
    epochs: float = 3.0
    optimisation: Optimisation = field(default_factory=lambda: Optimisation(lr=2e-5, batch_size=32))
    max_length: int = 128
    max_train: int | None = None   # subsample the train set (same subset for every seed: data_seed)
    data_seed: int = 0
    variant: str = "baseline"
    group_by_length: bool = True   # length-grouped batches ...
    dynamic_padding: bool = True   # ... padded to their own longest example (False: pad to max_length)
    eval_batch_size: int = 128
    eval_each_epoch: bool = True   # dev curve in the checkpoint's JSON (never used to pick an epoch)
    data_dir: str | None = None    # GLUE root (default $BERTOLOGY_DATA/glue, else `datasets`)
    save: bool = True
    progress: bool = True
    checkpoint_every: int = 100    # steps between resume states of an unfinished seed (0: none); not in the recipe

    def __post_init__(self):
        self.seeds = tuple(int(s) for s in self.seeds)
        if self.checkpoint_every < 0:
            raise SettingError("checkpoint_every", self.checkpoint_every, "must be 0 (never) or a number of steps",
                               shown=str(self.checkpoint_every))
        if not self.seeds:
            raise SettingError("seeds", self.seeds, "no seeds given; expected at least one, e.g. (0, 1, 2)",
                               shown="()")
        if any(seed < 0 for seed in self.seeds):
            raise SettingError("seeds", self.seeds, "expected non-negative integers", shown=str(self.seeds))
        # one setting per message, named as the field (the CLI names its option)
        for setting, value, low, expected in (("epochs", self.epochs, 0, "a positive number"),
                                              ("max_length", self.max_length, 7,
                                               "at least 8 (tokens: the special ones and some text)")):
            if value <= low:
                raise SettingError(setting, value, f"must be {expected}", shown=str(value))
        if self.max_train is not None and self.max_train < 1:
            raise DataError(f"max_train={self.max_train}; expected at least 1")
        self.variant = parse_variant(self.variant).name

    def recipe(self) -> dict:
        """The settings that change the result: a finished checkpoint is reused only if these match."""
        keys = ("epochs", "lr", "batch_size", "max_length", "warmup_ratio", "weight_decay", "max_grad_norm",
                "max_train", "max_steps", "data_seed", "variant")
        return {key: getattr(self, key) for key in keys}


#: The per-seed, per-metric table of :func:`finetune` and :func:`collect_results`.
RESULT_COLUMNS = ["model", "base_fingerprint", "task", "variant", "seed", "metric", "value", "split", "n_train",
                  "n_dev", "epochs", "lr", "checkpoint"]


#: Beside an unfinished seed's folder: ``seed-0.train-state.pt``, the state it resumes from (removed when it finishes).
STATE_NAME = "train-state.pt"


def _model_inputs(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items() if k != "labels"}


def _logits(handle: Encoder, inputs: dict) -> torch.Tensor:
    logits = handle.forward(inputs, hidden_states=False, logits=True).logits
    if not isinstance(logits, torch.Tensor):
        raise ModelError(f"{handle.name} returned no logits; expected a tensor or an output with .logits")
    return logits


def predict(model: torch.nn.Module, data: EncodedExamples, batch_size: int = 128,
            device: str | torch.device | None = None) -> np.ndarray:
    """Predictions for ``data`` in its order: class ids, or scores when the model has one output."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    handle = Encoder.of(model)
    out: np.ndarray | None = None
    with torch.inference_mode():
        for indices in evaluation_batches(data.lengths, batch_size):
            logits = _logits(handle, _model_inputs(collate(data, indices), device)).float()
            values = logits.squeeze(-1) if logits.shape[-1] == 1 else logits.argmax(-1)
            values = values.cpu().numpy()
            if out is None:
                out = np.empty(len(data), dtype=values.dtype)
            out[indices] = values
    model.train(was_training)
    return out if out is not None else np.empty(0)


def evaluate(model: torch.nn.Module, tokenizer, task_or_examples: str | Sequence[GlueExample] | EncodedExamples,
             metric: str | Callable[[np.ndarray, np.ndarray], dict] | None = None, *, split: str = "dev",
             batch_size: int = 128, max_length: int = 128, device: str | torch.device | None = None,
             data_dir: str | Path | None = None, return_predictions: bool = False) -> dict:
    """Score a sequence classifier/regressor on GLUE data; the one evaluation every module shares.

    - ``model``: any ``torch.nn.Module`` called as ``model(input_ids=, attention_mask=[, token_type_ids=])``
      that returns logits ``[batch, num_labels]`` (a tensor, or an object with ``.logits`` such as a
      transformers ``*ForSequenceClassification`` or a :class:`GlueModel`). One output column = regression.
      Hooks on it (head masks, pruning) stay in force: evaluation runs it as it is, in eval mode.
    - ``task_or_examples``: a GLUE task name (its ``split``, default dev, is read from ``data_dir``), a list
      of :class:`GlueExample`, or :class:`EncodedExamples` (tokenise once with :func:`encode_examples` to
      evaluate many times, e.g. one head ablated at a time).
    - ``metric``: a task name whose GLUE metrics to use (default: the task given), or a callable
      ``(predictions, labels) -> dict``. Needed when examples are given without a task.

    Returns ``{metric: value, ..., "n_examples": n}`` (+ ``"predictions"`` if asked).
    """
    if isinstance(task_or_examples, str):
        task = glue_task(task_or_examples).name
        data = encode_examples(tokenizer, read_examples(task, split, data_dir), max_length)
        metric = metric or task
    elif isinstance(task_or_examples, EncodedExamples):
        data = task_or_examples
    else:
        data = encode_examples(tokenizer, list(task_or_examples), max_length)
    if metric is None:
        raise DataError("evaluate: examples were given without a task; pass metric='cola'|'sst2'|... or a callable")
    if len(data) == 0:
        raise DataError("evaluate: no examples to score")
    predictions = predict(model, data, batch_size=batch_size, device=device)
    scores = metric(predictions, data.labels) if callable(metric) else glue_metric(metric, predictions, data.labels)
    result = {key: float(value) for key, value in scores.items()}
    result["n_examples"] = len(data)
    if return_predictions:
        result["predictions"] = predictions
    return result


def _fresh_backbone(encoder) -> torch.nn.Module:
    """A trainable copy of the encoder's weights without any head (the caller's Encoder is left untouched)."""
    backbone = copy.deepcopy(encoder.body)
    backbone.train()
    return backbone


def train_one_seed(model: GlueModel, train: EncodedExamples, dev: EncodedExamples, task: str, seed: int,
                   config: FinetuneConfig, device: torch.device, description: str = "",
                   state_path: Path | None = None, state_key: dict | None = None) -> tuple[dict, list[dict], float, float]:
    """Fine-tune ``model`` in place; returns (final dev metrics, per-epoch history, seconds, train examples/s).

    With ``state_path``, the run's state (weights, optimiser and schedule, the generator dropout draws from, the
    step, the dev curve so far) is saved there atomically every ``config.checkpoint_every`` steps, and a state
    saved for the same ``state_key`` is resumed from: a run killed part-way continues where it was and ends with
    the weights and numbers of an uninterrupted one."""
    model.to(device)
    model.train()
    recipe = dataclasses.replace(config.optimisation, seed=seed)
    steps_per_epoch = math.ceil(len(train) / recipe.batch_size)
    total_steps = recipe.steps(math.ceil(steps_per_epoch * config.epochs))
    optimiser = Optimiser(model, recipe, total_steps, device)
    pad_to = None if config.dynamic_padding else config.max_length
    history: list[dict] = []
    key = json.loads(json.dumps(state_key or {}, sort_keys=True, default=str))
    start_step, seconds_before = 0, 0.0
    epoch_losses: list[float] = []  # this epoch's, from its first step on (a resumed run's too)
    if state_path is not None and state_path.is_file():
        state = torch.load(state_path, map_location="cpu", weights_only=False)
        if state.get("key") == key:
            model.load_state_dict(state["model"])
            optimiser.load_state_dict(state)
            torch.set_rng_state(state["torch_rng"])
            if device.type == "cuda" and state.get("cuda_rng") is not None:
                torch.cuda.set_rng_state(state["cuda_rng"], device)
            history[:], start_step, seconds_before = state["history"], state["step"], state["seconds"]
            epoch_losses[:] = state["epoch_losses"]

    def epoch_order(epoch: int) -> list[np.ndarray]:
        # every earlier epoch's shuffle is replayed: the same order whether the run was resumed or not
        rng = np.random.default_rng(seed)
        for _ in range(epoch):
            training_batches(train.lengths, recipe.batch_size, rng, group_by_length=config.group_by_length)
        return training_batches(train.lengths, recipe.batch_size, rng, group_by_length=config.group_by_length)

    def after_step(step: int, seconds: float, loss: float) -> None:
        epoch_losses.append(loss)
        # not at an epoch's end: its dev scores come after this callback, and a state must hold them
        if (state_path is None or not config.checkpoint_every or step % config.checkpoint_every
                or step % steps_per_epoch == 0 or step >= total_steps):
            return
        with atomic_path(state_path) as tmp:
            torch.save({"key": key, "model": model.state_dict(), **optimiser.state_dict(),
                        "torch_rng": torch.get_rng_state(),
                        "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                        "history": history, "epoch_losses": epoch_losses, "step": step,
                        "seconds": seconds_before + seconds}, tmp)

    handle = Encoder.of(model)

    def batch_loss(indices: np.ndarray) -> torch.Tensor:
        batch = collate(train, indices, pad_to=pad_to)
        inputs = {**_model_inputs(batch, device), "labels": batch["labels"].to(device)}
        return handle.forward(inputs, hidden_states=False, grad=True).loss

    def after_epoch(epoch: int, step: int, losses: list[float]) -> None:
        if config.eval_each_epoch or step >= total_steps:
            scores = glue_metric(task, predict(model, dev, config.eval_batch_size, device), dev.labels)
            history.append({"epoch": epoch, "step": step,
                            "train_loss": float(np.mean(epoch_losses)) if epoch_losses else None, **scores})
        epoch_losses.clear()

    # dropout draws from the generator _run_seed's seeded(seed) block seeded, as before the shared loop existed
    log = train_steps(
        optimiser, batch_loss, lambda epoch, first: epoch_order(epoch)[first:], steps_per_epoch, total_steps,
        start_step=start_step, on_step=after_step, on_epoch_end=after_epoch,
        description=description or f"{task} seed {seed}", progress=config.progress)
    final = {k: v for k, v in history[-1].items() if k not in ("epoch", "step", "train_loss")}
    return final, history, seconds_before + log.seconds, log.examples / log.seconds if log.seconds else 0.0


def finetune(model, task: str, config: FinetuneConfig | None = None, out_dir: str | Path | None = None) -> Result:
    """Fine-tune ``model`` (an :class:`~bertology.models.Encoder`, alias, path or hub id) on GLUE ``task``.

    Each seed's checkpoint goes to ``out_dir/<task>/<variant>/seed-<s>/`` (``save_pretrained`` encoder +
    tokenizer, ``classifiers.safetensors``, ``finetune.json`` with the base model's fingerprint, task, variant,
    seed, recipe and dev metrics). A seed whose finished checkpoint is there is not trained again; a
    checkpoint of another base model or recipe there raises :class:`ModelError`.

    Returns a :class:`Result` with tables ``results`` (one row per seed x dev metric, the metric a
    fraction or correlation: ``model, base_fingerprint, task, variant, seed, metric, value, split,
    n_train, n_dev, epochs, lr, checkpoint``), ``runs`` (per seed: ``seed, reused, checkpoint,
    train_seconds, train_examples_per_second``) and ``history`` (per seed x epoch x metric: ``seed,
    epoch, step, train_loss, metric, value``); ``meta`` holds the model, task, variant, config and sizes.
    """
    config = config or FinetuneConfig()
    spec = glue_task(task)
    variant = parse_variant(config.variant)
    encoder = as_encoder(model)
    variant.check(encoder.num_layers)
    if config.save and out_dir is None:
        raise DataError("finetune: out_dir is needed to save checkpoints (or set config.save=False)")
    device = resolve_device(config.device)

    train_examples = seeded_subset(read_examples(spec.name, "train", config.data_dir), config.max_train, config.data_seed)
    dev_examples = read_examples(spec.name, "dev", config.data_dir)
    train = encode_examples(encoder.tokenizer, train_examples, config.max_length)
    dev = encode_examples(encoder.tokenizer, dev_examples, config.max_length)

    results, runs, history = [], [], []
    for seed in config.seeds:
        seed_dir = checkpoint_dir(out_dir, spec.name, variant.name, seed) if out_dir else None
        # Under the checkpoint's lock: a second process fine-tuning the same run waits, then reuses this checkpoint.
        with exclusive(seed_dir, "fine-tuning") if seed_dir is not None else contextlib.nullcontext():
            metrics, curve, checkpoint, reused, seconds, throughput = _run_seed(
                encoder, spec, variant, seed, config, train, dev, device, seed_dir)
        for metric, value in metrics.items():
            results.append({"model": encoder.name, "base_fingerprint": encoder.fingerprint, "task": spec.name,
                            "variant": variant.name, "seed": seed, "metric": metric, "value": float(value),
                            "split": "dev", "n_train": len(train), "n_dev": len(dev), "epochs": config.epochs,
                            "lr": config.lr, "checkpoint": str(checkpoint) if checkpoint else None})
        runs.append({"seed": seed, "reused": reused, "checkpoint": str(checkpoint) if checkpoint else None,
                     "train_seconds": float(seconds), "train_examples_per_second": float(throughput)})
        for point in curve:
            for metric, value in point.items():
                if metric not in ("epoch", "step", "train_loss"):
                    history.append({"seed": seed, "epoch": point.get("epoch"), "step": point.get("step"),
                                    "train_loss": point.get("train_loss"), "metric": metric, "value": value})
    return Result("finetune", tables={
        "results": pd.DataFrame(results, columns=RESULT_COLUMNS),
        "runs": pd.DataFrame(runs, columns=["seed", "reused", "checkpoint", "train_seconds",
                                            "train_examples_per_second"]),
        "history": pd.DataFrame(history, columns=["seed", "epoch", "step", "train_loss", "metric", "value"]),
    }, meta={"model": encoder.name, "base_fingerprint": encoder.fingerprint, "task": spec.name,
             "variant": variant.name, "config": config_dict(config), "n_train": len(train), "n_dev": len(dev),
             "device": str(device)})


def _run_seed(encoder, spec, variant, seed: int, config: FinetuneConfig, train: EncodedExamples, dev: EncodedExamples,
              device: torch.device, seed_dir: Path | None) -> tuple[dict, list[dict], Path | None, bool, float, float]:
    """One seed of :func:`finetune`: its finished checkpoint reused, or trained (and saved when ``config.save``)."""
    if seed_dir is not None and (seed_dir / CHECKPOINT_META).is_file():
        meta = read_checkpoint_meta(seed_dir)
        check_reusable(seed_dir, meta, encoder, spec.name, seed, config)
        return (meta["metrics"], meta.get("history", []), seed_dir, True, meta.get("train_seconds", 0.0),
                meta.get("train_examples_per_second", 0.0))
    state_path = seed_dir.with_name(f"{seed_dir.name}.{STATE_NAME}") if seed_dir is not None and config.save else None
    state_key = {"base_fingerprint": encoder.fingerprint, "task": spec.name, "seed": seed, "recipe": config.recipe(),
                 "n_train": len(train)}
    # the seed's model and its dropout draw from generators seeded here; the caller's are as they were after
    with seeded(seed, numpy=True, python=True):
        glue_model = build_glue_model(_fresh_backbone(encoder), spec.num_labels, variant, seed=seed)
        metrics, curve, seconds, throughput = train_one_seed(
            glue_model, train, dev, spec.name, seed, config, device,
            description=f"{encoder.name} {spec.name} {variant.name} seed {seed}", state_path=state_path,
            state_key=state_key)
    checkpoint = None
    if config.save:
        meta = {"base_model": encoder.name, "base_source": getattr(encoder, "source", None),
                "base_fingerprint": encoder.fingerprint, "task": spec.name, "seed": seed,
                "metrics": metrics, "history": curve, "recipe": config.recipe(), "n_train": len(train),
                "n_dev": len(dev), "device": str(device), "train_seconds": seconds,
                "train_examples_per_second": throughput, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
        checkpoint = save_checkpoint(glue_model.cpu(), encoder.tokenizer, seed_dir, meta)
    if state_path is not None:
        state_path.unlink(missing_ok=True)  # the finished checkpoint holds everything now
    return metrics, curve, checkpoint, False, seconds, throughput


def checkpoint_dir(out_dir: str | Path, task: str, variant: str, seed: int) -> Path:
    """Where :func:`finetune` keeps the checkpoint of one run: ``out_dir/<task>/<variant>/seed-<s>``."""
    return Path(out_dir) / glue_task(task).name / parse_variant(variant).name.replace(":", "-") / f"seed-{seed}"


def finished_run(out_dir: str | Path, encoder, task: str, seed: int, config: FinetuneConfig) -> bool:
    """Whether the run (``task``, ``config.variant``, ``seed``) has a finished checkpoint under ``out_dir``
    that :func:`finetune` would reuse; one of another model or recipe raises :class:`ModelError`."""
    seed_dir = checkpoint_dir(out_dir, task, config.variant, seed)
    if not (seed_dir / CHECKPOINT_META).is_file():
        return False
    check_reusable(seed_dir, read_checkpoint_meta(seed_dir), encoder, glue_task(task).name, seed, config)
    return True


def check_reusable(seed_dir: Path, meta: dict, encoder, task: str, seed: int, config: FinetuneConfig) -> None:
    if meta.get("base_fingerprint") != encoder.fingerprint:
        raise ModelError(
            f"{seed_dir}: this checkpoint was fine-tuned from {meta.get('base_model')!r} (fingerprint "
            f"{meta.get('base_fingerprint')}), not from {encoder.name!r} (fingerprint {encoder.fingerprint}); "
            "use another output folder (out=) or delete the checkpoint"
        )
    if meta.get("task") != task or int(meta.get("seed", -1)) != seed:
        raise ModelError(f"{seed_dir}: checkpoint is for task {meta.get('task')!r} seed {meta.get('seed')}, "
                         f"expected {task!r} seed {seed}")
    saved = meta.get("recipe", {})
    wanted = json.loads(json.dumps(config.recipe()))
    differences = {k: (saved.get(k), v) for k, v in wanted.items() if saved.get(k) != v}
    if differences:
        listed = ", ".join(f"{k}: saved {a!r}, asked {b!r}" for k, (a, b) in differences.items())
        raise ModelError(f"{seed_dir}: a finished checkpoint with other settings is there ({listed}); "
                         "use another output folder (out=) or delete it")


def finished_checkpoints(out_dir: str | Path) -> list[Path]:
    """The ``finetune.json`` of every finished checkpoint under ``out_dir``, in order; not those in the hidden
    temporary folders a run killed while saving leaves behind (``.seed-0.x1y2/``), whose checkpoint is not whole."""
    out_dir = Path(out_dir)
    return [path for path in sorted(out_dir.rglob(CHECKPOINT_META))
            if not any(part.startswith(".") for part in path.relative_to(out_dir).parts)]


def collect_results(out_dir: str | Path) -> pd.DataFrame:
    """Every finished checkpoint under ``out_dir`` as tidy rows, :func:`finetune`'s ``results`` columns
    (``model, task, variant, seed, metric, value, ...``); a building block of the variants table."""
    rows = []
    for meta_path in finished_checkpoints(out_dir):
        meta = read_checkpoint_meta(meta_path.parent)
        for metric, value in meta.get("metrics", {}).items():
            rows.append({"model": meta.get("base_model"), "base_fingerprint": meta.get("base_fingerprint"),
                         "task": meta.get("task"), "variant": meta.get("variant"), "seed": meta.get("seed"),
                         "metric": metric, "value": value, "split": "dev", "n_train": meta.get("n_train"),
                         "n_dev": meta.get("n_dev"), "epochs": meta.get("recipe", {}).get("epochs"),
                         "lr": meta.get("recipe", {}).get("lr"), "checkpoint": str(meta_path.parent)})
    return tidy(pd.DataFrame(rows, columns=RESULT_COLUMNS))


def config_dict(config: FinetuneConfig) -> dict:
    return asdict(config)
