"""Three classifiers of Kovaleva et al.'s pattern types, shipped side by side so their disagreement stays visible:

* :class:`RulePatternClassifier`: hand-set thresholds on interpretable features (diagonal band mass,
  [CLS]/[SEP]/top-column mass, within-segment mass); needs no training.
* :class:`FeaturePatternClassifier`: logistic regression or gradient boosting on the same features.
* :class:`CNNPatternClassifier`: a small CNN on the map resized to 32x32 (Kovaleva's approach); the shipped,
  default classifier (:func:`bertology.attention.pattern_resources.load_pattern_classifier`).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from torch import nn

from bertology.attention.pattern_features import FEATURE_NAMES, features_frame
from bertology.attention.pattern_maps import MAP_SIZE
from bertology.errors import ModelError
from bertology.files import atomic_path
from bertology.runtime import seeded

PATTERN_TYPES: tuple[str, ...] = ("vertical", "diagonal", "vertical+diagonal", "block", "heterogeneous")


class RulePatternClassifier(BaseEstimator):
    """Hand-set thresholds on :data:`FEATURE_NAMES`; the interpretable baseline. ``fit`` learns nothing.

    Decision order: a clear block (``block >= block_min`` with at least ``block_rest_min`` of the mass
    outside the diagonal band and vertical columns), then vertical + diagonal when both shares reach
    ``mixed_min``, then vertical or diagonal when one reaches ``single_min``, else heterogeneous.
    """

    def __init__(self, single_min: float = 0.5, mixed_min: float = 0.25, block_min: float = 0.5,
                 block_rest_min: float = 0.3):
        self.single_min = single_min
        self.mixed_min = mixed_min
        self.block_min = block_min
        self.block_rest_min = block_rest_min

    def fit(self, features=None, labels=None) -> "RulePatternClassifier":
        """Without data: keep the hand-set thresholds. With data: grid-search the four thresholds for
        accuracy on (``features``, ``labels``) -- a tuned-rules baseline that is as fair to rules as the
        learned models are to themselves."""
        if features is None:
            return self
        labels = np.asarray(labels)
        best = (-1.0, None)
        grid = {
            "single_min": np.arange(0.2, 0.75, 0.05),
            "mixed_min": np.arange(0.05, 0.45, 0.05),
            "block_min": np.arange(0.3, 0.8, 0.15),
            "block_rest_min": np.arange(0.1, 0.5, 0.15),
        }
        for values in itertools.product(*grid.values()):
            candidate = RulePatternClassifier(*[round(float(v), 3) for v in values])
            accuracy = float(np.mean(candidate.predict_features(features) == labels))
            if accuracy > best[0]:
                best = (accuracy, values)
        self.single_min, self.mixed_min, self.block_min, self.block_rest_min = [round(float(v), 3) for v in best[1]]
        return self

    def score(self, features: np.ndarray, labels: Sequence[str]) -> float:
        return float(np.mean(self.predict_features(features) == np.asarray(labels)))

    def predict_features(self, features: np.ndarray) -> np.ndarray:
        f = np.asarray(features, dtype=np.float32).reshape(-1, len(FEATURE_NAMES))
        column = {name: f[:, i] for i, name in enumerate(FEATURE_NAMES)}
        out = np.full(len(f), "heterogeneous", dtype=object)
        vertical, diag = column["vertical"], column["diagonal"]
        block = (column["block"] >= self.block_min) & (column["block_rest"] >= self.block_rest_min)
        mixed = (vertical >= self.mixed_min) & (diag >= self.mixed_min) & (vertical + diag >= self.single_min)
        for mask, name in (
            (vertical >= self.single_min, "vertical"),
            (diag >= self.single_min, "diagonal"),
            (mixed, "vertical+diagonal"),
            (block, "block"),
        ):
            # Later assignments win, so this loop runs from weakest to strongest evidence.
            out[mask] = name
        both_strong = (vertical >= self.single_min) & (diag >= self.mixed_min)
        out[both_strong & ~block] = "vertical+diagonal"
        return out


class FeaturePatternClassifier(BaseEstimator):
    """Logistic regression (``kind="logistic"``) or gradient boosting (``kind="boosting"``) on the features."""

    def __init__(self, kind: str = "logistic", random_state: int = 0):
        self.kind = kind
        self.random_state = random_state

    def _make(self):
        if self.kind == "logistic":
            return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
        if self.kind == "boosting":
            return HistGradientBoostingClassifier(
                max_iter=200, learning_rate=0.05, max_leaf_nodes=15, random_state=self.random_state
            )
        raise ValueError(f"unknown kind {self.kind!r}; expected 'logistic' or 'boosting'")

    def fit(self, features: np.ndarray, labels: Sequence[str]) -> "FeaturePatternClassifier":
        self.model_ = self._make().fit(features_frame(features).to_numpy(), np.asarray(labels))
        return self

    def predict_features(self, features: np.ndarray) -> np.ndarray:
        if not hasattr(self, "model_"):
            raise NotFittedError("this FeaturePatternClassifier is not fitted yet; call fit() first")
        return self.model_.predict(features_frame(features).to_numpy())

    def score(self, features: np.ndarray, labels: Sequence[str]) -> float:
        return float(np.mean(self.predict_features(features) == np.asarray(labels)))


def _build_cnn(channels: int = 16, n_classes: int = len(PATTERN_TYPES)):
    # Three conv blocks 32 -> 16 -> 8 -> 4; 16.6k parameters at 16 channels, enough for five visually distinct shapes.
    return nn.Sequential(
        nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(2 * channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.3), nn.Linear(2 * channels * 16, n_classes),
    )


class CNNPatternClassifier(BaseEstimator):
    """A small CNN on maps resized to 32x32 (:func:`~bertology.attention.pattern_maps.resize_map`), trained with
    Adam and flip-free augmentation.

    Only transpose-free augmentations are used (small intensity jitter): flipping a map would turn a
    [CLS] column into a last-token column and a lower diagonal into an upper one, which are the same types
    but different images, and the labelled set already contains both.
    """

    def __init__(self, channels: int = 16, epochs: int = 60, lr: float = 3e-3, weight_decay: float = 1e-4,
                 batch_size: int = 64, random_state: int = 0):
        self.channels = channels
        self.epochs = epochs
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.random_state = random_state

    def fit(self, images: np.ndarray, labels: Sequence[str]) -> "CNNPatternClassifier":
        # initial weights from random_state; the caller's generator is left as it was
        with seeded(self.random_state):
            return self._fit(images, labels)

    def _fit(self, images: np.ndarray, labels: Sequence[str]) -> "CNNPatternClassifier":
        rng = np.random.default_rng(self.random_state)
        y = np.array([PATTERN_TYPES.index(label) for label in labels])
        x = torch.from_numpy(np.asarray(images, dtype=np.float32)[:, None])
        yt = torch.from_numpy(y)
        self.net_ = _build_cnn(self.channels)
        # Class weights so that rare types (block) are not drowned by heterogeneous/vertical.
        counts = np.bincount(y, minlength=len(PATTERN_TYPES)).astype(np.float32)
        weight = torch.from_numpy(np.where(counts > 0, counts.sum() / np.maximum(counts, 1), 0.0) / len(counts))
        loss_fn = torch.nn.CrossEntropyLoss(weight=weight.float())
        optim = torch.optim.AdamW(self.net_.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        self.net_.train()
        for _ in range(self.epochs):
            order = rng.permutation(len(y))
            for start in range(0, len(y), self.batch_size):
                idx = torch.from_numpy(order[start : start + self.batch_size])
                xb = x[idx]
                # Contrast jitter (gamma) keeps the net from keying on exact intensities.
                gamma = torch.from_numpy(rng.uniform(0.7, 1.4, size=(len(idx), 1, 1, 1)).astype(np.float32))
                xb = xb.clamp_min(0) ** gamma
                optim.zero_grad()
                loss = loss_fn(self.net_(xb), yt[idx])
                loss.backward()
                optim.step()
        self.net_.eval()
        return self

    def predict_proba_images(self, images: np.ndarray) -> np.ndarray:
        if not hasattr(self, "net_"):
            raise NotFittedError("this CNNPatternClassifier is not fitted yet; call fit() or load()")
        x = torch.from_numpy(np.asarray(images, dtype=np.float32).reshape(-1, 1, MAP_SIZE, MAP_SIZE))
        with torch.no_grad():
            return torch.softmax(self.net_(x), dim=1).numpy()

    def predict_images(self, images: np.ndarray) -> np.ndarray:
        return np.array(PATTERN_TYPES, dtype=object)[self.predict_proba_images(images).argmax(axis=1)]

    def score(self, images: np.ndarray, labels: Sequence[str]) -> float:
        return float(np.mean(self.predict_images(images) == np.asarray(labels)))

    def save(self, path: str | Path) -> None:
        """Weights and hyper-parameters in one ``.npz``, written whole or not at all."""
        state = {k: v.detach().cpu().numpy() for k, v in self.net_.state_dict().items()}
        with atomic_path(path) as tmp, open(tmp, "wb") as handle:
            np.savez_compressed(handle, __params__=np.array(json.dumps(self.get_params())), **state)

    @classmethod
    def load(cls, path: str | Path) -> "CNNPatternClassifier":
        path = Path(path)
        if not path.exists():
            raise ModelError(f"{path}: pattern classifier weights not found")
        with np.load(path, allow_pickle=False) as data:
            params = json.loads(str(data["__params__"]))
            state = {k: torch.from_numpy(data[k]) for k in data.files if k != "__params__"}
        self = cls(**params)
        self.net_ = _build_cnn(self.channels)
        try:
            self.net_.load_state_dict(state)
        except RuntimeError as exc:
            raise ModelError(f"{path}: weights do not fit the pattern CNN ({exc})") from None
        self.net_.eval()
        return self
