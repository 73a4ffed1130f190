"""Interpretable features of one attention map, each a share of attention mass averaged over rows
(:data:`FEATURE_NAMES`: diagonal band, [CLS]/[SEP]/top-column mass, within-segment mass, entropy, ...);
what the rule-based and feature-based pattern classifiers read."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bertology.attention.pattern_maps import AttentionSample, as_attention_sample

FEATURE_NAMES: tuple[str, ...] = (
    "diagonal",
    "cls",
    "sep",
    "top_column",
    "vertical",
    "block",
    "block_rest",
    "entropy",
    "max_weight",
    "n_tokens_log",
    "has_two_segments",
)


def _map_features(a: np.ndarray, special: np.ndarray, segments: np.ndarray) -> np.ndarray:
    """Interpretable features of one ``[n, n]`` map, each a share of attention mass averaged over rows."""
    n = a.shape[0]
    rows = np.arange(n)
    offsets = np.abs(rows[:, None] - rows[None, :])
    band = offsets <= 1
    # Kovaleva's diagonal type is attention to the previous/next token (and itself), not to specials.
    diag = float((a * (band & ~special[None, :])).sum(axis=1).mean())
    cls = float(a[:, special & (rows == 0)].sum(axis=1).mean()) if special[0] else 0.0
    sep_cols = special & (rows != 0)
    sep = float(a[:, sep_cols].sum(axis=1).mean())
    # Vertical also covers heads that all attend to one ordinary token (often the final punctuation).
    column_mass = a.mean(axis=0)
    column_mass_ordinary = np.where(special, -1.0, column_mass)
    top = int(np.argmax(column_mass_ordinary))
    top_column = float(column_mass_ordinary[top]) if (~special).any() else 0.0
    vertical_cols = special.copy()
    if (~special).any():
        vertical_cols[top] = True
    vertical = float(a[:, vertical_cols].sum(axis=1).mean())
    # Block: of the mass not explained by the diagonal band or vertical columns, how much stays in the
    # row's own segment, scaled so that 0 = what uniform attention would give and 1 = all of it.
    # Local attention (a few tokens either side) stays inside a segment by construction, so a wider band
    # than the diagonal one is left out before asking whether attention respects segment boundaries.
    local = offsets <= max(3, n // 10)
    rest = ~local & ~vertical_cols[None, :]
    same = segments[:, None] == segments[None, :]
    two_segments = len(np.unique(segments[~special])) > 1 if (~special).any() else False
    rest_mass = (a * rest).sum(axis=1)
    block = 0.0
    if two_segments:
        within = (a * (rest & same)).sum(axis=1) / np.maximum(rest_mass, 1e-9)
        expected = (rest & same).sum(axis=1) / np.maximum(rest.sum(axis=1), 1)
        excess = (within - expected) / np.maximum(1 - expected, 1e-9)
        # Weight rows by how much mass they have outside band and vertical columns: a row that puts 99 %
        # on [SEP] says little about blocks.
        weights = rest_mass / max(rest_mass.sum(), 1e-9)
        block = float(np.clip((excess * weights).sum(), -1, 1))
    p = np.clip(a, 1e-12, 1.0)
    entropy = float((-(p * np.log(p)).sum(axis=1)).mean() / np.log(max(n, 2)))
    return np.array(
        [diag, cls, sep, top_column, vertical, block, float(rest_mass.mean()), entropy, float(a.max(axis=1).mean()),
         float(np.log(n)), float(two_segments)],
        dtype=np.float32,
    )


def attention_features(sample: AttentionSample | np.ndarray) -> np.ndarray:
    """Features of every head: ``[n_layers, n_heads, len(FEATURE_NAMES)]``."""
    sample = as_attention_sample(sample, 0)
    att = sample.attentions
    out = np.empty((*att.shape[:2], len(FEATURE_NAMES)), dtype=np.float32)
    for layer in range(att.shape[0]):
        for head in range(att.shape[1]):
            out[layer, head] = _map_features(att[layer, head], sample.special, sample.segments)
    return out


def features_frame(features: np.ndarray) -> pd.DataFrame:
    """Features of any shape ``[..., len(FEATURE_NAMES)]`` as a frame: one row per map, one column per feature."""
    return pd.DataFrame(np.asarray(features).reshape(-1, len(FEATURE_NAMES)), columns=list(FEATURE_NAMES))
