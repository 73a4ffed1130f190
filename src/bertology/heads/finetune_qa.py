"""Fine-tuning an encoder for SQuAD 2.0 span extraction, with checkpoints at fractions of an epoch.

The recipe is the GLUE one of :mod:`bertology.finetune.train` (AdamW with weight decay 0.01 except biases
and LayerNorm, linear warm-up over 10% of the steps then linear decay, gradient clipping at 1.0) on
:class:`~bertology.heads.qa.QAWindows`, with BERT's SQuAD head: one ``hidden x 2`` linear map giving
start and end logits, loss the mean of the two cross-entropies. Batches are length-grouped as GLUE's
(:func:`~bertology.finetune.batching.training_batches`: on SQuAD windows that halves the padding). The
schedule runs over the largest
checkpoint fraction (one epoch by default); a checkpoint at 0.3 is the model 30% of the way through it.

Why a loop of its own: ``train.train_one_seed`` scores with ``glue_metric(task)`` and has no hook to save
or evaluate part-way through an epoch. Folding this in needs two changes there: an ``evaluate(model) ->
dict`` callable instead of the GLUE task name, and a ``on_step(step)`` callback (see docs/heads.md).

Each checkpoint ``out/epoch-<f>/`` holds the encoder (``save_pretrained`` + tokenizer, so
``load_encoder(path)`` reads it), ``qa_head.safetensors`` and ``finetune-qa.json`` (base fingerprint,
fraction, step, recipe, evaluation). ``out/train-state.pt`` (weights, optimiser, scheduler, step) is
rewritten every ``save_every`` steps, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn
from transformers import get_linear_schedule_with_warmup

from bertology.errors import DataError, ModelError
from bertology.finetune.batching import training_batches
from bertology.files import atomic_path, ensure_dir, write_json
from bertology.heads.qa import QAWindows, decode_spans
from bertology.heads.squad_eval import evaluate_squad
from bertology.progress import progress_bar
from bertology.runtime import derive_seed, resolve_device

QA_META = "finetune-qa.json"
STATE_NAME = "train-state.pt"


@dataclass
class QAFinetuneConfig:
    checkpoints: tuple[float, ...] = (0.3, 1.0)  # fractions of an epoch at which the encoder is saved
    evaluate_at: tuple[float, ...] = ()          # extra fractions scored on the eval windows (the curve)
    lr: float = 5e-5
    batch_size: int = 16
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = 0
    max_steps: int | None = None
    eval_batch_tokens: int = 8192
    save_every: int = 50
    device: str = "auto"
    progress: bool = True

    def __post_init__(self):
        self.checkpoints = tuple(sorted({round(float(f), 4) for f in self.checkpoints}))
        self.evaluate_at = tuple(sorted({round(float(f), 4) for f in self.evaluate_at}))
        if not self.checkpoints or min(self.checkpoints + self.evaluate_at) <= 0:
            raise DataError(f"checkpoints {self.checkpoints}: expected fractions of an epoch above 0")
        if self.lr <= 0 or self.batch_size < 1:
            raise DataError(f"lr {self.lr}, batch_size {self.batch_size}: expected positive values")

    @property
    def epochs(self) -> float:
        return max(self.checkpoints + self.evaluate_at)

    def recipe(self) -> dict:
        keys = ("checkpoints", "evaluate_at", "lr", "batch_size", "warmup_ratio", "weight_decay",
                "max_grad_norm", "seed", "max_steps")
        return json.loads(json.dumps({key: getattr(self, key) for key in keys}))


class QAModel(nn.Module):
    """``backbone`` (a transformers encoder) + BERT's span head (``qa_outputs``: hidden -> start, end)."""

    def __init__(self, backbone: nn.Module, hidden: int):
        super().__init__()
        self.backbone = backbone
        self.qa_outputs = nn.Linear(hidden, 2)
        nn.init.normal_(self.qa_outputs.weight, std=0.02)
        nn.init.zeros_(self.qa_outputs.bias)

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        hidden = self.backbone(**kwargs).last_hidden_state
        logits = self.qa_outputs(hidden)
        mask = attention_mask.bool()
        start = logits[..., 0].masked_fill(~mask, -1e4)
        end = logits[..., 1].masked_fill(~mask, -1e4)
        return start, end


def span_loss(start: torch.Tensor, end: torch.Tensor, start_positions: torch.Tensor,
              end_positions: torch.Tensor) -> torch.Tensor:
    return (nn.functional.cross_entropy(start, start_positions) + nn.functional.cross_entropy(end, end_positions)) / 2


