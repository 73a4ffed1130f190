"""The one optimisation recipe, the one step loop and the one epoch order behind every training run in bertology
(a foundation module: the capabilities that train stand on it, none on another's trainer).

Every training configuration embeds an :class:`Optimisation` (``FinetuneConfig.optimisation``,
``QAFinetuneConfig.optimisation``, ``ReadoutTrainConfig.optimisation``, the MLM probe's): AdamW with weight decay
on matrices only (biases and LayerNorm weights are 1-d), linear warm-up over ``warmup_ratio`` of the steps then
linear decay to 0, gradient clipping, bf16 autocast on CUDA, the batch size, a step limit, the run's seed and
device. :class:`Optimiser` is that recipe at work on one model, and :func:`train_steps` the one step loop:
GLUE fine-tuning (:mod:`bertology.finetune.train`), SQuAD span fine-tuning (:mod:`bertology.readouts.finetune_qa`),
frozen-feature readouts (:mod:`bertology.readouts.train`) and the MLM probe (:mod:`bertology.knowledge.mlm_probe`)
differ only in their model, their batches, their loss and what they do between steps (scores after an epoch,
checkpoints, early stopping). :func:`training_batches` is an epoch's order of examples (length-grouped
shuffled batches) for those that train on examples of varying length.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import torch
from transformers import get_linear_schedule_with_warmup

from bertology.errors import SettingError, UsageError
from bertology.progress import progress_bar

#: ``auto``: bf16 autocast on CUDA where the GPU has it, float32 elsewhere; ``bf16``: bf16 autocast on any
#: device; ``fp32``: no autocast.
PRECISIONS = ("auto", "bf16", "fp32")


@dataclass(frozen=True)
class Optimisation:
    """How a training run optimises, whatever it trains.

    ``lr``: the peak learning rate (AdamW), reached after linear warm-up over ``warmup_ratio`` of the steps
    and decayed linearly to 0 at the last step; ``weight_decay`` on matrices only; gradients clipped to
    ``max_grad_norm`` (``None``: not clipped); ``batch_size`` examples a step; at most ``max_steps`` steps;
    ``seed`` the run's seed (what it draws from it is the run's own); ``device`` as
    :func:`bertology.runtime.resolve_device` reads it; ``precision`` one of :data:`PRECISIONS`; ``fused``:
    torch's fused AdamW (the same update in one kernel per step: 10x faster on CPU for large matrices, its
    last digits differ from the per-tensor one).
    """

    lr: float = 2e-5
    batch_size: int = 32
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float | None = 1.0
    max_steps: int | None = None
    seed: int = 0
    device: str = "auto"
    precision: str = "auto"
    fused: bool = False

    def __post_init__(self):
        # one setting per message, named as the field (the CLI names its option)
        if not self.lr > 0:
            raise SettingError("lr", self.lr, "must be a positive learning rate", shown=str(self.lr))
        if isinstance(self.batch_size, bool) or int(self.batch_size) != self.batch_size or self.batch_size < 1:
            raise SettingError("batch_size", self.batch_size, "must be at least 1", shown=str(self.batch_size))
        if not 0 <= self.warmup_ratio < 1:
            raise UsageError(f"warmup_ratio {self.warmup_ratio}: expected a fraction of the steps in [0, 1)")
        if self.weight_decay < 0:
            raise UsageError(f"weight_decay {self.weight_decay}: expected a non-negative number")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise UsageError(f"max_grad_norm {self.max_grad_norm}: expected a positive norm, or None for no clipping")
        if self.max_steps is not None and self.max_steps < 1:
            raise SettingError("max_steps", self.max_steps, "must be at least 1", shown=str(self.max_steps))
        if self.precision not in PRECISIONS:
            raise UsageError(f"precision {self.precision!r}: expected one of {', '.join(PRECISIONS)}")

    def steps(self, planned: int) -> int:
        """The steps a run takes: ``planned`` (at least 1), cut at ``max_steps``."""
        planned = max(1, planned)
        return planned if self.max_steps is None else min(planned, self.max_steps)


#: The fields of :class:`Optimisation`: each training config also takes them as keywords of its own.
OPTIMISATION_FIELDS = tuple(f.name for f in dataclasses.fields(Optimisation))


def embeds_optimisation(cls):
    """Class decorator for a dataclass with an ``optimisation: Optimisation`` field (its default factory gives
    the config's own recipe): ``cls(lr=1e-4, ...)`` is ``cls(optimisation=<that recipe with lr=1e-4>, ...)``,
    ``optimisation`` may be given as a dict (``dataclasses.asdict`` of a config reads back), and ``config.lr``
    reads (and assigning it replaces) ``config.optimisation.lr`` for every field the config does not hold
    itself, so the spellings of the configs before :class:`Optimisation` keep working."""
    own = {f.name for f in dataclasses.fields(cls)}
    default = cls.__dataclass_fields__["optimisation"].default_factory
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        flat = {key: kwargs.pop(key) for key in OPTIMISATION_FIELDS if key in kwargs and key not in own}
        given = kwargs.get("optimisation")
        if isinstance(given, dict):
            given = Optimisation(**given)
        if flat or given is not None:
            kwargs["optimisation"] = dataclasses.replace(given if given is not None else default(), **flat)
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    for name in OPTIMISATION_FIELDS:
        if name not in own:
            setattr(cls, name, property(
                lambda self, name=name: getattr(self.optimisation, name),
                lambda self, value, name=name: setattr(self, "optimisation",
                                                       dataclasses.replace(self.optimisation, **{name: value})),
                doc=f"``optimisation.{name}``"))
    return cls


class Optimiser:
    """An :class:`Optimisation` at work on ``model`` over ``total_steps`` steps: AdamW, the warm-up/decay
    schedule, clipping and the autocast of ``device``."""

    def __init__(self, model: torch.nn.Module, recipe: Optimisation, total_steps: int,
                 device: torch.device | str = "cpu"):
        self.model = model
        self.recipe = recipe
        decay, no_decay = [], []
        for parameter in model.parameters():
            if parameter.requires_grad:
                (decay if parameter.ndim >= 2 else no_decay).append(parameter)
        groups = [{"params": params, "weight_decay": rate}
                  for params, rate in ((decay, recipe.weight_decay), (no_decay, 0.0)) if params]
        self.optimizer = _adamw(groups, recipe.lr, recipe.fused)
        self.scheduler = get_linear_schedule_with_warmup(self.optimizer, int(recipe.warmup_ratio * total_steps),
                                                         total_steps)
        device = torch.device(device)
        self.device_type = device.type
        self.use_bf16 = recipe.precision == "bf16" or (
            recipe.precision == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported())

    def autocast(self):
        if not self.use_bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=torch.bfloat16)

    def step(self, loss: torch.Tensor) -> None:
        loss.backward()
        if self.recipe.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.recipe.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def _adamw(groups: list[dict], lr: float, fused: bool) -> torch.optim.Optimizer:
    if fused:
        try:
            return torch.optim.AdamW(groups, lr=lr, fused=True)
        except (RuntimeError, TypeError, ValueError):  # no fused kernel for this device or dtype
            pass
    return torch.optim.AdamW(groups, lr=lr)


@dataclass
class TrainLog:
    """What one call of :func:`train_steps` did: the step it reached, its training seconds (reading batches
    and stepping; the callbacks' time excluded), the examples it saw and each step's loss."""

    steps: int
    seconds: float
    examples: int
    losses: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class DropoutSeeds:
    """How :func:`train_steps` seeds dropout: a generator seeded with ``seed(step)`` before each step (so a run
    resumed at any step continues exactly as the uninterrupted one), or only once, with the step the run starts
    at, when ``each_step`` is False."""

    seed: Callable[[int], int]
    each_step: bool = True


def train_steps(optimiser: Optimiser, batch_loss: Callable[[Any], torch.Tensor],
                epoch_batches: Callable[[int, int], Iterable[Any]], steps_per_epoch: int | Callable[[int], int],
                total_steps: int, *, start_step: int = 0,
                on_step: Callable[[int, float, float], None] | None = None,
                on_epoch_end: Callable[[int, int, list[float]], bool | None] | None = None,
                dropout: DropoutSeeds | None = None,
                examples: Callable[[Any], int] = len, description: str = "training",
                progress: bool = True) -> TrainLog:
    """Run optimiser steps ``start_step + 1 .. total_steps``.

    - ``epoch_batches(epoch, first)``: that epoch's batches from its ``first`` on (called once per epoch, in
      order; a resumed run starts part-way into its epoch). ``steps_per_epoch``: a number, or
      ``steps_per_epoch(epoch)`` where epochs differ in length. ``examples(batch)``: how many a batch holds.
    - ``batch_loss(batch)``: the loss of one batch (run under the optimiser's autocast).
    - ``on_step(step, seconds, loss)`` runs after each step (``seconds``: training time so far in this call);
      ``on_epoch_end(epoch, step, losses)`` after each finished epoch (and after the last step) with that
      epoch's losses in this call; when it returns True training stops (early stopping).
    - ``dropout`` (:class:`DropoutSeeds`): dropout draws from a generator seeded with ``dropout.seed(step)``
      before each step (so a run resumed at any step continues exactly as the uninterrupted one), or only once,
      with ``start_step``, when ``dropout.each_step`` is False; the caller's RNG state is restored afterwards.
      Without it dropout draws from the caller's generator.
    """
    dropout_seed = dropout.seed if dropout is not None else None
    reseed_each_step = dropout.each_step if dropout is not None else True
    if callable(steps_per_epoch):
        epoch_length = steps_per_epoch
    else:
        epoch_length = lambda epoch: steps_per_epoch  # noqa: E731

    def locate(step: int) -> tuple[int, int]:
        epoch, first_step = 0, 0
        while step >= first_step + epoch_length(epoch):
            first_step += epoch_length(epoch)
            epoch += 1
        return epoch, step - first_step

    step, log = start_step, TrainLog(start_step, 0.0, 0)
    with torch.random.fork_rng(devices=[], enabled=dropout_seed is not None), progress_bar(progress) as bar:
        if dropout_seed is not None and not reseed_each_step:
            torch.manual_seed(dropout_seed(start_step))
        task = bar.add_task(description, total=total_steps, completed=step)
        stop = False
        while step < total_steps and not stop:
            epoch, first = locate(step)
            losses: list[float] = []
            batches = iter(epoch_batches(epoch, first))
            while True:
                started = time.perf_counter()
                batch = next(batches, None)
                if batch is None:
                    break
                if dropout_seed is not None and reseed_each_step:
                    torch.manual_seed(dropout_seed(step))
                with optimiser.autocast():
                    loss = batch_loss(batch)
                optimiser.step(loss)
                log.seconds += time.perf_counter() - started
                step += 1
                log.examples += examples(batch)
                losses.append(float(loss.detach()))
                bar.update(task, advance=1, description=f"{description}: epoch {epoch + 1} "
                                                        f"loss {np.mean(losses[-50:]):.3f}")
                if on_step is not None:
                    on_step(step, log.seconds, losses[-1])
                if step >= total_steps:
                    break
            log.losses.extend(losses)
            if on_epoch_end is not None:
                stop = bool(on_epoch_end(epoch + 1, step, losses))
            if not losses:
                break  # an epoch without batches: no later one would have any
    log.steps = step
    return log


def training_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator,
                     group_by_length: bool = True, window: int = 50) -> list[np.ndarray]:
    """One epoch's batches of example indices.

    With ``group_by_length``: shuffle, cut into windows of ``window * batch_size``, sort each window by
    length, cut into batches, shuffle the batches. Otherwise plain shuffled batches.
    """
    order = rng.permutation(len(lengths))
    if not group_by_length:
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    batches = []
    span = batch_size * window
    for start in range(0, len(order), span):
        chunk = order[start:start + span]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches.extend(chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


__all__ = ["OPTIMISATION_FIELDS", "PRECISIONS", "Optimisation", "Optimiser", "TrainLog", "embeds_optimisation",
           "train_steps", "training_batches"]
