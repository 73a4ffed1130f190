"""The one optimisation recipe and step loop behind every training run in bertology.

GLUE fine-tuning (:mod:`bertology.finetune.train`), SQuAD span fine-tuning
(:mod:`bertology.heads.finetune_qa`) and frozen-feature head training (:mod:`bertology.heads.train`) all
optimise with :class:`Optimisation`: AdamW with weight decay on matrices only (biases and LayerNorm
weights are 1-d), linear warm-up over ``warmup_ratio`` of the steps then linear decay to 0, gradient
clipping, bf16 autocast on CUDA. The two encoder fine-tunings also share the step loop
:func:`train_steps`; they differ only in what they do between steps (GLUE scores after each epoch, SQuAD
saves checkpoints at fractions of an epoch and its resume state).
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Sequence

import numpy as np
import torch
from transformers import get_linear_schedule_with_warmup

from bertology.progress import progress_bar
from bertology.runtime import derive_seed


class Optimisation:
    """AdamW + warm-up/decay schedule + clipping for ``model`` over ``total_steps`` steps."""

    def __init__(self, model: torch.nn.Module, *, lr: float, weight_decay: float, warmup_ratio: float,
                 max_grad_norm: float, total_steps: int, device: torch.device | str = "cpu"):
        self.model = model
        self.max_grad_norm = max_grad_norm
        decay, no_decay = [], []
        for parameter in model.parameters():
            if parameter.requires_grad:
                (decay if parameter.ndim >= 2 else no_decay).append(parameter)
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                            {"params": no_decay, "weight_decay": 0.0}], lr=lr)
        self.scheduler = get_linear_schedule_with_warmup(self.optimizer, int(warmup_ratio * total_steps), total_steps)
        device = torch.device(device)
        self.use_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        self.device_type = device.type

    def autocast(self):
        if not self.use_bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=torch.bfloat16)

    def step(self, loss: torch.Tensor) -> None:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def train_steps(optimisation: Optimisation, batch_loss: Callable[[np.ndarray], torch.Tensor],
                epoch_batches: Callable[[int], Sequence[np.ndarray]], steps_per_epoch: int, total_steps: int, *,
                start_step: int = 0, on_step: Callable[[int, float], None] | None = None,
                on_epoch_end: Callable[[int, int, list[float]], None] | None = None,
                dropout_seed: int | None = None, description: str = "training",
                progress: bool = True) -> tuple[int, float, int]:
    """Run optimiser steps ``start_step + 1 .. total_steps``; returns (steps, training seconds, examples seen).

    ``epoch_batches(epoch)`` gives that epoch's batches of example indices (called once per epoch, in
    order; a resumed run starts part-way into its epoch); ``batch_loss(indices)`` the loss of one batch
    (run under bf16 autocast on CUDA). ``on_step(step, seconds)`` runs after each step (``seconds``: training time so far in this call) and ``on_epoch_end(epoch,
    step, losses)`` after each finished epoch (and after the last step); their time is not training time.
    With ``dropout_seed``, each step's dropout draws from a generator seeded by (seed, step), so a run
    resumed at any step continues exactly as the uninterrupted one; the caller's RNG state is restored.
    """
    step, seconds, seen = start_step, 0.0, 0
    with torch.random.fork_rng(devices=[], enabled=dropout_seed is not None), progress_bar(progress) as bar:
        task = bar.add_task(description, total=total_steps, completed=step)
        while step < total_steps:
            epoch, first = divmod(step, steps_per_epoch)
            losses: list[float] = []
            for indices in list(epoch_batches(epoch))[first:]:
                started = time.perf_counter()
                if dropout_seed is not None:
                    torch.manual_seed(derive_seed(dropout_seed, "dropout", step))
                with optimisation.autocast():
                    loss = batch_loss(indices)
                optimisation.step(loss)
                seconds += time.perf_counter() - started
                step += 1
                seen += len(indices)
                losses.append(float(loss.detach()))
                bar.update(task, advance=1, description=f"{description}: epoch {epoch + 1} "
                                                        f"loss {np.mean(losses[-50:]):.3f}")
                if on_step is not None:
                    on_step(step, seconds)
                if step >= total_steps:
                    break
            if on_epoch_end is not None:
                on_epoch_end(epoch + 1, step, losses)
    return step, seconds, seen