@dataclass
class QACheckpoint:
    fraction: float
    step: int
    path: Path | None
    metrics: dict
    train_seconds: float


@dataclass
class QAFinetuneResult:
    checkpoints: list[QACheckpoint]
    curve: list[dict] = field(default_factory=list)  # one row per evaluated fraction
    steps_per_epoch: int = 0


def _inputs(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device) for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}


@torch.inference_mode()
def qa_logits(model: QAModel, windows: QAWindows, pad_id: int, batch_tokens: int = 8192,
              device: torch.device | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Start and end logits of every window (``[window tokens]`` each), in window order."""
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    lengths = windows.lengths
    order = np.argsort(lengths, kind="stable")
    starts: list = [None] * len(windows)
    ends: list = [None] * len(windows)
    position = 0
    while position < len(order):
        size = max(1, batch_tokens // int(lengths[order[min(len(order) - 1, position)]]))
        chosen = order[position: position + size]
        size = max(1, batch_tokens // int(lengths[chosen].max()))
        chosen = order[position: position + size]
        position += len(chosen)
        start, end = model(**_inputs(windows.batch(chosen, pad_id), device))
        start, end = start.float().cpu().numpy(), end.float().cpu().numpy()
        for row, w in enumerate(chosen):
            n = int(lengths[w])
            starts[w], ends[w] = start[row, :n], end[row, :n]
    model.train(was_training)
    return starts, ends


def evaluate_qa(model: QAModel, windows: QAWindows, pad_id: int, batch_tokens: int = 8192,
                max_answer_length: int = 30) -> dict:
    """Official SQuAD 2.0 scores (fractions) of ``model`` on ``windows``' questions."""
    starts, ends = qa_logits(model, windows, pad_id, batch_tokens)
    predictions = decode_spans(windows, starts, ends, max_answer_length)
    return evaluate_squad(windows.questions, predictions.answers)


def _optimizer(model: nn.Module, config: QAFinetuneConfig) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            (no_decay if parameter.ndim < 2 or "LayerNorm" in name or "layer_norm" in name else decay).append(parameter)
    return torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=config.lr)


def _save_checkpoint(model: QAModel, tokenizer, path: Path, meta: dict) -> Path:
    path = ensure_dir(path)
    model.backbone.save_pretrained(path)
    tokenizer.save_pretrained(path)
    with atomic_path(path / "qa_head.safetensors") as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in model.qa_outputs.state_dict().items()}, str(tmp))
    write_json(path / QA_META, meta)  # written last: its presence marks a finished checkpoint
    return path


