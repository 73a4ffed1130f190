"""Kovaleva et al. (2019) self-attention pattern types: vertical, diagonal, vertical+diagonal, block, heterogeneous.

"Revealing the Dark Secrets of BERT" sorts every head's token-level attention map into five types and reports
the share of each type per layer. They hand-labelled about 400 maps and trained a small CNN. We do the same
with a labelled set kept in ``resources/attention_patterns`` (see docs/attention_patterns.md for the labelling
protocol) and ship three classifiers side by side so their disagreement stays visible:

* :class:`RulePatternClassifier`: hand-set thresholds on interpretable features (diagonal band mass,
  [CLS]/[SEP]/top-column mass, within-segment mass); needs no training.
* :class:`FeaturePatternClassifier`: logistic regression or gradient boosting on the same features.
* :class:`CNNPatternClassifier`: a small CNN on the map resized to 32x32 (Kovaleva's approach); the shipped,
  default classifier.

Maps are token level (subwords plus [CLS]/[SEP]), as in the paper; :func:`token_attention_maps` gets them
through :meth:`bertology.models.Encoder.forward` (``attentions=True``). The spine's word-level maps can be
classified too (pass the arrays), but the labelled set and the shipped classifier were built on token-level maps.
:func:`pattern_analysis` is the experiment end to end (an encoder, its untrained twin, texts -> a Result).

Numbering (:mod:`bertology.numbering`): ``layer`` is the hidden_states layer (1..L; its attention is
``attentions[layer - 1]``), ``head`` counts from 0, ``head_label`` is ``L4H5``. Shares are fractions.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd

from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from bertology.attention.choices import CLASSIFIERS
from bertology.errors import DataError, ModelError
from bertology.files import atomic_path, save_figure
from bertology.numbering import head_label
from bertology.progress import track
from bertology.results import Result, tidy

PATTERN_TYPES: tuple[str, ...] = ("vertical", "diagonal", "vertical+diagonal", "block", "heterogeneous")
MAP_SIZE = 32
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


# --------------------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------------------


@dataclass
class AttentionSample:
    """All heads' attention for one input sequence.

    ``attentions`` is ``[n_layers, n_heads, n, n]`` (rows attend to columns, rows sum to 1). ``special`` marks
    the positions of special tokens ([CLS], [SEP], ...); ``segments`` gives each position's segment
    (``token_type_ids``: 0 for ``[CLS] A [SEP]``, 1 for ``B [SEP]``). Without them, position 0 and n-1 are
    taken as special and the whole sequence as one segment, which is what a plain ``[CLS] ... [SEP]`` input
    (and the spine's word-level maps) look like.
    """

    attentions: np.ndarray
    tokens: Sequence[str] | None = None
    special: np.ndarray | None = None
    segments: np.ndarray | None = None
    sentence_id: str | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        att = np.asarray(self.attentions, dtype=np.float32)
        if att.ndim == 2:
            att = att[None, None]
        if att.ndim != 4 or att.shape[-1] != att.shape[-2]:
            raise DataError(
                f"attention map of shape {tuple(att.shape)}; expected [n_layers, n_heads, n, n] (or [n, n])"
            )
        n = att.shape[-1]
        if n < 2:
            raise DataError(f"attention map over {n} position(s); expected at least 2 ([CLS] and [SEP])")
        if not np.isfinite(att).all():
            raise DataError("attention map contains NaN or infinite values")
        self.attentions = att
        if self.special is None:
            special = np.zeros(n, dtype=bool)
            special[[0, n - 1]] = True
        else:
            special = np.asarray(self.special, dtype=bool)
        if self.segments is None:
            segments = np.zeros(n, dtype=np.int64)
        else:
            segments = np.asarray(self.segments, dtype=np.int64)
        for name, value in (("special", special), ("segments", segments)):
            if value.shape != (n,):
                raise DataError(f"{name} has shape {value.shape}; expected ({n},) to match the attention map")
        if self.tokens is not None and len(self.tokens) != n:
            raise DataError(f"{len(self.tokens)} tokens for an attention map over {n} positions")
        self.special, self.segments = special, segments


def _as_sample(item, index: int) -> AttentionSample:
    if isinstance(item, AttentionSample):
        return item
    return AttentionSample(np.asarray(item), sentence_id=str(index))


def token_attention_maps(
    encoder,
    texts: Iterable[str | tuple[str, str]],
    *,
    max_length: int = 128,
    batch_size: int = 16,
    ids: Sequence[str] | None = None,
) -> Iterator[AttentionSample]:
    """Token-level attention of every layer and head, one :class:`AttentionSample` per input, in input order.

    ``texts`` are strings or ``(sentence_a, sentence_b)`` pairs; pairs are encoded as ``[CLS] A [SEP] B [SEP]``
    which is what produces block patterns. ``encoder`` is a :class:`bertology.models.Encoder`; the model runs
    through :meth:`~bertology.models.Encoder.forward` with ``attentions=True``, which switches to eager
    attention for the call and restores the encoder's implementation afterwards. Each sample's
    ``attentions`` is ``[L, H, n, n]`` with axis 0 = layers 1..L. Inputs longer than ``max_length`` tokens
    are truncated.
    """
    texts = list(texts)
    ids = list(ids) if ids is not None else [str(i) for i in range(len(texts))]
    if len(ids) != len(texts):
        raise DataError(f"{len(ids)} ids for {len(texts)} texts")
    # A batch holds consecutive inputs of one kind, so a single sentence never gets an empty second segment.
    start = 0
    while start < len(texts):
        is_pair = isinstance(texts[start], tuple)
        stop = start + 1
        while stop < len(texts) and stop - start < batch_size and isinstance(texts[stop], tuple) == is_pair:
            stop += 1
        yield from _encode_batch(encoder, texts[start:stop], ids[start:stop], is_pair, max_length)
        start = stop


def _encode_batch(encoder, chunk, chunk_ids, is_pair, max_length) -> Iterator[AttentionSample]:
    tokenizer = encoder.tokenizer
    first = [t[0] if is_pair else t for t in chunk]
    second = [t[1] for t in chunk] if is_pair else None
    batch = tokenizer(first, second, padding=True, truncation=True, max_length=max_length, return_tensors="pt",
                      return_special_tokens_mask=True)
    special_mask = batch.pop("special_tokens_mask")
    out = encoder.forward(dict(batch), hidden_states=False, attentions=True)
    att = np.stack([a.float().cpu().numpy() for a in out.attentions], axis=1)  # [B, L, H, n, n]
    for b in range(att.shape[0]):
        n = int(batch["attention_mask"][b].sum())
        input_ids = batch["input_ids"][b, :n].tolist()
        special = special_mask[b, :n].numpy().astype(bool)
        # Segments from the separator rather than token_type_ids, which RoBERTa-style tokenizers (and
        # some custom ones) leave at 0: everything after the first separator is sentence B.
        segments = np.zeros(n, dtype=np.int64)
        if is_pair:
            separators = np.flatnonzero(special[1:]) + 1
            if len(separators):
                segments[separators[0] + 1 :] = 1
        yield AttentionSample(
            attentions=att[b, :, :, :n, :n],
            tokens=tokenizer.convert_ids_to_tokens(input_ids),
            special=special,
            segments=segments,
            sentence_id=chunk_ids[b],
        )


# --------------------------------------------------------------------------------------------------------------
# Features and resizing
# --------------------------------------------------------------------------------------------------------------


def resize_map(attention: np.ndarray, size: int = MAP_SIZE) -> np.ndarray:
    """Resize one ``[n, n]`` map (or a stack ``[..., n, n]``) to ``[size, size]`` by area averaging.

    Maps shorter than ``size`` are stretched by repetition (adaptive average pooling does both), so every
    map becomes one fixed-size image whatever its length; each image is then scaled to a maximum of 1 so
    that long sequences (small weights) and short ones look alike to the CNN.
    """
    import torch
    import torch.nn.functional as F

    arr = np.asarray(attention, dtype=np.float32)
    lead = arr.shape[:-2]
    t = torch.from_numpy(arr.reshape(-1, 1, *arr.shape[-2:]))
    pooled = F.adaptive_avg_pool2d(t, (size, size)).reshape(-1, size * size)
    peak = pooled.max(dim=1, keepdim=True).values.clamp_min(1e-12)
    return (pooled / peak).reshape(*lead, size, size).numpy()


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
    sample = _as_sample(sample, 0)
    att = sample.attentions
    out = np.empty((*att.shape[:2], len(FEATURE_NAMES)), dtype=np.float32)
    for layer in range(att.shape[0]):
        for head in range(att.shape[1]):
            out[layer, head] = _map_features(att[layer, head], sample.special, sample.segments)
    return out


def features_frame(features: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(np.asarray(features).reshape(-1, len(FEATURE_NAMES)), columns=list(FEATURE_NAMES))


# --------------------------------------------------------------------------------------------------------------
# Classifiers
# --------------------------------------------------------------------------------------------------------------


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
        import itertools

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
        from sklearn.ensemble import HistGradientBoostingClassifier
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

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
    import torch.nn as nn

    # Three conv blocks 32 -> 16 -> 8 -> 4; 16.6k parameters at 16 channels, enough for five visually distinct shapes.
    return nn.Sequential(
        nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(2 * channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.3), nn.Linear(2 * channels * 16, n_classes),
    )


class CNNPatternClassifier(BaseEstimator):
    """A small CNN on maps resized to 32x32 (:func:`resize_map`), trained with Adam and flip-free augmentation.

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
        import torch

        torch.manual_seed(self.random_state)
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
        import torch

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
        import torch

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


# --------------------------------------------------------------------------------------------------------------
# Shipped resources
# --------------------------------------------------------------------------------------------------------------


def _resource_dir():
    return resources.files("bertology") / "resources" / "attention_patterns"


def load_labelled_maps() -> tuple[np.ndarray, pd.DataFrame]:
    """The labelled set: ``images [N, 32, 32]`` float32 (:func:`resize_map` of each map) and a DataFrame with
    one row per map (map_id, model, source, sentence_id, layer, head, n_tokens, label, rule_label, split,
    and the features in :data:`FEATURE_NAMES`)."""
    folder = _resource_dir()
    with (folder / "maps.npz").open("rb") as handle:
        data = np.load(io.BytesIO(handle.read()), allow_pickle=False)
        images = data["images"].astype(np.float32)
    with (folder / "labels.csv").open("r", encoding="utf-8") as handle:
        table = pd.read_csv(handle)
    if len(table) != len(images):
        raise DataError(f"labels.csv has {len(table)} rows for {len(images)} images in maps.npz")
    bad = sorted(set(table["label"]) - set(PATTERN_TYPES))
    if bad:
        raise DataError(f"labels.csv: unknown label(s) {bad}; expected one of {PATTERN_TYPES}")
    return images, table


_DEFAULT_CNN: CNNPatternClassifier | None = None


def load_pattern_classifier() -> CNNPatternClassifier:
    """The shipped CNN, trained on the train and dev splits of :func:`load_labelled_maps` (plus synthetic maps)."""
    global _DEFAULT_CNN
    if _DEFAULT_CNN is None:
        with resources.as_file(_resource_dir() / "cnn.npz") as path:
            _DEFAULT_CNN = CNNPatternClassifier.load(path)
    return _DEFAULT_CNN


def classifier_evaluation() -> dict:
    """The shipped classifier's held-out numbers, read from ``resources/attention_patterns/evaluation.json``
    (written by ``tools/train_pattern_classifier.py``), for reports and docs that quote them.

    Returns ``n_maps`` (labelled maps), ``n_test`` (test maps), ``n_train`` (the maps the shipped CNN
    was trained on), ``classifier`` (the shipped CNN's
    description), ``test_accuracy`` and ``test_macro_f1`` (fractions, the shipped seed),
    ``test_accuracy_seed_mean`` and ``test_accuracy_seed_sd`` (over the training seeds tried) and
    ``majority_accuracy`` (the majority class on test).
    """
    with (_resource_dir() / "evaluation.json").open("r", encoding="utf-8") as handle:
        evaluation = json.load(handle)
    rows = evaluation.get("test", [])
    shipped = [row for row in rows if str(row.get("classifier", "")).startswith("CNN (shipped")]
    majority = [row for row in rows if str(row.get("classifier", "")).startswith("majority")]
    if not shipped:
        raise DataError("evaluation.json: no 'CNN (shipped ...' row in 'test'; rerun tools/train_pattern_classifier.py")
    row = shipped[0]
    return {
        "n_maps": int(evaluation["n_maps"]),
        "n_test": int(evaluation["split_sizes"]["test"]),
        "n_train": sum(int(evaluation["split_sizes"][part]) for part in
                       str(evaluation.get("shipped_cnn", {}).get("trained_on", "train")).split("+")),
        "classifier": row["classifier"],
        "test_accuracy": float(row["test_accuracy"]),
        "test_macro_f1": float(row["test_macro_f1"]),
        "test_accuracy_seed_mean": float(row["seed_mean"]),
        "test_accuracy_seed_sd": float(row["seed_sd"]),
        "majority_accuracy": float(majority[0]["test_accuracy"]) if majority else float("nan"),
    }


# --------------------------------------------------------------------------------------------------------------
# Public analysis API
# --------------------------------------------------------------------------------------------------------------

# Classifier names :func:`pattern_types` accepts: CLASSIFIERS, imported above from bertology.attention.choices
# (a light module, so the command line checks ``--classifier`` without sklearn).


def _classifier(classifier):
    if not isinstance(classifier, str):
        return classifier
    if classifier == "cnn":
        return load_pattern_classifier()
    if classifier == "rules":
        return RulePatternClassifier()
    raise DataError(f"unknown classifier {classifier!r}; expected one of {', '.join(CLASSIFIERS)}")


def pattern_types(
    maps: Iterable[AttentionSample | np.ndarray],
    *,
    classifier: str | CNNPatternClassifier | RulePatternClassifier | FeaturePatternClassifier = "cnn",
    layers: Sequence[int] | None = None,
    progress: bool = False,
    total: int | None = None,
) -> pd.DataFrame:
    """Classify every head of every input into a Kovaleva pattern type.

    ``maps`` yields :class:`AttentionSample` (e.g. from :func:`token_attention_maps`) or plain arrays
    ``[n_layers, n_heads, n, n]``. ``layers`` names the layers those arrays hold (default 1..L; a store of
    some layers passes its ``attention_layers``). ``classifier`` is ``"cnn"`` (shipped), ``"rules"``, or a
    fitted classifier. Returns a tidy table, one row per (sentence, layer, head):
    ``sentence, layer, head, head_label, type`` (``type`` categorical over :data:`PATTERN_TYPES`).
    """
    from bertology.attention.stats import _layer_numbers

    classifier = _classifier(classifier)
    rows = []
    numbers: list[int] | None = None
    for index, item in enumerate(track(maps, "classifying attention maps", total=total, enabled=progress)):
        sample = _as_sample(item, index)
        n_layers, n_heads = sample.attentions.shape[:2]
        if numbers is None or len(numbers) != n_layers:
            numbers = _layer_numbers(layers, n_layers)
        if isinstance(classifier, CNNPatternClassifier):
            labels = classifier.predict_images(resize_map(sample.attentions).reshape(-1, MAP_SIZE, MAP_SIZE))
        else:
            labels = classifier.predict_features(attention_features(sample))
        sentence = sample.sentence_id if sample.sentence_id is not None else str(index)
        labels = np.asarray(labels).reshape(n_layers, n_heads)
        for position, layer in enumerate(numbers):
            for head in range(n_heads):
                rows.append((sentence, layer, head, head_label(layer, head), labels[position, head]))
    if not rows:
        raise DataError("no attention maps to classify")
    frame = pd.DataFrame(rows, columns=["sentence", "layer", "head", "head_label", "type"])
    frame["type"] = pd.Categorical(frame["type"], categories=list(PATTERN_TYPES))
    return tidy(frame)


def _proportions(types: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Share of each pattern type within each group of ``by`` (tidy: ``*by, type, count, proportion``)."""
    missing = [c for c in (*by, "type") if c not in types.columns]
    if missing:
        raise DataError(f"pattern table lacks column(s) {missing}; expected the output of pattern_types")
    kinds = pd.Categorical(types["type"].astype(str), categories=list(PATTERN_TYPES))
    frame = types.assign(type=kinds)
    if by:
        counts = frame.groupby([*by, "type"], observed=False, sort=False).size().rename("count").reset_index()
        counts = counts.sort_values([*by, "type"], kind="stable")
        totals = counts.groupby(list(by), sort=False)["count"].transform("sum")
    else:
        counts = frame.groupby("type", observed=False).size().rename("count").reset_index()
        totals = counts["count"].sum()
    counts["proportion"] = counts["count"] / np.maximum(totals, 1)
    return tidy(counts)


def pattern_proportions(types: pd.DataFrame) -> Result:
    """Share of each pattern type, per layer and overall, from a :func:`pattern_types` table.

    Returns a :class:`~bertology.results.Result` named ``pattern_proportions`` with tables ``by_layer``
    (``layer, type, count, proportion``; shares sum to 1 in each layer) and ``overall`` (``type, count,
    proportion``). A ``model`` column in ``types`` is kept: then the shares are per model.
    """
    group = ["model"] if "model" in types.columns else []
    return Result("pattern_proportions", {"by_layer": _proportions(types, [*group, "layer"]),
                                          "overall": _proportions(types, group)})


def compare_pattern_proportions(tables: dict[str, pd.DataFrame]) -> Result:
    """:func:`pattern_proportions` for several models (``{name: pattern_types(...)}``): the same two tables,
    each with a ``model`` column first, so shifts (e.g. untrained vs trained) read off."""
    if len(tables) < 1:
        raise DataError("no pattern tables to compare")
    types = pd.concat([table.assign(model=name) for name, table in tables.items()], ignore_index=True)
    types["model"] = pd.Categorical(types["model"], categories=list(tables))  # keep the given order
    result = pattern_proportions(types)
    for frame in result.tables.values():
        frame["model"] = frame["model"].astype(str)
    return result


def pattern_analysis(
    encoder,
    texts: Sequence[str | tuple[str, str]],
    *,
    ids: Sequence[str] | None = None,
    untrained_seeds: Sequence[int] = (0,),
    classifier: str = "cnn",
    layers: Sequence[int] | None = None,
    max_length: int = 128,
    batch_size: int = 16,
    source: str | None = None,
    progress: bool = False,
) -> Result:
    """Kovaleva et al.'s pattern types of ``encoder`` (and of its untrained twins) on ``texts``.

    ``texts`` are sentences or ``(a, b)`` pairs; ``untrained_seeds`` the seeds of the untrained twins to
    compare with (``()`` for none); ``layers`` the transformer layers to classify (default all).
    The encoder's attention implementation is left as it was.

    Returns a :class:`~bertology.results.Result` named ``attention_patterns`` with tables ``types``
    (``model, sentence, layer, head, head_label, type``: one row per map), ``by_layer`` and ``overall``
    (shares per model, see :func:`pattern_proportions`); ``meta`` holds each model's name, fingerprint
    and untrained seed, the classifier, the source and the number of texts.
    """
    texts = list(texts)
    if not texts:
        raise DataError("no texts to classify; expected at least one sentence or pair")
    chosen = None if layers is None else sorted({int(layer) for layer in layers})
    models = [encoder] + [encoder.untrained(seed) for seed in untrained_seeds]
    tables = {}
    for model in models:
        maps = token_attention_maps(model, texts, ids=ids, max_length=max_length, batch_size=batch_size)
        if chosen is not None:
            maps = (_select_layers(sample, chosen) for sample in maps)
        tables[model.name] = pattern_types(maps, classifier=classifier, layers=chosen, progress=progress,
                                           total=len(texts))
    proportions = compare_pattern_proportions(tables)
    types = pd.concat([table.assign(model=name) for name, table in tables.items()], ignore_index=True)
    types = types[["model"] + [c for c in types.columns if c != "model"]]
    meta = {
        "models": [{"name": m.name, "fingerprint": m.fingerprint, "untrained_seed": m.untrained_seed} for m in models],
        "classifier": classifier if isinstance(classifier, str) else type(classifier).__name__,
        "source": source, "n_texts": len(texts), "layers": chosen, "max_length": max_length,
    }
    return Result("attention_patterns", {"types": types, **proportions.tables}, meta=meta)


def _select_layers(sample: AttentionSample, layers: Sequence[int]) -> AttentionSample:
    n_layers = sample.attentions.shape[0]
    bad = [layer for layer in layers if not 1 <= layer <= n_layers]
    if bad:
        raise DataError(f"layers {bad}: this model has transformer layers 1-{n_layers}")
    sample.attentions = sample.attentions[[layer - 1 for layer in layers]]
    return sample


PATTERN_COLOURS = {
    "vertical": "#4c72b0",
    "diagonal": "#dd8452",
    "vertical+diagonal": "#8172b3",
    "block": "#55a868",
    "heterogeneous": "#c7c7c7",
}


def plot_pattern_proportions(tables: dict[str, pd.DataFrame] | pd.DataFrame, path: str | Path | None = None,
                             title: str | None = None):
    """Stacked bars of pattern shares per layer, one panel per model (as in the Dark Secrets post).

    ``tables`` is ``{model: pattern_types(...)}`` or one types table with a ``model`` column (the ``types``
    table of :func:`pattern_analysis`). Bars are labelled with the layers the tables hold. Returns the
    matplotlib Figure; with ``path`` it is also saved (PNG/SVG/PDF by suffix).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if isinstance(tables, pd.DataFrame):
        if "model" not in tables.columns:
            tables = {"model": tables}
        else:
            tables = {str(name): frame for name, frame in tables.groupby("model", sort=False, observed=True)}
    fig, axes = plt.subplots(1, len(tables), figsize=(4.2 * len(tables) + 1.6, 3.6), sharey=True, squeeze=False)
    for ax, (name, table) in zip(axes[0], tables.items()):
        props = _proportions(table, ["layer"]).pivot(index="layer", columns="type", values="proportion")
        props = props.reindex(columns=list(PATTERN_TYPES)).fillna(0.0).sort_index()
        bottom = np.zeros(len(props))
        for kind in PATTERN_TYPES:
            ax.bar([str(int(layer)) for layer in props.index], props[kind], bottom=bottom,
                   color=PATTERN_COLOURS[kind], label=kind, edgecolor="white", linewidth=0.5)
            bottom += props[kind].to_numpy()
        ax.set_title(name)
        ax.set_xlabel("layer")
        ax.set_ylim(0, 1)
    axes[0][0].set_ylabel("share of heads")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles[::-1], labels[::-1], loc="center right", frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1 - 1.5 / fig.get_figwidth(), 1))
    if path is not None:
        save_figure(fig, path, dpi=150)
    return fig


