"""Classification probes trained for every layer at once.

The layers are one more batch dimension: features ``X`` of shape ``[n_layers, n, dim]`` go through one
torch model whose weights are ``[n_layers, n_l2, dim, n_classes]`` (the L2 grid is batched too), so a
single optimiser run fits ``n_layers * len(l2)`` independent probes. Because the total loss is a sum of
independent per-probe losses, every probe gets exactly the gradient it would get alone; only the
optimiser's step-size search is shared.

Model selection is honest: the L2 strength is chosen per layer on the dev split; the test split is only
ever scored.

The linear probe is exact (``stop="converged"``, the default): an L2-regularised multinomial logistic
regression is a strictly convex problem with one optimum, and :func:`fit_multinomial` solves it to a gradient
tolerance, so the answer does not depend on the optimiser's path (its start, the batch composition of
extraction, the linear-algebra routine). The solver is L-BFGS with one history per problem (every layer its own
step sizes and curvature pairs), preconditioned by a Kronecker-factored estimate of the Hessian (feature
covariance x softmax curvature, both eigendecomposed once per refresh), and walks the L2 grid (1e-5 .. 1e3) as a
regularisation path from 1e-2 towards the value each layer's dev cross-entropy prefers, each value warm-started from
its neighbour's optimum, while the dev cross-entropy falls; the value chosen (lowest dev cross-entropy) is polished in float64. The MLP under
``converged`` trains until its training loss stops falling. ``stop="early"`` (the former default) keeps the
best-on-dev checkpoint of an early-stopped path, whose numbers depend on that path.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from bertology.errors import DataError, SettingError
from bertology.probing.names import PROBE_KINDS
from bertology.probing.solver import EXACT_MAX_ITER, GTOL, fit_multinomial
from bertology.probing.trainer import (
    RIDGE_START_SCALE,
    STOP_RULES,
    _accuracy_per_problem,
    _init_classifier,
    _nll_per_problem,
    _ridge_start,
    _linear_loss_and_grad,
    _train_batched,
    _TrainResult,
    _TrainRule,
    _weight_penalty,
)
from bertology.runtime import derive_seed, resolve_device

DEFAULT_L2 = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)
"""The exact linear probe's default L2 grid, every decade from 1e-5 to 1e3. The loss is ``mean cross-entropy +
l2/2 * ||W||^2`` on standardised features, so ``l2 = 1 / (C * n_train)`` in scikit-learn's parametrisation (C=1
with 4,000 examples is l2=2.5e-4). The path walks it from 1e-2 (:data:`~bertology.probing.solver.PATH_START`)
only as far as the dev cross-entropy falls. The former grid stopped at 1e-2, and on MiniLM every SentEval task
but WC chose that end on (nearly) every layer: its optimum lay beyond it (1e-1 .. 1e3: a few hundred to two
thousand training sentences of 384 features), and the layers' test accuracies were up to 4 points lower
(docs/probing.md, "The L2 grid"). At 1e3 a probe is almost its class prior tilted along each class's mean
feature difference: a layer that chooses it has next to no linear signal for the task."""

TRAINED_L2 = (1e-5, 1e-4, 1e-3, 1e-2)
"""The L2 grid of the probes trained by gradient steps (the MLP, the scalar mix, ``stop="early"``): they train
every value of the grid at once and choose on dev accuracy, so each value costs a whole training run, and the
former grid is kept for them."""


def default_grid(kind: str = "linear", stop: str = "converged", optimizer: str | None = None) -> tuple[float, ...]:
    """The L2 grid a probe uses when it is given none (``l2=None``): :data:`DEFAULT_L2` for the exact linear
    probe, :data:`TRAINED_L2` for the others."""
    return DEFAULT_L2 if _is_exact(kind, stop, optimizer) else TRAINED_L2


def grid_of(l2, kind: str = "linear", options: dict | None = None):
    """``l2`` as given, or for ``None`` the :func:`default_grid` of a probe of ``kind`` with ``options`` (its
    other settings: ``stop``, ``optimizer``): the grid a run records in its meta."""
    if l2 is not None:
        return l2
    options = options or {}
    return default_grid(kind, options.get("stop", "converged"), options.get("optimizer"))


def _is_exact(kind: str, stop: str, optimizer: str | None) -> bool:
    """Whether a probe of these settings is the exact linear probe (:func:`fit_multinomial`)."""
    return kind == "linear" and stop == "converged" and (optimizer or "lbfgs") == "lbfgs"

# ----------------------------------------------------------------------------------------------
# input handling


def as_layer_tensor(X, name: str = "X") -> np.ndarray:
    """Bring features to ``[n_layers, n, dim]`` float32: accepts that, one ``[n, dim]`` layer, or a list
    of ``[n, dim]`` arrays (one per layer)."""
    if isinstance(X, torch.Tensor):
        X = X.detach().cpu().numpy()
    if isinstance(X, (list, tuple)):
        if not X:
            raise DataError(f"{name}: empty list of layers; expected one [n, dim] array per layer")
        shapes = {np.shape(x) for x in X}
        if len(shapes) != 1:
            raise DataError(f"{name}: layers have different shapes {sorted(shapes)}; expected one [n, dim] each")
        X = np.stack([np.asarray(x, dtype=np.float32) for x in X])
    X = np.asarray(X, dtype=np.float32)
    if X.ndim == 2:
        X = X[None]
    if X.ndim != 3:
        raise DataError(f"{name}: shape {X.shape}; expected [n_layers, n, dim] or [n, dim]")
    if X.shape[1] == 0:
        raise DataError(f"{name}: no examples (shape {X.shape})")
    if not np.isfinite(X).all():
        raise DataError(f"{name}: contains NaN or infinite values")
    return X


def _check_grid(l2) -> tuple[float, ...]:
    grid = (float(l2),) if np.isscalar(l2) else tuple(float(v) for v in l2)
    if not grid or any(v < 0 or not math.isfinite(v) for v in grid):
        raise SettingError("l2", l2, "expected a non-negative number or a non-empty list of them")
    # Strongest regularisation first: argmax then breaks dev-score ties toward the simpler probe.
    return tuple(sorted(set(grid), reverse=True))


class _LabelCoder:
    """Labels of any hashable type <-> class indices; labels never seen in training map to -1."""

    def __init__(self, y_train: np.ndarray):
        self.classes_ = np.unique(np.asarray(y_train))
        self._index = {label: i for i, label in enumerate(self.classes_.tolist())}

    def encode(self, y, name: str) -> np.ndarray:
        y = np.asarray(y)
        if y.ndim != 1:
            raise DataError(f"{name}: shape {y.shape}; expected a 1-D array of labels")
        return np.fromiter((self._index.get(v, -1) for v in y.tolist()), dtype=np.int64, count=len(y))


def _standardise(X: np.ndarray, mean: np.ndarray, scale: np.ndarray, device: torch.device) -> torch.Tensor:
    # In place on one copy: numpy's (X - mean) / scale allocates twice, a second of the fit on a large dev split.
    out = torch.from_numpy(np.asarray(X)).to(device, copy=True)
    return out.sub_(torch.from_numpy(np.asarray(mean)).to(device)).div_(torch.from_numpy(np.asarray(scale)).to(device))


# A feature whose spread is below this fraction of its layer's mean feature spread is constant up to rounding.
# An absolute cut (1e-6 before) is not one: MiniLM's last layer has three dimensions that are exactly 0 on every
# input, features moved by 1e-6 gave them a spread of about 1e-6, and dividing by it turned that noise into a
# unit-variance feature the probe then used (the last layer's test accuracy moved by up to 1.7 points).
CONSTANT_SPREAD = 1e-4


def standard_scale(std: np.ndarray) -> np.ndarray:
    """The divisor that standardises features of spread ``std`` (``[..., dim]``, one row per layer): ``std``,
    or 1 for a feature that is constant up to rounding (spread at most ``CONSTANT_SPREAD`` of its layer's mean
    spread), which standardising would only turn into amplified noise."""
    std = np.asarray(std)
    floor = CONSTANT_SPREAD * std.mean(axis=-1, keepdims=True)
    return np.where(std > floor, std, 1.0).astype(np.float32)


def _fit_scaler(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-layer, per-feature standardisation from the training split (so one L2 grid suits every layer)."""
    mean = X.mean(axis=1, keepdims=True)
    return mean, standard_scale(X.std(axis=1, keepdims=True))


