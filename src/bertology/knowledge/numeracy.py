"""Numeracy (Wallace et al. 2019, "Do NLP models know numbers?"): can a number's value be read off its vectors,
and does WordPiece splitting a number make it harder?

The Primer's claim is that BERT represents numbers poorly, "maybe because of wordpiece tokenization". Wallace et
al.'s *decoding* probe answers the first half: the integers ``0..top`` (their [0, 999] range by default), each
written in digits and encoded alone, as they embed them; each layer's vector of the number (the mean of its
subwords, the store's word pooling) feeds a regression that predicts the value. We use a ridge regression on
standardised features (scikit-learn's ``RidgeCV``, its penalty chosen by leave-one-out on the training numbers;
Wallace et al. use a small MLP) and 5-fold cross-validation with seeded folds, so that every number is
predicted once by a probe that never saw it. The untrained twin gets the same probe, and the mean of the
training fold's values is the baseline every RMSE stands beside.

The second half is a comparison inside one model: numbers the tokenizer keeps whole against numbers it cuts
into several subwords. Values differ between the two groups (most numbers below 100 are whole, most above are
split), and a regression's error depends on the value, so they are compared within each hundred
(100-199, ..., 900-999, hundreds that hold both kinds): the *split gap* is the mean over those hundreds of
(mean absolute error of the split numbers - that of the whole ones). Positive: split numbers are decoded worse.

The layer is chosen on dev, as everywhere in the toolkit: a seeded fifth of the numbers (``dev``) picks the layer
with the lowest RMSE; every number reported is measured on the other four fifths (``test``). The 95% intervals
are percentile bootstraps over test numbers (the split gap's resampled within each hundred and kind). What
differs from the paper: ridge instead of an MLP probe, one range, integers only, and a cross-validated
prediction for every number instead of one random 80/20 split.

:func:`numeracy` returns a :class:`~bertology.results.Result` with ``layers`` (one row per weights x layer) and
``numbers`` (every number's value, kind, subwords, role and out-of-fold prediction per layer).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.linear_model import RidgeCV
from sklearn.model_selection import KFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from bertology.errors import ModelError, SettingError
from bertology.geometry.stores import cached_store
from bertology.models.encoders import as_encoder
from bertology.probing.labels import features_from_store
from bertology.results import Result
from bertology.runtime import derive_seed, resolve_device

#: Ridge penalties ``RidgeCV`` chooses from (on standardised features).
ALPHAS = tuple(float(a) for a in np.logspace(-2, 4, 13))
#: Cross-validation folds: every number is predicted by a probe trained on the other folds.
FOLDS = 5
#: The share of numbers that choose the layer (dev); the rest are scored (test).
DEV_SHARE = 0.2
#: Bootstrap resamples of the test numbers per interval.
N_BOOT = 1000
#: Where the split gap is measured: the hundreds from 100 (below it every number is one token in BERT's vocabulary).
GAP_FROM = 100


@dataclass(frozen=True)
class NumeracySpec:
    """The settings of :func:`numeracy`, checked once: the integers ``0..top``; ``folds`` cross-validation
    folds; ``seed`` draws the folds, the dev numbers, the bootstrap and the untrained twin; ``untrained``: also
    probe the twin; ``n_boot`` resamples per interval."""

    top: int = 999
    folds: int = FOLDS
    seed: int = 0
    untrained: bool = True
    n_boot: int = N_BOOT

    def __post_init__(self):
        if not 199 <= int(self.top) <= 100_000:
            raise SettingError("top", self.top, "expected an integer from 199 (two hundreds to compare) to 100000")
        if not 2 <= int(self.folds) <= 20:
            raise SettingError("folds", self.folds, "expected 2 to 20 cross-validation folds")
        if int(self.n_boot) < 100:
            raise SettingError("n_boot", self.n_boot, "expected at least 100 bootstrap resamples")


def number_kinds(tokenizer, numbers) -> np.ndarray:
    """How many subwords the tokenizer cuts each number (written in digits) into."""
    return np.array([len(tokenizer.tokenize(str(n))) for n in numbers], dtype=np.int64)


def out_of_fold(X: np.ndarray, y: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Every layer's out-of-fold predictions ``[n_layers, n]``: ridge on standardised features (scikit-learn,
    penalty by leave-one-out within the training folds), seeded folds shared by every layer."""
    splitter = KFold(folds, shuffle=True, random_state=derive_seed(seed, "numeracy-folds") % 2**32)
    probe = make_pipeline(StandardScaler(), RidgeCV(alphas=ALPHAS))
    return np.stack([cross_val_predict(probe, X[layer].astype(np.float64), y, cv=splitter)
                     for layer in range(X.shape[0])])


