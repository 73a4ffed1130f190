"""The batched trainer of the probes fitted by gradient steps (the MLP probe, the early-stopped linear probe,
the scalar mix): one optimiser run (L-BFGS or Adam) for every layer and L2 value at once, each problem's loss
summed so that every probe gets exactly its own gradient, with the stopping rules (:data:`STOP_RULES`) and the
classifiers it trains (linear, one-hidden-layer MLP). The exact linear probe is solved by :mod:`bertology.probing.solver`
instead; the estimators are in :mod:`bertology.probing.probes`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from bertology.errors import SettingError

# ----------------------------------------------------------------------------------------------
# the batched trainer shared by every probe


@dataclass
class _TrainResult:
    params: dict[str, torch.Tensor]  # best-on-dev parameters of every probe in the batch
    dev_accuracy: torch.Tensor  # [*batch]
    n_steps: int
    dev_loss: torch.Tensor | None = None  # [*batch]: the exact probe chooses its L2 on it (lower is better)


def _nll_per_problem(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of every problem: logits [*B, n, C], y [n] -> [*B]."""
    logp = torch.log_softmax(logits, dim=-1)
    index = y.view(*([1] * (logits.dim() - 2)), -1, 1).expand(*logits.shape[:-1], 1)
    return -logp.gather(-1, index).squeeze(-1).mean(-1)


