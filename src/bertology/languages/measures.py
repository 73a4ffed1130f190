"""The measures of language identity and cross-lingual alignment, on plain vectors (numpy only).

* :func:`centroids`: the mean sentence vector of each language (Libovický et al. 2019's language centroid).
* :func:`centroid_distances`: Euclidean and cosine distance between every two centroids.
* :func:`center`: each sentence vector minus its language's centroid (Libovický et al.'s centering).
* :func:`retrieval_hits`: for each query sentence of one language, whether its nearest neighbour by cosine
  among another language's sentences is its translation (accuracy @1 is the mean).
* :func:`project_2d`: a 2-D principal-component projection (fitted on the sentences given) of sentences and
  centroids, the figure Libovický et al. show.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from bertology.errors import DataError


def centroids(vectors: np.ndarray, languages: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """``(codes, [n_languages, dim])``: the mean of the rows of each language, codes in first-seen order."""
    vectors = np.asarray(vectors, dtype=np.float64)
    labels = np.asarray(languages, dtype=object)
    if len(labels) != len(vectors):
        raise DataError(f"{len(labels)} language labels for {len(vectors)} vectors; expected one per vector")
    codes = list(dict.fromkeys(labels.tolist()))
    return codes, np.stack([vectors[labels == code].mean(axis=0) for code in codes])


def center(vectors: np.ndarray, languages: Sequence[str]) -> np.ndarray:
    """Every row minus the centroid of its language (float64)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    codes, means = centroids(vectors, languages)
    index = {code: i for i, code in enumerate(codes)}
    return vectors - means[[index[code] for code in languages]]


def _unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)


def centroid_distances(codes: Sequence[str], means: np.ndarray) -> list[dict]:
    """One row per unordered pair of languages: ``language_a``, ``language_b``, ``euclidean`` and ``cosine``
    (1 - cosine similarity) between their centroids."""
    units = _unit(means)
    rows = []
    for i in range(len(codes)):
        for j in range(i + 1, len(codes)):
            rows.append({"language_a": codes[i], "language_b": codes[j],
                         "euclidean": float(np.linalg.norm(means[i] - means[j])),
                         "cosine": float(1.0 - units[i] @ units[j])})
    return rows


def retrieval_hits(queries: np.ndarray, candidates: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Booleans ``[n_queries]``: whether the candidate nearest to each query by cosine similarity is
    ``candidates[targets[q]]`` (the query's translation). Ties go to the lower candidate index."""
    queries, candidates = np.asarray(queries), np.asarray(candidates)
    targets = np.asarray(targets, dtype=np.int64)
    if queries.ndim != 2 or candidates.ndim != 2 or queries.shape[1] != candidates.shape[1]:
        raise DataError(f"queries {queries.shape} and candidates {candidates.shape}; expected [n, dim] and [m, dim]")
    if len(targets) != len(queries):
        raise DataError(f"{len(targets)} targets for {len(queries)} queries; expected one per query")
    if len(targets) and (targets.min() < 0 or targets.max() >= len(candidates)):
        raise DataError(f"a target outside 0..{len(candidates) - 1}")
    similarity = _unit(queries) @ _unit(candidates).T
    return similarity.argmax(axis=1) == targets


def project_2d(sentences: np.ndarray, centroid_vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(sentences_2d, centroids_2d, explained)``: both sets on the first two principal components of
    ``sentences`` (centred on their mean), and the share of the sentences' variance each component explains.
    The components' signs are fixed (largest loading positive) so the figure does not flip between runs."""
    sentences = np.asarray(sentences, dtype=np.float64)
    if len(sentences) < 2:
        raise DataError("a projection needs at least 2 sentences")
    mean = sentences.mean(axis=0)
    _, singular, components = np.linalg.svd(sentences - mean, full_matrices=False)
    components = components[:2]
    signs = np.sign(components[np.arange(len(components)), np.abs(components).argmax(axis=1)])
    components = components * np.where(signs == 0, 1.0, signs)[:, None]
    variance = singular ** 2
    explained = variance[:2] / variance.sum() if variance.sum() > 0 else np.zeros(2)
    return ((sentences - mean) @ components.T, (np.asarray(centroid_vectors, dtype=np.float64) - mean) @ components.T,
            explained)