def mean_predictions(y: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """The baseline: each number predicted by the mean value of the other folds (the same folds)."""
    out = np.empty(len(y), dtype=np.float64)
    splitter = KFold(folds, shuffle=True, random_state=derive_seed(seed, "numeracy-folds") % 2**32)
    for train, held in splitter.split(y):
        out[held] = y[train].mean()
    return out


def _gap_strata(values: np.ndarray, split: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(whole, split)`` index arrays per hundred from :data:`GAP_FROM` that holds both kinds."""
    strata = []
    for start in range(GAP_FROM, int(values.max()) + 1, 100):
        inside = (values >= start) & (values < start + 100)
        whole, cut = np.flatnonzero(inside & ~split), np.flatnonzero(inside & split)
        if len(whole) and len(cut):
            strata.append((whole, cut))
    return strata


def split_gap(errors: np.ndarray, strata) -> np.ndarray:
    """Mean over the strata of (mean |error| of the split numbers - of the whole ones); ``errors`` ``[..., n]``."""
    return np.mean([np.abs(errors[..., cut]).mean(-1) - np.abs(errors[..., whole]).mean(-1)
                    for whole, cut in strata], axis=0)


def bootstrap_rmse(errors: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``[n_layers, n_boot]`` RMSEs over resamples of the ``n`` numbers (the same resamples for every layer)."""
    n = errors.shape[-1]
    index = rng.integers(0, n, size=(n_boot, n))
    return np.sqrt((errors[:, index] ** 2).mean(-1))


def bootstrap_gap(errors: np.ndarray, strata, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``[n_layers, n_boot]`` split gaps, each kind of each hundred resampled on its own (a stratified bootstrap)."""
    draws = [(whole[rng.integers(0, len(whole), size=(n_boot, len(whole)))],
              cut[rng.integers(0, len(cut), size=(n_boot, len(cut)))]) for whole, cut in strata]
    return np.mean([np.abs(errors[:, c]).mean(-1) - np.abs(errors[:, w]).mean(-1) for w, c in draws], axis=0)


def _interval(boot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.quantile(boot, 0.025, axis=-1), np.quantile(boot, 0.975, axis=-1)


def numeracy(model="minilm", spec: NumeracySpec | None = None, *, device: str | None = "auto",
             cache_dir: str | os.PathLike | None = None, progress: bool = False) -> Result:
    """Wallace et al.'s decoding probe on every layer of ``model`` (an alias, folder, hub id or
    :class:`~bertology.models.Encoder`) and its untrained twin, with the split gap (module doc).

    Tables: ``layers``: ``weights`` (trained/untrained), ``layer``, ``rmse`` on the test numbers with
    ``rmse_ci_low``/``rmse_ci_high``, ``baseline_rmse`` (the training folds' mean), ``dev_rmse`` (what chooses
    the layer), ``chosen`` (the trained model's layer with the lowest dev RMSE, and the twin's at it),
    ``whole_mae``/``split_mae`` (test numbers from 100 up) and ``split_gap`` with ``gap_ci_low``/``gap_ci_high``;
    ``numbers``: ``value``, ``subwords``, ``role`` (dev/test) and ``prediction_<weights>_<layer>``.
    """
    spec = spec or NumeracySpec()
    run_device = str(resolve_device(device))
    encoder = as_encoder(model, device=run_device)
    values = np.arange(spec.top + 1)
    words = [str(v) for v in values]
    subwords = number_kinds(encoder.tokenizer, values)
    unknown = [w for w in words if encoder.tokenizer.unk_token in encoder.tokenizer.tokenize(w)]
    if unknown:
        raise ModelError(f"{encoder.source or encoder.name}: the tokenizer maps {len(unknown):,} of {len(words):,} "
                         f"numbers (e.g. {unknown[0]!r}) to its unknown token {encoder.tokenizer.unk_token!r}; the "
                         "numeracy probe needs every digit in the vocabulary")
    split = subwords > 1
    rng = np.random.default_rng(derive_seed(spec.seed, "numeracy-dev"))
    dev = np.zeros(len(values), dtype=bool)
    dev[rng.permutation(len(values))[:int(round(DEV_SHARE * len(values)))]] = True
    test = np.flatnonzero(~dev)
    strata = _gap_strata(values[test], split[test])
    y = values.astype(np.float64)
    baseline = mean_predictions(y, spec.folds, spec.seed)
    models = [("trained", encoder)]
    if spec.untrained:
        models.append(("untrained", encoder.untrained(spec.seed).to(run_device)))
    rows, numbers = [], {"value": values, "subwords": subwords, "role": np.where(dev, "dev", "test")}
    chosen_layer = None
    for weights, handle in models:
        store = cached_store(handle, words, cache_dir=cache_dir, device=run_device, progress=progress)
        X = features_from_store(store)
        layers = list(store.layers)
        predictions = out_of_fold(X, y, spec.folds, spec.seed)
        errors = predictions - y[None]
        dev_rmse = np.sqrt((errors[:, dev] ** 2).mean(-1))
        if chosen_layer is None:
            chosen_layer = layers[int(np.argmin(dev_rmse))]
        boot_rng = np.random.default_rng(derive_seed(spec.seed, "numeracy-bootstrap"))
        rmse_low, rmse_high = _interval(bootstrap_rmse(errors[:, test], spec.n_boot, boot_rng))
        gap = split_gap(errors[:, test], strata) if strata else np.full(len(layers), np.nan)
        gap_low, gap_high = (_interval(bootstrap_gap(errors[:, test], strata, spec.n_boot, boot_rng)) if strata
                             else (gap, gap))
        gap_from = values[test] >= GAP_FROM
        for i, layer in enumerate(layers):
            test_errors = errors[i, test]
            rows.append({
                "weights": weights, "layer": int(layer), "rmse": float(np.sqrt((test_errors ** 2).mean())),
                "rmse_ci_low": float(rmse_low[i]), "rmse_ci_high": float(rmse_high[i]),
                "baseline_rmse": float(np.sqrt(((baseline[test] - y[test]) ** 2).mean())),
                "dev_rmse": float(dev_rmse[i]), "chosen": int(layer) == chosen_layer,
                "whole_mae": float(np.abs(test_errors[gap_from & ~split[test]]).mean()),
                "split_mae": float(np.abs(test_errors[gap_from & split[test]]).mean()),
                "split_gap": float(gap[i]), "gap_ci_low": float(gap_low[i]), "gap_ci_high": float(gap_high[i]),
            })
            numbers[f"prediction_{weights}_{layer}"] = predictions[i]
    meta = {"model": encoder.describe(), "top": spec.top, "folds": spec.folds, "seed": spec.seed,
            "n_boot": spec.n_boot, "untrained": spec.untrained, "chosen_layer": chosen_layer,
            "numbers": len(values), "dev": int(dev.sum()), "test": len(test),
            "split_numbers": int(split.sum()), "hundreds_compared": len(strata),
            "probe": "ridge on standardised features (scikit-learn RidgeCV, leave-one-out penalty), "
                     f"{spec.folds}-fold out-of-fold predictions",
            "numbering": "layer l = hidden_states[l]; 0 = embeddings"}
    return Result("numeracy", tables={"layers": pd.DataFrame(rows), "numbers": pd.DataFrame(numbers)}, meta=meta)


def numeracy_table(layers: pd.DataFrame) -> pd.DataFrame:
    """The display of a ``layers`` table: one row per layer, the trained model's test RMSE with its interval,
    the twin's, the training mean's, and the split gap with its interval; the layer chosen on dev marked."""
    trained = layers[layers["weights"] == "trained"].set_index("layer")
    twin = layers[layers["weights"] == "untrained"].set_index("layer")
    out = pd.DataFrame({
        "layer": [f"{layer}{' (chosen on dev)' if row['chosen'] else ''}" for layer, row in trained.iterrows()],
        "RMSE": trained["rmse"].to_numpy(),
        "RMSE 95% CI": [f"{lo:.0f}-{hi:.0f}" for lo, hi in zip(trained["rmse_ci_low"], trained["rmse_ci_high"])],
        "untrained twin RMSE": twin["rmse"].reindex(trained.index).to_numpy() if len(twin) else np.nan,
        "training mean RMSE": trained["baseline_rmse"].to_numpy(),
        "split gap (MAE)": trained["split_gap"].to_numpy(),
        "gap 95% CI": [f"{lo:+.0f} to {hi:+.0f}" for lo, hi in zip(trained["gap_ci_low"], trained["gap_ci_high"])],
    })
    return out
