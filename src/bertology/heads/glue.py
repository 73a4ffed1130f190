"""GLUE sentence tasks with heads on frozen all-layer sentence vectors, beside fine-tuning.

Each example (a sentence, or a pair as ``[CLS] a [SEP] b [SEP]``, tokenised as ``bertology finetune``
does, at most ``max_length`` tokens) becomes one vector per layer: the [CLS] position (``pool="cls"``) or
the mean over its tokens (``"mean"``), written once as float16 to a store (:mod:`bertology.heads.activations`).
Heads (:mod:`bertology.heads.catalog`, classification task: dropout + linear on the pooled vector; one
output and mean squared error for STS-B) are trained on the streamed train vectors and scored on dev with
``bertology.finetune``'s GLUE metrics. The train subset for ``max_train`` is drawn exactly as
``bertology finetune --max-train`` draws it (same data seed, same examples), so the rows of a fine-tuning
run with the same settings (``finetune_dir``, or ``run_finetune=True``) sit in the same table.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bertology.data.glue import glue_task, read_glue
from bertology.errors import DataError, UsageError
from bertology.extraction.alignment import check_pool
from bertology.files import ensure_dir
from bertology.finetune.batching import encode_examples
from bertology.finetune.metrics import glue_metric
from bertology.heads.activations import read_labels, write_activations
from bertology.heads.catalog import build_head, check_head_name
from bertology.heads.train import HeadTrainConfig, predict_head, train_head
from bertology.models.encoders import Encoder, load_encoder
from bertology.results import Result
from bertology.runtime import derive_seed
from bertology.store.store import Store

DEFAULT_GLUE_HEADS = ("lp", "ap", "last", "adapter-shared-64", "adapter-shared-386-skip", "cnn")
GLUE_COLUMNS = ["model", "task", "component", "pool", "seed", "trainable_params", "param_share", "metric", "value",
                "train_seconds", "io_share", "n_train", "n_dev"]


@dataclass
class GlueHeadsConfig:
    heads: tuple[str, ...] = DEFAULT_GLUE_HEADS
    seeds: tuple[int, ...] = (0,)
    pool: str = "cls"
    max_train: int | None = None
    max_dev: int | None = None
    max_length: int = 128
    data_seed: int = 0
    data_dir: str | None = None
    head: HeadTrainConfig = field(default_factory=lambda: HeadTrainConfig(epochs=3, batch_size=32))
    device: str = "cpu"
    progress: bool = True

    def __post_init__(self):
        self.heads = tuple(check_head_name(h) for h in self.heads)
        if self.pool not in ("cls", "mean"):
            raise DataError(f"pool {self.pool!r}: expected cls or mean")
        if not self.seeds:
            raise DataError("no seeds; expected at least one")


def _examples(task: str, config: GlueHeadsConfig):
    train = read_glue(task, "train", config.data_dir)
    dev = read_glue(task, "dev", config.data_dir)
    if config.max_train is not None and config.max_train < len(train):
        # the same draw as bertology.finetune's FinetuneConfig.max_train with data_seed
        keep = np.sort(np.random.default_rng(config.data_seed).choice(len(train), config.max_train, replace=False))
        train = [train[i] for i in keep]
    if config.max_dev is not None and config.max_dev < len(dev):
        dev = dev[: config.max_dev]
    return train, dev


def sentence_store(encoder: Encoder, examples, task: str, out: Path, config: GlueHeadsConfig):
    encoded = encode_examples(encoder.tokenizer, examples, config.max_length)
    spec = glue_task(task)
    labels = [float(v) for v in encoded.labels] if spec.is_regression else [int(v) for v in encoded.labels]
    records = [{"id": e.id, "words": e.text_a.split() + (e.text_b.split() if e.text_b else [])} for e in examples]
    return write_activations(encoder, encoded.input_ids, encoded.token_type_ids, records, {"label": labels}, out,
                             pool=config.pool, kind=f"glue-{spec.name}", settings={"max_length": config.max_length},
                             device=config.device, progress=config.progress)


def finetune_rows(finetune_dir: str | Path, encoder: Encoder, task: str) -> list[dict]:
    """Rows for every `bertology finetune` checkpoint of ``encoder`` on ``task`` under ``finetune_dir``."""
    from bertology.finetune.train import collect_results

    results = collect_results(finetune_dir)
    if results.empty:
        raise UsageError(f"--finetune-dir {finetune_dir}: no finished fine-tuning checkpoints (finetune.json with "
                         "metrics) in it; expected the --out folder of `bertology finetune`")
    runs = results.drop_duplicates("checkpoint")
    of_task = runs[runs["task"] == task]
    if of_task.empty:
        held = ", ".join(f"{name} ({count} run{'s' if count > 1 else ''})"
                         for name, count in runs["task"].value_counts(sort=False).sort_index().items())
        raise UsageError(f"--finetune-dir {finetune_dir}: no {task} fine-tuning runs; it holds {held}")
    if not (of_task["base_fingerprint"] == encoder.fingerprint).any():
        others = ", ".join(sorted({f"{m} ({f})" for m, f in zip(of_task["model"], of_task["base_fingerprint"])}))
        raise UsageError(f"--finetune-dir {finetune_dir}: its {task} runs were fine-tuned from {others}, not from "
                         f"{encoder.name} ({encoder.fingerprint}); their rows would not belong in this table")
    chosen = results[(results["task"] == task) & (results["base_fingerprint"] == encoder.fingerprint)]
    rows = []
    for record in chosen.to_dict("records"):
        rows.append({"model": encoder.name, "task": task, "component": f"fine-tuned ({record['variant'] or 'baseline'})",
                     "pool": None, "seed": record["seed"], "trainable_params": encoder.num_parameters,
                     "param_share": 1.0, "metric": record["metric"], "value": record["value"], "train_seconds": None,
                     "io_share": None, "n_train": record["n_train"], "n_dev": record["n_dev"]})
    return rows


def head_rows(name: str, seed: int, train_store: Store | str, dev_store: Store | str, *, task: str,
              config: GlueHeadsConfig, model_name: str, model_parameters: int, out: str) -> list[dict]:
    """Train head ``name`` with ``seed`` on the train store's vectors, score it on dev: its table rows.
    The stores may be given as folders (a worker on another process opens them itself)."""
    spec = glue_task(task)
    train_store = train_store if isinstance(train_store, Store) else Store.open(train_store)
    dev_store = dev_store if isinstance(dev_store, Store) else Store.open(dev_store)
    dev_labels = np.asarray(read_labels(dev_store)["labels"]["label"])
    head = build_head(name, len(train_store.layers), train_store.dim, "classify", num_labels=spec.num_labels,
                      seed=derive_seed(seed, "glue-head-init", spec.name, name))
    head_config = HeadTrainConfig(**{**asdict(config.head), "seed": seed, "device": config.device,
                                     "progress": config.progress})
    folder = ensure_dir(Path(out) / "heads" / f"{name}" / f"seed-{seed}")
    stats = train_head(head, train_store, head_config, checkpoint=folder / "checkpoint.pt")
    logits = predict_head(head, dev_store)
    predictions = logits[:, 0] if spec.is_regression else logits.argmax(-1)
    return [{"model": model_name, "task": spec.name, "component": name, "pool": config.pool, "seed": seed,
             "trainable_params": head.num_parameters, "param_share": head.parameter_share(model_parameters),
             "metric": metric, "value": float(value), "train_seconds": stats.seconds, "io_share": stats.io_share,
             "n_train": train_store.n_sentences, "n_dev": dev_store.n_sentences}
            for metric, value in glue_metric(spec.name, predictions, dev_labels).items()]


def run_glue_heads(model: str | Encoder, task: str, out: str | Path, config: GlueHeadsConfig | None = None, *,
                   finetune_dir: str | Path | None = None, runner=None) -> Result:
    """Frozen heads on ``task`` (one row per head x seed x metric), plus fine-tuning rows from
    ``finetune_dir``; saved to ``out`` and returned. ``runner(jobs, train_folder, dev_folder, context)``, if
    given, runs the (head, seed) ``jobs`` elsewhere and returns each one's :func:`head_rows` (in order)."""
    config = config or GlueHeadsConfig()
    spec = glue_task(task)
    # Every input is read and checked before the output folder is created: the data files, the model, the
    # pooling it allows and the fine-tuning folder (whose rows are collected now, added at the end).
    train, dev = _examples(spec.name, config)
    encoder = model if isinstance(model, Encoder) else load_encoder(model)
    check_pool(encoder.tokenizer, config.pool, encoder.name)
    finetuned = finetune_rows(finetune_dir, encoder, spec.name) if finetune_dir is not None else []
    out = ensure_dir(out)
    started = time.perf_counter()
    train_store = sentence_store(encoder, train, spec.name, out / "activations" / "train", config)
    dev_store = sentence_store(encoder, dev, spec.name, out / "activations" / "dev", config)
    jobs = [(name, seed) for name in config.heads for seed in config.seeds]
    context = {"task": spec.name, "config": config, "model_name": encoder.name,
               "model_parameters": encoder.num_parameters, "out": str(out)}
    if runner is None:
        rows = [row for name, seed in jobs for row in head_rows(name, seed, train_store, dev_store, **context)]
    else:  # e.g. bertology.scale: one Ray task per head x seed, each opening the stores by path
        rows = [row for part in runner(jobs, str(train_store.path), str(dev_store.path), context) for row in part]
    rows += finetuned
    scores = pd.DataFrame(rows).reindex(columns=GLUE_COLUMNS)
    meta = {"model": encoder.describe(), "task": spec.name, "config": asdict(config),
            "finetune_dir": str(finetune_dir) if finetune_dir else None, "seconds": time.perf_counter() - started}
    result = Result("heads-glue", tables={"scores": scores}, meta=meta)
    result.save(out)
    return result
