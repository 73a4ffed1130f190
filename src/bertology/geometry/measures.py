"""The geometry measures of Ethayarajh (2019), as pure functions of vectors.

Each function takes plain arrays so it can be checked by hand on a few vectors; :mod:`.contextuality`
applies them to a store layer by layer. The definitions follow the code that produced the paper's
numbers (github.com/kawine/contextual, ``analyze.py``); where the code and the paper's formulas differ,
the code is followed and the docstring says so.
"""

from __future__ import annotations

import numpy as np

#: Vectors shorter than this are treated as zero (their cosine with anything is 0, not NaN).
_TINY = 1e-12


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (float64); all-zero rows stay zero."""
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms < _TINY, 1.0, norms)


def pair_count(n: int) -> int:
    """Unordered pairs of ``n`` items."""
    return n * (n - 1) // 2


def sample_pairs(n: int, max_pairs: int | None, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray] | None:
    """``max_pairs`` distinct unordered pairs ``(a, b)``, ``a < b``, of ``range(n)``, drawn with ``rng``;
    ``None`` when every pair is to be used (``max_pairs`` is None or at least the number of pairs).

    kawine/contextual samples 1,000 *ordered* pairs ``i != j`` when there are more; drawing distinct
    unordered pairs gives the same expectation without counting a pair twice.
    """
    total = pair_count(n)
    if max_pairs is None or total <= max_pairs:
        return None
    chosen = np.sort(rng.choice(total, size=int(max_pairs), replace=False))
    return _pair_from_index(chosen, n)


def _pair_from_index(k: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k``-th pair in the order (0,1), (0,2), ..., (0,n-1), (1,2), ...: the inverse of the row-major
    upper-triangle index."""
    k = np.asarray(k, dtype=np.int64)
    # pairs before row a: a * (2n - a - 1) / 2; solve for the largest a with that <= k
    a = (n - 2 - np.floor(np.sqrt(-8 * k + 4 * n * (n - 1) - 7) / 2.0 - 0.5)).astype(np.int64)
    a = np.clip(a, 0, n - 2)

    def before(row):
        return row * (2 * n - row - 1) // 2

    a -= before(a) > k  # guard against rounding of the square root at row boundaries
    a += before(a + 1) <= k
    before = before(a)
    b = k - before + a + 1
    return a, b


def mean_pair_cosine(units: np.ndarray, pairs: tuple[np.ndarray, np.ndarray] | None = None) -> float:
    """Mean cosine over ``pairs`` of the unit rows ``units`` (:func:`unit_rows`); over every unordered pair
    when ``pairs`` is None, exactly and in O(n d): ``(|sum u|^2 - sum |u|^2) / (n (n - 1))``."""
    n = len(units)
    if n < 2:
        return float("nan")
    if pairs is None:
        total = units.sum(axis=0)
        squared = float(np.einsum("ij,ij->", units, units))
        return float((total @ total - squared) / (n * (n - 1)))
    a, b = pairs
    return float(np.einsum("ij,ij->i", units[a], units[b]).mean())


def self_similarity(vectors: np.ndarray, pairs: tuple[np.ndarray, np.ndarray] | None = None) -> float:
    """Ethayarajh's self-similarity of one word type in one layer: the mean cosine between its vectors in
    different contexts (every pair of occurrences, or the sampled ``pairs``)."""
    return mean_pair_cosine(unit_rows(vectors), pairs)


