"""Training a readout on streamed activations, resumably, and predicting with it.

The optimisation and the step loop are the package's one recipe (:mod:`bertology.training`: AdamW,
linear warm-up over the first 10% of steps then linear decay, clipping), on batches from
:class:`~bertology.readouts.streaming.StreamingReader`. Losses: span - the mean of the
cross-entropies of the start and end positions (BERT's SQuAD loss); classification - cross-entropy, or
mean squared error with one output (STS-B).

Resuming: with ``checkpoint`` set, the readout, optimiser, scheduler and position (epoch, batch) are saved
atomically every ``checkpoint_every`` batches and at the end; a later call with the same settings
continues from there (the data order is fixed by the seed, so the remaining batches are the same ones),
and a finished checkpoint is loaded without training. A checkpoint trained on activations of another
model, or with other settings, is refused.

Time: ``seconds`` is the wall time of the training loop, ``wait_seconds`` the part of it spent blocked on
data; ``io_share = wait_seconds / seconds`` is the seed's "loading takes more than 90%" number.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from bertology.errors import ModelError, StoreError
from bertology.files import atomic_path
from bertology.training import DropoutSeeds, Optimisation, Optimiser, embeds_optimisation, train_steps
from bertology.readouts.activations import read_labels
from bertology.probing.probes import standard_scale
from bertology.readouts.catalog import ReadoutModel
from bertology.readouts.streaming import StreamingReader
from bertology.runtime import derive_seed, resolve_device
from bertology.store.store import Store


@embeds_optimisation
@dataclass
class ReadoutTrainConfig:
    """How a readout trains: ``optimisation`` (:class:`~bertology.training.Optimisation`, whose fields are
    also keywords and attributes of the config: ``ReadoutTrainConfig(lr=1e-2).lr``) and the reading of the
    activations."""

    epochs: int = 1
    optimisation: Optimisation = field(default_factory=lambda: Optimisation(lr=1e-3, batch_size=16, device="cpu"))
    buffer_shards: int = 4
    queue_depth: int = 4
    checkpoint_every: int = 200
    progress: bool = True
    prefetch: bool = True  # False: read on the training thread (the benchmark's baseline)
    # Early stopping: with a ``validate`` callable, score after every epoch and stop after ``patience``
    # epochs without improvement; ``epochs`` is then the most epochs. The best epoch's readout is kept.
    patience: int | None = None
    standardise: bool = False  # per-layer, per-dimension mean/std of the training activations

    def recipe(self) -> dict:
        keys = ("epochs", "lr", "batch_size", "weight_decay", "warmup_ratio", "max_grad_norm", "seed",
                "buffer_shards", "max_steps")
        recipe = {key: getattr(self, key) for key in keys}
        if self.patience is not None or self.standardise:  # older checkpoints keep their key
            recipe.update(patience=self.patience, standardise=self.standardise)
        return recipe


@dataclass
class TrainStats:
    steps: int
    seconds: float
    wait_seconds: float
    final_loss: float
    resumed_from: int = 0
    reused: bool = False
    losses: list[float] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)  # per epoch: {"epoch", "step", "loss", "score"}
    best_epoch: int | None = None

    @property
    def epochs_run(self) -> int:
        return len(self.history)

    @property
    def io_share(self) -> float:
        return self.wait_seconds / self.seconds if self.seconds else float("nan")


def _targets(store: Store, task: str) -> dict[str, torch.Tensor]:
    labels = read_labels(store)["labels"]
    if task == "span":
        missing = [key for key in ("start", "end") if key not in labels]
        if missing:
            raise StoreError(f"{store.path}: no span labels ({', '.join(missing)}); it was not written for SQuAD")
        return {"start": torch.as_tensor(labels["start"], dtype=torch.long),
                "end": torch.as_tensor(labels["end"], dtype=torch.long)}
    if "label" not in labels:
        raise StoreError(f"{store.path}: no class labels; it was not written for a classification task")
    values = np.asarray(labels["label"])
    dtype = torch.float32 if values.dtype.kind == "f" else torch.long
    return {"label": torch.as_tensor(values, dtype=dtype)}


def readout_loss(readout: ReadoutModel, outputs, targets: dict[str, torch.Tensor]) -> torch.Tensor:
    if readout.task == "span":
        start, end = outputs
        return (torch.nn.functional.cross_entropy(start, targets["start"])
                + torch.nn.functional.cross_entropy(end, targets["end"])) / 2
    if outputs.shape[-1] == 1:
        return torch.nn.functional.mse_loss(outputs[:, 0], targets["label"].float())
    return torch.nn.functional.cross_entropy(outputs, targets["label"])


_STATS: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}


def feature_stats(store: Store) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation ``[layers, hidden]`` of every stored row (float64 sums, shard by shard);
    a dimension with no spread gets std 1. Cached per store for the process (every readout of a run shares
    the training store's statistics)."""
    key = (str(store.path), store.index["input"]["hash"])
    if key not in _STATS:
        means, stds = [], []
        for layer in store.layers:
            total, squares, count = np.zeros(store.dim), np.zeros(store.dim), 0
            for _, rows in store.iter_layer(layer):
                rows = np.asarray(rows, dtype=np.float64)
                total += rows.sum(0)
                squares += np.square(rows).sum(0)
                count += len(rows)
            if not count:
                raise StoreError(f"{store.path}: no rows to standardise with")
            mean = total / count
            std = np.sqrt(np.maximum(squares / count - np.square(mean), 0.0))
            means.append(mean)
            stds.append(standard_scale(std))
        _STATS[key] = (np.stack(means).astype(np.float32), np.stack(stds).astype(np.float32))
    return _STATS[key]


