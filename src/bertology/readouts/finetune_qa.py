"""Fine-tuning an encoder for SQuAD 2.0 span extraction, with checkpoints at fractions of an epoch.

The recipe is the GLUE one of :mod:`bertology.finetune.train` (AdamW with weight decay 0.01 except biases
and LayerNorm, linear warm-up over 10% of the steps then linear decay, gradient clipping at 1.0) on
:class:`~bertology.readouts.qa.QAWindows`, with BERT's SQuAD head: one ``hidden x 2`` linear map giving
start and end logits, loss the mean of the two cross-entropies. Batches are length-grouped as GLUE's
(:func:`~bertology.training.training_batches`: on SQuAD windows that halves the padding). The
schedule runs over the largest
checkpoint fraction (one epoch by default); a checkpoint at 0.3 is the model 30% of the way through it.

The optimisation and the step loop are the package's one recipe (:mod:`bertology.training`): only
the model, the loss and what happens between steps (checkpoints at fractions of an epoch, the resume
state) are SQuAD's. The encoder runs through :meth:`~bertology.models.Encoder.forward` (``grad=True``) and
evaluation windows are batched by the one batcher (:func:`bertology.models.batching.token_budget_batches`).

Each checkpoint ``out/epoch-<f>/`` holds the encoder (``save_pretrained`` + tokenizer, so
``load_encoder(path)`` reads it), ``qa_head.safetensors`` and ``finetune-qa.json`` (base fingerprint,
fraction, step, recipe, evaluation). ``out/train-state.pt`` (weights, optimiser, scheduler, step) is
rewritten every ``save_every`` steps, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn

from bertology.errors import DataError, ModelError
from bertology.training import DropoutSeeds, Optimisation, Optimiser, embeds_optimisation, train_steps, training_batches
from bertology.files import atomic_dir, atomic_path, ensure_dir, write_json
from bertology.readouts.qa import QAWindows, score_spans
from bertology.models.batching import token_budget_batches
from bertology.models.encoders import Encoder, load_encoder, load_weights_file
from bertology.runtime import derive_seed, resolve_device, seeded

QA_META = "finetune-qa.json"
STATE_NAME = "train-state.pt"


@embeds_optimisation
@dataclass
class QAFinetuneConfig:
    """``optimisation``: :class:`~bertology.training.Optimisation` (its fields are also keywords and
    attributes of the config: ``QAFinetuneConfig(lr=2e-4).lr``); the schedule runs over the largest fraction."""

    checkpoints: tuple[float, ...] = (0.3, 1.0)  # fractions of an epoch at which the encoder is saved
    evaluate_at: tuple[float, ...] = ()          # extra fractions scored on the eval windows (the curve)
    optimisation: Optimisation = field(default_factory=lambda: Optimisation(lr=5e-5, batch_size=16))
    eval_batch_tokens: int = 8192
    save_every: int = 50
    progress: bool = True

    def __post_init__(self):
        self.checkpoints = tuple(sorted({round(float(f), 4) for f in self.checkpoints}))
        self.evaluate_at = tuple(sorted({round(float(f), 4) for f in self.evaluate_at}))
        if not self.checkpoints or min(self.checkpoints + self.evaluate_at) <= 0:
            raise DataError(f"checkpoints {self.checkpoints}: expected fractions of an epoch above 0")

    @property
    def epochs(self) -> float:
        return max(self.checkpoints + self.evaluate_at)

    def recipe(self) -> dict:
        keys = ("checkpoints", "evaluate_at", "lr", "batch_size", "warmup_ratio", "weight_decay",
                "max_grad_norm", "seed", "max_steps")
        return json.loads(json.dumps({key: getattr(self, key) for key in keys}))


class QAModel(nn.Module):
    """``backbone`` (a transformers encoder) + BERT's span head (``qa_outputs``: hidden -> start, end).

    ``forward`` returns the logits ``[batch, tokens, 2]`` (start, end; padding at -1e4), the layout of a
    ``head="qa"`` encoder's, so it too runs through :meth:`~bertology.models.Encoder.forward`
    (:func:`span_logits`)."""

    def __init__(self, backbone: nn.Module, hidden: int):
        super().__init__()
        self.backbone = backbone
        self.qa_outputs = nn.Linear(hidden, 2)
        nn.init.normal_(self.qa_outputs.weight, std=0.02)
        nn.init.zeros_(self.qa_outputs.bias)

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        # the backbone through the one forward pass; grad=True imposes no inference mode (a caller's stays)
        hidden = Encoder.of(self.backbone).forward(inputs, grad=True).hidden_states[-1]
        return self.qa_outputs(hidden).masked_fill(~attention_mask.bool()[..., None], -1e4)


def span_logits(model: QAModel, inputs: dict, grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Start and end logits ``[batch, tokens]`` of ``model`` on ``inputs``, each contiguous."""
    logits = Encoder.of(model).forward(inputs, hidden_states=False, logits=True, grad=grad).logits
    return logits[..., 0].contiguous(), logits[..., 1].contiguous()


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
    losses: list[dict] = field(default_factory=list)  # mean training loss per epoch: {"epoch", "step", "loss"}


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
    starts: list = [None] * len(windows)
    ends: list = [None] * len(windows)
    for chosen in token_budget_batches(lengths, batch_tokens, max_padding=None):
        start, end = span_logits(model, _inputs(windows.batch(chosen, pad_id), device))
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
    return score_spans(windows, starts, ends, max_answer_length)


