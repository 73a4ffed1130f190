"""The one optimisation recipe and step loop (bertology.training): the recipe embedded in every training
config with the old flat spellings kept, early stopping, exact resumption, epochs of different lengths."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from bertology.errors import UsageError
from bertology.training import DropoutSeeds, Optimisation, Optimiser, train_steps
from bertology.finetune.train import FinetuneConfig
from bertology.readouts.finetune_qa import QAFinetuneConfig
from bertology.readouts.train import ReadoutTrainConfig


def test_every_training_config_embeds_one_optimisation_and_keeps_the_flat_spellings():
    config = FinetuneConfig(lr=1e-4, batch_size=8, max_steps=5, device="cpu")
    assert config.optimisation == Optimisation(lr=1e-4, batch_size=8, max_steps=5, device="cpu")
    assert (config.lr, config.batch_size, config.warmup_ratio) == (1e-4, 8, 0.1)
    # the recipe a finished checkpoint is compared with keeps its flat keys and values
    assert FinetuneConfig().recipe() == {"epochs": 3.0, "lr": 2e-5, "batch_size": 32, "max_length": 128,
                                         "warmup_ratio": 0.1, "weight_decay": 0.01, "max_grad_norm": 1.0,
                                         "max_train": None, "max_steps": None, "data_seed": 0,
                                         "variant": "baseline"}
    # each config starts from its own recipe; flat keywords change only what they name
    assert ReadoutTrainConfig(lr=1e-2).optimisation == Optimisation(lr=1e-2, batch_size=16, device="cpu")
    assert QAFinetuneConfig(seed=3).optimisation == Optimisation(lr=5e-5, batch_size=16, seed=3)
    # dataclasses.replace and asdict (the Ray sweep ships configs as dicts) read back
    moved = dataclasses.replace(config, device="cuda", variant="drop-last:1")
    assert (moved.device, moved.lr, moved.variant) == ("cuda", 1e-4, "drop-last:1")
    assert FinetuneConfig(**dataclasses.asdict(config)) == config
    head = ReadoutTrainConfig()
    head.lr = 0.5
    assert head.optimisation.lr == 0.5
    with pytest.raises(UsageError, match="^lr -1"):
        FinetuneConfig(lr=-1)
    with pytest.raises(UsageError, match="^batch_size 0"):
        QAFinetuneConfig(batch_size=0)


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))


def _data():
    rng = np.random.default_rng(0)
    return torch.as_tensor(rng.normal(size=(40, 4)), dtype=torch.float32), torch.as_tensor(rng.normal(size=40),
                                                                                          dtype=torch.float32)


def _run(model, total, *, start=0, state=None, stop_at=None, kept=None, **kwargs):
    """Train ``model`` with epochs of 4 and 5 batches in turn; with ``stop_at``, keep the model's and the
    optimiser's state in ``kept`` at that step and stop there as an interrupted run does."""
    x, y = _data()
    optimiser = Optimiser(model, Optimisation(lr=1e-2, batch_size=5, device="cpu"), total)
    if state is not None:
        optimiser.load_state_dict(state)

    def batches(epoch, first):
        order = np.random.default_rng(epoch).permutation(40)
        return [order[i * 5:(i + 1) * 5] for i in range(4 + epoch % 2)][first:]

    def loss(index):
        return torch.nn.functional.mse_loss(model(x[index])[:, 0], y[index])

    def on_step(step, seconds, value):
        if step == stop_at:
            kept.update(model={k: v.clone() for k, v in model.state_dict().items()}, optimiser=optimiser.state_dict())
            raise KeyboardInterrupt

    return train_steps(optimiser, loss, batches, lambda epoch: 4 + epoch % 2, total, start_step=start,
                       on_step=on_step, dropout=DropoutSeeds(lambda step: 1000 + step), progress=False, **kwargs)


def test_a_resumed_run_ends_as_the_uninterrupted_one_across_epochs_of_different_lengths():
    straight = _model()
    log = _run(straight, 11)
    assert log.steps == 11 and len(log.losses) == 11 and log.examples == 55
    kept = {}
    with pytest.raises(KeyboardInterrupt):
        _run(_model(), 11, stop_at=6, kept=kept)  # step 6: the second batch of the 5-batch epoch
    resumed = _model(seed=99)
    resumed.load_state_dict(kept["model"])
    log = _run(resumed, 11, start=6, state=kept["optimiser"])
    assert log.steps == 11 and len(log.losses) == 5
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def test_early_stopping_ends_after_the_epoch_that_asks_and_the_callers_generator_is_untouched():
    ended, model = [], _model()
    before = torch.random.get_rng_state()
    log = _run(model, 40, on_epoch_end=lambda epoch, step, losses: ended.append((epoch, step)) or epoch == 2)
    assert ended == [(1, 4), (2, 9)] and log.steps == 9
    assert torch.equal(torch.random.get_rng_state(), before)


def _gradient_norm_at_the_step(max_grad_norm):
    model = _model()
    optimiser = Optimiser(model, Optimisation(lr=1e-3, weight_decay=0.5, max_grad_norm=max_grad_norm), 10)
    seen = []
    optimiser.optimizer.register_step_pre_hook(
        lambda *_: seen.append(float(torch.norm(torch.stack([p.grad.norm() for p in model.parameters()])))))
    optimiser.step(model(torch.full((2, 4), 1e3)).sum())
    assert all(p.grad is None for p in model.parameters())  # zeroed for the next step
    return optimiser, seen[0]


def test_the_optimiser_decays_matrices_only_and_clips_only_when_asked():
    optimiser, unclipped = _gradient_norm_at_the_step(None)
    groups = optimiser.optimizer.param_groups
    assert [g["weight_decay"] for g in groups] == [0.5, 0.0]
    assert all(p.ndim >= 2 for p in groups[0]["params"]) and all(p.ndim == 1 for p in groups[1]["params"])
    assert optimiser.scheduler.get_last_lr()[0] == pytest.approx(1e-3)  # warm-up over int(0.1 * 10) = 1 step
    _, clipped = _gradient_norm_at_the_step(0.5)
    assert unclipped > 10 and clipped == pytest.approx(0.5, rel=1e-4)
