"""The seed's experiment end to end: fine-tune part of an epoch and a full one, then train readouts on the
frozen all-layer activations of each checkpoint, and score everything with the official SQuAD 2.0 rules.

Steps (each resumes: finished parts are reused, interrupted ones continue):

1. Questions: a SQuAD v2.0 file split by article (:func:`~bertology.data.squad.split_by_article`) into train,
   dev and test, or separate train and test files (dev: articles of the train file); optionally a seeded
   subset of each (``max_train``, ``max_dev``, ``max_test``).
2. Windows (:func:`~bertology.readouts.qa.encode_windows`, 384 tokens, stride 128 by default).
3. Fine-tuning (:func:`bertology.readouts.finetune_qa.finetune_qa`) with checkpoints at ``checkpoints`` (fractions of
   the epoch; 0.3 and 1.0 as the seed), each scored on the test questions.
4. For each checkpoint, every layer's activations of every window token, train, dev and test, written
   once as float16 stores (:mod:`bertology.readouts.activations`).
5. Every readout (:mod:`bertology.readouts.catalog`) trained for ``readout.epochs`` epoch(s) per seed on the
   streamed train activations (early stopping on dev), then scored on the test activations of every
   checkpoint (the seed's 4.4: readouts trained on 0.3-epoch activations, tested on 1-epoch ones).
6. The answerable-or-not framing for ``classify_readouts``: window label "holds the answer", question
   answerable when a window says so.

Scores on the shared dev subset are **not comparable to official SQuAD 2.0 numbers** (half of dev, split
by article into train, dev and test; a 22M-parameter MiniLM, not BERT-large).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from bertology.data.squad import TEST_ARTICLE_SHARE, SquadQuestion, read_squad, split_by_article
from bertology.errors import DataError, SettingError, UsageError
from bertology.files import ensure_dir
from bertology.readouts.finetune_qa import QAFinetuneConfig, finetune_qa, load_qa_model, qa_logits
from bertology.readouts.activations import write_activations
from bertology.readouts.catalog import ReadoutModel, build_readout, check_readout_name
from bertology.readouts.names import SEED_READOUTS
from bertology.readouts.qa import MAX_ANSWER_LENGTH, MAX_LENGTH, STRIDE, QAWindows, choose_null_margin, decode_spans, \
    encode_windows, question_answerable, score_spans
from bertology.readouts.spec import MODES, SQUAD_RENAMED, SquadReadoutsSpec
from bertology.readouts.squad_eval import score_predictions, summarize_scores
from bertology.readouts.train import ReadoutTrainConfig, check_store_model, predict_readout, train_readout
from bertology.models.encoders import Encoder, as_encoder
from bertology.plots import finish_figure
from bertology.results import Result
from bertology.runtime import derive_seed
from bertology.settings import renamed_keywords
from bertology.store.store import Store
from bertology.training import Optimisation

#: The span scores in the ``scores`` table (fractions; see :func:`~bertology.readouts.qa.score_spans`).
SPAN_METRICS = ("exact", "f1", "has_ans_f1", "no_ans_accuracy", "has_ans_f1_forced")

#: ``checkpoint``: the activations a readout trained on; ``test_checkpoint``: the activations of the test questions
#: it is scored on (the same checkpoint, or another: the seed's 4.4); ``dev_f1``: its F1 on the dev questions.
SCORE_COLUMNS = ["model", "checkpoint", "test_checkpoint", "component", "task", "seed", "trainable_params",
                 "param_share", *SPAN_METRICS, "answerable_accuracy", "null_margin", "dev_f1", "epochs_run",
                 "best_epoch", "train_seconds", "io_share", "n_train", "n_test"]
QUESTION_COLUMNS = ["checkpoint", "test_checkpoint", "component", "task", "seed", "id", "has_answer", "exact", "f1"]


@renamed_keywords({**SQUAD_RENAMED, "max_heldout_questions": "max_dev"})
@dataclass
class SquadReadoutsConfig:
    """The library's settings of the seed's experiment (the command line's are :class:`SquadReadoutsSpec`, made
    into one with :meth:`from_spec`); its defaults are the seed's (one readout epoch, no early stopping). The
    old keywords (``eval_share``, ``heldout_share``, ``max_train_questions``, ``max_eval_questions``,
    ``max_heldout_questions``) still work with a :class:`DeprecationWarning`."""

    readouts: tuple[str, ...] = SEED_READOUTS
    classify_readouts: tuple[str, ...] = ("lp",)
    seeds: tuple[int, ...] = (0,)
    max_length: int = MAX_LENGTH
    stride: int = STRIDE
    max_answer_length: int = MAX_ANSWER_LENGTH
    max_train: int | None = None             # seeded subsets of the questions of each split (None: all)
    max_test: int | None = None
    max_dev: int | None = None
    mode: str = "squad2"
    test_share: float = TEST_ARTICLE_SHARE   # of the articles: the test split, only scored
    dev_share: float = 0.2                   # of the other articles: the dev split (early stopping, the threshold)
    pretrained: bool = True                  # checkpoint 0: readouts on the encoder as it is, no fine-tuning
    readout_checkpoints: tuple[float, ...] | None = None  # the checkpoints readouts train on (None: every one)
    finetune: QAFinetuneConfig | None = field(default_factory=QAFinetuneConfig)
    readout: ReadoutTrainConfig = field(default_factory=ReadoutTrainConfig)
    batch_tokens: int = 8192
    device: str = "cpu"
    progress: bool = True

    def __post_init__(self):
        self.readouts = tuple(check_readout_name(h) for h in self.readouts)
        self.classify_readouts = tuple(check_readout_name(h) for h in self.classify_readouts)
        if not self.seeds:
            raise SettingError("seeds", self.seeds, "expected at least one seed", shown="(none)")
        if self.mode not in MODES:
            raise SettingError("mode", self.mode, f"expected one of {', '.join(MODES)}")
        for name in ("test_share", "dev_share"):
            if not 0 < getattr(self, name) < 1:
                raise SettingError(name, getattr(self, name), "expected a fraction of the articles strictly between "
                                   "0 and 1", shown=str(getattr(self, name)))
        if not self.pretrained and self.finetune is None:
            raise SettingError("checkpoints", (), "expected 0 (the pretrained encoder) and/or fractions of an epoch",
                               shown="(none)")

    @classmethod
    def from_spec(cls, spec: SquadReadoutsSpec, device: str = "cpu", progress: bool = True) -> "SquadReadoutsConfig":
        """The experiment ``spec`` describes, run on ``device``: fine-tuning (when a checkpoint is above 0) with
        ``finetune_lr``/``finetune_batch_size`` seeded by the first seed, readouts with ``readout_lr``/``batch_size``."""
        tuned = spec.finetune_checkpoints
        finetune = QAFinetuneConfig(checkpoints=tuned, evaluate_at=spec.curve, progress=progress,
                                    optimisation=Optimisation(lr=spec.finetune_lr, batch_size=spec.finetune_batch_size,
                                                              seed=spec.seeds[0], device=device)) if tuned else None
        readout = ReadoutTrainConfig(epochs=spec.readout_epochs, patience=spec.patience or None,
                                     standardise=spec.standardise,
                                     optimisation=Optimisation(lr=spec.readout_lr, batch_size=spec.batch_size))
        return cls(readouts=spec.readouts, classify_readouts=spec.classify_readouts, seeds=spec.seeds,
                   max_length=spec.max_length, stride=spec.stride, max_train=spec.max_train,
                   max_test=spec.max_test, mode=spec.mode, test_share=spec.test_share,
                   dev_share=spec.dev_share, pretrained=spec.pretrained,
                   readout_checkpoints=spec.readout_checkpoints, finetune=finetune, readout=readout, device=device,
                   progress=progress)


def _subset(questions: list[SquadQuestion], limit: int | None, purpose: str) -> list[SquadQuestion]:
    if limit is None or limit >= len(questions):
        return questions
    keep = np.sort(np.random.default_rng(derive_seed(0, "squad-subset", purpose)).choice(len(questions), limit,
                                                                                       replace=False))
    return [questions[i] for i in keep]


def check_file_pair(train_path: str | Path | None, test_path: str | Path | None) -> None:
    """A train file needs a test file and the reverse (:class:`UsageError` naming the options)."""
    if (train_path is None) != (test_path is None):
        given, missing = ("train_path=", "test_path=") if test_path is None else ("test_path=", "train_path=")
        raise UsageError(f"{given} without {missing}: give both a train and a test SQuAD file, or neither "
                         "(then data= is split by article)")


def load_questions(data: str | Path | None = None, train_path: str | Path | None = None,
                   test_path: str | Path | None = None, test_share: float = TEST_ARTICLE_SHARE,
                   ) -> tuple[list[SquadQuestion], list[SquadQuestion]]:
    """(train, test) questions: two files as given, or one file (default: the shared subset) split by article."""
    check_file_pair(train_path, test_path)
    if train_path is not None:
        train, test = read_squad(train_path), read_squad(test_path)
        shared = {q.title for q in train} & {q.title for q in test}
        if shared:
            raise DataError(f"articles in both train and test files: {', '.join(sorted(shared)[:3])}")
        return train, test
    return split_by_article(read_squad(data), test_share)


def split_dev(train: list[SquadQuestion], dev_share: float) -> tuple[list[SquadQuestion], list[SquadQuestion]]:
    """(train, dev): the first ``ceil(dev_share x articles)`` training articles in
    :func:`~bertology.data.squad.article_order` are the dev split (early stopping, the no-answer threshold); the
    test articles are never among them."""
    titles = {q.title for q in train}
    if len(titles) < 2:
        raise DataError(f"{len(titles)} training article(s): a dev split of articles for early stopping needs at "
                        "least 2; give more articles or a smaller test_share=")
    return split_by_article(train, dev_share)


def select_mode(questions: list[SquadQuestion], mode: str) -> list[SquadQuestion]:
    """All questions (``squad2``) or only those with an answer (``answerable``, SQuAD 1.1-style)."""
    if mode not in MODES:
        raise SettingError("mode", mode, f"expected one of {', '.join(MODES)}")
    return questions if mode == "squad2" else [q for q in questions if q.answers]


def prepare_windows(tokenizer, config: "SquadReadoutsConfig", data: str | Path | None = None,
                    train_path: str | Path | None = None, test_path: str | Path | None = None) -> dict[str, QAWindows]:
    """``{"train", "dev", "test"}`` windows of the experiment, as ``config`` asks.

    Articles are split three ways (test, dev, train; no article in two), the mode's questions kept, the
    seeded subsets drawn, and in ``answerable`` mode the training windows without the answer dropped (SQuAD
    1.1's training windows: every label is a span; dev and test keep every window, since decoding looks at
    all of them)."""
    train_questions, test_questions = load_questions(data, train_path, test_path, config.test_share)
    train_questions, dev_questions = split_dev(train_questions, config.dev_share)
    # the subsets' seed names ("heldout", "eval") are those of the first runs: the same questions are drawn
    train_questions = _subset(select_mode(train_questions, config.mode), config.max_train, "train")
    dev_questions = _subset(select_mode(dev_questions, config.mode), config.max_dev, "heldout")
    test_questions = _subset(select_mode(test_questions, config.mode), config.max_test, "eval")
    for name, part in (("train", train_questions), ("dev", dev_questions), ("test", test_questions)):
        if not part:
            raise DataError(f"no {name} questions left with mode= {config.mode}")
    windows = {name: encode_windows(tokenizer, part, config.max_length, config.stride)
               for name, part in (("train", train_questions), ("dev", dev_questions), ("test", test_questions))}
    if config.mode == "answerable":
        windows["train"] = windows["train"].select(windows["train"].start_positions > 0)
    return windows


def window_store(encoder: Encoder, windows: QAWindows, out: Path, config: SquadReadoutsConfig) -> Store:
    """Every layer of every window token (float16) plus span and answerable labels, in a store at ``out``."""
    tokens = [encoder.tokenizer.convert_ids_to_tokens(ids) for ids in windows.input_ids]
    records = [{"id": wid, "question": windows.questions[int(q)].id, "words": toks}
               for wid, q, toks in zip(windows.window_ids(), windows.question_index, tokens)]
    labels = {"start": windows.start_positions.tolist(), "end": windows.end_positions.tolist(),
              "label": windows.answerable.tolist(), "question": windows.question_index.tolist()}
    return write_activations(encoder, windows.input_ids, windows.token_type_ids, records, labels, out, pool="tokens",
                             kind="squad-windows", settings={"max_length": windows.max_length, "stride": windows.stride},
                             batch_tokens=config.batch_tokens, device=config.device, progress=config.progress)


def score_readout(readout: ReadoutModel, store: Store, windows: QAWindows, max_answer_length: int) -> dict:
    """Official scores of a span readout, or answerable accuracy of a classification readout, on ``store``."""
    if store.n_sentences != len(windows):
        raise DataError(f"{store.path}: {store.n_sentences} windows stored, {len(windows)} expected")
    if readout.task == "span":
        starts, ends = predict_readout(readout, store)
        metrics = score_spans(windows, starts, ends, max_answer_length)
        return {key: metrics[key] for key in SPAN_METRICS}
    logits = torch.as_tensor(predict_readout(readout, store))
    probability = torch.softmax(logits, dim=-1)[:, 1].numpy()
    predicted = question_answerable(windows, probability)
    truth = {q.id: bool(q.answers) for q in windows.questions}
    return {"answerable_accuracy": float(np.mean([predicted[qid] == truth[qid] for qid in truth]))}


def lp_weights_figure(weights: pd.DataFrame):
    """Learned layer weights of the LP readouts: one line per checkpoint (and seed), layers on the x axis."""
    matplotlib.use("Agg")  # on a machine with a display too: the figure goes to a file
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


def score_logits(windows: QAWindows, starts, ends, mode: str, max_answer_length: int = MAX_ANSWER_LENGTH,
                 null_margin: float = 0.0) -> tuple[dict, pd.DataFrame]:
    """Scores (fractions) of per-window logits and one row per question (``id``, ``has_answer``,
    ``exact``, ``f1``). ``answerable`` mode always gives the best span (SQuAD 1.1); ``squad2`` abstains when
    the no-answer score beats the best span by more than ``null_margin`` (chosen on the dev articles)."""
    predictions = decode_spans(windows, starts, ends, max_answer_length, null_margin)
    answers = predictions.spans if mode == "answerable" else predictions.answers
    per_question = score_predictions(windows.questions, answers)
    summary = summarize_scores(per_question)
    answerable = [question for question in windows.questions if question.answers]
    forced = summarize_scores(score_predictions(answerable, predictions.spans))["f1"] if answerable else float("nan")
    metrics = {"exact": summary["exact"], "f1": summary["f1"], "has_ans_f1": summary["has_ans_f1"],
               "no_ans_accuracy": summary["no_ans_accuracy"], "has_ans_f1_forced": forced,
               "null_margin": null_margin if mode == "squad2" else None}
    return metrics, per_question[["id", "has_answer", "exact", "f1"]]


def dev_choice(windows: QAWindows, starts, ends, mode: str, max_answer_length: int) -> tuple[float, float]:
    """(F1, no-answer margin) on the dev questions: the margin chosen there (``squad2``; 0 otherwise)."""
    margin = choose_null_margin(windows, starts, ends, max_answer_length) if mode == "squad2" else 0.0
    return score_logits(windows, starts, ends, mode, max_answer_length, margin)[0]["f1"], margin


def classify_accuracy(readout: ReadoutModel, store: Store, windows: QAWindows) -> float:
    logits = torch.as_tensor(predict_readout(readout, store))
    probability = torch.softmax(logits, dim=-1)[:, 1].numpy()
    predicted = question_answerable(windows, probability)
    return float(np.mean([predicted[q.id] == bool(q.answers) for q in windows.questions]))


def _old_keyword(given: dict, old: str, new: str, value, function: str):
    """``value`` of keyword ``new``, or of its old name ``old`` in ``given`` (with a :class:`DeprecationWarning`);
    any other keyword is refused as Python would."""
    unknown = set(given) - {old}
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    if old not in given:
        return value
    if value is not None:
        raise SettingError(old, given[old], f"the old name of {new}; give only {new}", shown=str(given[old]))
    warnings.warn(f"{function}({old}=...) is deprecated (it goes in the next release); use {new}=",
                  DeprecationWarning, stacklevel=3)
    return given[old]


def run_squad_readouts(model: str | Encoder, out: str | Path, config: SquadReadoutsConfig | None = None, *,
                       data: str | Path | None = None, train_path: str | Path | None = None,
                       test_path: str | Path | None = None, **old) -> Result:
    """The whole experiment into ``out`` (see the module docstring); returns and saves the Result.

    Checkpoint 0 is the pretrained encoder, frozen and never fine-tuned (``config.pretrained``); the
    others are fractions of a fine-tuning epoch. Readouts train with early stopping on the dev articles
    (``config.readout.patience``) and, in ``squad2`` mode, every system's no-answer margin is chosen on the
    dev articles; the test articles are only scored. ``test_path``: the test file beside ``train_path``
    (its old keyword ``eval_path`` still works, with a :class:`DeprecationWarning`).

    Tables: ``scores`` (one row per checkpoint x test checkpoint x readout x task x seed, the readout's name
    in ``component``, plus the fine-tuned encoders themselves as component ``fine-tuned``), ``questions``
    (per-question EM/F1 of every span row: what the paired bootstrap resamples), ``curve`` (the encoder's
    scores at each evaluated fraction of the epoch), ``layer_weights`` (learned softmax weights of
    LP/adapters/stack), ``history`` (per readout epoch: training loss and dev score), ``finetune_losses``
    and ``windows`` (window counts per ``split``: train, dev, test).
    """
    test_path = _old_keyword(old, "eval_path", "test_path", test_path, "run_squad_readouts")
    config = config or SquadReadoutsConfig()
    check_file_pair(train_path, test_path)  # before the model loads
    encoder = as_encoder(model)
    if config.max_length > encoder.max_length:
        raise SettingError("max_length", config.max_length, f"{encoder.name} takes at most {encoder.max_length} tokens")
    started = time.perf_counter()
    windows = prepare_windows(encoder.tokenizer, config, data, train_path, test_path)
    train_windows, dev_windows, test_windows = windows["train"], windows["dev"], windows["test"]
    n_train, n_test = len(train_windows.questions), len(test_windows.questions)
    out = ensure_dir(out)  # only now: every input above is read and checked, so bad input leaves no folder
    base = {"model": encoder.name, "n_train": n_train, "n_test": n_test}
    mode, max_answer = config.mode, config.max_answer_length
    rows, question_rows = [], []

    def add_question_rows(frame: pd.DataFrame, **keys) -> None:
        question_rows.append(frame.assign(**keys))

    tuned = None
    if config.finetune is not None:
        tuned = finetune_qa(encoder, train_windows, test_windows if config.finetune.evaluate_at else None,
                            out / "finetune", config.finetune)
        pad_id = encoder.tokenizer.pad_token_id if encoder.tokenizer.pad_token_id is not None else 0
        for checkpoint in tuned.checkpoints:
            qa_model = load_qa_model(checkpoint.path)
            dev_f1, margin = None, 0.0
            if mode == "squad2":  # the threshold; in answerable mode there is none and nothing stops early
                d_starts, d_ends = qa_logits(qa_model, dev_windows, pad_id, config.finetune.eval_batch_tokens)
                dev_f1, margin = dev_choice(dev_windows, d_starts, d_ends, mode, max_answer)
            t_starts, t_ends = qa_logits(qa_model, test_windows, pad_id, config.finetune.eval_batch_tokens)
            metrics, per_question = score_logits(test_windows, t_starts, t_ends, mode, max_answer, margin)
            del qa_model
            keys = {"checkpoint": checkpoint.fraction, "test_checkpoint": checkpoint.fraction,
                    "component": "fine-tuned", "task": "span", "seed": config.finetune.seed}
            rows.append({**base, **keys, "trainable_params": encoder.num_parameters + 2 * encoder.hidden_size + 2,
                         "param_share": 1.0, **metrics, "dev_f1": dev_f1,
                         "train_seconds": checkpoint.train_seconds, "io_share": None})
            add_question_rows(per_question, **keys)

    sources: list[tuple[float, Encoder | Path]] = [(0.0, encoder)] if config.pretrained else []
    if tuned is not None:
        sources += [(c.fraction, c.path) for c in tuned.checkpoints]
    readout_fractions = set(config.readout_checkpoints) if config.readout_checkpoints is not None else None
    stores: dict[float, dict[str, Store]] = {}
    for fraction, source in sources:
        if readout_fractions is not None and not any(abs(fraction - f) < 1e-9 for f in readout_fractions):
            continue
        source_encoder = as_encoder(source)
        folder = out / "activations" / f"epoch-{fraction:g}"
        stores[fraction] = {part: window_store(source_encoder, windows[part], folder / part, config)
                            for part in ("train", "dev", "test")}
        del source_encoder

    weights, histories = [], []
    classify = config.classify_readouts if mode == "squad2" else ()  # every question is answerable otherwise
    jobs = [(name, "span") for name in config.readouts] + [(name, "classify") for name in classify]
    for fraction, parts in stores.items():
        train_store, dev_store = parts["train"], parts["dev"]
        n_layers, hidden = len(train_store.layers), train_store.dim
        for name, task in jobs:
            for seed in config.seeds:
                readout = build_readout(name, n_layers, hidden, task, seed=derive_seed(seed, "head-init", name, task))
                readout_config = replace(config.readout, seed=seed, device=config.device, progress=config.progress)
                folder = out / "readouts" / f"epoch-{fraction:g}" / f"{name}-{task}" / f"seed-{seed}"
                if task == "span":
                    def validate(trained, store=dev_store):
                        return dev_choice(dev_windows, *predict_readout(trained, store), mode, max_answer)[0]
                else:
                    def validate(trained, store=dev_store):
                        return classify_accuracy(trained, store, dev_windows)
                stats = train_readout(readout, train_store, readout_config,
                                      checkpoint=ensure_dir(folder) / "checkpoint.pt", validate=validate)
                histories += [{"checkpoint": fraction, "component": name, "task": task, "seed": seed, **row}
                              for row in stats.history]
                margin, dev_score = 0.0, None
                if task == "span":
                    dev_score, margin = dev_choice(dev_windows, *predict_readout(readout, dev_store), mode, max_answer)
                for test_fraction, test_parts in stores.items():
                    test_store = test_parts["test"]
                    if test_fraction == fraction:  # other checkpoints' activations are the seed's 4.4, on purpose
                        check_store_model(test_store, train_store.index["model"]["fingerprint"])
                    if test_store.n_sentences != len(test_windows):
                        raise DataError(f"{test_store.path}: {test_store.n_sentences} windows stored, "
                                        f"{len(test_windows)} expected")
                    keys = {"checkpoint": fraction, "test_checkpoint": test_fraction, "component": name,
                            "task": task, "seed": seed}
                    if task == "span":
                        scores, per_question = score_logits(test_windows, *predict_readout(readout, test_store), mode,
                                                            max_answer, margin)
                        add_question_rows(per_question, **keys)
                    else:
                        scores = {"answerable_accuracy": classify_accuracy(readout, test_store, test_windows)}
                    rows.append({**base, **keys, "trainable_params": readout.num_parameters,
                                 "param_share": readout.parameter_share(encoder.num_parameters), **scores,
                                 "dev_f1": dev_score, "epochs_run": stats.epochs_run,
                                 "best_epoch": stats.best_epoch, "train_seconds": stats.seconds,
                                 "io_share": stats.io_share})
                mix = readout.layer_weights()
                if mix is not None:
                    weights += [{"checkpoint": fraction, "component": name, "task": task, "seed": seed,
                                 "layer": layer, "weight": float(w)} for layer, w in zip(train_store.layers, mix)]
    scores = pd.DataFrame(rows).reindex(columns=SCORE_COLUMNS)
    questions = (pd.concat(question_rows, ignore_index=True) if question_rows
                 else pd.DataFrame(columns=QUESTION_COLUMNS)).reindex(columns=QUESTION_COLUMNS)
    weights_frame = pd.DataFrame(weights, columns=["checkpoint", "component", "task", "seed", "layer", "weight"])
    history = pd.DataFrame(histories, columns=["checkpoint", "component", "task", "seed", "epoch", "step", "loss",
                                               "score"])
    curve = pd.DataFrame(tuned.curve if tuned is not None else [])
    finetune_losses = pd.DataFrame(tuned.losses if tuned is not None else [],
                                   columns=["epoch", "step", "loss", "last_50"])
    window_counts = pd.DataFrame([{"split": part, **windows[part].stats} for part in ("train", "dev", "test")])
    figures = {}
    if (weights_frame["component"] == "lp").any():
        figures["lp_layer_weights"] = finish_figure(lp_weights_figure(weights_frame), out / "lp_layer_weights.png")
    meta = {"model": encoder.describe(), "config": asdict(config), "seconds": time.perf_counter() - started,
            "steps_per_epoch": tuned.steps_per_epoch if tuned is not None else None,
            "train_articles": sorted({q.title for q in train_windows.questions}),
            "dev_articles": sorted({q.title for q in dev_windows.questions}),
            "test_articles": sorted({q.title for q in test_windows.questions}),
            "note": "scores on a subset of SQuAD 2.0 dev split by article: not comparable to official SQuAD numbers"}
    result = Result("readouts-squad", tables={"scores": scores, "questions": questions, "curve": curve,
                                           "layer_weights": weights_frame, "history": history,
                                           "finetune_losses": finetune_losses, "windows": window_counts},
                    meta=meta, figures=figures)
    result.save(out)
    return result


def summary_table(scores: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per (checkpoint, test checkpoint, readout, task), with the seed count."""
    keys = ["checkpoint", "test_checkpoint", "component", "task"]
    numeric = ["trainable_params", "param_share", "exact", "f1", "has_ans_f1", "no_ans_accuracy", "has_ans_f1_forced",
               "answerable_accuracy", "train_seconds", "io_share"]
    frame = scores.copy()
    frame[numeric] = frame[numeric].apply(pd.to_numeric, errors="coerce")
    grouped = frame.groupby(keys, sort=False, dropna=False)
    table = grouped[numeric].mean().reset_index()
    table["n_seeds"] = grouped["seed"].nunique().values
    return table