def _save(path: Path, payload: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def train_readout(readout: ReadoutModel, store: Store, config: ReadoutTrainConfig | None = None,
                  checkpoint: str | Path | None = None, validate=None) -> TrainStats:
    """Train ``readout`` in place on every example of ``store`` for ``config.epochs`` epochs.

    ``validate(readout) -> float`` (higher is better; e.g. F1 or accuracy on held-out training articles)
    is called after every epoch; with ``config.patience`` training stops after that many epochs without
    a better score, and the readout ends with the weights of its best epoch. With ``config.standardise`` the
    readout's scaler is set from :func:`feature_stats` of ``store`` before the first step."""
    config = config or ReadoutTrainConfig()
    if config.patience is not None and validate is None:
        raise ModelError("early stopping (patience) needs a validate function: a score on held-out data")
    targets = _targets(store, readout.task)
    fingerprint = store.index["model"]["fingerprint"]
    device = resolve_device(config.device)
    # The seed purposes ("heads", "heads-dropout", like "head-init" in squad/glue) and the checkpoint keys
    # ("head", "head_state") keep their first spelling: the same seeds, and saved checkpoints still resume.
    reader = StreamingReader(store, config.batch_size, shuffle=True,
                             seed=derive_seed(config.seed, "heads", readout.name),
                             buffer_shards=config.buffer_shards, queue_depth=config.queue_depth,
                             pin_memory=device.type == "cuda", prefetch=config.prefetch)
    # Epochs differ a little in length (their shard groups, hence their last partial batches, differ), so
    # positions are located from each epoch's own batch count, not from the first epoch's.
    sizes: dict[int, int] = {}

    def epoch_size(epoch: int) -> int:
        if epoch not in sizes:
            sizes[epoch] = sum(len(group.batches) for group in reader.plan(epoch))
        return sizes[epoch]

    total = sum(epoch_size(epoch) for epoch in range(config.epochs))
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    readout.to(device)
    optimiser = Optimiser(readout, config.optimisation, total, device)
    step, seconds, waited, losses = 0, 0.0, 0.0, []
    history: list[dict] = []
    best: dict = {"score": -np.inf, "epoch": None, "state": None}
    if config.standardise:
        readout.scaler.set(*feature_stats(store))
    checkpoint = Path(checkpoint) if checkpoint is not None else None
    state_key = {"head": readout.name, "task": readout.task, "fingerprint": fingerprint,
                 "store_input": store.index["input"]["hash"], "recipe": config.recipe(),
                 "parameters": readout.num_parameters}
    if checkpoint is not None and checkpoint.is_file():
        saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
        if saved.get("key") != state_key:
            differences = {k: (saved.get("key", {}).get(k), v) for k, v in state_key.items()
                           if saved.get("key", {}).get(k) != v}
            listed = "; ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in differences.items())
            raise ModelError(f"{checkpoint}: a readout checkpoint of other settings or activations ({listed}); "
                             "use another out= folder or delete it")
        readout.load_state_dict(saved["head_state"])
        optimiser.load_state_dict(saved)
        step, seconds, waited, losses = saved["step"], saved["seconds"], saved["wait_seconds"], saved["losses"]
        history = saved.get("history", [])
        best = saved.get("best", best)
        if saved.get("done"):
            return TrainStats(step, seconds, waited, losses[-1] if losses else float("nan"), step, True, losses,
                              history, best["epoch"])
    resumed_from, resumed_seconds = step, seconds
    loop_seconds = 0.0  # the loop's training time at its last step

    def save(at_step: int, done: bool) -> None:
        if checkpoint is None:
            return
        _save(checkpoint, {"key": state_key, "head_state": readout.state_dict(), **optimiser.state_dict(),
                           "step": at_step, "seconds": seconds, "history": history, "best": best,
                           "wait_seconds": waited, "losses": losses, "done": done, "config": asdict(config)})

    def take_time() -> None:
        """Bring ``seconds`` and ``waited`` up to the last step (the reader counts its waits since it was
        last read)."""
        nonlocal seconds, waited
        seconds = resumed_seconds + loop_seconds
        waited += reader.wait_seconds
        reader.wait_seconds = 0.0

    def batch_loss(batch) -> torch.Tensor:
        x = batch.x.to(device, non_blocking=True)
        mask = batch.mask.to(device, non_blocking=True)
        index = torch.as_tensor(batch.indices)
        wanted = {key: value[index].to(device) for key, value in targets.items()}
        return readout_loss(readout, readout(x, mask), wanted)

    def on_step(at_step: int, seconds_so_far: float, loss: float) -> None:
        nonlocal loop_seconds
        loop_seconds = seconds_so_far
        losses.append(loss)
        if at_step < total and config.checkpoint_every and at_step % config.checkpoint_every == 0:
            take_time()
            save(at_step, False)

    def end_of_epoch(epoch: int, at_step: int, epoch_losses: list[float]) -> bool:
        """Record the epoch, validate, keep the best state; True when training should stop."""
        take_time()
        row = {"epoch": epoch, "step": at_step,
               "loss": float(np.mean(epoch_losses)) if epoch_losses else float("nan")}
        if validate is not None:
            readout.eval()
            row["score"] = float(validate(readout))
            readout.train()
            if row["score"] > best["score"]:
                best.update(score=row["score"], epoch=epoch,
                            state={k: v.detach().clone() for k, v in readout.state_dict().items()})
        history.append(row)
        stop = (config.patience is not None and best["epoch"] is not None
                and epoch - best["epoch"] >= config.patience)
        if not stop and at_step < total:
            save(at_step, False)
        return stop

    reader.wait_seconds = 0.0
    readout.train()
    # dropout draws from one seeded stream from the step the run starts at; the caller's is untouched
    log = train_steps(optimiser, batch_loss, lambda epoch, first: reader.epoch(epoch, start_batch=first), epoch_size,
                      total, start_step=step, on_step=on_step, on_epoch_end=end_of_epoch,
                      dropout=DropoutSeeds(lambda at: derive_seed(config.seed, "heads-dropout", readout.name, at),
                                           each_step=False), examples=lambda batch: len(batch.indices),
                      description=f"readout {readout.name}", progress=config.progress)
    step, loop_seconds = log.steps, log.seconds
    take_time()
    if best["state"] is not None:
        readout.load_state_dict(best["state"])
    readout.eval()
    save(step, True)
    return TrainStats(step, seconds, waited, float(np.mean(losses[-20:])) if losses else float("nan"),
                      resumed_from, False, losses, history, best["epoch"])


def check_store_model(store: Store, fingerprint: str, what: str = "the readout") -> None:
    """Refuse a store whose activations come from another model than ``fingerprint``."""
    found = store.index["model"]["fingerprint"]
    if found != fingerprint:
        raise StoreError(f"{store.path}: activations of model {store.index['model']['name']!r} (fingerprint {found}), "
                         f"but {what} was trained on fingerprint {fingerprint}; use the matching store")


def predict_readout(readout: ReadoutModel, store: Store, batch_size: int = 32, device: str = "cpu"):
    """Outputs for every example of ``store`` in store order.

    Span readouts: ``(starts, ends)``, lists of per-example logit arrays (one value per stored row);
    classification readouts: an array ``[examples, num_labels]``.
    """
    # built outside inference mode: its reusable buffers are written in place by the prefetch thread
    reader = StreamingReader(store, batch_size, shuffle=False, buffer_shards=1, queue_depth=2)
    readout.to(device).eval()
    starts: list = [None] * store.n_sentences
    ends: list = [None] * store.n_sentences
    logits = None
    for batch in reader.epoch(0):
        with torch.inference_mode():
            outputs = readout(batch.x.to(device), batch.mask.to(device))
        if readout.task == "span":
            start, end = (o.float().cpu().numpy() for o in outputs)
            for row, i in enumerate(batch.indices):
                n = int(store.row_counts[i])
                starts[i], ends[i] = start[row, :n].copy(), end[row, :n].copy()
        else:
            values = outputs.float().cpu().numpy()
            if logits is None:
                logits = np.zeros((store.n_sentences, values.shape[-1]), dtype=np.float32)
            logits[batch.indices] = values
    return (starts, ends) if readout.task == "span" else logits
