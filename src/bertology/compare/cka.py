"""Linear centered kernel alignment (Kornblith, Norouzi, Lee & Hinton 2019, "Similarity of Neural Network
Representations Revisited", eq. for linear CKA in feature space).

    CKA(X, Y) = ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F),   Xc, Yc: column-centred [n, d] matrices

It is 1 for identical representations, invariant to orthogonal transforms and isotropic scaling of
either side (not to arbitrary invertible linear maps), and the two sides may differ in width.
"""

from __future__ import annotations

import numpy as np

from bertology.errors import DataError


def _centred(x, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise DataError(f"{name}: expected a [n_examples, n_features] matrix, got shape {x.shape}")
    return x - x.mean(axis=0, keepdims=True)


def linear_cka(x, y) -> float:
    """Linear CKA between representations ``x`` [n, d1] and ``y`` [n, d2] of the same n examples."""
    xc, yc = _centred(x, "x"), _centred(y, "y")
    if xc.shape[0] != yc.shape[0]:
        raise DataError(f"linear_cka: x has {xc.shape[0]} rows and y {yc.shape[0]}; expected the same examples")
    if xc.shape[0] < 2:
        raise DataError("linear_cka: need at least 2 examples")
    cross = np.linalg.norm(yc.T @ xc, "fro") ** 2
    norm_x = np.linalg.norm(xc.T @ xc, "fro")
    norm_y = np.linalg.norm(yc.T @ yc, "fro")
    if norm_x == 0 or norm_y == 0:
        return float("nan")  # a constant representation has no similarity structure
    return float(cross / (norm_x * norm_y))


def cka_matrix(xs: list, ys: list) -> np.ndarray:
    """CKA of every pair (xs[i], ys[j]); centring and Gram norms computed once per matrix."""
    xcs = [_centred(x, f"xs[{i}]") for i, x in enumerate(xs)]
    ycs = [_centred(y, f"ys[{j}]") for j, y in enumerate(ys)]
    x_norms = [np.linalg.norm(x.T @ x, "fro") for x in xcs]
    y_norms = [np.linalg.norm(y.T @ y, "fro") for y in ycs]
    out = np.full((len(xcs), len(ycs)), np.nan)
    for i, x in enumerate(xcs):
        for j, y in enumerate(ycs):
            if x.shape[0] != y.shape[0]:
                raise DataError(f"cka_matrix: xs[{i}] has {x.shape[0]} rows and ys[{j}] {y.shape[0]}")
            if x_norms[i] > 0 and y_norms[j] > 0:
                out[i, j] = np.linalg.norm(y.T @ x, "fro") ** 2 / (x_norms[i] * y_norms[j])
    return out
