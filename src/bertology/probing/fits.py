"""One fit of a probe and its scores, and a task's fits on the same features solved together.

A *fit* is one probe trained on one training sample and one set of labels (the point fit, a seed's bootstrap
resample, for the task or its control task); :func:`fit_and_score` fits one and scores every layer on dev and test
(:class:`Scores`). :func:`fit_group` solves several fits on the same features side by side, each to its own
optimum, and :func:`fit_and_score_group` scores them: the probing experiment's and ``probe_labels``'s way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from sklearn.base import clone

from bertology.errors import SettingError
from bertology.probing.names import SCALAR_MIX
from bertology.probing.probes import (
    EXACT_MAX_ITER,
    LayerwiseProbe,
    ScalarMixProbe,
    _fit_scaler,
    _is_layered,
    _standardise,
    as_layer_tensor,
)
from bertology.probing.problems import ABSENT_LOGIT, Group, grouped_logits
from bertology.probing.solver import fit_multinomial
from bertology.probing.trainer import _TrainResult


def _rows(model, task, probe, layers, seed, metric, values, baseline, split, component=None) -> list[dict]:
    return [{"model": model, "task": task, "probe": probe, "component": component, "layer": layer, "seed": seed,
             "metric": metric, "value": float(v), "baseline": baseline, "split": split}
            for layer, v in zip(layers, values)]


def _correct(predictions: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Booleans: which predictions equal the gold labels (labels unseen in training never do)."""
    return np.asarray(np.asarray(predictions, dtype=object) == np.asarray(y, dtype=object)[None], dtype=bool)


@dataclass
class Scores:
    """What fitting or scoring gives: tidy ``rows`` (:data:`COLUMNS`) and ``hits``, which dev/test examples
    each layer got right, for the intervals: ``hits[(probe, component, baseline, split)][seed] = bool [n_layers, n]``."""

    rows: list[dict] = field(default_factory=list)
    hits: dict[tuple, dict[int, np.ndarray]] = field(default_factory=dict)

    def add(self, other: "Scores") -> "Scores":
        """``other`` appended (rows after these; hits merged key by key, in the order first seen)."""
        self.rows += other.rows
        for key, by_seed in other.hits.items():
            self.hits.setdefault(key, {}).update(by_seed)
        return self


def fit_and_score(kind, probe_kwargs, seed, X, y, train_index, layers, model, task, baseline,
                  scalar_mix: bool) -> Scores:
    """Fit every layer's probe (and optionally the scalar mix) on train[train_index]; score dev and test."""
    Xtr, ytr = X["train"][:, train_index], y["train"][train_index]
    probe = LayerwiseProbe(kind=kind, seed=seed, **probe_kwargs).fit(Xtr, ytr, X["dev"], y["dev"])
    scores = score_fit(probe, kind, seed, X, y, layers, model, task, baseline)
    return scores.add(mix_scores(kind, probe_kwargs, seed, X, y, train_index, layers, model, task, baseline)) \
        if scalar_mix else scores


def mix_scores(kind, probe_kwargs, seed, X, y, train_index, layers, model, task, baseline) -> Scores:
    """The scalar mix's fit on train[train_index] (Tenney et al.'s weighted sum of layers): its dev and test
    accuracy and its layer weights."""
    scores = Scores()
    mix = ScalarMixProbe(kind=kind, seed=seed, **probe_kwargs).fit(X["train"][:, train_index], y["train"][train_index],
                                                                   X["dev"], y["dev"])
    for split in ("dev", "test"):
        hits = _correct(mix.predict(X[split])[None], y[split])
        scores.rows += _rows(model, task, kind, [pd.NA], seed, "accuracy", hits.mean(axis=1), baseline, split,
                             component=SCALAR_MIX)
        scores.hits[(kind, SCALAR_MIX, baseline, split)] = {seed: hits}
    scores.rows += _rows(model, task, kind, layers, seed, "mix_weight", mix.layer_weights_, baseline, "dev",
                         component=SCALAR_MIX)
    return scores


