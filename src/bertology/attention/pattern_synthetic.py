"""Synthetic attention maps of each pattern type: training augmentation for the rare block type, never used
for evaluation (tools/train_pattern_classifier.py)."""

from __future__ import annotations

import numpy as np

from bertology.attention.pattern_classifiers import PATTERN_TYPES


def synthetic_maps(n_per_type: int, seed: int = 0) -> tuple[list[np.ndarray], list[str], list[np.ndarray]]:
    """Random maps of each pattern type with noisy mixing weights: ``(maps, labels, segments)``.

    MiniLM shows almost no block heads, so the labelled set has only a handful; these maps teach the CNN
    the shape Kovaleva et al. describe (attention staying inside ``[CLS] A [SEP]`` and ``B [SEP]``).
    """
    rng = np.random.default_rng(seed)
    maps, labels, segments = [], [], []
    for kind in PATTERN_TYPES:
        for _ in range(n_per_type):
            n = int(rng.integers(10, 80))
            split = int(rng.integers(n // 3, 2 * n // 3))
            seg = (np.arange(n) >= split).astype(np.int64)
            noise = rng.dirichlet(np.full(n, rng.uniform(0.05, 1.0)), size=n)
            vertical = np.zeros((n, n))
            cols = [0, n - 1] + ([split - 1] if kind == "block" or rng.random() < 0.5 else [])
            if rng.random() < 0.3:
                cols.append(int(rng.integers(1, n - 1)))
            col_weights = rng.dirichlet(np.full(len(cols), 0.7))
            for c, w in zip(cols, col_weights):
                vertical[:, c] += w
            diagonal = np.zeros((n, n))
            offsets = rng.dirichlet(np.full(3, 0.5))
            for off, w in zip((-1, 0, 1), offsets):
                idx = np.arange(max(0, -off), min(n, n - off))
                diagonal[idx, idx + off] += w
            diagonal /= np.maximum(diagonal.sum(axis=1, keepdims=True), 1e-9)
            same = (seg[:, None] == seg[None, :]).astype(float)
            block = same * rng.dirichlet(np.full(n, rng.uniform(0.3, 3.0)), size=n)
            block /= block.sum(axis=1, keepdims=True)
            if kind == "vertical":
                parts = {"vertical": rng.uniform(0.6, 0.95), "diagonal": rng.uniform(0, 0.1)}
            elif kind == "diagonal":
                parts = {"diagonal": rng.uniform(0.55, 0.95), "vertical": rng.uniform(0, 0.15)}
            elif kind == "vertical+diagonal":
                v = rng.uniform(0.3, 0.6)
                parts = {"vertical": v, "diagonal": rng.uniform(0.3, 1 - v)}
            elif kind == "block":
                parts = {"block": rng.uniform(0.6, 0.95), "vertical": rng.uniform(0, 0.2)}
            else:
                parts = {"vertical": rng.uniform(0, 0.25), "diagonal": rng.uniform(0, 0.1)}
            rest = max(0.0, 1.0 - sum(parts.values()))
            a = rest * noise
            a += parts.get("vertical", 0) * vertical + parts.get("diagonal", 0) * diagonal
            a += parts.get("block", 0) * block
            a /= a.sum(axis=1, keepdims=True)
            maps.append(a.astype(np.float32))
            labels.append(kind)
            segments.append(seg)
    return maps, labels, segments