def _save_checkpoint(model: QAModel, tokenizer, path: Path, meta: dict) -> Path:
    # A whole folder or none (a kill or a full disk in save_pretrained leaves no half checkpoint to be overwritten
    # or mistaken); QA_META inside marks it finished.
    with atomic_dir(path) as tmp:
        model.backbone.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        save_file({k: v.detach().cpu().contiguous() for k, v in model.qa_outputs.state_dict().items()},
                  str(tmp / "qa_head.safetensors"))
        write_json(tmp / QA_META, meta)
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
    total = config.optimisation.steps(math.ceil(config.epochs * steps_per_epoch))
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
                                 "use another out= folder or delete it")
            done[fraction] = QACheckpoint(fraction, meta["step"], folder, meta["metrics"], meta["train_seconds"])
    curve_path = out / "curve.json" if out is not None else None
    curve = json.loads(curve_path.read_text(encoding="utf-8")) if curve_path is not None and curve_path.is_file() else []
    losses_path = out / "losses.json" if out is not None else None
    epoch_losses = (json.loads(losses_path.read_text(encoding="utf-8"))
                    if losses_path is not None and losses_path.is_file() else [])
    if len(done) == len(config.checkpoints) and all(any(abs(r["fraction"] - f) < 1e-9 for r in curve)
                                                   for f in config.evaluate_at if evaluation is not None):
        return QAFinetuneResult([done[f] for f in config.checkpoints], curve, steps_per_epoch, epoch_losses)

    with seeded(derive_seed(config.seed, "squad-head-init")):
        model = QAModel(copy.deepcopy(encoder.body), encoder.hidden_size)
    model.to(device).train()
    optimiser = Optimiser(model, config.optimisation, total, device)
    step, seconds = 0, 0.0
    state_path = out / STATE_NAME if out is not None else None
    if state_path is not None and state_path.is_file():
        state = torch.load(state_path, map_location="cpu", weights_only=False)
        if state.get("key") == key:
            model.load_state_dict(state["model"])
            optimiser.load_state_dict(state)
            step, seconds = state["step"], state["seconds"]
    resumed_seconds = seconds

    def save_state(step: int) -> None:
        if state_path is None:
            return
        with atomic_path(state_path) as tmp:
            torch.save({"key": key, "model": model.state_dict(), **optimiser.state_dict(), "step": step,
                        "seconds": seconds}, tmp)

    def record(fraction: float, step: int) -> dict | None:
        if evaluation is None:
            return None
        metrics = evaluate_qa(model, evaluation, pad_id, config.eval_batch_tokens)
        row = {"fraction": fraction, "step": step, **metrics}
        curve[:] = [r for r in curve if abs(r["fraction"] - fraction) > 1e-9] + [row]
        curve.sort(key=lambda r: r["fraction"])
        if curve_path is not None:
            write_json(curve_path, curve)
        return metrics

    def finish(fraction: float, step: int) -> None:
        metrics = record(fraction, step) or {}
        meta = {"key": key, "base_model": encoder.name, "base_fingerprint": encoder.fingerprint,
                "fraction": fraction, "step": step, "steps_per_epoch": steps_per_epoch, "metrics": metrics,
                "train_seconds": seconds, "config": asdict(config), "n_train_windows": len(train)}
        path = _save_checkpoint(model, encoder.tokenizer, checkpoint_dir(fraction), meta) if out is not None else None
        done[fraction] = QACheckpoint(fraction, step, path, metrics, seconds)

    def batch_loss(indices: np.ndarray) -> torch.Tensor:
        batch = train.batch(indices, pad_id)
        start, end = span_logits(model, _inputs(batch, device), grad=True)
        return span_loss(start.float(), end.float(), batch["start_positions"].to(device),
                         batch["end_positions"].to(device))

    def epoch_batches(epoch: int, first: int) -> list[np.ndarray]:
        rng = np.random.default_rng(derive_seed(config.seed, "squad-finetune", epoch))
        return training_batches(train.lengths, config.batch_size, rng, group_by_length=True)[first:]

    def on_step(step: int, loop_seconds: float, loss: float) -> None:
        nonlocal seconds
        reached = [f for f, s in at_step.items() if s == step]
        if not (reached or step % config.save_every == 0 or step >= total):
            return
        seconds = resumed_seconds + loop_seconds
        for fraction in sorted(reached):
            if fraction in config.checkpoints and fraction not in done:
                finish(fraction, step)
            elif fraction in config.evaluate_at and not any(abs(r["fraction"] - fraction) < 1e-9 for r in curve):
                record(fraction, step)
        save_state(step)

    def on_epoch_end(epoch: int, step: int, losses: list[float]) -> None:
        # the convergence record: a resumed epoch counts only its resumed part
        if not losses:
            return
        epoch_losses[:] = [r for r in epoch_losses if r["epoch"] != epoch] + [
            {"epoch": epoch, "step": step, "loss": float(np.mean(losses)), "last_50": float(np.mean(losses[-50:]))}]
        if losses_path is not None:
            write_json(losses_path, epoch_losses)

    log = train_steps(optimiser, batch_loss, epoch_batches, steps_per_epoch, total, start_step=step, on_step=on_step,
                      on_epoch_end=on_epoch_end,
                      dropout=DropoutSeeds(lambda at: derive_seed(config.seed, "dropout", at)),
                      description=f"squad fine-tune {encoder.name}", progress=config.progress)
    step, seconds = log.steps, resumed_seconds + log.seconds
    for fraction in config.checkpoints:
        if fraction not in done:  # max_steps stopped the run before this fraction: save what there is
            finish(fraction, step)
    return QAFinetuneResult([done[f] for f in config.checkpoints], curve, steps_per_epoch, epoch_losses)


def checkpoint_meta(path: str | Path) -> dict:
    path = Path(path) / QA_META
    if not path.is_file():
        raise ModelError(f"{path.parent}: not a finished SQuAD checkpoint (no {QA_META})")
    return json.loads(path.read_text(encoding="utf-8"))


def load_qa_model(path: str | Path) -> QAModel:
    """A finished checkpoint of :func:`finetune_qa` (encoder + span head) ready to score."""
    checkpoint_meta(path)
    encoder = load_encoder(path)
    model = QAModel(encoder.model, encoder.hidden_size)
    model.qa_outputs.load_state_dict(load_weights_file(Path(path) / "qa_head.safetensors"))
    return model.eval()
