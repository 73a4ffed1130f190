"""The seed's experiment end to end: fine-tune part of an epoch and a full one, then train heads on the
frozen all-layer activations of each checkpoint, and score everything with the official SQuAD 2.0 rules.

Steps (each resumes: finished parts are reused, interrupted ones continue):

1. Questions: a SQuAD v2.0 file split by article (:func:`~bertology.data.squad.split_by_article`), or
   separate train and evaluation files; optionally a seeded subset of each (``max_*_questions``).
2. Windows (:func:`~bertology.heads.qa.encode_windows`, 384 tokens, stride 128 by default).
3. Fine-tuning (:func:`bertology.heads.finetune_qa.finetune_qa`) with checkpoints at ``checkpoints`` (fractions of
   the epoch; 0.3 and 1.0 as the seed), each scored on the evaluation questions.
4. For each checkpoint, every layer's activations of every window token, train and evaluation, written
   once as float16 stores (:mod:`bertology.heads.activations`).
5. Every head (:mod:`bertology.heads.catalog`) trained for ``head.epochs`` epoch(s) per seed on the
   streamed train activations, then scored on the evaluation activations of every checkpoint (the seed's
   4.4: heads trained on 0.3-epoch activations, evaluated on 1-epoch ones).
6. The answerable-or-not framing for ``classify_heads``: window label "holds the answer", question
   answerable when a window says so.

Scores on the shared dev subset are **not comparable to official SQuAD 2.0 numbers** (half of dev, split
by article into train and evaluation; a 22M-parameter MiniLM, not BERT-large).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bertology.data.squad import SquadQuestion, read_squad, split_by_article
from bertology.errors import DataError, UsageError
from bertology.files import ensure_dir, save_figure
from bertology.heads.finetune_qa import QAFinetuneConfig, evaluate_qa, finetune_qa, load_qa_model
from bertology.heads.activations import write_activations
from bertology.heads.catalog import HeadModel, build_head, check_head_name
from bertology.heads.qa import MAX_ANSWER_LENGTH, MAX_LENGTH, STRIDE, QAWindows, encode_windows, question_answerable, \
    score_spans
from bertology.heads.train import HeadTrainConfig, check_store_model, predict_head, train_head
from bertology.models.encoders import Encoder, load_encoder
from bertology.results import Result
from bertology.runtime import derive_seed
from bertology.store.store import Store

#: The span scores in the ``scores`` table (fractions; see :func:`~bertology.heads.qa.score_spans`).
SPAN_METRICS = ("exact", "f1", "has_ans_f1", "no_ans_accuracy", "has_ans_f1_forced")

#: The heads `bertology heads squad` trains by default: the seed's Table 1 rows, the CNN, the last layer.
DEFAULT_HEADS = ("lp", "ap", "adapter-shared-386-skip", "adapter-independent-386", "adapter-shared-64",
                 "adapter-independent-64", "stack", "cnn", "last")

SCORE_COLUMNS = ["model", "checkpoint", "eval_checkpoint", "component", "task", "seed", "trainable_params",
                 "param_share", *SPAN_METRICS, "answerable_accuracy", "train_seconds", "io_share",
                 "n_train_questions", "n_eval_questions"]


@dataclass
class SquadHeadsConfig:
    heads: tuple[str, ...] = DEFAULT_HEADS
    classify_heads: tuple[str, ...] = ("lp",)
    seeds: tuple[int, ...] = (0,)
    max_length: int = MAX_LENGTH
    stride: int = STRIDE
    max_answer_length: int = MAX_ANSWER_LENGTH
    max_train_questions: int | None = None
    max_eval_questions: int | None = None
    finetune: QAFinetuneConfig = field(default_factory=QAFinetuneConfig)
    head: HeadTrainConfig = field(default_factory=HeadTrainConfig)
    batch_tokens: int = 8192
    device: str = "cpu"
    progress: bool = True

    def __post_init__(self):
        self.heads = tuple(check_head_name(h) for h in self.heads)
        self.classify_heads = tuple(check_head_name(h) for h in self.classify_heads)
        if not self.seeds:
            raise DataError("no seeds; expected at least one")


def _subset(questions: list[SquadQuestion], limit: int | None, purpose: str) -> list[SquadQuestion]:
    if limit is None or limit >= len(questions):
        return questions
    keep = np.sort(np.random.default_rng(derive_seed(0, "squad-subset", purpose)).choice(len(questions), limit,
                                                                                       replace=False))
    return [questions[i] for i in keep]


def check_file_pair(train_path: str | Path | None, eval_path: str | Path | None) -> None:
    """A train file needs an evaluation file and the reverse (:class:`UsageError` naming the options)."""
    if (train_path is None) != (eval_path is None):
        given, missing = ("--train-file", "--eval-file") if eval_path is None else ("--eval-file", "--train-file")
        raise UsageError(f"{given} without {missing}: give both a train and an evaluation SQuAD file, or neither "
                         "(then --data is split by article)")


def load_questions(data: str | Path | None = None, train_path: str | Path | None = None,
                   eval_path: str | Path | None = None) -> tuple[list[SquadQuestion], list[SquadQuestion]]:
    """(train, eval) questions: two files as given, or one file (default: the shared subset) split by article."""
    check_file_pair(train_path, eval_path)
    if train_path is not None:
        train, evaluation = read_squad(train_path), read_squad(eval_path)
        shared = {q.title for q in train} & {q.title for q in evaluation}
        if shared:
            raise DataError(f"articles in both train and evaluation files: {', '.join(sorted(shared)[:3])}")
        return train, evaluation
    return split_by_article(read_squad(data))


def window_store(encoder: Encoder, windows: QAWindows, out: Path, config: SquadHeadsConfig) -> Store:
    """Every layer of every window token (float16) plus span and answerable labels, in a store at ``out``."""
    tokens = [encoder.tokenizer.convert_ids_to_tokens(ids) for ids in windows.input_ids]
    records = [{"id": wid, "question": windows.questions[int(q)].id, "words": toks}
               for wid, q, toks in zip(windows.window_ids(), windows.question_index, tokens)]
    labels = {"start": windows.start_positions.tolist(), "end": windows.end_positions.tolist(),
              "label": windows.answerable.tolist(), "question": windows.question_index.tolist()}
    return write_activations(encoder, windows.input_ids, windows.token_type_ids, records, labels, out, pool="tokens",
                             kind="squad-windows", settings={"max_length": windows.max_length, "stride": windows.stride},
                             batch_tokens=config.batch_tokens, device=config.device, progress=config.progress)


def score_head(head: HeadModel, store: Store, windows: QAWindows, max_answer_length: int) -> dict:
    """Official scores of a span head, or answerable accuracy of a classification head, on ``store``."""
    if store.n_sentences != len(windows):
        raise DataError(f"{store.path}: {store.n_sentences} windows stored, {len(windows)} expected")
    if head.task == "span":
        starts, ends = predict_head(head, store)
        metrics = score_spans(windows, starts, ends, max_answer_length)
        return {key: metrics[key] for key in SPAN_METRICS}
    logits = torch.as_tensor(predict_head(head, store))
    probability = torch.softmax(logits, dim=-1)[:, 1].numpy()
    predicted = question_answerable(windows, probability)
    truth = {q.id: bool(q.answers) for q in windows.questions}
    return {"answerable_accuracy": float(np.mean([predicted[qid] == truth[qid] for qid in truth]))}


def lp_weights_figure(weights: pd.DataFrame):
    """Learned layer weights of the LP heads: one line per checkpoint (and seed), layers on the x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 3.5))
    chosen = weights[(weights["component"] == "lp") & (weights["task"] == "span")]
    for (checkpoint, seed), part in chosen.groupby(["checkpoint", "seed"]):
        part = part.sort_values("layer")
        axis.plot(part["layer"], 100 * part["weight"], marker="o", label=f"{checkpoint:g} epoch, seed {seed}")
    if len(chosen):
        n = int(chosen["layer"].max()) + 1
        axis.axhline(100 / n, color="grey", linestyle=":", label="uniform")
        axis.set_xticks(range(n))
    axis.set_xlabel("layer (0 = embeddings)")
    axis.set_ylabel("softmax weight (%)")
    axis.set_title("LP (scalar mix) layer weights")
    axis.legend(fontsize=7)
    figure.tight_layout()
    return figure


