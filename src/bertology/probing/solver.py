"""The exact linear probe's solver: an L2-regularised multinomial logistic regression of every layer at once,
solved to its optimum (:func:`fit_multinomial`, :func:`polish_multinomial`).

One L-BFGS per problem (every layer its own step sizes and curvature pairs), preconditioned by a
Kronecker-factored estimate of the Hessian (feature covariance x softmax curvature, both eigendecomposed once per
refresh: :class:`_KroneckerPreconditioner`), walking the L2 grid from the strongest value as a regularisation
path; the value each layer chooses is polished in float64. The estimators that use it are in
:mod:`bertology.probing.probes`; the MDL probe (:mod:`bertology.probing.mdl`) calls it directly.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

#: The exact linear probe's iteration cap per L2 value. Two-class problems converge in a few Newton-like steps; on
#: many classes the last digits of the gradient come slowly and move no prediction: UPOS on MiniLM (17 classes,
#: 4,000 words) capped at 50 iterations scores within 0.003 points of every layer's converged accuracy, at a
#: seventh of the time (benchmarks/perf/bench_probe_exact.py measures the cap's effect).
EXACT_MAX_ITER = 100

#: The linear probe's convergence tolerance: the largest absolute gradient entry of the mean loss (scikit-learn's
#: ``tol`` for lbfgs is the same measure, default 1e-4).
GTOL = 1e-6

#: Iterations between refreshes of the exact probe's preconditioner (:func:`_lbfgs`).
REFRESH_EVERY = 40

#: The chosen L2 value of every layer is then solved again in float64 from its float32 optimum, to this gradient
#: tolerance (at most ``EXACT_MAX_ITER`` more iterations). float32 features hold the gradient near 1e-6, and at
#: that precision the weights are still about 1e-4 from the optimum: enough to flip the test examples nearest a
#: decision boundary, so features moved by 1e-6 moved a small task's accuracy by one or two examples. Two-class
#: problems get there in about ten iterations (benchmarks/perf/bench_probe_exact.py).
POLISH_GTOL = 1e-9

#: The float64 copy of the training features that the polish makes is built a few layers at a time, at most
#: this many bytes at once.
POLISH_BYTES = 1 << 30


def _softmax_loss(X: torch.Tensor, onehot: torch.Tensor, W: torch.Tensor, b: torch.Tensor, l2: torch.Tensor,
                  bias_l2: torch.Tensor, grad: bool = True):
    """Mean cross-entropy + ``l2/2 ||W||^2`` (+ ``bias_l2/2 ||b||^2``) of every problem (float64), and its
    closed-form gradient: X [B, n, d], onehot [n, C], W [B, d, C], b [B, C], l2 and bias_l2 [B]. Without
    ``grad``: the loss and the log-probabilities (from which :func:`_softmax_gradient` finishes the job)."""
    logp = torch.log_softmax(torch.baddbmm(b.unsqueeze(1), X, W), -1)
    # Summed in float64: near the optimum a step lowers the loss by less than float32 resolves (about 1e-7 of
    # it), and the line search and the flat-loss stop compare losses.
    loss = (-(logp * onehot).sum(-1).double().mean(-1) + 0.5 * l2.double() * W.double().pow(2).sum((-2, -1))
            + 0.5 * bias_l2.double() * b.double().pow(2).sum(-1))
    if not grad:
        return loss, logp
    return (loss, *_softmax_gradient(X, onehot, W, b, l2, bias_l2, logp))


def _softmax_gradient(X, onehot, W, b, l2, bias_l2, logp):
    """The gradient of :func:`_softmax_loss` from its log-probabilities (consumed): ``(grad_W, grad_b, residual)``."""
    residual = logp.exp_().sub_(onehot).div_(X.shape[1])
    grad_W = torch.bmm(X.transpose(1, 2), residual).add_(l2[:, None, None] * W)
    grad_b = residual.sum(1).add_(bias_l2[:, None] * b)
    return grad_W, grad_b, residual


def _dot(aW, ab, cW, cb) -> torch.Tensor:
    return (aW * cW).sum((-2, -1)) + (ab * cb).sum(-1)


class _KroneckerPreconditioner:
    """An approximate inverse Hessian of the multinomial loss of every problem: ``(A (x) S + l2 I)^-1``, the
    Kronecker factorisation of K-FAC. Each example's softmax curvature ``M_i = diag(p_i) - p_i p_i^T`` is
    taken as ``(tr M_i / mean tr M) A`` with ``A = mean_i M_i``, so the feature factor ``S`` is the covariance
    weighted by each example's curvature (examples near the decision boundary dominate, as in the Hessian).
    For two classes this is the exact Hessian, and L-BFGS then takes Newton steps after every refresh. Both
    factors are eigendecomposed: in their eigenbases (:meth:`rotate`) the preconditioner is diagonal
    (:meth:`scale`), and :func:`_lbfgs` works there between refreshes (from the current probabilities, every
    few iterations)."""

    def __init__(self, X: torch.Tensor, l2: torch.Tensor, bias_l2: torch.Tensor):
        self.l2, self.bias_l2 = l2, bias_l2

    def refresh(self, X: torch.Tensor, p: torch.Tensor) -> None:
        """From the current class probabilities ``p`` ``[B, n, C]``."""
        n = X.shape[1]
        curvature = torch.diag_embed(p.mean(1)) - torch.bmm(p.transpose(1, 2), p) / n
        trace = (p * (1 - p)).sum(-1)  # tr M_i  [B, n]
        weight = trace / trace.mean(1, keepdim=True).clamp_min(1e-12)
        covariance = torch.bmm(X.transpose(1, 2), X * weight.unsqueeze(-1)) / n
        # float32 is enough for a preconditioner, and the eigendecomposition is a third of a refresh's cost.
        eigenvalues, U = torch.linalg.eigh(covariance)
        self.lam, self.U = eigenvalues.clamp_min(0).to(X.dtype), U.to(X.dtype)
        alpha, V = torch.linalg.eigh(curvature.double())
        self.alpha, self.V = alpha.clamp_min(0).to(X.dtype), V.to(X.dtype)
        # The bias sees unit "feature variance"; the softmax's all-ones direction has no curvature, so it is
        # floored (that direction does not change the probabilities).
        self.bias_scale = 1.0 / (self.alpha + self.bias_l2[:, None]).clamp_min(1e-3)

    def select(self, rows, l2: torch.Tensor, bias_l2: torch.Tensor, dtype: torch.dtype) -> "_KroneckerPreconditioner":
        """The factors of the problems ``rows`` (an index or a slice), for other L2 values and in ``dtype``: the
        curvature of the data term does not depend on L2, so the factors of a neighbouring optimum serve the
        next value of the path (and the float64 polish) without a refresh."""
        other = _KroneckerPreconditioner(None, l2, bias_l2)
        other.lam, other.U = self.lam[rows].to(dtype), self.U[rows].to(dtype)
        other.alpha, other.V = self.alpha[rows].to(dtype), self.V[rows].to(dtype)
        other.bias_scale = 1.0 / (other.alpha + bias_l2[:, None].to(dtype)).clamp_min(1e-3)
        return other

    def store(self, rows, other: "_KroneckerPreconditioner") -> None:
        """Write the factors of ``other`` (problems ``rows`` of this one) back into this one."""
        for name in ("lam", "U", "alpha", "V"):
            getattr(self, name)[rows] = getattr(other, name).to(getattr(self, name).dtype)

    def _bases(self, rows):
        return (self.U, self.V) if rows is None else (self.U[rows], self.V[rows])

    def rotate(self, gW: torch.Tensor, gb: torch.Tensor, rows=None):
        """``(W, b)`` of the problems ``rows`` (all by default) in the factors' eigenbases: ``U^T W V``, ``b V``.
        Both bases are orthonormal, so dot products (all that L-BFGS takes of its vectors) are unchanged."""
        U, V = self._bases(rows)
        return torch.bmm(torch.bmm(U.transpose(1, 2), gW), V), torch.bmm(gb.unsqueeze(1), V).squeeze(1)

    def unrotate(self, rW: torch.Tensor, rb: torch.Tensor, rows=None):
        """The inverse of :meth:`rotate`."""
        U, V = self._bases(rows)
        return (torch.bmm(torch.bmm(U, rW), V.transpose(1, 2)),
                torch.bmm(rb.unsqueeze(1), V.transpose(1, 2)).squeeze(1))

    def scale(self, qW: torch.Tensor, qb: torch.Tensor):
        """The preconditioner of rotated vectors (:meth:`rotate`): there it is diagonal."""
        return qW / (self.lam[:, :, None] * self.alpha[:, None, :] + self.l2[:, None, None]), qb * self.bias_scale


def _lbfgs(X: torch.Tensor, onehot: torch.Tensor, l2: torch.Tensor, W: torch.Tensor, b: torch.Tensor, *,
           bias_l2: torch.Tensor, gtol: float, max_iter: int, history: int = 10, refresh_every: int = REFRESH_EVERY,
           preconditioner: _KroneckerPreconditioner | None = None):
    """Minimise :func:`_softmax_loss` for every problem of the batch (axis 0) with its own L-BFGS: its own
    curvature pairs, step sizes (Armijo backtracking with quadratic interpolation) and stopping. A problem
    stops when its largest gradient entry is at most ``gtol``, or when no step along its direction lowers the
    loss any more, or three steps in a row lower it by no more than its rounding (the limit of the
    arithmetic). The preconditioner is refreshed every ``refresh_every`` iterations (40: on UPOS, dependency
    labels and WC as many iterations as 20, with half the refreshes, each a weighted covariance and its
    eigendecomposition, the dearest step on wide arc features; never refreshing took more iterations in
    one-off timings); a
    ``preconditioner`` given (:meth:`_KroneckerPreconditioner.select`: a neighbouring optimum's) is used from
    the start instead of a first refresh. Returns ``(W, b, iterations, gradient max, preconditioner)``."""
    batch = X.shape[0]
    rounding = 4 * torch.finfo(X.dtype).eps / math.sqrt(X.shape[1])
    loss, gW, gb, residual = _softmax_loss(X, onehot, W, b, l2, bias_l2)
    if preconditioner is None:
        preconditioner = _KroneckerPreconditioner(X, l2, bias_l2)
        preconditioner.refresh(X, residual * X.shape[1] + onehot)
    # L-BFGS runs in the preconditioner's eigenbases (:meth:`_KroneckerPreconditioner.rotate`), where it is
    # diagonal: its curvature pairs, directions and gradients are kept rotated, and each iteration rotates one
    # gradient and turns one direction back (two products with the [dim, dim] basis, against four when the
    # preconditioner was applied in place: on wide arc features with fewer examples than features, they were
    # half an iteration's time). Rotation keeps dot products, so the iterates are the same.
    gRW, gRb = preconditioner.rotate(gW, gb)
    pairs: list[tuple] = []
    gamma = torch.ones(batch, dtype=X.dtype, device=X.device)
    done = torch.zeros(batch, dtype=torch.bool, device=X.device)
    flat = torch.zeros(batch, dtype=torch.long, device=X.device)
    moving, X_moving = None, X
    iterations = 0
    while iterations < max_iter:
        gmax = torch.maximum(gW.abs().amax((-2, -1)), gb.abs().amax(-1))
        active = (gmax > gtol) & ~done
        if not bool(active.any()):
            break
        if iterations and iterations % refresh_every == 0:
            # A fresh curvature estimate changes the metric: the old pairs no longer describe it.
            preconditioner.refresh(X, residual * X.shape[1] + onehot)
            pairs, gamma = [], torch.ones_like(gamma)
            gRW, gRb = preconditioner.rotate(gW, gb)
        # two-loop recursion, every problem at once, in the rotated coordinates
        qW, qb, alphas = gRW, gRb, []
        for sW, sb, yW, yb, rho in reversed(pairs):
            a = rho * _dot(sW, sb, qW, qb)
            qW, qb = qW - a[:, None, None] * yW, qb - a[:, None] * yb
            alphas.append(a)
        rW, rb = preconditioner.scale(qW, qb)
        rW, rb = gamma[:, None, None] * rW, gamma[:, None] * rb
        for (sW, sb, yW, yb, rho), a in zip(pairs, reversed(alphas)):
            c = a - rho * _dot(yW, yb, rW, rb)
            rW, rb = rW + c[:, None, None] * sW, rb + c[:, None] * sb
        dRW, dRb = -rW, -rb
        slope = _dot(gRW, gRb, dRW, dRb)
        uphill = slope >= 0
        if bool(uphill.any()):  # not a descent direction: the preconditioned gradient is one
            pW, pb = preconditioner.scale(gRW, gRb)
            dRW = torch.where(uphill[:, None, None], -pW, dRW)
            dRb = torch.where(uphill[:, None], -pb, dRb)
            slope = _dot(gRW, gRb, dRW, dRb)
        slope = slope.double()
        # Only the problems still moving are evaluated (a layer that converged costs nothing more), and in the
        # line search only those whose step is not yet accepted.
        rows = active.nonzero().squeeze(1)
        if len(rows) == batch:
            dW, db = preconditioner.unrotate(dRW, dRb)
        else:  # the others do not move
            dW, db = torch.zeros_like(W), torch.zeros_like(b)
            dW[rows], db[rows] = preconditioner.unrotate(dRW[rows], dRb[rows], rows)
        if moving is None or not torch.equal(rows, moving):
            moving, X_moving = rows, (X if len(rows) == batch else X[rows])
        step = active.double()
        trial = loss.clone()
        logp = torch.empty(len(rows), *onehot.shape, dtype=X.dtype, device=X.device)
        pending = torch.arange(len(rows), device=X.device)  # positions in ``rows``
        for _ in range(40):
            r = rows[pending]
            W_try = W[r] + step[r].to(X.dtype)[:, None, None] * dW[r]
            b_try = b[r] + step[r].to(X.dtype)[:, None] * db[r]
            X_try = X_moving if len(pending) == len(rows) else X_moving[pending]
            trial[r], logp[pending] = _softmax_loss(X_try, onehot, W_try, b_try, l2[r], bias_l2[r], grad=False)
            accepted = trial[r] <= loss[r] + 1e-4 * step[r] * slope[r]
            if bool(accepted.all()):
                pending = pending[:0]
                break
            rejected = r[~accepted]
            curvature = 2 * (trial[rejected] - loss[rejected] - step[rejected] * slope[rejected])
            guess = torch.where(curvature > 0, -slope[rejected] * step[rejected] ** 2 / curvature.clamp_min(1e-30),
                                0.5 * step[rejected])
            step[rejected] = torch.minimum(torch.maximum(guess, 0.1 * step[rejected]), 0.5 * step[rejected])
            pending = pending[~accepted]
        stalled = torch.zeros_like(active)
        if len(pending):  # no step lowered these: they stay where they are
            r = rows[pending]
            stalled[r] = True
            step[r] = 0.0
            trial[r], logp[pending] = _softmax_loss(X_moving[pending], onehot, W[r], b[r], l2[r], bias_l2[r],
                                                    grad=False)
        W_new, b_new = W + step.to(X.dtype)[:, None, None] * dW, b + step.to(X.dtype)[:, None] * db
        new_loss, new_gW, new_gb, new_residual = trial, gW.clone(), gb.clone(), residual.clone()
        new_gW[rows], new_gb[rows], new_residual[rows] = _softmax_gradient(
            X_moving, onehot, W_new[rows], b_new[rows], l2[rows], bias_l2[rows], logp)
        residual = new_residual
        new_gRW, new_gRb = gRW.clone(), gRb.clone()
        new_gRW[rows], new_gRb[rows] = preconditioner.rotate(new_gW[rows], new_gb[rows],
                                                             None if len(rows) == batch else rows)
        moved = step.to(X.dtype)
        sW, sb, yW, yb = moved[:, None, None] * dRW, moved[:, None] * dRb, new_gRW - gRW, new_gRb - gRb
        sy = _dot(sW, sb, yW, yb)
        keep = active & (sy > 1e-10 * _dot(sW, sb, sW, sb).sqrt() * _dot(yW, yb, yW, yb).sqrt())
        if bool(keep.any()):
            hyW, hyb = preconditioner.scale(yW, yb)
            gamma = torch.where(keep, sy / _dot(yW, yb, hyW, hyb).clamp_min(1e-30), gamma)
            rho = torch.where(keep, 1.0 / sy.clamp_min(1e-30), torch.zeros_like(sy))
            mask = keep.to(X.dtype)
            pairs.append((sW * mask[:, None, None], sb * mask[:, None], yW, yb, rho))
            pairs = pairs[-history:]
        # At the arithmetic's limit (float32 features: a gradient floor near 1e-6 on some layers) steps stop
        # lowering the loss by more than its rounding (float32 log-probabilities summed in float64: about
        # eps32 / sqrt(n) of it); three such steps in a row end that problem.
        flat = torch.where(loss - new_loss <= rounding * loss.abs(), flat + 1, 0)
        done = done | stalled | (active & (flat >= 3))
        W, b, loss, gW, gb, gRW, gRb = W_new, b_new, new_loss, new_gW, new_gb, new_gRW, new_gRb
        iterations += 1
    gmax = torch.maximum(gW.abs().amax((-2, -1)), gb.abs().amax(-1))
    return W, b, iterations, gmax, preconditioner


def fit_multinomial(X: torch.Tensor, y: torch.Tensor, n_classes: int, l2_grid: Sequence[float], *,
                    gtol: float = GTOL, max_iter: int = EXACT_MAX_ITER, continuation: bool = True,
                    bias_l2: bool = False, score: Callable | None = None, polish: bool = False):
    """The exact L2-regularised multinomial logistic regression of every layer, for every L2 value.

    ``X`` ``[n_layers, n, dim]`` (standardised features, on any device), ``y`` ``[n]`` class indices in
    ``[0, n_classes)``; the loss is ``mean cross-entropy + l2/2 ||W||^2`` (the bias unpenalised unless
    ``bias_l2``, which penalises it as the weights: the MDL probe's, whose classes may be absent from a
    prefix). ``l2_grid`` is solved in the order given (strongest first), every layer at once (its own L-BFGS,
    :func:`_lbfgs`); with ``continuation`` each value starts from the previous value's optimum, which is the
    same optimum reached faster.

    ``score(W, b, layers)`` (``W`` ``[k, dim, C]`` of the layers ``layers``; returns ``[k]``, higher is better:
    the probe's: minus the dev cross-entropy) walks the grid as a regularisation path: a layer goes on to the next, weaker value only
    while each value it solved scored strictly better than the one before, so the weak end of the grid, where
    the solver needs the most steps, is solved only for layers whose dev score still rises. The values a
    layer did not reach score ``-inf`` and hold its last optimum. Each value after the first starts from the
    preconditioner of the value before (no first refresh: the data term's curvature is the same).

    ``polish`` (with ``score``): each layer's best-scoring value (the first of ties: the strongest) is then
    solved again in float64 (:func:`polish_multinomial`, from its float32 optimum and preconditioner);
    ``"unconverged"``: only for the layers whose float32 solve of that value stopped on ``max_iter`` before
    reaching ``gtol``.

    Returns ``W`` ``[n_layers, n_l2, dim, C]``, ``b`` ``[n_layers, n_l2, C]``, the total number of iterations
    and the scores ``[n_layers, n_l2]`` (``None`` without ``score``)."""
    L, _, d = X.shape
    onehot = torch.nn.functional.one_hot(y, n_classes).to(X.dtype)
    W = torch.zeros(L, d, n_classes, dtype=X.dtype, device=X.device)
    b = torch.zeros(L, n_classes, dtype=X.dtype, device=X.device)
    weights, biases, total = [], [], 0
    scores = torch.full((L, len(l2_grid)), -math.inf, dtype=torch.float64, device=X.device)
    # Whether each layer's float32 solve of each value reached ``gtol`` (not stopped by ``max_iter``).
    converged = torch.zeros((L, len(l2_grid)), dtype=torch.bool, device=X.device)
    walking = torch.arange(L, device=X.device)  # the layers still on the path
    factors = None  # every layer's latest preconditioner
    for g, value in enumerate(l2_grid):
        W, b = W.clone(), b.clone()
        if len(walking):
            rows = walking if len(walking) < L else slice(None)
            Xw = X[rows]
            l2 = torch.full((len(walking),), float(value), dtype=X.dtype, device=X.device)
            penalty = l2 if bias_l2 else torch.zeros_like(l2)
            start_W, start_b = (W[rows], b[rows]) if continuation else (torch.zeros_like(W[rows]),
                                                                         torch.zeros_like(b[rows]))
            given = None if factors is None else factors.select(rows, l2, penalty, X.dtype)
            W[rows], b[rows], iterations, gmax, used = _lbfgs(Xw, onehot, l2, start_W, start_b, gtol=gtol,
                                                              max_iter=max_iter, bias_l2=penalty,
                                                              preconditioner=given)
            converged[walking, g] = gmax.to(converged.device) <= gtol
            if factors is None:
                factors = used
            else:
                factors.store(rows, used)
            total += iterations
            if score is not None:
                scores[walking, g] = score(W[rows], b[rows], walking).double()
                if g:
                    walking = walking[scores[walking, g] > scores[walking, :g].amax(1)]
        weights.append(W)
        biases.append(b)
    W_all, b_all = torch.stack(weights, 1), torch.stack(biases, 1)
    if polish and score is not None and factors is not None:
        best = scores.argmax(1)  # the first max: the strongest value among ties
        layers = torch.arange(L, device=X.device)
        if polish == "unconverged":  # only the layers whose float32 solve stopped short of gtol
            layers = layers[~converged[layers, best]]
            best = best[layers]
        if len(layers):
            l2 = torch.tensor([float(v) for v in l2_grid], dtype=torch.float64, device=X.device)[best]
            chosen = factors if len(layers) == L else factors.select(layers, factors.l2[layers],
                                                                     factors.bias_l2[layers], factors.lam.dtype)
            W_all[layers, best], b_all[layers, best], iterations = polish_multinomial(
                X[layers] if len(layers) < L else X, y, n_classes, l2, W_all[layers, best], b_all[layers, best],
                max_iter=max_iter, factors=chosen, bias_l2=bias_l2)
            total += iterations
    return W_all, b_all, total, (scores if score is not None else None)


def polish_multinomial(X: torch.Tensor, y: torch.Tensor, n_classes: int, l2: torch.Tensor, W: torch.Tensor,
                       b: torch.Tensor, *, gtol: float = POLISH_GTOL, max_iter: int = EXACT_MAX_ITER,
                       budget: int = POLISH_BYTES, factors: _KroneckerPreconditioner | None = None,
                       bias_l2: bool = False):
    """Solve every layer's problem again in float64 from ``W`` ``[L, dim, C]``, ``b`` ``[L, C]`` (a float32
    optimum of :func:`fit_multinomial`) at its own ``l2`` ``[L]``, to a largest gradient entry of ``gtol``;
    a few layers at a time (a float64 copy of at most ``budget`` bytes). With ``factors`` (the preconditioner
    of the float32 solve, one per layer) no refresh is made: near the optimum the curvature no longer changes,
    and a refresh (a weighted covariance and its eigendecomposition) costs as much as a dozen iterations on
    the 1,152-wide arc features. Returns ``W`` and ``b`` in the input's dtype and the number of iterations
    (the largest chunk's)."""
    L, n, d = X.shape
    onehot = torch.nn.functional.one_hot(y, n_classes).to(torch.float64)
    step = max(1, budget // max(1, n * d * 8))
    W_out, b_out, iterations = W.clone(), b.clone(), 0
    for start in range(0, L, step):
        part = slice(start, min(L, start + step))
        lam = l2[part].to(torch.float64)
        penalty = lam if bias_l2 else torch.zeros_like(lam)
        given = None if factors is None else factors.select(part, lam, penalty, torch.float64)
        W_part, b_part, used, _, _ = _lbfgs(X[part].to(torch.float64), onehot, lam, W[part].to(torch.float64),
                                            b[part].to(torch.float64), bias_l2=penalty, gtol=gtol,
                                            max_iter=max_iter, preconditioner=given,
                                            refresh_every=max_iter + 1 if given is not None else REFRESH_EVERY)
        W_out[part], b_out[part] = W_part.to(W.dtype), b_part.to(b.dtype)
        iterations = max(iterations, used)
    return W_out, b_out, iterations