def intra_sentence_similarity(vectors: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per sentence: the mean cosine between each word vector and the sentence vector (the mean of the
    sentence's word vectors, not normalised first, as in kawine/contextual).

    ``vectors`` holds the sentences' rows back to back; sentence ``i`` is rows ``offsets[i]:offsets[i+1]``.
    """
    vectors = np.asarray(vectors, dtype=np.float64)
    offsets = np.asarray(offsets, dtype=np.int64)
    counts = np.diff(offsets)
    if (counts < 1).any():
        raise ValueError("every sentence needs at least one vector")
    starts = offsets[:-1]
    means = np.add.reduceat(vectors, starts, axis=0) / counts[:, None]
    owner = np.repeat(np.arange(len(counts)), counts)
    cosines = np.einsum("ij,ij->i", unit_rows(vectors[offsets[0]:offsets[-1]]), unit_rows(means)[owner])
    return np.add.reduceat(cosines, starts - offsets[0]) / counts


#: The three definitions of a word type's maximum explainable variance (MEV) that circulate, by name:
#: ``released`` (kawine/contextual's released numbers, ``TruncatedSVD(100).explained_variance_ratio_[0]``:
#: var(X v1) / total column variance, v1 the first right singular vector of the *uncentred* X; the
#: contextuality tables' definition), ``paper`` (Ethayarajh 2019's formula, s1^2 / sum_i s_i^2 of the
#: uncentred X) and ``centred_pca`` (the repository's later code: the same ratio of the column-centred X,
#: i.e. PCA's ``explained_variance_ratio_[0]``).
MEV_DEFINITIONS = ("released", "paper", "centred_pca")


def _check_mev_definition(definition: str) -> None:
    if definition not in MEV_DEFINITIONS:
        raise ValueError(f"MEV definition {definition!r}: expected one of {', '.join(MEV_DEFINITIONS)}")


def max_explainable_variance(vectors: np.ndarray, definition: str = "released") -> float:
    """The share of variance that the first principal direction of a word type's occurrence vectors
    explains, under one of :data:`MEV_DEFINITIONS`. ``released`` (default), as kawine/contextual computed
    the released numbers: ``TruncatedSVD(...).explained_variance_ratio_[0]``, i.e. the variance of the
    projections on the first right singular vector ``v1`` of the *uncentred* occurrence matrix ``X``, over
    the total variance of its columns::

        var(X v1) / sum_j var(X[:, j])          (capped at 1)

    ``paper``: ``s1^2 / sum_i s_i^2`` of the uncentred ``X`` (the paper's formula); ``centred_pca``: the
    same of the column-centred ``X`` (the repository's later code). They differ a lot: on MiniLM's
    embeddings (layer 0) the mean over EWT dev word types is about 0.002 (released), 0.95 (paper) and 0.44
    (centred PCA); only the released one gives the paper's "less than 5% of the variance" figure. The same
    function gives the random-words baseline (:func:`random_words_explained_variance`), so "adjusted"
    subtracts like from like.
    """
    _check_mev_definition(definition)
    vectors = np.asarray(vectors, dtype=np.float64)
    total = float(vectors.var(axis=0).sum())
    if len(vectors) < 2 or total < _TINY:
        return float("nan")
    if definition != "released":
        matrix = vectors - vectors.mean(axis=0) if definition == "centred_pca" else vectors
        singular = np.linalg.svd(matrix, compute_uv=False)
        return float(singular[0] ** 2 / np.sum(singular**2))
    _, _, right = np.linalg.svd(vectors, full_matrices=False)
    projections = vectors @ right[0]
    return min(1.0, float(projections.var() / total))


def max_explainable_variance_grouped(vectors: np.ndarray, offsets: np.ndarray, definition: str = "released"
                                     ) -> np.ndarray:
    """:func:`max_explainable_variance` (``definition``) of each group ``vectors[offsets[k]:offsets[k+1]]``
    at once.

    Groups of equal size are stacked and solved together through their Gram matrices ``X X^T`` (``n x n``,
    small for most word types): with ``u`` the top unit eigenvector and ``s^2`` its eigenvalue, the
    projections ``X v1`` are ``s u``, so their variance is ``s^2 (1/n - mean(u)^2)``; the total column
    variance is ``trace(G)/n - 1^T G 1 / n^2``. Groups larger than the dimension use ``X^T X`` instead.
    """
    _check_mev_definition(definition)
    vectors = np.asarray(vectors, dtype=np.float64)
    offsets = np.asarray(offsets, dtype=np.int64)
    sizes = np.diff(offsets)
    out = np.full(len(sizes), np.nan)
    if definition != "released":
        return np.array([max_explainable_variance(vectors[offsets[g]:offsets[g + 1]], definition)
                         if sizes[g] >= 2 else np.nan for g in range(len(sizes))])
    dim = vectors.shape[1]
    for size in np.unique(sizes):
        groups = np.flatnonzero(sizes == size)
        if size < 2:
            continue
        if size > dim:
            out[groups] = [max_explainable_variance(vectors[offsets[g]:offsets[g + 1]]) for g in groups]
            continue
        index = offsets[groups][:, None] + np.arange(size)[None, :]
        stacked = vectors[index]  # [k, n, d]
        gram = np.einsum("knd,kmd->knm", stacked, stacked)
        values, vecs = np.linalg.eigh(gram)
        top_value, top = values[:, -1], vecs[:, :, -1]
        explained = top_value * (1.0 / size - top.mean(axis=1) ** 2)
        total = np.trace(gram, axis1=1, axis2=2) / size - gram.sum(axis=(1, 2)) / size**2
        share = np.where(total < _TINY, np.nan, explained / np.where(total < _TINY, 1.0, total))
        out[groups] = np.minimum(1.0, share)
    return out


def random_words_explained_variance(vectors: np.ndarray, definition: str = "released") -> float:
    """The MEV baseline of kawine/contextual: :func:`max_explainable_variance` (``definition``) of the
    vectors of random words, one from each of many random sentences."""
    return max_explainable_variance(vectors, definition)