def run_squad_heads(model: str | Encoder, out: str | Path, config: SquadHeadsConfig | None = None, *,
                    data: str | Path | None = None, train_path: str | Path | None = None,
                    eval_path: str | Path | None = None) -> Result:
    """The whole experiment into ``out`` (see the module docstring); returns and saves the Result.

    Tables: ``scores`` (one row per checkpoint x evaluated checkpoint x head x task x seed, the head's name
    in ``component``, plus the fine-tuned encoders themselves as component ``fine-tuned``), ``curve`` (the encoder's scores at each
    evaluated fraction of the epoch), ``layer_weights`` (learned softmax weights of LP/adapters/stack) and
    ``windows`` (window counts).
    """
    config = config or SquadHeadsConfig()
    check_file_pair(train_path, eval_path)  # before the model loads
    encoder = model if isinstance(model, Encoder) else load_encoder(model)
    if config.max_length > encoder.max_length:
        raise UsageError(f"--max-length {config.max_length}: {encoder.name} takes at most {encoder.max_length} tokens")
    started = time.perf_counter()
    train_questions, eval_questions = load_questions(data, train_path, eval_path)
    train_questions = _subset(train_questions, config.max_train_questions, "train")
    eval_questions = _subset(eval_questions, config.max_eval_questions, "eval")
    train_windows = encode_windows(encoder.tokenizer, train_questions, config.max_length, config.stride)
    eval_windows = encode_windows(encoder.tokenizer, eval_questions, config.max_length, config.stride)
    n_train, n_eval = len(train_questions), len(eval_questions)
    out = ensure_dir(out)  # only now: every input above is read and checked, so bad input leaves no folder

    tuned = finetune_qa(encoder, train_windows, eval_windows, out / "finetune", config.finetune)
    base = {"model": encoder.name, "n_train_questions": n_train, "n_eval_questions": n_eval}
    rows = []
    for checkpoint in tuned.checkpoints:
        if any(key not in checkpoint.metrics for key in SPAN_METRICS):  # saved before a metric was added
            checkpoint.metrics = evaluate_qa(load_qa_model(checkpoint.path), eval_windows, encoder.tokenizer.pad_token_id,
                                             config.finetune.eval_batch_tokens, config.max_answer_length)
        rows.append({**base, "checkpoint": checkpoint.fraction, "eval_checkpoint": checkpoint.fraction,
                     "component": "fine-tuned", "task": "span", "seed": config.finetune.seed,
                     "trainable_params": encoder.num_parameters + 2 * encoder.hidden_size + 2,
                     "param_share": 1.0, **{k: checkpoint.metrics.get(k) for k in SPAN_METRICS},
                     "train_seconds": checkpoint.train_seconds, "io_share": None})

    stores: dict[float, tuple[Store, Store]] = {}
    for checkpoint in tuned.checkpoints:
        tuned_encoder = load_encoder(checkpoint.path)
        folder = out / "activations" / f"epoch-{checkpoint.fraction:g}"
        stores[checkpoint.fraction] = (window_store(tuned_encoder, train_windows, folder / "train", config),
                                       window_store(tuned_encoder, eval_windows, folder / "eval", config))
        del tuned_encoder

    weights = []
    jobs = [(name, "span") for name in config.heads] + [(name, "classify") for name in config.classify_heads]
    for fraction, (train_store, _) in stores.items():
        n_layers, hidden = len(train_store.layers), train_store.dim
        for name, task in jobs:
            for seed in config.seeds:
                head = build_head(name, n_layers, hidden, task, seed=derive_seed(seed, "head-init", name, task))
                head_config = HeadTrainConfig(**{**asdict(config.head), "seed": seed, "device": config.device,
                                                 "progress": config.progress})
                folder = out / "heads" / f"epoch-{fraction:g}" / f"{name}-{task}" / f"seed-{seed}"
                stats = train_head(head, train_store, head_config, checkpoint=ensure_dir(folder) / "checkpoint.pt")
                for eval_fraction, (_, eval_store) in stores.items():
                    if eval_fraction == fraction:  # other checkpoints' activations are the seed's 4.4, on purpose
                        check_store_model(eval_store, train_store.index["model"]["fingerprint"])
                    scores = score_head(head, eval_store, eval_windows, config.max_answer_length)
                    rows.append({**base, "checkpoint": fraction, "eval_checkpoint": eval_fraction, "component": name,
                                 "task": task, "seed": seed, "trainable_params": head.num_parameters,
                                 "param_share": head.parameter_share(encoder.num_parameters), **scores,
                                 "train_seconds": stats.seconds, "io_share": stats.io_share})
                mix = head.layer_weights()
                if mix is not None:
                    weights += [{"checkpoint": fraction, "component": name, "task": task, "seed": seed,
                                 "layer": layer, "weight": float(w)} for layer, w in zip(train_store.layers, mix)]
    scores = pd.DataFrame(rows).reindex(columns=SCORE_COLUMNS)
    weights_frame = pd.DataFrame(weights, columns=["checkpoint", "component", "task", "seed", "layer", "weight"])
    curve = pd.DataFrame(tuned.curve)
    windows = pd.DataFrame([{"split": "train", **train_windows.stats}, {"split": "eval", **eval_windows.stats}])
    figures = {}
    if (weights_frame["component"] == "lp").any():
        figures["lp_layer_weights"] = save_figure(lp_weights_figure(weights_frame), out / "lp_layer_weights.png")
    meta = {"model": encoder.describe(), "config": asdict(config), "seconds": time.perf_counter() - started,
            "steps_per_epoch": tuned.steps_per_epoch,
            "train_articles": sorted({q.title for q in train_questions}),
            "eval_articles": sorted({q.title for q in eval_questions}),
            "note": "scores on a subset of SQuAD 2.0 dev split by article: not comparable to official SQuAD numbers"}
    result = Result("heads-squad", tables={"scores": scores, "curve": curve, "layer_weights": weights_frame,
                                           "windows": windows}, meta=meta, figures=figures)
    result.save(out)
    return result


def summary_table(scores: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per (checkpoint, eval checkpoint, head, task), with the seed count."""
    keys = ["checkpoint", "eval_checkpoint", "component", "task"]
    numeric = ["trainable_params", "param_share", "exact", "f1", "has_ans_f1", "no_ans_accuracy", "has_ans_f1_forced",
               "answerable_accuracy", "train_seconds", "io_share"]
    frame = scores.copy()
    frame[numeric] = frame[numeric].apply(pd.to_numeric, errors="coerce")
    grouped = frame.groupby(keys, sort=False, dropna=False)
    table = grouped[numeric].mean().reset_index()
    table["n_seeds"] = grouped["seed"].nunique().values
    return table
