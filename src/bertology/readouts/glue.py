"""GLUE sentence tasks with readouts on frozen all-layer sentence vectors, beside fine-tuning.

Each example (a sentence, or a pair as ``[CLS] a [SEP] b [SEP]``, tokenised as ``bertology finetune``
does, at most ``max_length`` tokens) becomes one vector per layer: the [CLS] position (``pool="cls"``) or
the mean over its tokens (``"mean"``), written once as float16 to a store (:mod:`bertology.readouts.activations`).
Readouts (:mod:`bertology.readouts.catalog`, classification task: dropout + linear on the pooled vector; one
output and mean squared error for STS-B) are trained on the streamed train vectors and scored on dev with
``bertology.finetune``'s GLUE metrics, with early stopping on a seeded slice of the training examples (not
called dev: GLUE's dev split is the one scored, as in ``bertology finetune``). The train subset for
``max_train`` is drawn exactly as ``bertology finetune --max-train`` draws it (same data seed, same examples),
so the rows of a fine-tuning run with the same settings (``finetune_dir``, or ``run_finetune=True``) sit in the same table.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.linear_model import LogisticRegressionCV, RidgeCV

from bertology.data.glue import glue_task, read_glue
from bertology.errors import DataError, SettingError
from bertology.extraction.alignment import check_pool
from bertology.files import atomic_path, ensure_dir, write_json
from bertology.finetune.batching import encode_examples
from bertology.finetune.metrics import glue_metric
from bertology.finetune.train import collect_results
from bertology.readouts.activations import read_labels, write_activations
from bertology.readouts.catalog import build_readout, check_readout_name
from bertology.readouts.spec import GLUE_POOLS, GLUE_READOUTS, GLUE_RENAMED, GlueReadoutsSpec
from bertology.readouts.train import ReadoutTrainConfig, feature_stats, predict_readout, train_readout
from bertology.models.encoders import Encoder, as_encoder
from bertology.results import Result
from bertology.runtime import derive_seed
from bertology.settings import renamed_keywords
from bertology.store.store import Store
from bertology.training import Optimisation

GLUE_COLUMNS = ["model", "task", "component", "pool", "seed", "trainable_params", "param_share", "metric", "value",
                "epochs_run", "best_epoch", "train_seconds", "io_share", "n_train", "n_early_stopping", "n_dev"]
#: The scikit-learn references: a converged logistic regression (C by cross-validation on the training rows)
#: on the features a linear readout sees - the last layer (``last``), the mean of the standardised layers
#: (``ap``) and all layers side by side (a superset of ``lp``'s weighted sum).
REFERENCES = {"last": "sklearn logreg (last layer)", "ap": "sklearn logreg (mean of layers)",
              "lp": "sklearn logreg (all layers)"}


@renamed_keywords(GLUE_RENAMED)
@dataclass
class GlueReadoutsConfig:
    """The library's settings of frozen readouts on a GLUE task (the command line's are :class:`GlueReadoutsSpec`,
    made into one with :meth:`from_spec`). The old keyword ``heldout_share`` still works with a
    :class:`DeprecationWarning`."""

    readouts: tuple[str, ...] = GLUE_READOUTS
    seeds: tuple[int, ...] = (0,)
    pool: str = "cls"
    max_train: int | None = None
    max_dev: int | None = None
    max_length: int = 128
    data_seed: int = 0
    data_dir: str | None = None
    # Held out of the training examples (seeded) for early stopping; 0: train on all, fixed epochs.
    early_stopping_share: float = 0.1
    references: bool = True  # the scikit-learn logistic regressions beside the readouts
    readout: ReadoutTrainConfig = field(default_factory=lambda: ReadoutTrainConfig(epochs=50, batch_size=32,
                                                                                   patience=5, standardise=True))
    device: str = "cpu"
    progress: bool = True

    def __post_init__(self):
        self.readouts = tuple(check_readout_name(h) for h in self.readouts)
        if self.pool not in GLUE_POOLS:
            raise SettingError("pool", self.pool, f"expected {' or '.join(GLUE_POOLS)}")
        if not self.seeds:
            raise SettingError("seeds", self.seeds, "expected at least one seed", shown="(none)")
        if not 0 <= self.early_stopping_share < 1:
            raise SettingError("early_stopping_share", self.early_stopping_share, "expected a fraction in [0, 1)",
                               shown=str(self.early_stopping_share))

    @classmethod
    def from_spec(cls, spec: GlueReadoutsSpec, data_dir: str | None = None, device: str = "cpu",
                  progress: bool = True) -> "GlueReadoutsConfig":
        """The experiment ``spec`` describes, on the GLUE files under ``data_dir``, run on ``device``."""
        readout = ReadoutTrainConfig(epochs=spec.epochs, patience=spec.patience or None, standardise=spec.standardise,
                                     optimisation=Optimisation(lr=spec.lr, batch_size=spec.batch_size))
        return cls(readouts=spec.readouts, seeds=spec.seeds, pool=spec.pool, max_train=spec.max_train,
                   max_dev=spec.max_dev, data_dir=data_dir, early_stopping_share=spec.early_stopping_share,
                   references=spec.references, readout=readout, device=device, progress=progress)


def split_early_stopping(train: list, share: float, seed: int = 0) -> tuple[list, list]:
    """(train, early stopping): a seeded ``share`` of the training examples held out for early stopping."""
    if not share:
        return train, []
    n = max(1, round(share * len(train)))
    if n >= len(train):
        raise DataError(f"{len(train)} training examples: too few to hold {share:g} of them out")
    # "glue-heldout": the seed name of the first runs, so the same examples are held out
    chosen = set(np.random.default_rng(derive_seed(seed, "glue-heldout")).choice(len(train), n, replace=False).tolist())
    return [e for i, e in enumerate(train) if i not in chosen], [e for i, e in enumerate(train) if i in chosen]


def _examples(task: str, config: GlueReadoutsConfig):
    train = read_glue(task, "train", config.data_dir)
    dev = read_glue(task, "dev", config.data_dir)
    if config.max_train is not None and config.max_train < len(train):
        # the same draw as bertology.finetune's FinetuneConfig.max_train with data_seed
        keep = np.sort(np.random.default_rng(config.data_seed).choice(len(train), config.max_train, replace=False))
        train = [train[i] for i in keep]
    if config.max_dev is not None and config.max_dev < len(dev):
        dev = dev[: config.max_dev]
    return train, dev


def sentence_store(encoder: Encoder, examples, task: str, out: Path, config: GlueReadoutsConfig):
    encoded = encode_examples(encoder.tokenizer, examples, config.max_length)
    spec = glue_task(task)
    labels = [float(v) for v in encoded.labels] if spec.is_regression else [int(v) for v in encoded.labels]
    records = [{"id": e.id, "words": e.text_a.split() + (e.text_b.split() if e.text_b else [])} for e in examples]
    return write_activations(encoder, encoded.input_ids, encoded.token_type_ids, records, {"label": labels}, out,
                             pool=config.pool, kind=f"glue-{spec.name}", settings={"max_length": config.max_length},
                             device=config.device, progress=config.progress)


def finetune_rows(finetune_dir: str | Path, encoder: Encoder, task: str) -> list[dict]:
    """Rows for every `bertology finetune` checkpoint of ``encoder`` on ``task`` under ``finetune_dir``."""
    results = collect_results(finetune_dir)
    if results.empty:
        raise SettingError("finetune_dir", finetune_dir, "no finished fine-tuning checkpoints (finetune.json with "
                           "metrics) in it; expected the output folder of `bertology finetune`", shown=str(finetune_dir))
    runs = results.drop_duplicates("checkpoint")
    of_task = runs[runs["task"] == task]
    if of_task.empty:
        held = ", ".join(f"{name} ({count} run{'s' if count > 1 else ''})"
                         for name, count in runs["task"].value_counts(sort=False).sort_index().items())
        raise SettingError("finetune_dir", finetune_dir, f"no {task} fine-tuning runs; it holds {held}",
                           shown=str(finetune_dir))
    if not (of_task["base_fingerprint"] == encoder.fingerprint).any():
        others = ", ".join(sorted({f"{m} ({f})" for m, f in zip(of_task["model"], of_task["base_fingerprint"])}))
        raise SettingError("finetune_dir", finetune_dir, f"its {task} runs were fine-tuned from {others}, not from "
                           f"{encoder.name} ({encoder.fingerprint}); their rows would not belong in this table",
                           shown=str(finetune_dir))
    chosen = results[(results["task"] == task) & (results["base_fingerprint"] == encoder.fingerprint)]
    rows = []
    for record in chosen.to_dict("records"):
        rows.append({"model": encoder.name, "task": task, "component": f"fine-tuned ({record['variant'] or 'baseline'})",
                     "pool": None, "seed": record["seed"], "trainable_params": encoder.num_parameters,
                     "param_share": 1.0, "metric": record["metric"], "value": record["value"], "train_seconds": None,
                     "io_share": None, "n_train": record["n_train"], "n_dev": record["n_dev"]})
    return rows


def early_stopping_validator(store: Store, regression: bool):
    """``validate(readout)``: minus the mean loss on the early-stopping examples (cross-entropy, or squared error for regression) -
    smoother than accuracy on a few hundred examples, so early stopping follows convergence."""
    labels = np.asarray(read_labels(store)["labels"]["label"])

    def validate(readout) -> float:
        logits = torch.as_tensor(predict_readout(readout, store))
        if regression:
            return -float(torch.mean((logits[:, 0] - torch.as_tensor(labels, dtype=torch.float32)) ** 2))
        return -float(torch.nn.functional.cross_entropy(logits, torch.as_tensor(labels, dtype=torch.long)))

    return validate


def readout_rows(name: str, seed: int, train_store: Store | str, dev_store: Store | str, *, task: str,
                 config: GlueReadoutsConfig, model_name: str, model_parameters: int, out: str,
                 early_stopping_store: Store | str | None = None) -> list[dict]:
    """Train readout ``name`` with ``seed`` on the train store's vectors (early stopping on ``early_stopping_store``
    when the recipe has a patience), score it on dev: its table rows. The stores may be given as folders
    (a worker on another process opens them itself)."""
    spec = glue_task(task)
    train_store = train_store if isinstance(train_store, Store) else Store.open(train_store)
    dev_store = dev_store if isinstance(dev_store, Store) else Store.open(dev_store)
    if early_stopping_store is not None and not isinstance(early_stopping_store, Store):
        early_stopping_store = Store.open(early_stopping_store)
    dev_labels = np.asarray(read_labels(dev_store)["labels"]["label"])
    readout = build_readout(name, len(train_store.layers), train_store.dim, "classify", num_labels=spec.num_labels,
                            seed=derive_seed(seed, "glue-head-init", spec.name, name))
    readout_config = replace(config.readout, seed=seed, device=config.device, progress=config.progress)
    if early_stopping_store is None:
        readout_config.patience = None
    folder = ensure_dir(Path(out) / "readouts" / f"{name}" / f"seed-{seed}")
    validate = (early_stopping_validator(early_stopping_store, spec.is_regression)
                if early_stopping_store is not None else None)
    stats = train_readout(readout, train_store, readout_config, checkpoint=folder / "checkpoint.pt", validate=validate)
    logits = predict_readout(readout, dev_store)
    predictions = logits[:, 0] if spec.is_regression else logits.argmax(-1)
    save_predictions(folder, predictions)  # per example: what a bootstrap over dev resamples
    return [{"model": model_name, "task": spec.name, "component": name, "pool": config.pool, "seed": seed,
             "trainable_params": readout.num_parameters, "param_share": readout.parameter_share(model_parameters),
             "metric": metric, "value": float(value), "epochs_run": stats.epochs_run, "best_epoch": stats.best_epoch,
             "train_seconds": stats.seconds, "io_share": stats.io_share, "n_train": train_store.n_sentences,
             "n_early_stopping": early_stopping_store.n_sentences if early_stopping_store is not None else 0,
             "n_dev": dev_store.n_sentences}
            for metric, value in glue_metric(spec.name, predictions, dev_labels).items()]


def save_predictions(folder: Path, predictions: np.ndarray) -> Path:
    """``folder/dev_predictions.npy``, whole or not at all (a kill or a full disk leaves no half array)."""
    path = folder / "dev_predictions.npy"
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        np.save(handle, predictions)
    return path


def layer_features(store: Store, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """``[examples, layers, hidden]`` standardised with the training statistics (as the readouts see them)."""
    stacked = np.stack([store.layer(layer).astype(np.float32) for layer in store.layers], axis=1)
    return (stacked - mean[None]) / std[None]


def _fit_reference(regression: bool, train_x: np.ndarray, train_y: np.ndarray, dev_x: np.ndarray):
    """(fitted model, dev predictions, chosen regularisation) of one scikit-learn reference."""
    if regression:
        fitted = RidgeCV(alphas=np.logspace(-2, 4, 13)).fit(train_x, train_y)
        return fitted, fitted.predict(dev_x), float(fitted.alpha_)
    fitted = LogisticRegressionCV(Cs=np.logspace(-4, 2, 13), cv=5, max_iter=5000, scoring="accuracy").fit(train_x,
                                                                                                      train_y)
    return fitted, fitted.predict(dev_x), float(np.ravel(fitted.C_)[0])


def reference_rows(train_store: Store, dev_store: Store, *, task: str, config: GlueReadoutsConfig, model_name: str,
                   out: str | Path) -> list[dict]:
    """The scikit-learn references (:data:`REFERENCES`) on the readouts' training rows, scored on dev.

    Classification: ``LogisticRegressionCV`` (C from 13 values, 1e-4..1e2, by 5-fold cross-validation on
    the training rows only; lbfgs to convergence); regression (STS-B): ``RidgeCV`` likewise."""
    spec = glue_task(task)
    mean, std = feature_stats(train_store)
    train_x, dev_x = layer_features(train_store, mean, std), layer_features(dev_store, mean, std)
    train_y = np.asarray(read_labels(train_store)["labels"]["label"])
    dev_y = np.asarray(read_labels(dev_store)["labels"]["label"])
    views = {"last": lambda x: x[:, -1], "ap": lambda x: x.mean(1), "lp": lambda x: x.reshape(len(x), -1)}
    rows = []
    key = {"train": train_store.index["input"]["hash"], "dev": dev_store.index["input"]["hash"],
           "fingerprint": train_store.index["model"]["fingerprint"]}
    for view_name, view in views.items():
        folder = Path(out) / "references" / view_name
        saved = folder / "reference.json"
        if saved.is_file():  # a finished fit on the same stores is reused (a rerun adds fine-tuning rows)
            record = json.loads(saved.read_text(encoding="utf-8"))
            if record.get("key") == key:
                rows += record["rows"]
                continue
        started = time.perf_counter()
        with warnings.catch_warnings():  # scikit-learn 1.8's notices of future defaults, not problems of the fit
            warnings.simplefilter("ignore", FutureWarning)
            fitted, predictions, chosen = _fit_reference(spec.is_regression, view(train_x), train_y, view(dev_x))
        folder = ensure_dir(folder)
        save_predictions(folder, predictions)
        seconds = time.perf_counter() - started
        fitted_rows = [{"model": model_name, "task": spec.name, "component": REFERENCES[view_name], "pool": config.pool,
                  "seed": None, "trainable_params": int(np.size(fitted.coef_) + np.size(fitted.intercept_)),
                  "param_share": None, "metric": metric, "value": float(value), "epochs_run": None,
                  "best_epoch": None, "train_seconds": seconds, "io_share": None, "n_train": len(train_y),
                  "n_early_stopping": 0, "n_dev": len(dev_y), "regularisation": chosen}
                       for metric, value in glue_metric(spec.name, predictions, dev_y).items()]
        write_json(saved, {"key": key, "rows": fitted_rows})
        rows += fitted_rows
    return rows


def run_glue_readouts(model: str | Encoder, task: str, out: str | Path, config: GlueReadoutsConfig | None = None, *,
                      finetune_dir: str | Path | None = None, runner=None) -> Result:
    """Frozen readouts on ``task`` (one row per readout x seed x metric), plus fine-tuning rows from
    ``finetune_dir``; saved to ``out`` and returned. ``runner(jobs, train_folder, dev_folder, context)``, if
    given, runs the (readout, seed) ``jobs`` elsewhere and returns each one's :func:`readout_rows` (in order)."""
    config = config or GlueReadoutsConfig()
    spec = glue_task(task)
    # Every input is read and checked before the output folder is created: the data files, the model, the
    # pooling it allows and the fine-tuning folder (whose rows are collected now, added at the end).
    train, dev = _examples(spec.name, config)
    train, early_stopping = split_early_stopping(train, config.early_stopping_share, config.data_seed)
    encoder = as_encoder(model)
    check_pool(encoder.tokenizer, config.pool, encoder.name)
    finetuned = finetune_rows(finetune_dir, encoder, spec.name) if finetune_dir is not None else []
    out = ensure_dir(out)
    started = time.perf_counter()
    train_store = sentence_store(encoder, train, spec.name, out / "activations" / "train", config)
    dev_store = sentence_store(encoder, dev, spec.name, out / "activations" / "dev", config)
    early_stopping_store = (sentence_store(encoder, early_stopping, spec.name, out / "activations" / "early-stopping",
                                           config) if early_stopping else None)
    jobs = [(name, seed) for name in config.readouts for seed in config.seeds]
    context = {"task": spec.name, "config": config, "model_name": encoder.name,
               "model_parameters": encoder.num_parameters, "out": str(out),
               "early_stopping_store": str(early_stopping_store.path) if early_stopping_store is not None else None}
    if runner is None:
        rows = [row for name, seed in jobs for row in readout_rows(name, seed, train_store, dev_store, **context)]
    else:  # e.g. bertology.scale: one Ray task per readout x seed, each opening the stores by path
        rows = [row for part in runner(jobs, str(train_store.path), str(dev_store.path), context) for row in part]
    if config.references:
        rows += reference_rows(train_store, dev_store, task=spec.name, config=config, model_name=encoder.name,
                               out=out)
    rows += finetuned
    scores = pd.DataFrame(rows).reindex(columns=GLUE_COLUMNS + ["regularisation"])
    meta = {"model": encoder.describe(), "task": spec.name, "config": asdict(config),
            "finetune_dir": str(finetune_dir) if finetune_dir else None, "seconds": time.perf_counter() - started}
    result = Result("readouts-glue", tables={"scores": scores}, meta=meta)
    result.save(out)
    return result
