"""Minimum description length probing: the online code of Voita and Titov (2020), every layer at once.

The labels of the training set are transmitted block by block. The first block (the first ``t_1`` share of
the examples, in a seeded random order) is sent with the uniform code, ``log2 K`` bits per label; every later
block ``(t_i, t_{i+1}]`` is sent with a probe trained on the examples before it, costing ``-log2 p(y | x)``
bits per label. The sum is the *online codelength*; the *uniform codelength* is ``n log2 K``; their ratio is
the *compression*. A representation from which the labels are easy to learn compresses them more, so
codelength separates a task from its control task more clearly than accuracy (Voita and Titov's point).

Each block's probe is the exact linear probe (:func:`bertology.probing.solver.fit_multinomial`) over all
``K`` classes, standardised on its own prefix, with the bias penalised like the weights (so a class the
prefix has not seen yet keeps a finite cost); its L2 strength is chosen per layer on the dev split by
cross-entropy (test is never used). What differs from the paper: the paper trains each block's probe with
early stopping on dev; ours is solved to its optimum, so the codelength does not depend on the optimiser.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bertology.errors import SettingError
from bertology.probing.probes import DEFAULT_L2, _check_grid, _fit_scaler, as_layer_tensor
from bertology.probing.solver import fit_multinomial, path_start
from bertology.probing.spec import DEFAULT_TIMESTAMPS, check_timestamps  # noqa: F401 (public here)
from bertology.runtime import derive_seed, resolve_device

def block_ends(timestamps: Sequence[float], n_train: int) -> list[int]:
    """The number of examples transmitted after each timestamp: ``int(t * n)``, repeats removed."""
    ends: list[int] = []
    for t in check_timestamps(timestamps, n_train):
        end = max(1, int(t * n_train))
        if not ends or end > ends[-1]:
            ends.append(end)
    return ends


@dataclass
class Codelength:
    """One online code per layer: ``online`` and ``uniform`` bits ``[n_layers]``, ``compression`` (uniform /
    online), the ``blocks`` (their ends) and each block's bits ``[n_blocks, n_layers]`` (the first block's
    uniform), and the L2 strength each block's probe chose per layer ``[n_blocks - 1, n_layers]``."""

    online: np.ndarray
    uniform: np.ndarray
    compression: np.ndarray
    blocks: list[int]
    block_bits: np.ndarray
    l2: np.ndarray


def _standardised(X: np.ndarray, mean: np.ndarray, scale: np.ndarray, device) -> torch.Tensor:
    return torch.from_numpy((X - mean) / scale).to(device)


def _bits(X: torch.Tensor, y: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Bits to send ``y`` with every probe: X [L, n, d], W [L, G, d, C], b [L, G, C] -> [L, G]."""
    logits = torch.einsum("lnd,lgdc->lgnc", X, W) + b.unsqueeze(-2)
    logp = torch.log_softmax(logits, -1)
    index = y.view(1, 1, -1, 1).expand(*logits.shape[:-1], 1)
    return -logp.gather(-1, index).squeeze(-1).sum(-1) / math.log(2)


def online_codelength(X_train, y_train, X_dev, y_dev, *, timestamps: Sequence[float] = DEFAULT_TIMESTAMPS,
                      l2: float | Sequence[float] | None = None, seed: int = 0, device: str | None = "auto") -> Codelength:
    """The online codelength of ``y_train`` given ``X_train`` (``[n_layers, n, dim]`` or ``[n, dim]``), per layer.

    The examples are sent in the order of ``derive_seed(seed, "mdl-order")``; ``timestamps`` are the block
    boundaries as shares of the training set (:data:`DEFAULT_TIMESTAMPS`); ``X_dev``/``y_dev`` choose each
    block's L2 strength (from ``l2``) per layer by cross-entropy. Labels of ``y_dev`` that ``y_train`` lacks
    are left out of that choice. Returns a :class:`Codelength`."""
    X_train = as_layer_tensor(X_train, "X_train")
    X_dev = as_layer_tensor(X_dev, "X_dev")
    y_train, y_dev = np.asarray(y_train), np.asarray(y_dev)
    n = X_train.shape[1]
    if len(y_train) != n:
        raise SettingError("y_train", len(y_train), f"expected one label per training example ({n})")
    ends = block_ends(timestamps, n)
    classes = np.unique(y_train)
    index = {label: i for i, label in enumerate(classes.tolist())}
    K = len(classes)
    order = np.random.default_rng(derive_seed(seed, "mdl-order")).permutation(n)
    X_train, codes = X_train[:, order], np.array([index[v] for v in y_train[order].tolist()], dtype=np.int64)
    known = np.array([v in index for v in y_dev.tolist()], dtype=bool)
    X_dev, dev_codes = X_dev[:, known], np.array([index[v] for v in y_dev[known].tolist()], dtype=np.int64)
    device = resolve_device(device)
    grid = _check_grid(DEFAULT_L2 if l2 is None else l2)
    L = X_train.shape[0]
    first = np.full(L, ends[0] * math.log2(K)) if K > 1 else np.zeros(L)
    block_bits, chosen = [first], []
    for start, end in zip(ends, ends[1:]):
        mean, scale = _fit_scaler(X_train[:, :start])
        prefix = _standardised(X_train[:, :start], mean, scale, device)
        targets = torch.from_numpy(codes[:start]).to(device)
        if len(dev_codes):
            dev = _standardised(X_dev, mean, scale, device)
            dev_targets = torch.from_numpy(dev_codes).to(device)

            def score(W, b, layers):  # higher is better: minus the dev bits
                return -_bits(dev if len(layers) == L else dev[layers], dev_targets, W.unsqueeze(1),
                              b.unsqueeze(1))[:, 0]

            # The grid walked as the probes' path (from PATH_START while the dev bits fall): a small prefix wants
            # a strong L2, a large one a weak L2, and each block solves only the values near its own.
            W, b, _, scores = fit_multinomial(prefix, targets, K, grid, bias_l2=True, score=score)
            pick = scores.argmax(1)  # first maximum: the strongest L2 among ties
        else:  # nothing to choose on: the path's first value
            first = path_start(grid)
            W, b, _, _ = fit_multinomial(prefix, targets, K, grid[first:first + 1], bias_l2=True)
            W, b = W.expand(-1, len(grid), -1, -1), b.expand(-1, len(grid), -1)
            pick = torch.full((L,), first, dtype=torch.long, device=device)
        block = _standardised(X_train[:, start:end], mean, scale, device)
        bits = _bits(block, torch.from_numpy(codes[start:end]).to(device), W, b)
        rows = torch.arange(L, device=device)
        block_bits.append(bits[rows, pick].double().cpu().numpy())
        chosen.append(np.asarray(grid)[pick.cpu().numpy()])
    block_bits = np.stack(block_bits)
    online = block_bits.sum(0)
    uniform = np.full(L, ends[-1] * math.log2(K)) if K > 1 else np.zeros(L)
    with np.errstate(divide="ignore", invalid="ignore"):
        compression = np.where(online > 0, uniform / online, np.nan)
    return Codelength(online=online, uniform=uniform, compression=compression, blocks=ends, block_bits=block_bits,
                      l2=np.stack(chosen) if chosen else np.empty((0, L)))