def finetune_qa(encoder, train: QAWindows, evaluation: QAWindows | None, out: str | Path | None,
                config: QAFinetuneConfig | None = None) -> QAFinetuneResult:
    """Fine-tune a copy of ``encoder`` on ``train``; save and score it at ``config.checkpoints``.

    Finished checkpoints of the same base model and recipe are reused; an interrupted run resumes from
    ``out/train-state.pt``. ``encoder`` itself is left untouched.
    """
    config = config or QAFinetuneConfig()
    device = resolve_device(config.device)
    out = ensure_dir(out) if out is not None else None
    pad_id = encoder.tokenizer.pad_token_id if encoder.tokenizer.pad_token_id is not None else 0
    steps_per_epoch = math.ceil(len(train) / config.batch_size)
    total = max(1, math.ceil(config.epochs * steps_per_epoch))
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    at_step = {f: min(total, max(1, round(f * steps_per_epoch))) for f in config.checkpoints + config.evaluate_at}
    key = {"base_fingerprint": encoder.fingerprint, "train_hash": train.content_hash(), "recipe": config.recipe()}

    def checkpoint_dir(fraction: float) -> Path | None:
        return out / f"epoch-{fraction:g}" if out is not None else None

    done = {}
    for fraction in config.checkpoints:
        folder = checkpoint_dir(fraction)
        if folder is not None and (folder / QA_META).is_file():
            meta = json.loads((folder / QA_META).read_text(encoding="utf-8"))
            if meta.get("key") != key:
                raise ModelError(f"{folder}: a SQuAD checkpoint of another base model, data or recipe is there; "
                                 "use another --out folder or delete it")
            done[fraction] = QACheckpoint(fraction, meta["step"], folder, meta["metrics"], meta["train_seconds"])
    curve_path = out / "curve.json" if out is not None else None
    curve = json.loads(curve_path.read_text(encoding="utf-8")) if curve_path is not None and curve_path.is_file() else []
    if len(done) == len(config.checkpoints) and all(any(abs(r["fraction"] - f) < 1e-9 for r in curve)
                                                   for f in config.evaluate_at if evaluation is not None):
        return QAFinetuneResult([done[f] for f in config.checkpoints], curve, steps_per_epoch)

    generator_state = torch.random.get_rng_state()
    torch.manual_seed(derive_seed(config.seed, "squad-head-init"))
    model = QAModel(copy.deepcopy(encoder.model), encoder.hidden_size)
    torch.random.set_rng_state(generator_state)
    model.to(device).train()
    optimizer = _optimizer(model, config)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(config.warmup_ratio * total), total)
    step, seconds = 0, 0.0
    state_path = out / STATE_NAME if out is not None else None
    if state_path is not None and state_path.is_file():
        state = torch.load(state_path, map_location="cpu", weights_only=False)
        if state.get("key") == key:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            step, seconds = state["step"], state["seconds"]

    def save_state() -> None:
        if state_path is None:
            return
        with atomic_path(state_path) as tmp:
            torch.save({"key": key, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(), "step": step, "seconds": seconds}, tmp)

    def record(fraction: float) -> dict | None:
        if evaluation is None:
            return None
        metrics = evaluate_qa(model, evaluation, pad_id, config.eval_batch_tokens)
        row = {"fraction": fraction, "step": step, **metrics}
        curve[:] = [r for r in curve if abs(r["fraction"] - fraction) > 1e-9] + [row]
        curve.sort(key=lambda r: r["fraction"])
        if curve_path is not None:
            write_json(curve_path, curve)
        return metrics

    use_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    with progress_bar(config.progress) as bar:
        task = bar.add_task(f"squad fine-tune {encoder.name}", total=total, completed=step)
        while step < total:
            epoch, first = divmod(step, steps_per_epoch)
            rng = np.random.default_rng(derive_seed(config.seed, "squad-finetune", epoch))
            batches = training_batches(train.lengths, config.batch_size, rng, group_by_length=True)
            started = time.perf_counter()
            for b in range(first, steps_per_epoch):
                chosen = batches[b]
                batch = train.batch(chosen, pad_id)
                with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16):
                    start, end = model(**_inputs(batch, device))
                loss = span_loss(start.float(), end.float(), batch["start_positions"].to(device),
                                 batch["end_positions"].to(device))
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                bar.advance(task)
                reached = [f for f, s in at_step.items() if s == step]
                if reached or step % config.save_every == 0 or step >= total:
                    seconds += time.perf_counter() - started
                    for fraction in sorted(reached):
                        if fraction in config.checkpoints and fraction not in done:
                            metrics = record(fraction) or {}
                            meta = {"key": key, "base_model": encoder.name, "base_fingerprint": encoder.fingerprint,
                                    "fraction": fraction, "step": step, "steps_per_epoch": steps_per_epoch,
                                    "metrics": metrics, "train_seconds": seconds, "config": asdict(config),
                                    "n_train_windows": len(train)}
                            path = (_save_checkpoint(model, encoder.tokenizer, checkpoint_dir(fraction), meta)
                                    if out is not None else None)
                            done[fraction] = QACheckpoint(fraction, step, path, metrics, seconds)
                        elif fraction in config.evaluate_at and not any(abs(r["fraction"] - fraction) < 1e-9
                                                                       for r in curve):
                            record(fraction)
                    save_state()
                    started = time.perf_counter()  # evaluation and saving are not training time
                if step >= total:
                    break
    for fraction in config.checkpoints:
        if fraction not in done:  # max_steps stopped the run before this fraction: save what there is
            metrics = record(fraction) or {}
            meta = {"key": key, "base_model": encoder.name, "base_fingerprint": encoder.fingerprint,
                    "fraction": fraction, "step": step, "steps_per_epoch": steps_per_epoch, "metrics": metrics,
                    "train_seconds": seconds, "config": asdict(config), "n_train_windows": len(train)}
            path = _save_checkpoint(model, encoder.tokenizer, checkpoint_dir(fraction), meta) if out is not None else None
            done[fraction] = QACheckpoint(fraction, step, path, metrics, seconds)
    return QAFinetuneResult([done[f] for f in config.checkpoints], curve, steps_per_epoch)


def checkpoint_meta(path: str | Path) -> dict:
    path = Path(path) / QA_META
    if not path.is_file():
        raise ModelError(f"{path.parent}: not a finished SQuAD checkpoint (no {QA_META})")
    return json.loads(path.read_text(encoding="utf-8"))


def fractions_text(values: Sequence[float]) -> str:
    return ", ".join(f"{v:g}" for v in values)