def score_fit(probe: LayerwiseProbe, kind, seed, X, y, layers, model, task, baseline) -> Scores:
    """A fitted probe's dev and test accuracy of every layer (rows and hits) and the L2 each layer chose."""
    scores = Scores()
    for split in ("dev", "test"):
        hits = _correct(probe.predict(X[split]), y[split])
        scores.rows += _rows(model, task, kind, layers, seed, "accuracy", hits.mean(axis=1), baseline, split)
        scores.hits[(kind, None, baseline, split)] = {seed: hits}
    scores.rows += _rows(model, task, kind, layers, seed, "l2", probe.best_l2_, baseline, "dev")
    return scores


def fit_and_score_group(kind, probe_kwargs, X, jobs: Sequence[tuple], layers, model, task) -> list[Scores]:
    """:func:`fit_and_score` (without the scalar mix: :func:`mix_scores`) of several fits on the same features
    ``X``, solved side by side (:func:`fit_group`): ``jobs`` are ``(seed, y,
    train_index, baseline)``, ``y`` each fit's labels (the task's or its control task's); one :class:`Scores`
    per job, in order."""
    probes = [LayerwiseProbe(kind=kind, seed=seed, **probe_kwargs) for seed, _, _, _ in jobs]
    problems = [(y["train"], index, y["dev"]) for _, y, index, _ in jobs]
    fitted = fit_group(probes, X["train"], problems, X["dev"])
    return [score_fit(probe, kind, seed, X, y, layers, model, task, baseline)
            for probe, (seed, y, _, baseline) in zip(fitted, jobs)]


