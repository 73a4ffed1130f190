"""The exact linear probe's solver: an L2-regularised multinomial logistic regression of every layer at once,
solved to its optimum (:func:`fit_multinomial`, :func:`polish_multinomial`).

One L-BFGS per problem (every layer its own step sizes and curvature pairs), preconditioned by a
Kronecker-factored estimate of the Hessian (feature covariance x softmax curvature, both eigendecomposed once per
refresh: :class:`~bertology.probing.kronecker._KroneckerPreconditioner`), walking the L2 grid as a regularisation
path from 1e-2 towards the value each layer's dev score prefers (:data:`PATH_START`); the value each layer chooses
is polished in float64 by Newton steps (:func:`_newton`: conjugate gradients on the Hessian's products, in the
same eigenbases with the Hessian's own diagonal). The estimators that use it are in
:mod:`bertology.probing.probes`; the MDL probe (:mod:`bertology.probing.mdl`) calls it directly.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

from bertology.probing.kronecker import _dot, _KroneckerPreconditioner
from bertology.probing.problems import ABSENT_LOGIT, Group, _Layout, _Problems, grouped_logits  # noqa: F401

#: The exact linear probe's iteration cap per L2 value. Two-class problems converge in a few Newton-like steps; on
#: many classes the last digits of the gradient come slowly and move no prediction: UPOS on MiniLM (17 classes,
#: 4,000 words) capped at 50 iterations scores within 0.003 points of every layer's converged accuracy, at a
#: seventh of the time (benchmarks/perf/bench_probe_exact.py measures the cap's effect).
EXACT_MAX_ITER = 100

#: The linear probe's convergence tolerance: the largest absolute gradient entry of the mean loss (scikit-learn's
#: ``tol`` for lbfgs is the same measure, default 1e-4). Not looser, although the polish below solves the chosen
#: value to POLISH_GTOL anyway: the weak L2 values' dev cross-entropy is compared from these solves, and at 1e-5 a
#: layer of WC on MiniLM chose another value (0.72 points of test accuracy); 1e-7 chooses as 1e-6 does
#: (benchmarks/perf/bench_probe_gtol.py).
GTOL = 1e-6

#: Iterations between refreshes of the exact probe's preconditioner (:func:`_lbfgs`).
REFRESH_EVERY = 40

#: The chosen L2 value of every layer is then solved again in float64 from its float32 optimum, to this gradient
#: tolerance (by Newton steps: :func:`polish_multinomial`). float32 features hold the gradient near 1e-6, and at
#: that precision the weights are still about 1e-4 from the optimum: enough to flip the test examples nearest a
#: decision boundary, so features moved by 1e-6 moved a small task's accuracy by one or two examples. From there two
#: or three Newton steps reach it (benchmarks/perf/bench_probe_polish.py).
POLISH_GTOL = 1e-9

#: A cold path's iteration cap, as a multiple of a warm one's: solved from zero rather than from its stronger
#: neighbour's optimum (``continuation=False``: the same optimum, more steps), a weakly regularised value needs
#: several times the steps; at the warm path's cap MiniLM's WC layer 1 (L2 1e-5) stopped far enough from its
#: optimum that the chosen value and a test sentence or five followed the start (0.72 points,
#: probe_exact_polished_cap_minilm_cpu.json). The default path is warm, so this costs only a cold one.
COLD_ITER_FACTOR = 4

#: The float64 copy of the training features that the polish makes is built a few layers at a time, at most
#: this many bytes at once.
POLISH_BYTES = 1 << 30

#: The Newton polish (:func:`_newton`): its most steps; the most conjugate-gradient iterations of one step; and
#: their stop, a residual of ``H s = -g`` at most this share of the gradient's norm (each step then divides the
#: gradient by about a hundred; at 1e-1 or 3e-2, one-off timings on XPOS took four steps instead of three and
#: about as many iterations in all).
NEWTON_STEPS, NEWTON_CG_ITER, NEWTON_CG_TOL = 10, 100, 1e-2

#: Where the regularisation path starts on the L2 grid (the grid's value nearest it, :func:`path_start`): the
#: strongest value of the former grid (1e-5 .. 1e-2), where MiniLM's token tasks (UPOS, XPOS, dependency labels)
#: have their optimum, so they pay for one value more than before (the stronger neighbour that confirms it), not
#: for the whole strong end; the SentEval tasks, which mostly want 1e-1 .. 1e3, walk there from it without a
#: weaker value's solve (the path tries the stronger side first).
PATH_START = 1e-2


def path_start(l2_grid: Sequence[float]) -> int:
    """The index in ``l2_grid`` (strongest first) where :func:`fit_multinomial`'s path starts: the value nearest
    :data:`PATH_START` on a log scale (the stronger of two as near)."""
    def distance(value: float) -> float:
        return abs(math.log10(value) - math.log10(PATH_START)) if value > 0 else math.inf
    return min(range(len(l2_grid)), key=lambda g: (distance(float(l2_grid[g])), g))



def _lbfgs(data: _Problems, l2: torch.Tensor, W: torch.Tensor, b: torch.Tensor, *, bias_l2: torch.Tensor,
           gtol: float, max_iter: int, history: int = 10, refresh_every: int = REFRESH_EVERY,
           preconditioner: _KroneckerPreconditioner | None = None, active: torch.Tensor | None = None):
    """Minimise :meth:`_Problems.loss` for every problem (axis 0 of ``W`` ``[problems, dim, C]``; ``active``: only
    these, the others stay as they are and cost nothing) with its own L-BFGS: its own curvature pairs, step sizes
    (Armijo backtracking with quadratic interpolation) and stopping. A problem stops when its largest gradient
    entry is at most ``gtol``, or when no step along its direction lowers the loss any more, or three steps in a
    row lower it by no more than its rounding (the limit of the arithmetic). The problems of a feature set are
    computed side by side (:class:`_Layout`). The preconditioner is refreshed every ``refresh_every`` iterations
    (40: on UPOS, dependency labels and WC as many iterations as 20, with half the refreshes, each a weighted
    covariance and its eigendecomposition, the dearest step on wide arc features; never refreshing took more
    iterations in one-off timings); a ``preconditioner`` given (a neighbouring optimum's factors) is used from the
    start instead of a first refresh. Returns ``(W, b, iterations, gradient max, preconditioner)``."""
    X = data.X
    P = data.size
    dtype, device = X.dtype, X.device
    rounding = 4 * torch.finfo(dtype).eps / math.sqrt(data.n)
    done = torch.zeros(P, dtype=torch.bool, device=device) if active is None else ~active
    W, b = W.clone(), b.clone()
    loss = torch.zeros(P, dtype=torch.float64, device=device)
    gW, gb = torch.zeros_like(W), torch.zeros_like(b)
    # Class probabilities of the problems, kept only from the evaluations that a refresh of the preconditioner
    # will read (the first, and every ``refresh_every``-th).
    prob = None
    rows = (~done).nonzero().squeeze(1)
    if len(rows):
        loss[rows], gW[rows], gb[rows], p = data.loss(W[rows], b[rows], rows, l2[rows], bias_l2[rows],
                                                      keep_prob=preconditioner is None)
        if p is not None:
            prob = torch.zeros(P, data.n, data.n_classes, dtype=dtype, device=device)
            prob[rows] = p
    if preconditioner is None:
        preconditioner = _KroneckerPreconditioner(X, data.scaled_l2(l2), bias_l2, data.groups)
        if len(rows):
            preconditioner.refresh(X, prob[rows], rows, data.weights)
    else:
        preconditioner = preconditioner.with_l2(data.scaled_l2(l2), bias_l2)
    # L-BFGS runs in the preconditioner's eigenbases (:meth:`_KroneckerPreconditioner.rotate`), where it is
    # diagonal: its curvature pairs, directions and gradients are kept rotated, and each iteration rotates one
    # gradient and turns one direction back (two products with the [dim, dim] basis, against four when the
    # preconditioner was applied in place: on wide arc features with fewer examples than features, they were
    # half an iteration's time; in the thin form, with few examples, three products of n columns). Rotation keeps
    # dot products, so the iterates are the same.
    gRW, gRb = preconditioner.rotated_zeros(gW), torch.zeros_like(gb)
    if len(rows):
        gRW[rows], gRb[rows] = preconditioner.rotate(gW[rows], gb[rows], rows)
    pairs: list[tuple] = []
    gamma = torch.ones(P, dtype=dtype, device=device)
    flat = torch.zeros(P, dtype=torch.long, device=device)
    iterations = 0
    while iterations < max_iter:
        gmax = torch.maximum(gW.abs().amax((-2, -1)), gb.abs().amax(-1))
        active_now = (gmax > gtol) & ~done
        if not bool(active_now.any()):
            break
        rows = active_now.nonzero().squeeze(1)
        if iterations and iterations % refresh_every == 0:
            # A fresh curvature estimate changes the metric: the old pairs no longer describe it.
            preconditioner.refresh(X, prob[rows], rows, data.weights)
            pairs, gamma = [], torch.ones_like(gamma)
            gRW, gRb = preconditioner.rotated_zeros(gW), torch.zeros_like(gb)
            gRW[rows], gRb[rows] = preconditioner.rotate(gW[rows], gb[rows], rows)
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
        if bool((uphill & active_now).any()):  # not a descent direction: the preconditioned gradient is one
            pW, pb = preconditioner.scale(gRW, gRb)
            dRW = torch.where(uphill[:, None, None], -pW, dRW)
            dRb = torch.where(uphill[:, None], -pb, dRb)
            slope = _dot(gRW, gRb, dRW, dRb)
        slope = slope.double()
        # Only the problems still moving are evaluated (a problem that converged costs nothing more), and in the
        # line search only those whose step is not yet accepted.
        dW, db = torch.zeros_like(W), torch.zeros_like(b)
        dW[rows], db[rows] = preconditioner.unrotate(dRW[rows], dRb[rows], rows)
        step = active_now.double()
        trial = loss.clone()
        pending = torch.arange(len(rows), device=device)  # positions in ``rows``
        first = None  # the first trial's log-probabilities (every row): the gradient's, when every step is taken
        for attempt in range(40):
            r = rows[pending]
            W_try = W[r] + step[r].to(dtype)[:, None, None] * dW[r]
            b_try = b[r] + step[r].to(dtype)[:, None] * db[r]
            trial[r], packed = data.loss(W_try, b_try, r, l2[r], bias_l2[r], grad=False)
            accepted = trial[r] <= loss[r] + 1e-4 * step[r] * slope[r]
            if attempt == 0:
                first, cut = packed, pending[~accepted]  # cut: the rows whose first step was not taken
            if bool(accepted.all()):
                pending = pending[:0]
                break
            rejected = r[~accepted]
            curvature = 2 * (trial[rejected] - loss[rejected] - step[rejected] * slope[rejected])
            guess = torch.where(curvature > 0, -slope[rejected] * step[rejected] ** 2 / curvature.clamp_min(1e-30),
                                0.5 * step[rejected])
            step[rejected] = torch.minimum(torch.maximum(guess, 0.1 * step[rejected]), 0.5 * step[rejected])
            pending = pending[~accepted]
        stalled = torch.zeros_like(active_now)
        if len(pending):  # no step lowered these: they stay where they are
            r = rows[pending]
            stalled[r] = True
            step[r] = 0.0
            trial[r] = loss[r]
        W_new, b_new = W + step.to(dtype)[:, None, None] * dW, b + step.to(dtype)[:, None] * db
        new_loss, new_gW, new_gb = trial, gW.clone(), gb.clone()
        if len(cut):  # their probabilities at the step finally taken, into the first trial's
            r = rows[cut]
            _, (logp_cut, layout_cut) = data.loss(W_new[r], b_new[r], r, l2[r], bias_l2[r], grad=False)
            logp_first, layout_first = first
            logp_first[layout_first.position[cut], :, layout_first.slot[cut]] = layout_cut.take(
                logp_cut.transpose(1, 2))
        refresh_next = (iterations + 1) % refresh_every == 0
        new_gW[rows], new_gb[rows], p = data.gradient(W_new[rows], b_new[rows], rows, l2[rows], bias_l2[rows],
                                                      first, keep_prob=refresh_next)
        if p is not None:
            prob = torch.zeros(P, data.n, data.n_classes, dtype=dtype, device=device) if prob is None else prob
            prob[rows] = p
        new_gRW, new_gRb = gRW.clone(), gRb.clone()
        new_gRW[rows], new_gRb[rows] = preconditioner.rotate(new_gW[rows], new_gb[rows], rows)
        moved = step.to(dtype)
        sW, sb, yW, yb = moved[:, None, None] * dRW, moved[:, None] * dRb, new_gRW - gRW, new_gRb - gRb
        sy = _dot(sW, sb, yW, yb)
        keep = active_now & (sy > 1e-10 * _dot(sW, sb, sW, sb).sqrt() * _dot(yW, yb, yW, yb).sqrt())
        if bool(keep.any()):
            hyW, hyb = preconditioner.scale(yW, yb)
            gamma = torch.where(keep, sy / _dot(yW, yb, hyW, hyb).clamp_min(1e-30), gamma)
            rho = torch.where(keep, 1.0 / sy.clamp_min(1e-30), torch.zeros_like(sy))
            mask = keep.to(dtype)
            pairs.append((sW * mask[:, None, None], sb * mask[:, None], yW, yb, rho))
            pairs = pairs[-history:]
        # At the arithmetic's limit (float32 features: a gradient floor near 1e-6 on some layers) steps stop
        # lowering the loss by more than its rounding (float32 log-probabilities summed in float64: about
        # eps32 / sqrt(n) of it); three such steps in a row end that problem.
        flat = torch.where(loss - new_loss <= rounding * loss.abs(), flat + 1, 0)
        done = done | stalled | (active_now & (flat >= 3))
        W, b, loss, gW, gb, gRW, gRb = W_new, b_new, new_loss, new_gW, new_gb, new_gRW, new_gRb
        iterations += 1
    gmax = torch.maximum(gW.abs().amax((-2, -1)), gb.abs().amax(-1))
    return W, b, iterations, gmax, preconditioner


def fit_multinomial(X: torch.Tensor, y: torch.Tensor, n_classes: int, l2_grid: Sequence[float], *,
                    gtol: float = GTOL, max_iter: int = EXACT_MAX_ITER, continuation: bool = True,
                    bias_l2: bool = False, score: Callable | None = None, polish: bool = False,
                    group: Group | None = None):
    """The exact L2-regularised multinomial logistic regression of every layer, for every L2 value.

    ``X`` ``[n_layers, n, dim]`` (standardised features, on any device), ``y`` ``[n]`` class indices in
    ``[0, n_classes)``; the loss is ``mean cross-entropy + l2/2 ||W||^2`` (the bias unpenalised unless
    ``bias_l2``, which penalises it as the weights: the MDL probe's, whose classes may be absent from a
    prefix). ``l2_grid`` is given strongest first, every layer solved at once (its own L-BFGS, :func:`_lbfgs`);
    with ``continuation`` each value starts from the optimum of the neighbour the path came from, which is the
    same optimum reached faster (without, each value starts from zero and may take ``COLD_ITER_FACTOR *
    max_iter`` iterations).

    Several problems on the same features (a probe's bootstrap resamples and its control task: one *group*)
    are solved side by side, each its own L-BFGS, with one product per layer for all of them: ``y`` ``[groups,
    n]`` and ``group`` (:class:`~bertology.probing.problems.Group`: example weights, per-feature penalty
    weights, absent classes). Problem ``p`` is layer ``p // groups``'s ``p % groups``-th; without groups,
    problem = layer.

    ``score(W, b, problems)`` (``W`` ``[k, dim, C]`` of the problems ``problems``; returns ``[k]``, higher is
    better: the probe's: minus the dev cross-entropy) walks the grid as a regularisation path, each problem its
    own: from the value nearest :data:`PATH_START` (:func:`path_start`) towards stronger values while each value
    scores strictly better than every value before; when the first stronger value does not (or there is none),
    the walk turns and goes towards weaker values from the first one, again while the score rises. Each problem
    thus solves the values from its start to one past its best (a whole grid only where the dev score rises to
    an end), its best is its first local maximum on the grid (the maximum where the score is unimodal), and the
    weak end, where the solver needs the most steps, is solved only for problems whose dev score still rises
    there. Problems at different values are solved side by side (each its own L2). The values a problem did not
    reach score ``-inf`` and hold its nearest reached optimum. Without ``score`` every value is solved, from the
    strongest. Each solve after the first starts from the preconditioner of the one before (no first refresh:
    the data term's curvature hardly changes along the path).

    ``polish`` (with ``score``): each problem's best-scoring value (the first of ties: the strongest) is then
    solved again in float64 (:func:`polish_multinomial`: Newton steps from its float32 optimum, in its
    preconditioner's eigenbases);
    ``"unconverged"``: only for the problems whose float32 solve of that value stopped on ``max_iter`` before
    reaching ``gtol``.

    Returns ``W`` ``[problems, n_l2, dim, C]``, ``b`` ``[problems, n_l2, C]``, the total number of iterations
    and the scores ``[problems, n_l2]`` (``None`` without ``score``)."""
    group = group or Group()
    data = _Problems(X, y, n_classes, group.weights, group.penalty, group.mask_absent)
    P, d, device = data.size, data.dim, X.device
    G = len(l2_grid)
    grid = torch.tensor([float(v) for v in l2_grid], dtype=X.dtype, device=device)
    W = torch.zeros(P, d, n_classes, dtype=X.dtype, device=device)
    b = torch.zeros(P, n_classes, dtype=X.dtype, device=device)
    W_all = torch.zeros(P, G, d, n_classes, dtype=X.dtype, device=device)
    b_all = torch.zeros(P, G, n_classes, dtype=X.dtype, device=device)
    total = 0
    scores = torch.full((P, G), -math.inf, dtype=torch.float64, device=device)
    # Whether each problem's float32 solve of each value reached ``gtol`` (not stopped by ``max_iter``).
    converged = torch.zeros((P, G), dtype=torch.bool, device=device)
    walking = torch.ones(P, dtype=torch.bool, device=device)  # the problems still on the path
    # Each problem's place on the grid and its direction (-1: towards stronger values, +1: weaker); without a
    # score the whole grid is solved from its strongest value.
    first = path_start(l2_grid) if score is not None else 0
    position = torch.full((P,), first, dtype=torch.long, device=device)
    direction = torch.full((P,), -1 if score is not None else 1, dtype=torch.long, device=device)
    reached = torch.zeros((P, G), dtype=torch.bool, device=device)
    factors = None  # every problem's latest preconditioner
    cap = max_iter if continuation else COLD_ITER_FACTOR * max_iter
    problems = torch.arange(P, device=device)
    while bool(walking.any()):
        rows = walking.nonzero().squeeze(1)
        at = position[rows]
        l2 = grid[position]
        penalty_b = l2 if bias_l2 else torch.zeros_like(l2)
        # From the optimum of the neighbour the walk came from (zero for the first value, or without continuation).
        start_W, start_b = W.clone(), b.clone()
        came = at - direction[rows]
        warm = reached[rows, came.clamp(0, G - 1)] & (came >= 0) & (came < G) & continuation
        start_W[rows] = torch.where(warm[:, None, None], W_all[rows, came.clamp(0, G - 1)], 0.0)
        start_b[rows] = torch.where(warm[:, None], b_all[rows, came.clamp(0, G - 1)], 0.0)
        W, b, iterations, gmax, factors = _lbfgs(data, l2, start_W, start_b, gtol=gtol, max_iter=cap,
                                                 bias_l2=penalty_b, preconditioner=factors, active=walking)
        total += iterations
        W_all[rows, at], b_all[rows, at] = W[rows], b[rows]
        converged[rows, at] = gmax[rows] <= gtol
        better = ~reached[rows].any(1)  # a problem's first value always counts as better
        reached[rows, at] = True
        if score is not None:
            value = score(W[rows], b[rows], rows).double()
            better |= value > scores[rows].amax(1)
            scores[rows, at] = value
        else:
            better[:] = True
        # Go on while the score rises; a first step stronger that does not rise (or no stronger value at all)
        # turns the walk towards the weaker values, from the first value's optimum. Stronger first: a strong
        # value is solved in a few iterations and a weak one may take the cap, so a problem that wants stronger
        # values never pays for a weaker one.
        nxt = at + direction[rows]
        turn = (direction[rows] < 0) & (((at == first - 1) & ~better) | ((at == first) & (nxt < 0)))
        direction[rows[turn]] = 1
        nxt = torch.where(turn, first + 1, nxt)
        go = (better | turn) & (nxt >= 0) & (nxt < G)
        position[rows[go]] = nxt[go]
        walking[rows[~go]] = False
    # The values a problem did not reach hold its nearest reached optimum.
    index = torch.arange(G, device=device).expand(P, G)
    low = torch.where(reached, index, G).amin(1, keepdim=True)
    high = torch.where(reached, index, -1).amax(1, keepdim=True)
    nearest = torch.minimum(torch.maximum(index, low), high)
    W_all, b_all = W_all[problems[:, None], nearest], b_all[problems[:, None], nearest]
    if polish and score is not None and factors is not None:
        best = scores.argmax(1)  # the first max: the strongest value among ties
        chosen = torch.ones(P, dtype=torch.bool, device=device)
        if polish == "unconverged":  # only the problems whose float32 solve stopped short of gtol
            chosen = ~converged[torch.arange(P, device=device), best]
        if bool(chosen.any()):
            l2 = torch.tensor([float(v) for v in l2_grid], dtype=torch.float64, device=device)[best]
            W_best, b_best, products = polish_multinomial(
                data, l2, W_all[problems, best], b_all[problems, best], factors=factors, bias_l2=bias_l2,
                active=chosen)
            W_all[problems, best], b_all[problems, best] = W_best, b_best
            total += products // 2  # an L-BFGS iteration's worth: two products with the features
    return W_all, b_all, total, (scores if score is not None else None)


def polish_multinomial(data: _Problems, l2: torch.Tensor, W: torch.Tensor, b: torch.Tensor, *,
                       gtol: float = POLISH_GTOL, max_steps: int = NEWTON_STEPS, budget: int = POLISH_BYTES,
                       factors: _KroneckerPreconditioner | None = None, bias_l2: bool = False,
                       active: torch.Tensor | None = None):
    """Solve the ``active`` problems (all by default) of ``data`` again from ``W`` ``[problems, dim, C]``, ``b``
    ``[problems, C]`` (float32 optima of :func:`fit_multinomial`), each at its own ``l2`` ``[problems]``, to a
    largest gradient entry of ``gtol`` in float64, by Newton steps (:func:`_newton`, at most ``max_steps``); a
    few feature sets at a time (a float64 copy of at most ``budget`` bytes). With ``factors`` (the
    preconditioner of the float32 solve) its eigenbases serve the steps' conjugate gradients, corrected to the
    Hessian's diagonal at the start (:meth:`_KroneckerPreconditioner.correct`); without, they are made there.
    Returns ``W`` and ``b`` in the input's dtype and the number of products with the features (the largest
    chunk's)."""
    G, device = data.groups, W.device
    P = data.size
    active = torch.ones(P, dtype=torch.bool, device=device) if active is None else active
    # Only the feature sets with a problem to polish are copied.
    sets = torch.unique(torch.div(active.nonzero().squeeze(1), G, rounding_mode="floor"))
    step = max(1, budget // max(1, data.n * data.dim * 8))
    W_out, b_out, products = W.clone(), b.clone(), 0
    low = data.X.dtype
    for start in range(0, len(sets), step):
        part = sets[start:start + step]
        rows = (part[:, None] * G + torch.arange(G, device=device)).reshape(-1)
        exact = data.to(torch.float64, part)
        # The Hessian products of the conjugate gradients in the features' own dtype (no copy when every set is in).
        fast = data if len(part) == data.n_sets else data.to(low, part)
        lam = l2[rows].to(torch.float64)
        penalty = lam if bias_l2 else torch.zeros_like(lam)
        given = None if factors is None else factors.of_sets(part, low)
        W_part, b_part, used = _newton(fast, exact, lam, W[rows].to(torch.float64), b[rows].to(torch.float64),
                                       bias_l2=penalty, gtol=gtol, max_steps=max_steps, preconditioner=given,
                                       active=active[rows])
        W_out[rows], b_out[rows] = W_part.to(W.dtype), b_part.to(b.dtype)
        products = max(products, used)
    return W_out, b_out, products


def _newton(data: _Problems, exact: _Problems, l2: torch.Tensor, W: torch.Tensor, b: torch.Tensor, *,
            bias_l2: torch.Tensor, gtol: float, max_steps: int, preconditioner: _KroneckerPreconditioner | None,
            active: torch.Tensor):
    """Newton steps for the ``active`` problems of ``exact`` (float64) from near their optimum, to a largest
    gradient entry of ``gtol``: the loss and gradient in float64, each step ``H s = -g`` solved by conjugate
    gradients (:func:`_conjugate_gradients`) to ``NEWTON_CG_TOL`` on the Hessian of ``data`` (the same problems
    in the features' own dtype: a step needs its Hessian only to that tolerance) at the step's probabilities,
    then Armijo backtracking (near the optimum the whole step is taken). A Newton step squares the error, so from
    a float32 optimum (largest gradient entry near 1e-6) two or three steps reach 1e-9. The preconditioner
    (``preconditioner``, else one refreshed from the first step's probabilities) is corrected to the Hessian's
    diagonal at the first step. A problem whose step lowers the loss no more (the arithmetic's limit) stops
    there. Returns ``(W, b, products)``: products with the features, two per evaluation and per iteration."""
    P, device, low = exact.size, W.device, data.X.dtype
    W, b = W.clone(), b.clone()
    done = ~active
    products = 0
    l2_low, bias_low = l2.to(low), bias_l2.to(low)
    if preconditioner is None:
        preconditioner = _KroneckerPreconditioner(data.X, data.scaled_l2(l2_low), bias_low, data.groups)
        fresh = True
    else:
        preconditioner = preconditioner.with_l2(data.scaled_l2(l2_low), bias_low)
        fresh = False

    def precondition(rW, rb, rows):  # H^-1 as the preconditioner has it, for problems rows
        qW = preconditioner.rotated_zeros(rW, P)
        qb = torch.zeros(P, rb.shape[1], dtype=low, device=device)
        qW[rows], qb[rows] = preconditioner.rotate(rW, rb, rows)
        sW, sb = preconditioner.scale(qW, qb)
        return preconditioner.unrotate(sW[rows], sb[rows], rows)

    for attempt in range(max_steps + 1):
        rows = (~done).nonzero().squeeze(1)
        if not len(rows):
            break
        loss, (logp, layout) = exact.loss(W[rows], b[rows], rows, l2[rows], bias_l2[rows], grad=False)
        prob = layout.take(logp.exp().to(low).transpose(1, 2))  # [rows, n, C]
        gW, gb, _ = exact.gradient(W[rows], b[rows], rows, l2[rows], bias_l2[rows], (logp, layout))
        products += 2
        reached = torch.maximum(gW.abs().amax((-2, -1)), gb.abs().amax(-1)) <= gtol
        done[rows[reached]] = True
        if bool(reached.all()) or attempt == max_steps:
            break
        if attempt == 0:
            if fresh:
                preconditioner.refresh(data.X, prob, rows, data.weights)
            preconditioner.correct(data.X, prob, rows, data.weights)
        going = ~reached
        rows, loss, gW, gb, prob = rows[going], loss[going], gW[going], gb[going], prob[going]
        sW, sb, used = _conjugate_gradients(data, rows, prob, -gW.to(low), -gb.to(low), l2_low[rows],
                                               bias_low[rows], precondition)
        products += used
        sW, sb = sW.to(W.dtype), sb.to(b.dtype)
        slope = _dot(gW, gb, sW, sb)
        size = torch.ones_like(loss)
        pending = torch.arange(len(rows), device=device)
        for _ in range(20):
            r = rows[pending]
            trial, _ = exact.loss(W[r] + size[pending, None, None] * sW[pending],
                                  b[r] + size[pending, None] * sb[pending], r, l2[r], bias_l2[r], grad=False)
            products += 1
            accepted = trial <= loss[pending] + 1e-4 * size[pending] * slope[pending]
            taken = pending[accepted]
            W[rows[taken]] += size[taken, None, None] * sW[taken]
            b[rows[taken]] += size[taken, None] * sb[taken]
            pending = pending[~accepted]
            if not len(pending):
                break
            size[pending] = size[pending] / 2
        done[rows[pending]] = True  # no step lowered these: the arithmetic's limit
    return W, b, products


def _conjugate_gradients(data: _Problems, rows: torch.Tensor, prob: torch.Tensor, gW: torch.Tensor, gb: torch.Tensor,
                         l2: torch.Tensor, bias_l2: torch.Tensor, precondition: Callable,
                         tolerance: float = NEWTON_CG_TOL):
    """Preconditioned conjugate gradients on ``H x = (gW, gb)`` for problems ``rows`` (the Hessian of ``data`` at
    class probabilities ``prob`` ``[rows, n, C]``), each its own, until its residual is at most ``tolerance``
    of its right-hand side's norm; a problem that gets there (or meets a direction of no curvature) stops and
    costs nothing more. Returns ``(xW, xb, products)``."""
    rW, rb = gW, gb
    xW, xb = torch.zeros_like(rW), torch.zeros_like(rb)
    zW, zb = precondition(rW, rb, rows)
    dW, db = zW, zb
    rz = _dot(rW, rb, zW, zb)
    target = tolerance ** 2 * _dot(rW, rb, rW, rb)
    running = torch.ones(len(rows), dtype=torch.bool, device=rows.device)
    products, live, packed = 0, None, None
    for _ in range(NEWTON_CG_ITER):
        now = running.nonzero().squeeze(1)
        if live is None or len(now) != len(live):  # the probabilities of the problems still running, packed
            live = now
            layout = data.layouts.get(rows[live], data.n_sets)
            packed = layout.pack(prob[live].reshape(len(live), -1, prob.shape[-1]))
            packed = packed.view(len(layout.sets), data.n, max(1, layout.width), data.n_classes)
        hW, hb = data.curvature(dW[live], db[live], rows[live], l2[live], bias_l2[live], packed)
        products += 2
        curvature = _dot(dW[live], db[live], hW, hb)
        positive = curvature > 0
        alpha = torch.where(positive, rz[live] / curvature.clamp_min(1e-30), torch.zeros_like(curvature))
        xW[live] += alpha[:, None, None] * dW[live]
        xb[live] += alpha[:, None] * db[live]
        rW[live] -= alpha[:, None, None] * hW
        rb[live] -= alpha[:, None] * hb
        running[live] = positive & (_dot(rW[live], rb[live], rW[live], rb[live]) > target[live])
        if not bool(running.any()):
            break
        go = running.nonzero().squeeze(1)
        zW, zb = precondition(rW[go], rb[go], rows[go])
        rz_next = _dot(rW[go], rb[go], zW, zb)
        beta = rz_next / rz[go].clamp_min(1e-30)
        dW[go] = zW + beta[:, None, None] * dW[go]
        db[go] = zb + beta[:, None] * db[go]
        rz[go] = rz_next
    return xW, xb, products
