"""The exact linear probe's preconditioner (:class:`_KroneckerPreconditioner`): a Kronecker-factored estimate of
the multinomial loss's Hessian (K-FAC), both factors eigendecomposed, in whose eigenbases the solver's L-BFGS
(:func:`bertology.probing.solver._lbfgs`) and its Newton polish's conjugate gradients
(:func:`bertology.probing.solver._newton`) work; and :func:`_dot`, the dot product of the problems' ``(W, b)``.
"""

from __future__ import annotations

import torch

from bertology.probing.problems import _Layout


#: The thin form of :class:`_KroneckerPreconditioner` is used when the features are at least this many times the
#: examples (``THIN * n <= dim``): a rotation then costs three products of ``n`` columns with the features'
#: ``dim`` (against two of ``dim``), and the eigendecomposition is of an ``n x n`` matrix.
THIN = 2

#: A Gram eigenvalue at most this share of the set's largest is taken as zero (its eigenvector is not kept).
THIN_RANK_TOL = 1e-9


def _dot(aW, ab, cW, cb) -> torch.Tensor:
    return (aW * cW).sum((-2, -1)) + (ab * cb).sum(-1)


def _thin_eigenbasis(X: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The eigenvalues ``[sets, n]`` and orthonormal eigenvectors ``[sets, dim, n]`` of the weighted covariance
    ``X^T diag(weight) X / n`` of each set (``X`` ``[sets, n, dim]``, ``n < dim``), from the ``n x n`` Gram
    matrix of the weighted examples, in float64: its eigenvectors ``e`` give the covariance's ``X_w^T e /
    sqrt(n lam)``; one whose eigenvalue is (numerically) zero is left out as a zero column."""
    n = X.shape[1]
    Xw = X.double() * weight.double().clamp_min(0).sqrt().unsqueeze(-1)
    eigenvalues, E = torch.linalg.eigh(torch.bmm(Xw, Xw.transpose(1, 2)) / n)
    kept = eigenvalues > THIN_RANK_TOL * eigenvalues.amax(1, keepdim=True).clamp_min(1e-300)
    eigenvalues = torch.where(kept, eigenvalues, 0.0)
    scale = torch.where(kept, 1 / (n * eigenvalues).clamp_min(1e-300).sqrt(), 0.0)
    return eigenvalues, torch.bmm(Xw.transpose(1, 2), E * scale.unsqueeze(1))


class _KroneckerPreconditioner:
    """An approximate inverse Hessian of the multinomial loss of every problem: ``(A (x) S + l2 I)^-1``, the
    Kronecker factorisation of K-FAC. Each example's softmax curvature ``M_i = diag(p_i) - p_i p_i^T`` is
    taken as ``(tr M_i / mean tr M) A`` with ``A = mean_i M_i``, so the feature factor ``S`` is the covariance
    weighted by each example's curvature (examples near the decision boundary dominate, as in the Hessian).
    For two classes this is the exact Hessian, and L-BFGS then takes Newton steps after every refresh. Both
    factors are eigendecomposed: in their eigenbases (:meth:`rotate`) the preconditioner is diagonal
    (:meth:`scale`), and :func:`_lbfgs` works there between refreshes (from the current probabilities, every
    few iterations).

    The problems of one feature set (``groups`` of them, :class:`_Problems`) share ``S``, weighted by all their
    examples' curvature (and example weights): one eigendecomposition per set, and their rotations one product
    per set; ``A`` is each problem's own.

    With fewer examples than half the features (:data:`THIN`) ``S`` has rank at most ``n``: it is decomposed
    from the examples' ``n x n`` Gram matrix instead, and only its ``n`` eigenvectors with room for a non-zero
    eigenvalue are kept (``U`` ``[sets, dim, n]``). A rotated vector is then those ``n`` coordinates followed by
    what is left of the vector outside them, as it lies (``[n + dim, C]`` before the class basis): dot products
    are kept as before, and there the preconditioner is ``1 / l2``, as the full decomposition's zero eigenvalues
    give it. The same preconditioner, at ``n`` rather than ``dim`` columns per rotation."""

    def __init__(self, X: torch.Tensor, l2: torch.Tensor, bias_l2: torch.Tensor, groups: int = 1):
        self.l2, self.bias_l2, self.groups = l2, bias_l2, groups
        self.n_sets = X.shape[0] if X is not None else None
        #: the thin form's number of kept coordinates (the examples), None for the full decomposition
        self.thin = X.shape[1] if X is not None and THIN * X.shape[1] <= X.shape[2] else None
        self.lam = self.U = self.alpha = self.V = self.bias_scale = self.D = self.D_bias = None
        self._bases_of = (None, None)

    def rotated_zeros(self, W: torch.Tensor, problems: int | None = None) -> torch.Tensor:
        """Zeros shaped as :meth:`rotate` turns ``W`` ``[problems, dim, C]`` (``problems`` of them: default
        ``W``'s), in its dtype."""
        count = W.shape[0] if problems is None else problems
        return W.new_zeros(count, W.shape[1] + (self.thin or 0), W.shape[2])

    def refresh(self, X: torch.Tensor, p: torch.Tensor, rows: torch.Tensor | None = None,
                weights: torch.Tensor | None = None) -> None:
        """From the current class probabilities ``p`` ``[rows, n, C]`` of problems ``rows`` (all by default);
        ``weights``: the example weights ``[groups, n]`` of :class:`_Problems` (default: the mean)."""
        B, n, d = X.shape
        P, C = len(self.l2), p.shape[-1]
        if rows is None:
            rows = torch.arange(P, device=X.device)
        r = self.thin
        if self.lam is None:
            self.lam = torch.zeros(B, d if r is None else r + d, dtype=X.dtype, device=X.device)
            self.U = torch.zeros(B, d, d if r is None else r, dtype=X.dtype, device=X.device)
            self.alpha = torch.zeros(P, C, dtype=X.dtype, device=X.device)
            self.V = torch.zeros(P, C, C, dtype=X.dtype, device=X.device)
        trace = (p * (1 - p)).sum(-1)  # tr M_i  [rows, n]
        if weights is None:
            curvature = torch.diag_embed(p.mean(1)) - torch.bmm(p.transpose(1, 2), p) / n
        else:
            w = weights[torch.remainder(rows, self.groups)]
            pw = p * w.unsqueeze(-1)
            curvature = torch.diag_embed(pw.sum(1)) - torch.bmm(pw.transpose(1, 2), p)
            trace = trace * w
        layout = _Layout(rows, self.groups, B)
        # Each set's examples weighted by the summed curvature of its problems' examples (one problem: tr M_i).
        per_set = trace if layout.width == 1 else torch.zeros(len(layout.sets), n, dtype=trace.dtype,
                                                              device=X.device).index_add_(0, layout.position, trace)
        weight = per_set / per_set.mean(1, keepdim=True).clamp_min(1e-12)
        Xs = X if layout.all_sets else X[layout.sets]
        if r is None:
            covariance = torch.bmm(Xs.transpose(1, 2), Xs * weight.unsqueeze(-1)) / n
            # float32 is enough for a preconditioner, and the eigendecomposition is a third of a refresh's cost.
            eigenvalues, U = torch.linalg.eigh(covariance)
            self.lam[layout.sets], self.U[layout.sets] = eigenvalues.clamp_min(0).to(X.dtype), U.to(X.dtype)
        else:
            eigenvalues, U = _thin_eigenbasis(Xs, weight)
            self.lam[layout.sets] = torch.cat([eigenvalues, eigenvalues.new_zeros(len(eigenvalues), d)], 1).to(X.dtype)
            self.U[layout.sets] = U.to(X.dtype)
        alpha, V = torch.linalg.eigh(curvature.double())
        self.alpha[rows], self.V[rows] = alpha.clamp_min(0).to(X.dtype), V.to(X.dtype)
        self._bases_of = (None, None)
        self.D = self.D_bias = None  # a correction belongs to the factors it was made in
        self._update_bias_scale()

    def correct(self, X: torch.Tensor, p: torch.Tensor, rows: torch.Tensor, weights: torch.Tensor | None = None) -> None:
        """Replace the Kronecker product's eigenvalues ``lam_j alpha_k`` of problems ``rows`` by the exact diagonal
        of their data term's Hessian in the same eigenbases, at class probabilities ``p`` ``[rows, n, C]``:
        entry ``(j, k)`` is ``sum_i w_i (U^T x_i)_j^2 (V^T M_i V)_kk`` (George et al. 2018, eigenvalue-corrected
        K-FAC; ``weights`` as in :meth:`refresh`), and the bias's ``sum_i w_i (V^T M_i V)_kk``. Where examples
        are confident about different classes, ``M_i`` is far from a multiple of its mean and the Kronecker
        product's diagonal far from the Hessian's; the conjugate gradients of the Newton polish
        (:func:`_newton`) took about two thirds of the iterations with the corrected one on XPOS and on
        dependency labels' group of eight fits (one-off runs, not stored). Costs a product of the
        features with the feature basis and one as wide as a gradient's; :meth:`refresh` drops it."""
        n, C = p.shape[1], p.shape[2]
        rows, layout = self._layout(rows, len(self.l2))
        if self.D is None:  # (the thin form: zero outside its coordinates, where no example's features lie)
            self.D = torch.zeros(len(self.l2), X.shape[-1] + (self.thin or 0), C, dtype=X.dtype, device=X.device)
            self.D_bias = torch.zeros(len(self.l2), C, dtype=X.dtype, device=X.device)
        Xs = X if layout.all_sets else X[layout.sets]
        rotated = torch.bmm(Xs, self._set_bases(layout, rows)).pow_(2)  # [sets, n, d]: (U^T x_i)_j^2
        V = self.V[rows]
        pV = torch.bmm(p, V)
        Q = torch.bmm(p, V * V).sub_(pV.pow_(2))  # [rows, n, C]: (V^T M_i V)_kk
        Q = Q.div_(n) if weights is None else Q.mul_(weights[torch.remainder(rows, self.groups)].unsqueeze(-1))
        diagonal = layout.unpack(torch.bmm(rotated.transpose(1, 2), layout.pack(Q)))
        if self.thin is None:
            self.D[rows] = diagonal
        else:
            self.D[rows, :self.thin] = diagonal
        self.D_bias[rows] = Q.sum(1)
        self._update_bias_scale()

    def _update_bias_scale(self) -> None:
        # The bias sees unit "feature variance"; the softmax's all-ones direction has no curvature, so it is
        # floored (that direction does not change the probabilities).
        curvature = self.alpha if self.D_bias is None else self.D_bias
        self.bias_scale = 1.0 / (curvature + self.bias_l2[:, None].to(curvature.dtype)).clamp_min(1e-3)

    def with_l2(self, l2: torch.Tensor, bias_l2: torch.Tensor) -> "_KroneckerPreconditioner":
        """The same factors for other L2 values: the curvature of the data term does not depend on L2, so the
        factors of a neighbouring optimum serve the next value of the path without a refresh."""
        other = _KroneckerPreconditioner(None, l2, bias_l2, self.groups)
        other.n_sets, other.thin = self.n_sets, self.thin
        other.lam, other.U, other.alpha, other.V = self.lam, self.U, self.alpha, self.V
        other.D, other.D_bias = self.D, self.D_bias
        other._update_bias_scale()
        return other

    def of_sets(self, sets: torch.Tensor, dtype: torch.dtype) -> "_KroneckerPreconditioner":
        """The factors of the problems of feature sets ``sets``, in ``dtype`` (the float64 polish; set
        :meth:`with_l2` before use)."""
        rows = (sets[:, None] * self.groups + torch.arange(self.groups, device=sets.device)).reshape(-1)
        other = _KroneckerPreconditioner(None, self.l2[rows], self.bias_l2[rows], self.groups)
        other.n_sets, other.thin = len(sets), self.thin
        other.lam, other.U = self.lam[sets].to(dtype), self.U[sets].to(dtype)
        other.alpha, other.V = self.alpha[rows].to(dtype), self.V[rows].to(dtype)
        if self.D is not None:
            other.D, other.D_bias = self.D[rows].to(dtype), self.D_bias[rows].to(dtype)
        other._update_bias_scale()
        return other

    def _set_bases(self, layout: _Layout, rows) -> torch.Tensor:
        if layout.all_sets:
            return self.U
        key = self._bases_of
        if key[0] is None or not torch.equal(key[0], layout.sets):
            self._bases_of = (layout.sets.clone(), self.U[layout.sets])
        return self._bases_of[1]

    def _layout(self, rows, n: int):
        if rows is None:
            rows = torch.arange(n, device=self.U.device)
        return rows, _Layout(rows, self.groups, self.n_sets)

    def rotate(self, gW: torch.Tensor, gb: torch.Tensor, rows=None):
        """``(W, b)`` of the problems ``rows`` (all by default) in the factors' eigenbases: ``U^T W V``, ``b V``.
        Both bases are orthonormal, so dot products (all that L-BFGS takes of its vectors) are unchanged."""
        rows, layout = self._layout(rows, len(gW))
        U, V = self._set_bases(layout, rows), self.V[rows]
        packed = layout.pack(gW)
        left = torch.bmm(U.transpose(1, 2), packed)
        if self.thin is not None:  # the kept coordinates, then the rest of the vector as it lies
            left = torch.cat([left, packed - torch.bmm(U, left)], 1)
        return torch.bmm(layout.unpack(left), V), torch.bmm(gb.unsqueeze(1), V).squeeze(1)

    def unrotate(self, rW: torch.Tensor, rb: torch.Tensor, rows=None):
        """The inverse of :meth:`rotate`."""
        rows, layout = self._layout(rows, len(rW))
        U, V = self._set_bases(layout, rows), self.V[rows]
        right = torch.bmm(rW, V.transpose(1, 2))
        bias = torch.bmm(rb.unsqueeze(1), V.transpose(1, 2)).squeeze(1)
        if self.thin is None:
            return layout.unpack(torch.bmm(U, layout.pack(right))), bias
        r = self.thin
        return layout.unpack(torch.bmm(U, layout.pack(right[:, :r]))) + right[:, r:], bias

    def scale(self, qW: torch.Tensor, qb: torch.Tensor):
        """The preconditioner of rotated vectors (:meth:`rotate`) of every problem: there it is diagonal (the
        corrected diagonal once :meth:`correct` made one)."""
        if self.D is not None:
            return qW / (self.D + self.l2[:, None, None]), qb * self.bias_scale
        sets = torch.div(torch.arange(len(self.l2), device=qW.device), self.groups, rounding_mode="floor")
        lam = self.lam if self.groups == 1 else self.lam[sets]
        return qW / (lam[:, :, None] * self.alpha[:, None, :] + self.l2[:, None, None]), qb * self.bias_scale
