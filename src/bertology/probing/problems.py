"""The training data of a group of exact linear probes solved together, and its packed layout.

A *group* (:func:`bertology.probing.solver.fit_multinomial` with labels ``[groups, n]``) is several fits on the
same features: a probe's point fit, its bootstrap resamples and its control task. Problem ``p`` is feature set
(layer) ``p // groups``'s fit ``p % groups``; :class:`_Problems` holds their labels, example weights, per-feature
penalty weights and absent classes, and computes their loss and gradient with one product of each layer's
features with all its problems' weight matrices side by side (:class:`_Layout`), turned round on the features
stored transposed where that is faster (:func:`_products`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Group:
    """What a group's fits add to their labels (:func:`bertology.probing.solver.fit_multinomial`): each fit's
    example ``weights`` ``[groups, n]`` (a resample's counts over its size; None: the mean), per-feature
    ``penalty`` weights ``[n_layers * groups, dim]`` of the L2 term (a resample standardised its own way is this
    problem after a change of variables: :func:`bertology.probing.fits.fit_group`), and ``mask_absent``: a class
    without weight in a fit is left out of it (:data:`ABSENT_LOGIT`)."""

    weights: torch.Tensor | None = None
    penalty: torch.Tensor | None = None
    mask_absent: bool = False


#: The logit offset of a class that a problem of a group never sees in training (:class:`_Problems`): its
#: probability is then exactly 0 in float32 and float64, so its weights and bias stay at 0, as if the problem
#: had been solved without that class (an unpenalised bias would otherwise run off towards minus infinity).
ABSENT_LOGIT = -1e4


class _Layout:
    """Where a subset of problems sits when the problems of each feature set are computed side by side.

    Problem ``p`` is the ``p % groups``-th problem of feature set ``p // groups``. For problems ``rows`` (sorted),
    ``sets`` are their feature sets, ``position`` each row's index in ``sets``, ``slot`` its place among its set's
    rows and ``width`` the most rows of one set: one product of a set's features with its rows' weight matrices
    side by side (``[dim, width * classes]``) costs much less than as many narrow ones."""

    def __init__(self, rows: torch.Tensor, groups: int, n_sets: int):
        of = torch.div(rows, groups, rounding_mode="floor")
        self.sets, counts = torch.unique_consecutive(of, return_counts=True)
        self.position = torch.repeat_interleave(torch.arange(len(self.sets), device=rows.device), counts)
        self.slot = torch.arange(len(rows), device=rows.device) - (torch.cumsum(counts, 0) - counts)[self.position]
        self.width = int(counts.max()) if len(rows) else 0
        # Every problem of every set, in order: packing is a reshape.
        self.whole = len(rows) == len(self.sets) * groups and self.width == groups
        self.all_sets = len(self.sets) == n_sets
        self.targets = None  # (labels, weights) in this layout, made by _Problems on first use

    def take(self, values: torch.Tensor) -> torch.Tensor:
        """``[sets, width, ...]`` -> ``[rows, ...]``: each row's slot."""
        if self.width == 1:
            return values[:, 0]
        if self.whole:
            return values.reshape(-1, *values.shape[2:])
        return values[self.position, self.slot]

    def pack(self, values: torch.Tensor) -> torch.Tensor:
        """``[rows, a, C]`` -> ``[sets, a, width * C]`` (zeros where a set has fewer rows)."""
        R, a, C = values.shape
        S, M = len(self.sets), self.width
        if M == 1:
            return values
        if self.whole:
            return values.view(S, M, a, C).transpose(1, 2).reshape(S, a, M * C)
        out = values.new_zeros(S, a, M, C)
        out[self.position, :, self.slot] = values
        return out.view(S, a, M * C)

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`pack`: ``[sets, a, width * C]`` -> ``[rows, a, C]``."""
        S, a, MC = packed.shape
        M = self.width
        if M == 1:
            return packed
        C = MC // M
        if self.whole:
            return packed.view(S, a, M, C).transpose(1, 2).reshape(S * M, a, C)
        return packed.view(S, a, M, C)[self.position, :, self.slot]


#: The widest product (a layer's problems side by side times the classes) turned round (:func:`_products`), by
#: dtype: beyond it turned round is no faster, and at XPOS's eight fits (376 columns) 5-17% slower
#: (``benchmarks/perf/bench_probe_layout.py``).
NARROW = {torch.float32: 128, torch.float64: 256}


class _Layouts:
    """A one-entry cache of :class:`_Layout` (the problems still running change only when one stops) and of the
    feature sets it selects, as they lie (a copy unless every set is in, made when first asked for)."""

    def __init__(self, groups: int):
        self.groups, self._key, self._value = groups, None, None  # _value: [layout, its features or None]

    def get(self, rows: torch.Tensor, n_sets: int) -> _Layout:
        if self._key is None or not torch.equal(self._key, rows):
            self._key, self._value = rows.clone(), [_Layout(rows, self.groups, n_sets), None]
        return self._value[0]

    def features(self, rows: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """The feature sets of :meth:`get` ``(rows)`` of ``X``: ``X`` itself, or a copy of the sets it selects."""
        layout = self.get(rows, X.shape[0])
        if self._value[1] is None:
            self._value[1] = X if layout.all_sets else X[layout.sets]
        return self._value[1]


def _turned(XT: torch.Tensor, width: int) -> bool:
    """Whether a product ``width`` columns wide runs turned round (:data:`NARROW`)."""
    return width <= NARROW.get(XT.dtype, 0)


def _products(layout: _Layout, XT: torch.Tensor, left: torch.Tensor, features_first: bool = False) -> torch.Tensor:
    """``left @ XT[s]`` (``left`` ``[sets, a, dim]``: the logits turned round, ``W^T X^T``) or, with
    ``features_first``, ``left @ XT[s]^T`` (``left`` ``[sets, a, n]``: the gradient turned round, ``R^T X``) for
    each of the layout's sets ``s`` of the transposed features ``XT`` ``[sets, dim, n]``: one batched product when
    every set is in, else one product per set on views (no copy of a subset of the features).

    Why turned round: with the features ``[n, dim]`` as they lie, torch's CPU batched product of a narrow weight
    matrix (the classes of a few problems) streams them far below the machine's speed; ``W^T X^T`` and ``R^T X`` on
    the features stored ``[dim, n]`` give the same numbers up to rounding 1.3-4x faster for one fit in float32 and
    1.1-1.8x in float64 (``benchmarks/perf/bench_probe_layout.py``; :data:`NARROW` for the widest groups)."""
    if layout.all_sets:
        return torch.bmm(left, XT.transpose(1, 2) if features_first else XT)
    parts = [left[i] @ (XT[s].T if features_first else XT[s]) for i, s in enumerate(layout.sets.tolist())]
    return torch.stack(parts)


class _Problems:
    """The training data of ``sets x groups`` problems (problem ``p``: feature set ``p // groups``, the
    ``p % groups``-th problem of it): features ``X`` ``[sets, n, dim]`` shared by a set's problems; per problem
    of a set, labels ``y`` ``[groups, n]`` and optional example ``weights`` ``[groups, n]`` (each row summing to
    1; default: the mean over examples); per problem an optional ``penalty`` ``[problems, dim]`` weighting the
    L2 term of each feature's weights (``l2/2 sum_j penalty_j ||W_j||^2``). ``mask_absent``: a class with no
    weight in a problem's training data is left out of that problem (:data:`ABSENT_LOGIT`).

    The loss and its gradient are computed in the packed layout of :class:`_Layout` (``[sets, n, width,
    classes]``): the log-probabilities, the picked labels and the residual never leave it, so that solving
    problems together adds no pass over ``n x classes`` values per problem."""

    def __init__(self, X: torch.Tensor, y: torch.Tensor, n_classes: int, weights: torch.Tensor | None = None,
                 penalty: torch.Tensor | None = None, mask_absent: bool = False):
        y = y.reshape(1, -1) if y.dim() == 1 else y
        # The features as they lie and transposed, [sets, dim, n] contiguous (the products turned round: _products).
        self.XT = X.transpose(1, 2).contiguous()
        self.X, self.groups, self.labels = X, y.shape[0], y
        self.n_sets, self.n, self.dim = X.shape
        self.size, self.n_classes = self.n_sets * self.groups, n_classes
        self.weights = None if weights is None else weights.to(X.dtype)
        self.mask = None
        if mask_absent:
            mass = torch.ones_like(y, dtype=X.dtype) if self.weights is None else self.weights
            present = torch.zeros(self.groups, n_classes, dtype=X.dtype, device=X.device).scatter_add_(1, y, mass) > 0
            if not bool(present.all()):
                self.mask = torch.where(present, 0.0, ABSENT_LOGIT).to(X.dtype)
        self.penalty = None if penalty is None else penalty.to(X.dtype)
        self.layouts = _Layouts(self.groups)

    def to(self, dtype: torch.dtype, sets: torch.Tensor) -> "_Problems":
        """The problems of feature sets ``sets`` in ``dtype`` (the float64 polish)."""
        other = object.__new__(_Problems)
        other.__dict__.update(self.__dict__)
        other.XT = self.XT[sets].to(dtype)
        other.X = other.XT.transpose(1, 2)  # a view (read only by a product not turned round, and the refresh)
        other.n_sets, other.size = len(sets), len(sets) * self.groups
        other.weights = None if self.weights is None else self.weights.to(dtype)
        other.mask = None if self.mask is None else self.mask.to(dtype)
        rows = (sets[:, None] * self.groups + torch.arange(self.groups, device=sets.device)).reshape(-1)
        other.penalty = None if self.penalty is None else self.penalty[rows].to(dtype)
        other.layouts = _Layouts(self.groups)
        return other

    def scaled_l2(self, l2: torch.Tensor) -> torch.Tensor:
        """The L2 strength a preconditioner takes for each problem (the penalty weights' mean)."""
        return l2 if self.penalty is None else l2 * self.penalty.mean(-1)

    def _kinds(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.remainder(rows, self.groups)

    def _targets(self, layout: _Layout, rows: torch.Tensor):
        """The labels ``[sets, n, width]`` and example weights (the same shape; None: the mean) of ``rows`` in
        ``layout`` (a padding slot takes kind 0's: its results are never read)."""
        if layout.targets is None:
            S, M = len(layout.sets), max(1, layout.width)
            if self.groups == 1:
                labels = self.labels[0].view(1, self.n, 1).expand(S, self.n, M)
                weights = None if self.weights is None else self.weights[0].view(1, self.n, 1).expand(S, self.n, M)
            else:
                kinds = torch.zeros(S, M, dtype=torch.long, device=rows.device)
                kinds[layout.position, layout.slot] = self._kinds(rows)
                labels = self.labels[kinds].transpose(1, 2)
                weights = None if self.weights is None else self.weights[kinds].transpose(1, 2)
            layout.targets = (labels, weights)
        return layout.targets

    def loss(self, W, b, rows, l2, bias_l2, grad: bool = True, keep_prob: bool = False):
        """Loss of every problem ``rows`` (float64; the weighted or mean cross-entropy + ``l2/2 ||W||^2``, penalty
        weighted, + ``bias_l2/2 ||b||^2``), and with ``grad`` its closed-form gradient (:meth:`gradient`):
        ``(loss, grad_W, grad_b, p)``; without: ``(loss, packed)``, the log-probabilities for :meth:`gradient`."""
        layout = self.layouts.get(rows, self.n_sets)
        bias = b if self.mask is None else b + self.mask[self._kinds(rows)]
        logp = torch.log_softmax(self._logits(layout, rows, W, bias), -1)
        labels, weights = self._targets(layout, rows)
        picked = logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # [S, n, M]
        # Summed in float64: near the optimum a step lowers the loss by less than float32 resolves (about 1e-7 of
        # it), and the line search and the flat-loss stop compare losses.
        data = -(picked.double().mean(1) if weights is None else (picked * weights).double().sum(1))  # [S, M]
        squares = W.pow(2) if self.penalty is None else W.pow(2) * self.penalty[rows].unsqueeze(-1)
        loss = (layout.take(data) + 0.5 * l2.double() * squares.double().sum((-2, -1))
                + 0.5 * bias_l2.double() * b.double().pow(2).sum(-1))
        if not grad:
            return loss, (logp, layout)
        return (loss, *self.gradient(W, b, rows, l2, bias_l2, (logp, layout), keep_prob))

    def gradient(self, W, b, rows, l2, bias_l2, packed, keep_prob: bool = False):
        """The gradient of :meth:`loss` from its packed log-probabilities (consumed): ``(grad_W, grad_b, p)``,
        ``p`` the class probabilities ``[rows, n, C]`` with ``keep_prob`` (the preconditioner's refresh), else
        None."""
        logp, layout = packed
        labels, weights = self._targets(layout, rows)
        p = logp.exp_()  # [S, n, M, C]
        prob = layout.take(p.transpose(1, 2)).clone() if keep_prob else None  # before the residual overwrites p
        index = labels.unsqueeze(-1)
        if weights is None:
            residual = p.scatter_add_(-1, index, torch.full(index.shape, -1.0, dtype=p.dtype, device=p.device))
            residual = residual.div_(self.n)
        else:
            residual = p.mul_(weights.unsqueeze(-1)).scatter_add_(-1, index, -weights.unsqueeze(-1))
        grad_W = self._back(layout, rows, residual)
        shrink = W if self.penalty is None else W * self.penalty[rows].unsqueeze(-1)
        grad_W = grad_W.add_(l2[:, None, None] * shrink)
        grad_b = layout.take(residual.sum(1)).add_(bias_l2[:, None] * b)
        return grad_W, grad_b, prob

    def _logits(self, layout: _Layout, rows: torch.Tensor, W: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """``X W + bias`` of problems ``rows`` in ``layout``, packed: ``[sets, n, width, classes]``."""
        S, M = len(layout.sets), max(1, layout.width)
        if _turned(self.XT, M * self.n_classes):
            logits = _products(layout, self.XT, layout.pack(W).transpose(1, 2))  # [S, M * C, n]
            logits = logits.add_(layout.pack(bias.unsqueeze(1)).transpose(1, 2)).transpose(1, 2).contiguous()
        else:
            logits = torch.baddbmm(layout.pack(bias.unsqueeze(1)), self.layouts.features(rows, self.X), layout.pack(W))
        return logits.view(S, self.n, M, self.n_classes)

    def _back(self, layout: _Layout, rows: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """``X^T residual`` (``residual`` packed ``[sets, n, width, classes]``) of problems ``rows``:
        ``[rows, dim, classes]``."""
        S, M, C = len(layout.sets), max(1, layout.width), self.n_classes
        if _turned(self.XT, M * C):
            product = _products(layout, self.XT, residual.view(S, self.n, M * C).transpose(1, 2), features_first=True)
            return layout.unpack(product.transpose(1, 2).contiguous())
        Xs = self.layouts.features(rows, self.X)
        return layout.unpack(torch.bmm(Xs.transpose(1, 2), residual.view(S, self.n, M * C)))

    def curvature(self, V, vb, rows, l2, bias_l2, prob) -> tuple[torch.Tensor, torch.Tensor]:
        """The Hessian of :meth:`loss` at class probabilities ``prob`` (packed ``[sets, n, width, classes]``, of
        problems ``rows``) times the direction ``(V, vb)`` (``[rows, dim, C]``, ``[rows, C]``): the data term's
        ``X^T (M_i X V)_i`` with ``M_i = diag(p_i) - p_i p_i^T`` (example weighted), plus the L2 terms. Two
        products, as a gradient; a class absent from a problem has ``p = 0`` there and no curvature from data."""
        layout = self.layouts.get(rows, self.n_sets)
        _, weights = self._targets(layout, rows)
        Z = self._logits(layout, rows, V, vb)
        q = prob * (Z - (prob * Z).sum(-1, keepdim=True))
        q = q.div_(self.n) if weights is None else q.mul_(weights.unsqueeze(-1))
        HV = self._back(layout, rows, q)
        shrink = V if self.penalty is None else V * self.penalty[rows].unsqueeze(-1)
        return HV.add_(l2[:, None, None] * shrink), layout.take(q.sum(1)).add_(bias_l2[:, None] * vb)


def grouped_logits(X: torch.Tensor, W: torch.Tensor, b: torch.Tensor, rows: torch.Tensor, groups: int) -> torch.Tensor:
    """Logits ``[rows, n, C]`` of problems ``rows`` (sorted; problem ``p``: feature set ``p // groups`` of ``X``
    ``[sets, n, dim]``) with weights ``W`` ``[rows, dim, C]`` and biases ``b`` ``[rows, C]``, one product per
    feature set (:class:`_Layout`)."""
    layout = _Layout(rows, groups, X.shape[0])
    Xs = X if layout.all_sets else X[layout.sets]
    return layout.unpack(torch.baddbmm(layout.pack(b.unsqueeze(1)), Xs, layout.pack(W)))