def _accuracy_per_problem(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (logits.argmax(-1) == y).float().mean(-1)


def _keep_best(best: dict[str, torch.Tensor], current: dict[str, torch.Tensor], improved: torch.Tensor) -> None:
    for key, value in current.items():
        mask = improved.view(*improved.shape, *([1] * (value.dim() - improved.dim())))
        best[key] = torch.where(mask, value.detach(), best[key])


#: How a probe stops training: ``converged`` (the default: train to the optimum and keep the final weights; for
#: the linear probe a gradient tolerance, for the MLP the training loss's convergence; L2 still chosen on dev) or
#: ``early`` (the former default: early stopping on dev, keeping each probe's best-on-dev checkpoint; its numbers
#: depend on the optimisation path, docs/probing.md and benchmarks/perf/bench_probe_exact.py).
STOP_RULES = ("converged", "early")

@dataclass(frozen=True)
class _TrainRule:
    """How :func:`_train_batched` trains and stops: the optimiser (``lbfgs`` or ``adam``), its iteration cap,
    evaluations every ``eval_every`` iterations or epochs, ``patience`` and ``tol`` of the stopping rule, Adam's
    ``lr`` and ``batch_size``, and the rule itself (``stop``: :data:`STOP_RULES`)."""

    optimizer: str
    max_iter: int
    eval_every: int
    patience: int
    lr: float
    batch_size: int
    tol: float
    stop: str = "early"


def _train_batched(
    params: dict[str, torch.Tensor],
    forward: Callable[[dict[str, torch.Tensor], torch.Tensor], torch.Tensor],
    penalty: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    data: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    rule: _TrainRule,
    *,
    generator: torch.Generator,
    sample_axis: int,
    group: Callable[[torch.Tensor], torch.Tensor],
    loss_and_grad: Callable | None = None,
) -> _TrainResult:
    """Minimise the sum of per-problem losses; keep, per problem, the parameters best on dev.

    ``data``: ``(X_train, y_train, X_dev, y_dev)``; ``rule``: the optimiser and the stopping rule
    (:class:`_TrainRule`). ``forward`` maps parameters and features to logits ``[*batch, n, C]``; ``penalty`` gives
    ``[*batch]``. Early stopping: evaluate dev every ``eval_every`` iterations (L-BFGS) or epochs (Adam); stop when no
    group (``group`` maps per-problem dev accuracy to per-group accuracy) has improved by more than
    ``tol`` for ``patience`` evaluations. ``loss_and_grad(params, X, y) -> (loss, grads)`` replaces
    autograd in full-batch L-BFGS when the gradient has a closed form (the linear probe's).

    ``stop="converged"`` trains to convergence (or ``max_iter``) instead and keeps every problem's final
    parameters and their dev accuracy: the result no longer depends on which checkpoint of the path scored
    best on dev, so it moves far less with tiny changes of the start or the features (docs/probing.md).
    """
    X_train, y_train, X_dev, y_dev = data
    optimizer, max_iter, eval_every, patience = rule.optimizer, rule.max_iter, rule.eval_every, rule.patience
    lr, batch_size, tol, stop = rule.lr, rule.batch_size, rule.tol, rule.stop
    if stop not in STOP_RULES:
        raise SettingError("stop", stop, f"expected one of {', '.join(STOP_RULES)}")
    early = stop == "early"
    for p in params.values():
        p.requires_grad_(True)
    leaves = list(params.values())

    def dev_accuracy() -> torch.Tensor:
        with torch.no_grad():
            return _accuracy_per_problem(forward(params, X_dev), y_dev)

    best = {k: v.detach().clone() for k, v in params.items()}
    first = dev_accuracy()
    state = {"best_acc": first, "group_best": group(first), "stale": torch.zeros_like(group(first))}
    steps = 0

    def record() -> torch.Tensor:
        # Every probe keeps its best-on-dev parameters. Patience is counted per group (a layer: the
        # best over its L2 grid), and only an improvement of more than ``tol`` resets it, so that
        # one-example wobbles of a converged probe do not keep the whole batch training.
        acc = dev_accuracy()
        improved = acc > state["best_acc"]
        _keep_best(best, params, improved)
        state["best_acc"] = torch.maximum(state["best_acc"], acc)
        grouped = group(acc)
        progress = grouped > state["group_best"] + tol
        state["group_best"] = torch.maximum(state["group_best"], grouped)
        state["stale"] = torch.where(progress, torch.zeros_like(grouped), state["stale"] + 1)
        return state["stale"]
    n = y_train.shape[0]

    if optimizer == "lbfgs":
        opt = torch.optim.LBFGS(
            leaves, lr=1.0, max_iter=eval_every, history_size=20, line_search_fn="strong_wolfe",
            tolerance_grad=1e-6, tolerance_change=1e-9,
        )

        def closure():
            if loss_and_grad is not None:
                with torch.no_grad():
                    loss, grads = loss_and_grad(params, X_train, y_train)
                for key, grad in grads.items():
                    params[key].grad = grad
                return loss
            opt.zero_grad(set_to_none=True)
            loss = (_nll_per_problem(forward(params, X_train), y_train) + penalty(params)).sum()
            loss.backward()
            return loss

        previous = math.inf
        while steps < max_iter:
            loss = float(opt.step(closure).detach())
            steps += eval_every
            stale = record()
            converged = abs(previous - loss) <= 1e-7 * max(1.0, abs(loss))
            previous = loss
            if (early and bool((stale >= patience).all())) or converged:
                break
    elif optimizer == "adam":
        opt = torch.optim.Adam(leaves, lr=lr)
        previous_epoch, flat = None, 0
        while steps < max_iter:
            order = torch.randperm(n, generator=generator).to(y_train.device)
            epoch_loss = 0.0
            for start in range(0, n, batch_size):
                idx = order[start : start + batch_size]
                opt.zero_grad(set_to_none=True)
                batch_X = X_train.index_select(sample_axis, idx)
                per_problem = _nll_per_problem(forward(params, batch_X), y_train[idx]) + penalty(params)
                per_problem.sum().backward()
                opt.step()
                epoch_loss = epoch_loss + per_problem.detach() * len(idx) / n
            steps += 1
            if not early:
                # The MLP's deterministic rule: stop once no problem's mean training loss over an epoch fell by
                # more than ``tol`` (nats) for ``patience`` epochs in a row; keep the final weights. Absolute, not
                # relative: a loss falling toward zero keeps a large relative fall long after it stops mattering.
                if previous_epoch is not None:
                    flat = flat + 1 if bool((previous_epoch - epoch_loss <= tol).all()) else 0
                previous_epoch = epoch_loss
                if flat >= patience:
                    break
                continue
            if steps % eval_every:
                continue
            stale = record()
            if bool((stale >= patience).all()):
                break
    else:
        raise SettingError("optimizer", optimizer, "expected 'lbfgs' or 'adam'")
    for p in params.values():
        p.requires_grad_(False)
    if not early:
        return _TrainResult(params={k: v.detach().clone() for k, v in params.items()}, dev_accuracy=dev_accuracy(),
                            n_steps=steps)
    return _TrainResult(params=best, dev_accuracy=state["best_acc"], n_steps=steps)


# ----------------------------------------------------------------------------------------------
# the classifiers: linear and one-hidden-layer MLP, for a shared input [L, n, d] and a grid axis G


def _init_classifier(kind: str, batch: tuple[int, ...], dim: int, n_classes: int, hidden: int,
                     generator: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    def normal(*shape, std):
        return (torch.randn(*shape, generator=generator) * std).to(device)

    if kind == "linear":
        return {"W": normal(*batch, dim, n_classes, std=0.01), "b": torch.zeros(*batch, n_classes, device=device)}
    return {
        "W1": normal(*batch, dim, hidden, std=math.sqrt(2.0 / dim)),
        "b1": torch.zeros(*batch, hidden, device=device),
        "W2": normal(*batch, hidden, n_classes, std=math.sqrt(1.0 / hidden)),
        "b2": torch.zeros(*batch, n_classes, device=device),
    }


#: Ridge weights are ~10x smaller than a fitted logistic regression's on standardised features; scaling the
#: start by 10 cut L-BFGS steps by a third and agreed best with scikit-learn (benchmarks/perf/bench_probes.py).
RIDGE_START_SCALE = 10.0


def _ridge_start(X: torch.Tensor, y: torch.Tensor, n_classes: int, l2: torch.Tensor) -> torch.Tensor:
    """Ridge regression onto centred one-hot labels, per layer and L2 value: a cheap start for L-BFGS."""
    n, d = X.shape[1], X.shape[2]
    targets = torch.nn.functional.one_hot(y, n_classes).to(X.dtype) - 1.0 / n_classes
    gram = X.transpose(1, 2) @ X / n  # [L, d, d]
    cross = X.transpose(1, 2) @ targets / n  # [L, d, C]
    eye = torch.eye(d, dtype=X.dtype, device=X.device)
    system = gram[:, None] + (l2[..., None, None] + 1e-4) * eye  # [L, G, d, d]
    # Cholesky, not torch.linalg.solve: the system is symmetric positive definite, and the LU solve of the
    # torch 2.13 CPU wheel (MKL 2024.2) fails ("Pivots given to lu_solve...") after torch.set_num_threads(n > 1).
    factor = torch.linalg.cholesky(system)
    return torch.cholesky_solve(cross[:, None].expand(-1, l2.shape[1], -1, -1).contiguous(), factor).contiguous()


def _linear_loss_and_grad(l2: torch.Tensor) -> Callable:
    """Multinomial logistic regression, every layer x L2 value: the summed loss of ``_nll_per_problem`` +
    ``_weight_penalty`` and its gradient in closed form (dW = X^T (softmax - onehot) / n + l2 W), which
    saves autograd's graph and backward pass in every L-BFGS evaluation."""

    def loss_and_grad(params, X, y):
        W, b = params["W"], params["b"]  # [L, G, d, C], [L, G, C]
        logits = torch.einsum("lnd,lgdc->lgnc", X, W) + b.unsqueeze(-2)
        logp = torch.log_softmax(logits, dim=-1)
        n = X.shape[1]
        index = y.view(1, 1, -1, 1).expand(*logits.shape[:-1], 1)
        nll = -logp.gather(-1, index).squeeze(-1).mean(-1)  # [L, G]
        residual = logp.exp_()
        residual.scatter_add_(-1, index, torch.full_like(index, -1, dtype=residual.dtype))
        residual /= n
        grad_W = torch.einsum("lnd,lgnc->lgdc", X, residual) + l2[..., None, None] * W
        grad_b = residual.sum(-2)
        loss = (nll + 0.5 * l2 * W.pow(2).sum((-2, -1))).sum()
        return loss, {"W": grad_W.contiguous(), "b": grad_b.contiguous()}

    return loss_and_grad



def _weight_penalty(l2: torch.Tensor) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
    """0.5 * l2 * squared norm of the weight matrices (not the biases) of every problem."""

    def penalty(params):
        total = 0.0
        for key in ("W", "W1", "W2"):
            if key in params:
                total = total + params[key].pow(2).sum((-2, -1))
        return 0.5 * l2 * total

    return penalty