# --------------------------------------------------------------------------------------------------------------
# Synthetic maps (training augmentation for the rare block type; never used for evaluation)
# --------------------------------------------------------------------------------------------------------------


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


def pattern_inputs(data: str | Path = "ewt-dev", glue: str | None = None,
                   max_sentences: int | None = 200) -> tuple[list, list[str], str]:
    """Texts to classify, their ids and a description of the source: ``(texts, ids, source)``.

    ``glue`` (a GLUE task name) takes its dev set (rte/mrpc give ``(a, b)`` pairs, encoded as
    ``[CLS] A [SEP] B [SEP]``); otherwise ``data`` is a packaged corpus (``ewt-train``, ``ewt-dev``, ``ewt-test``) or a corpus file
    (.conllu/.txt/.tsv). At most ``max_sentences`` inputs are kept.
    """
    if glue:
        from bertology.data.glue import read_glue

        examples = read_glue(glue, "dev")[:max_sentences]
        texts = [(e.text_a, e.text_b) if e.text_b else e.text_a for e in examples]
        return texts, [e.id for e in examples], f"GLUE {glue} dev"
    from bertology.data import read_corpus

    data = str(data)
    sentences = read_corpus(data)[:max_sentences]  # a file, or a packaged corpus by name (ewt-dev, ...)
    return [" ".join(s.words) for s in sentences], [s.id for s in sentences], data