def fit_group(probes: Sequence[LayerwiseProbe], X_train, problems: Sequence[tuple], X_dev,
              y_dev=None) -> list[LayerwiseProbe]:
    """Several probes on the same features, solved side by side: for each of ``probes`` (settings alike but
    for ``seed``) and its problem ``(y, index, y_dev)`` of ``problems``, a fitted clone equal to
    ``clone(probe).fit(X_train[:, index], y[index], X_dev, y_dev)`` (``y`` ``[n]`` labels of every training
    example, ``index`` the examples this fit uses, repeats allowed: a bootstrap resample; ``y_dev`` that
    problem's dev labels, ``None`` for the argument's).

    A probe's bootstrap resamples and its control task train on the same features, so the exact linear probe
    solves them together (:func:`fit_multinomial` with groups): one product of each layer's features with all
    their weight matrices side by side costs much less than as many narrow ones (BENCHMARKS.md). Each problem
    keeps its own optimum: a resample is the whole training set weighted by how often each example was drawn,
    and its own standardisation (mean and spread of its examples) is a change of variables of the shared one
    (the whole training set's): the weights of a feature scaled by ``spread / shared spread``, their L2 term
    weighted by the square of that ratio, the mean's shift taken up by the unpenalised bias. Other probes (the
    MLP, ``stop="early"``) and a fit without a dev split are fitted one by one."""
    if len(probes) != len(problems):
        raise SettingError("probes", len(probes), f"expected one probe per problem ({len(problems)})")
    fitted = [clone(probe) for probe in probes]
    if not problems:
        return fitted
    settings = [{k: v for k, v in probe.get_params().items() if k != "seed"} for probe in probes]
    if any(other != settings[0] for other in settings[1:]):
        raise SettingError("probes", "differing settings", "expected probes alike but for their seed")
    if not fitted[0]._exact() or X_dev is None or len(problems) == 1:
        for one, (y, index, own_dev) in zip(fitted, problems):
            X = as_layer_tensor(X_train, "X_train")[:, index] if _is_layered(X_train) else np.asarray(X_train)[index]
            one.fit(X, np.asarray(y)[index], X_dev, y_dev if own_dev is None else own_dev)
        return fitted
    X_all = as_layer_tensor(X_train, "X_train")
    checked = []
    for one, (y, index, own_dev) in zip(fitted, problems):
        index = np.asarray(index)
        checked.append(one._check_fit(X_all[:, index], np.asarray(y)[index], X_dev,
                                      y_dev if own_dev is None else own_dev))
    first, K = fitted[0], len(problems)
    device, L, n, d = first.device_, X_all.shape[0], X_all.shape[1], X_all.shape[2]
    # One class space for the group (each problem's classes a subset; the others masked in its fit).
    union: dict = {}
    for one in fitted:
        for label in one.classes_.tolist():
            union.setdefault(label, len(union))
    C = len(union)
    mean, scale = _fit_scaler(X_all)
    X = _standardise(X_all, mean, scale, device)
    X_dev_shared = _standardise(checked[0][2], mean, scale, device)
    codes, weights, penalty, dev_codes = [], [], [], []
    for one, (y, index, _), (_, _, _, dev_labels) in zip(fitted, problems, checked):
        codes.append(np.fromiter((union.get(v, 0) for v in np.asarray(y).tolist()), dtype=np.int64, count=n))
        weights.append(np.bincount(np.asarray(index), minlength=n) / len(index))
        penalty.append((one._scale / scale)[:, 0] ** 2)  # [L, d]
        known = one._coder.encode(dev_labels, "y_dev") >= 0
        dev_codes.append(np.where(known, [union.get(v, -1) for v in np.asarray(dev_labels).tolist()], -1))
    Y = torch.from_numpy(np.stack(codes)).to(device)
    w = torch.from_numpy(np.stack(weights)).to(device=device, dtype=torch.float32)
    # problem p = layer p // K, the (p % K)-th problem
    q = torch.from_numpy(np.stack(penalty, 1).reshape(L * K, d)).to(device)
    y_dev_codes = torch.from_numpy(np.stack(dev_codes)).to(device)  # [K, n_dev], -1: no term
    masks = torch.full((K, C), ABSENT_LOGIT, dtype=torch.float32, device=device)
    for k, one in enumerate(fitted):
        masks[k, [union[c] for c in one.classes_.tolist()]] = 0.0

    def dev_logits(W, b, rows):
        return grouped_logits(X_dev_shared, W, b + masks[rows % K], rows, K)

    def dev_fit(W, b, rows):  # higher is better: minus the mean dev cross-entropy of each problem's known labels
        labels = y_dev_codes[rows % K]
        known = labels >= 0
        logp = torch.log_softmax(dev_logits(W, b, rows).double(), -1)
        picked = logp.gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1) * known
        return picked.sum(-1) / known.sum(-1).clamp_min(1)

    W, b, iterations, fit = fit_multinomial(X, Y, C, first.l2_grid_, gtol=first.gtol,
                                            max_iter=first.max_iter or EXACT_MAX_ITER, continuation=first.warm_start,
                                            score=dev_fit, polish=first.polish,
                                            group=Group(weights=w, penalty=q, mask_absent=True))
    P, G = fit.shape
    accuracy = torch.full_like(fit, -math.inf)
    for g in range(G):
        reached = torch.isfinite(fit[:, g]).nonzero().squeeze(1)
        if len(reached):
            hits = dev_logits(W[reached, g], b[reached, g], reached).argmax(-1) == y_dev_codes[reached % K]
            accuracy[reached, g] = hits.to(torch.float64).mean(-1)
    shared_mean = torch.from_numpy(mean[:, 0]).to(device)  # [L, d]
    shared_scale = torch.from_numpy(scale[:, 0]).to(device)
    for k, one in enumerate(fitted):
        rows = torch.arange(L, device=device) * K + k
        columns = torch.tensor([union[c] for c in one.classes_.tolist()], device=device)
        own_mean = torch.from_numpy(one._mean[:, 0]).to(device)
        own_scale = torch.from_numpy(one._scale[:, 0]).to(device)
        # Back to the problem's own standardisation: W = V * scale_k / scale_0, b = c - ((m0 - m_k) / s_k) W.
        W_own = W[rows][..., columns] * (own_scale / shared_scale)[:, None, :, None]
        shift = ((shared_mean - own_mean) / own_scale)[:, None, None, :]  # [L, 1, 1, d]
        b_own = b[rows][..., columns] - (shift @ W_own).squeeze(-2)
        one._keep(_TrainResult(params={"W": W_own, "b": b_own}, dev_accuracy=accuracy[rows],
                               n_steps=iterations, dev_loss=-fit[rows]))
    return fitted