def _is_layered(X) -> bool:
    """True for ``[n_layers, n, dim]`` input (an array or tensor of 3 dimensions, or a list of 2-D layers)."""
    if isinstance(X, (list, tuple)):
        return len(X) > 0 and np.ndim(X[0]) == 2
    return getattr(X, "ndim", None) == 3


class _ProbeBase(ClassifierMixin, BaseEstimator):
    """What the layer-wise probe and the scalar mix share: parameters, input checks, standardisation.

    Input is either ``[n_layers, n, dim]`` (or a list of ``[n, dim]`` layers): the probing use; or a plain
    ``[n, dim]`` matrix: one layer, validated exactly as any scikit-learn classifier's input (this is the
    view on which ``sklearn.utils.estimator_checks`` runs).
    """

    def __init__(self, kind: str = "linear", l2: float | Sequence[float] | None = None, hidden: int = 128,
                 seed: int = 0, device: str | None = "auto", optimizer: str | None = None,
                 max_iter: int | None = None, eval_every: int | None = None, patience: int = 2,
                 tol: float = 2e-3, lr: float = 1e-3, batch_size: int = 256, stop: str = "converged",
                 gtol: float = GTOL):
        self.kind = kind
        self.l2 = l2
        self.hidden = hidden
        self.seed = seed
        self.device = device
        self.optimizer = optimizer
        self.max_iter = max_iter
        self.eval_every = eval_every
        self.patience = patience
        self.tol = tol
        self.lr = lr
        self.batch_size = batch_size
        self.stop = stop
        self.gtol = gtol

    def _validate(self, X, y=None, *, reset: bool, name: str = "X"):
        """``X`` as float32 ``[n_layers, n, dim]`` (and ``y`` as a 1-D array), checked against the fit."""
        layered = _is_layered(X)
        if layered:
            X = as_layer_tensor(X, name)
            if reset:
                self.n_features_in_ = X.shape[2]
                self.__dict__.pop("feature_names_in_", None)  # a previous fit on a DataFrame
            elif X.shape[2] != self.n_features_in_ or X.shape[0] != self.n_layers_:
                raise DataError(f"{name} shape {X.shape}; the probe was fitted on {self.n_layers_} layers of "
                                f"dim {self.n_features_in_}")
            if y is not None:
                y = np.asarray(y)
                if y.ndim != 1 or y.shape[0] != X.shape[1]:
                    raise DataError(f"y: {y.shape[0] if y.ndim else 0} labels for {X.shape[1]} examples in "
                                    f"{name}; expected one label per example")
            return X, y
        if not reset and self.n_layers_ != 1:
            raise DataError(f"{name} is one [n, dim] matrix; the probe was fitted on {self.n_layers_} layers, "
                            "expected [n_layers, n, dim]")
        if y is None:
            X = validate_data(self, X, reset=reset, dtype=[np.float32, np.float64])
        else:
            X, y = validate_data(self, X, y, reset=reset, dtype=[np.float32, np.float64])
        return np.ascontiguousarray(X, dtype=np.float32)[None], y

    def _setup(self, X_train, y_train, X_dev, y_dev):
        X_train, y_train, X_dev, y_dev = self._check_fit(X_train, y_train, X_dev, y_dev)
        gen = torch.Generator().manual_seed(int(self.seed))
        data = (
            _standardise(X_train, self._mean, self._scale, self.device_),
            torch.from_numpy(self._coder.encode(y_train, "y_train")).to(self.device_),
            _standardise(X_dev, self._mean, self._scale, self.device_),
            torch.from_numpy(self._coder.encode(y_dev, "y_dev")).to(self.device_),
        )
        return data, gen

    def _check_fit(self, X_train, y_train, X_dev, y_dev):
        """The checks and the state of a fit before any training: the inputs validated (10% of train held out
        for dev when no dev split is given), the label coder, the device, the L2 grid and the standardisation
        (from the training split). Returns ``(X_train, y_train, X_dev, y_dev)``."""
        if self.kind not in PROBE_KINDS:
            raise SettingError("kind", self.kind, f"expected one of {', '.join(PROBE_KINDS)}")
        if y_train is None:
            raise DataError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        X_train, y_train = self._validate(X_train, y_train, reset=True, name="X_train")
        if y_train.dtype != object:  # object arrays hold labels of any hashable type (strings, bools, tuples)
            check_classification_targets(y_train)
        self.n_layers_ = X_train.shape[0]
        if len(np.unique(y_train)) < 2:
            raise DataError(f"y_train has one class only ({np.unique(y_train).tolist()}); a probe needs at least "
                            "two classes")
        if X_dev is None:
            if X_train.shape[1] < 2:
                raise DataError("X_train has 1 sample; a probe needs at least 2 (10% are held out for dev)")
            # No dev split given: hold out 10% of train (seeded) so selection still never sees test.
            rng = np.random.default_rng(derive_seed(self.seed, "dev-holdout"))
            order = rng.permutation(X_train.shape[1])
            n_dev = max(1, X_train.shape[1] // 10)
            X_dev, y_dev = X_train[:, order[:n_dev]], y_train[order[:n_dev]]
            X_train, y_train = X_train[:, order[n_dev:]], y_train[order[n_dev:]]
        else:
            X_dev, y_dev = self._validate(X_dev, y_dev, reset=False, name="X_dev")
        self._coder = _LabelCoder(y_train)
        self.classes_ = self._coder.classes_
        if len(self.classes_) < 2:
            raise DataError(f"y_train has one class only ({self.classes_.tolist()}) after holding out dev; "
                            "a probe needs at least two classes")
        self.device_ = resolve_device(self.device)
        self.l2_grid_ = _check_grid(self._default_grid() if self.l2 is None else self.l2)
        self._mean, self._scale = _fit_scaler(X_train)
        return X_train, y_train, X_dev, y_dev

    def _optimizer(self) -> str:
        return self.optimizer or ("lbfgs" if self.kind == "linear" else "adam")

    def _default_grid(self) -> tuple[float, ...]:
        """The L2 grid of ``l2=None`` (:func:`default_grid`; the scalar mix is never exact)."""
        return TRAINED_L2

    def _train(self, params, l2, data, gen, group):
        optimizer = self._optimizer()
        rule = _TrainRule(optimizer=optimizer, max_iter=self.max_iter or (300 if optimizer == "lbfgs" else 100),
                          eval_every=self.eval_every or (5 if optimizer == "lbfgs" else 1), patience=self.patience,
                          lr=self.lr, batch_size=self.batch_size, tol=self.tol, stop=self.stop)
        return _train_batched(
            params, self._forward, _weight_penalty(l2), tuple(data), rule, generator=gen, sample_axis=1, group=group,
            loss_and_grad=_linear_loss_and_grad(l2) if self.kind == "linear" and "mix" not in params else None,
        )

    def _prepare(self, X, y=None):
        """Standardised features ``[n_layers, n, dim]`` on the device (and class indices), plus whether the
        input was layered."""
        check_is_fitted(self, "params_")
        layered = _is_layered(X)
        X, y = self._validate(X, y, reset=False)
        Xt = _standardise(X, self._mean, self._scale, self.device_)
        if y is None:
            return Xt, None, layered
        return Xt, torch.from_numpy(self._coder.encode(y, "y")).to(self.device_), layered

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


class LayerwiseProbe(_ProbeBase):
    """One probe per layer, all trained in one batched pass; a scikit-learn classifier.

    ``kind="linear"`` is multinomial logistic regression (full-batch L-BFGS by default), ``"mlp"`` one
    hidden ReLU layer of ``hidden`` units (mini-batch Adam). ``l2`` is a grid (``None``: :func:`default_grid`,
    1e-5 .. 1e3 for the exact linear probe, 1e-5 .. 1e-2 for the others); every layer picks its own value (and,
    with ``early``, its stopping point) on the dev split. ``device``: ``"auto"`` (cuda if available), ``"cpu"``,
    ``"cuda"`` (:func:`bertology.runtime.resolve_device`). ``seed`` sets the initialisation, Adam's batch
    order and, when no dev split is given, which 10% of train is held out (``derive_seed(seed,
    "dev-holdout")``).

    ``warm_start`` (linear only): with ``converged``, each L2 value starts from the optimum of its neighbour on
    the path (continuation; the optimum is the same; without it each value starts from zero and may take
    ``solver.COLD_ITER_FACTOR`` times ``max_iter``); with ``early``, L-BFGS starts from the
    ridge-regression solution onto centred one-hot labels.

    ``polish`` (the exact linear probe only): solve each layer's chosen L2 value again in float64
    (:func:`polish_multinomial`), so that the number does not depend on the float32 solver's path;
    ``"unconverged"``: only the layers whose float32 solve stopped on the iteration cap before ``gtol``, a
    faster approximation: where the solve reached ``gtol`` the polish moves the probabilities by about the
    solver's tolerance, which still flips a few near-tied predictions of a weakly regularised many-class probe
    (on MiniLM's WC, bootstrap seeds' accuracies moved by about a point). The probing experiment polishes
    every fit.

    ``stop``: ``"converged"`` (the linear probe is solved exactly, :func:`fit_multinomial`, to a
    largest gradient entry of ``gtol``; the MLP trains until its training loss stops falling, see ``tol``;
    final weights kept, L2 chosen on dev from them; the default) or ``"early"`` (the former default: early
    stopping on dev, each probe keeping its best-on-dev checkpoint, which makes the numbers depend on the optimisation
    path: ``benchmarks/experiments/probing/compare_probe_runs.py``). ``tol``: with ``early``, the dev improvement that resets
    the patience; with the MLP's ``converged``, the fall of the epoch's mean training loss (nats) under which
    an epoch counts as flat (``patience`` flat epochs stop it).

    Scores: :meth:`score` returns one float, the test accuracy of the layer chosen on dev
    (``best_layer_index_``); :meth:`score_layers` returns every layer's accuracy. Input ``[n, dim]`` is one
    layer and gives scikit-learn's shapes (``predict`` -> ``[n]``).

    After ``fit``: ``classes_``, ``n_features_in_``, ``n_layers_``, ``l2_grid_`` (strongest first),
    ``dev_scores_`` ``[n_layers, n_l2]`` (dev accuracy; the exact probe: ``-inf`` for the values a layer
    did not reach, :func:`fit_multinomial`), ``dev_losses_`` (the exact probe only: the mean dev cross-entropy
    it chooses on, ``inf`` where not reached), ``best_l2_`` ``[n_layers]``, ``best_layer_index_`` (the best
    dev accuracy at the chosen values), ``n_iter_``.
    """

    def __init__(self, kind: str = "linear", l2: float | Sequence[float] | None = None, hidden: int = 128,
                 seed: int = 0, device: str | None = "auto", optimizer: str | None = None,
                 max_iter: int | None = None, eval_every: int | None = None, patience: int = 2,
                 tol: float = 2e-3, lr: float = 1e-3, batch_size: int = 256, warm_start: bool = True,
                 stop: str = "converged", gtol: float = GTOL, polish: bool | str = True):
        super().__init__(kind=kind, l2=l2, hidden=hidden, seed=seed, device=device, optimizer=optimizer,
                         max_iter=max_iter, eval_every=eval_every, patience=patience, tol=tol, lr=lr,
                         batch_size=batch_size, stop=stop, gtol=gtol)
        self.warm_start = warm_start
        self.polish = polish

    def fit(self, X, y, X_dev=None, y_dev=None) -> "LayerwiseProbe":
        """Fit one probe per layer and L2 value; keep, per layer, the L2 value best on the dev split.

        ``X``: ``[n_layers, n, dim]`` features (or a list of ``[n, dim]`` layers, or one ``[n, dim]``
        layer); ``y``: ``[n]`` labels of any hashable type. ``X_dev`` ``[n_layers, n_dev, dim]`` and
        ``y_dev`` ``[n_dev]`` choose the L2 strength and the stopping point; without them 10% of ``X`` is
        held out for that. Returns ``self``.
        """
        data, gen = self._setup(X, y, X_dev, y_dev)
        L, G, C = self.n_layers_, len(self.l2_grid_), len(self.classes_)
        if self.stop not in STOP_RULES:
            raise SettingError("stop", self.stop, f"expected one of {', '.join(STOP_RULES)}")
        if self._exact():
            result = self._fit_exact(data, C)
        else:
            l2 = torch.tensor(self.l2_grid_, dtype=torch.float32, device=self.device_).expand(L, G)
            params = _init_classifier(self.kind, (L, G), self.n_features_in_, C, self.hidden, gen, self.device_)
            if self.kind == "linear" and self.warm_start:
                params["W"] = _ridge_start(data[0], data[1], C, l2) * RIDGE_START_SCALE
            result = self._train(params, l2, data, gen, group=lambda acc: acc.max(dim=1).values)
        return self._keep(result)

    def _exact(self) -> bool:
        """Whether a fit is the exact linear probe (:meth:`_fit_exact`)."""
        return _is_exact(self.kind, self.stop, self.optimizer)

    def _default_grid(self) -> tuple[float, ...]:
        return default_grid(self.kind, self.stop, self.optimizer)

    def _keep(self, result: _TrainResult) -> "LayerwiseProbe":
        """The fitted state from a training result of every layer and L2 value: each layer's value chosen on
        dev (its parameters kept), the layer chosen on dev, the scores."""
        L = self.n_layers_
        self.dev_scores_ = result.dev_accuracy.cpu().numpy()
        if result.dev_loss is not None:
            self.dev_losses_ = result.dev_loss.cpu().numpy()
            best = self.dev_losses_.argmin(axis=1)  # first min = strongest L2 among ties
        else:
            self.__dict__.pop("dev_losses_", None)
            best = self.dev_scores_.argmax(axis=1)  # first max = strongest L2 among ties
        self.best_index_ = best
        self.best_l2_ = np.asarray(self.l2_grid_)[best]
        # First max over layers of the chosen values' dev accuracy: the lower layer among ties.
        self.best_layer_index_ = int(self.dev_scores_[np.arange(L), best].argmax())
        rows = torch.arange(L, device=self.device_)
        pick = torch.from_numpy(best).to(self.device_)
        # Keep a grid axis of size 1 so fitted and grid parameters share one forward.
        self.params_ = {k: v[rows, pick].unsqueeze(1) for k, v in result.params.items()}
        self.n_iter_ = result.n_steps
        return self

    def _fit_exact(self, data, n_classes: int) -> _TrainResult:
        """Every layer and L2 value solved to its optimum (:func:`fit_multinomial`); ``warm_start``: each L2
        value starts from the optimum of its neighbour on the path (else from zero: the same optimum, more steps).

        The path and the choice are made on the dev cross-entropy, not the dev accuracy: accuracy is a step
        function, and two L2 values a dev example or two apart tied or swapped under a 1e-6 change of the
        features (and with them the layer's test accuracy, by several points on SentLen in one-off checks); the cross-entropy
        moves by about as little as the features. The chosen value is then polished in float64
        (``POLISH_GTOL``) as ``polish`` says."""
        Xtr, ytr, Xdv, ydv = data
        known = ydv >= 0  # dev labels the training split never saw: always wrong, and no term of the loss

        def dev_logits(W, b, layers):
            # All layers: no copy of the dev features (the largest tensor of a fit).
            return torch.baddbmm(b.unsqueeze(1), Xdv if len(layers) == len(Xdv) else Xdv[layers], W)

        def dev_fit(W, b, layers):  # higher is better: minus the mean dev cross-entropy
            if not bool(known.any()):
                return torch.zeros(len(layers), dtype=torch.float64, device=Xdv.device)
            return -_nll_per_problem(dev_logits(W, b, layers)[:, known].double(), ydv[known])

        W, b, iterations, fit = fit_multinomial(Xtr, ytr, n_classes, self.l2_grid_, gtol=self.gtol,
                                                max_iter=self.max_iter or EXACT_MAX_ITER,
                                                continuation=self.warm_start, score=dev_fit,
                                                polish=self.polish)
        L, G = fit.shape
        accuracy = torch.full_like(fit, -math.inf)
        for g in range(G):
            reached = torch.isfinite(fit[:, g]).nonzero().squeeze(1)
            if len(reached):
                logits = dev_logits(W[reached, g], b[reached, g], reached)
                accuracy[reached, g] = (logits.argmax(-1) == ydv).to(torch.float64).mean(-1)
        return _TrainResult(params={"W": W, "b": b}, dev_accuracy=accuracy, n_steps=iterations, dev_loss=-fit)

    def _forward(self, params, X):
        """X [L, n, d] -> logits [L, G, n, C]."""
        if "W" in params:
            return torch.einsum("lnd,lgdc->lgnc", X, params["W"]) + params["b"].unsqueeze(-2)
        h = torch.relu(torch.einsum("lnd,lgdh->lgnh", X, params["W1"]) + params["b1"].unsqueeze(-2))
        return torch.einsum("lgnh,lghc->lgnc", h, params["W2"]) + params["b2"].unsqueeze(-2)

    def _logits(self, X, y=None):
        Xt, yt, layered = self._prepare(X, y)
        with torch.no_grad():
            return self._forward(self.params_, Xt)[:, 0], yt, layered

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities: ``[n_layers, n, n_classes]`` for layered input, ``[n, n_classes]`` for one
        ``[n, dim]`` layer."""
        logits, _, layered = self._logits(X)
        proba = torch.softmax(logits, -1).cpu().numpy()
        return proba if layered else proba[0]

    def predict(self, X) -> np.ndarray:
        """Predicted labels (in the label space of ``y``): ``[n_layers, n]``, or ``[n]`` for one layer."""
        logits, _, layered = self._logits(X)
        labels = self.classes_[logits.argmax(-1).cpu().numpy()]
        return labels if layered else labels[0]

    def score_layers(self, X, y) -> np.ndarray:
        """Accuracy of every layer's probe, ``[n_layers]`` (fractions). Labels unseen in training count wrong."""
        logits, yt, _ = self._logits(X, y)
        return _accuracy_per_problem(logits, yt).cpu().numpy()

    def score(self, X, y) -> float:
        """Accuracy (a fraction) of the layer chosen on dev, ``best_layer_index_``; one float."""
        return float(self.score_layers(X, y)[self.best_layer_index_])


class ScalarMixProbe(_ProbeBase):
    """One probe over a learned softmax-weighted mix of all layers (Tenney et al. 2019's scalar mix).

    Each layer is standardised first; the mix is ``sum_l softmax(s)_l * x_l``. The usual scalar ``gamma``
    is left out: with an L2 penalty on the classifier it would grow without bound to dodge the penalty.
    After ``fit``: ``layer_weights_`` ``[n_layers]`` (the reported softmax weights), ``best_l2_``,
    ``dev_scores_`` ``[n_l2]``, ``n_iter_``. ``predict`` gives ``[n]`` labels, ``score`` one accuracy.
    """

    def __init__(self, kind: str = "linear", l2: float | Sequence[float] | None = None, hidden: int = 128,
                 seed: int = 0, device: str | None = "auto", optimizer: str | None = None,
                 max_iter: int | None = None, eval_every: int | None = None, patience: int = 2,
                 tol: float = 2e-3, lr: float = 1e-3, batch_size: int = 256, stop: str = "early",
                 gtol: float = GTOL):
        # The mix weights make this problem non-convex: there is no one optimum to solve for, so the scalar mix
        # keeps the early-stopped rule by default (the layer-wise probes are the exact ones).
        super().__init__(kind=kind, l2=l2, hidden=hidden, seed=seed, device=device, optimizer=optimizer,
                         max_iter=max_iter, eval_every=eval_every, patience=patience, tol=tol, lr=lr,
                         batch_size=batch_size, stop=stop, gtol=gtol)

    def fit(self, X, y, X_dev=None, y_dev=None) -> "ScalarMixProbe":
        """Fit the mix weights and the classifier together for every L2 value; keep the one best on dev.

        ``X``: ``[n_layers, n, dim]`` (or a list of ``[n, dim]`` layers, or one ``[n, dim]`` layer);
        ``y``: ``[n]`` labels; ``X_dev``/``y_dev`` as in :meth:`LayerwiseProbe.fit`. Returns ``self``.
        """
        data, gen = self._setup(X, y, X_dev, y_dev)
        L, G, C = self.n_layers_, len(self.l2_grid_), len(self.classes_)
        l2 = torch.tensor(self.l2_grid_, dtype=torch.float32, device=self.device_)
        params = _init_classifier(self.kind, (G,), self.n_features_in_, C, self.hidden, gen, self.device_)
        params["mix"] = torch.zeros(G, L, device=self.device_)
        result = self._train(params, l2, data, gen, group=lambda acc: acc.max(dim=0, keepdim=True).values)
        self.dev_scores_ = result.dev_accuracy.cpu().numpy()
        best = int(self.dev_scores_.argmax())
        self.best_index_ = best
        self.best_l2_ = self.l2_grid_[best]
        self.params_ = {k: v[best : best + 1] for k, v in result.params.items()}
        self.layer_weights_ = torch.softmax(self.params_["mix"][0], -1).cpu().numpy()
        self.n_iter_ = result.n_steps
        return self

    def _forward(self, params, X):
        """X [L, n, d] -> logits [G, n, C]."""
        mixed = torch.einsum("gl,lnd->gnd", torch.softmax(params["mix"], -1), X)
        if "W" in params:
            return torch.einsum("gnd,gdc->gnc", mixed, params["W"]) + params["b"].unsqueeze(-2)
        h = torch.relu(torch.einsum("gnd,gdh->gnh", mixed, params["W1"]) + params["b1"].unsqueeze(-2))
        return torch.einsum("gnh,ghc->gnc", h, params["W2"]) + params["b2"].unsqueeze(-2)

    def predict_proba(self, X) -> np.ndarray:
        """``[n, n_classes]`` class probabilities of the mixed representation."""
        Xt, _, _ = self._prepare(X)
        with torch.no_grad():
            return torch.softmax(self._forward(self.params_, Xt)[0], -1).cpu().numpy()

    def predict(self, X) -> np.ndarray:
        """``[n]`` predicted labels."""
        Xt, _, _ = self._prepare(X)
        with torch.no_grad():
            return self.classes_[self._forward(self.params_, Xt)[0].argmax(-1).cpu().numpy()]

    def score(self, X, y) -> float:
        """Accuracy (a fraction); labels unseen in training count wrong."""
        Xt, yt, _ = self._prepare(X, y)
        with torch.no_grad():
            return float(_accuracy_per_problem(self._forward(self.params_, Xt)[0], yt))
