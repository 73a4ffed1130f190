"""The languages experiment's summaries (:func:`bertology.languages.experiment.run_languages`): mean, spread and
95% interval per layer, the layer chosen on dev, the zero-shot / in-language transfer ratio with its paired
bootstrap interval, and retrieval accuracy over language pairs. Plain functions of the per-seed rows and hits.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bertology.probing.summary import bootstrap_accuracies, bootstrap_intervals
from bertology.runtime import derive_seed

#: The ``baseline`` column's values, probing's words: the model itself, its untrained twin, the majority class.
MODEL, TWIN, MAJORITY = "none", "untrained", "majority"
#: Their first spellings, still in the seed purposes (so the bootstrap intervals do not move) and progress lines.
SEED_WORDS = {MODEL: "model", TWIN: "twin", MAJORITY: "majority"}
IN_LANGUAGE, ZERO_SHOT = "in-language", "zero-shot"
RAW, CENTERED = "none", "centered"
#: The ``language`` of the rows that score the zero-shot probes on their own (English) dev split.
SOURCE = "source"


def summary_table(frame: pd.DataFrame, keys: list[str], hits: dict, prefix: tuple, n_boot: int) -> pd.DataFrame:
    """Mean, std and seeds per ``keys`` x layer x split, with the 95% interval of the test rows and ``best``:
    the layer whose dev mean is highest (ties to the lower layer), per ``keys``."""
    if frame.empty:
        return pd.DataFrame(columns=[*keys, "layer", "split", "mean", "std", "n_seeds", "ci_low", "ci_high"])
    grouped = (frame.groupby([*keys, "layer", "split"], sort=False)["accuracy"]
               .agg(mean="mean", std="std", n_seeds="count").reset_index())
    grouped["ci_low"] = np.nan
    grouped["ci_high"] = np.nan
    for key, by_seed in hits.items():
        if key[: len(prefix)] != prefix:
            continue
        values = key[len(prefix):]
        purpose = [SEED_WORDS[v] if column == "baseline" else v for column, v in zip(keys, values)]
        low, high = bootstrap_intervals(by_seed, n_boot=n_boot, seed=derive_seed(0, "bootstrap", *prefix, *purpose))
        mask = np.ones(len(grouped), dtype=bool)
        for column, value in zip(keys, values):
            mask &= grouped[column].to_numpy() == value
        mask &= grouped["split"].to_numpy() == "test"
        for layer, lo, hi in zip(sorted(grouped.loc[mask, "layer"].unique()), np.atleast_1d(low), np.atleast_1d(high)):
            at = mask & (grouped["layer"].to_numpy() == layer)
            grouped.loc[at, "ci_low"], grouped.loc[at, "ci_high"] = float(lo), float(hi)
    return grouped


def best_layer(summary: pd.DataFrame, selector: dict, split: str = "dev") -> int | None:
    """The layer with the highest mean on ``split`` among the rows matching ``selector`` (lowest among ties)."""
    rows = summary[summary["split"] == split]
    for column, value in selector.items():
        rows = rows[rows[column] == value]
    if rows.empty:
        return None
    top = rows["mean"].max()
    return int(rows[rows["mean"] >= top - 1e-12]["layer"].min())


def transfer_ratios(summary: pd.DataFrame, hits: dict, n_boot: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per task, language and baseline (model or twin): zero-shot / in-language test accuracy per layer (with a paired bootstrap
    interval), and the best-layer comparison (each setting's layer chosen on its own dev: English for zero-shot)."""
    ratios, best = [], []
    keys = sorted({k[1:4] for k in hits if k[0] == "transfer" and k[3] in (MODEL, TWIN)})
    for task, code, kind in keys:
        zero = hits.get(("transfer", task, code, kind, ZERO_SHOT))
        within = hits.get(("transfer", task, code, kind, IN_LANGUAGE))
        if not zero or not within:
            continue
        seeds = sorted(set(zero) & set(within))
        boot_seed = derive_seed(0, "bootstrap-ratio", task, code, SEED_WORDS[kind])
        zb = np.stack([bootstrap_accuracies(zero[s], n_boot, boot_seed) for s in seeds])  # [seeds, layers, boot]
        wb = np.stack([bootstrap_accuracies(within[s], n_boot, boot_seed) for s in seeds])
        ratio_boot = zb / np.where(wb > 0, wb, np.nan)
        zero_mean = np.mean([zero[s].mean(axis=1) for s in seeds], axis=0)
        within_mean = np.mean([within[s].mean(axis=1) for s in seeds], axis=0)
        rows = summary[(summary["task"] == task) & (summary["language"] == code) & (summary["baseline"] == kind)
                       & (summary["setting"] == IN_LANGUAGE) & (summary["split"] == "test")]
        layers = sorted(int(v) for v in rows["layer"].unique())
        for li, layer in enumerate(layers):
            flat = ratio_boot[:, li].ravel()
            ratios.append({"task": task, "language": code, "baseline": kind, "layer": layer,
                           "zero_shot": float(zero_mean[li]), "in_language": float(within_mean[li]),
                           "ratio": float(zero_mean[li] / within_mean[li]) if within_mean[li] > 0 else np.nan,
                           "ci_low": float(np.nanquantile(flat, 0.025)), "ci_high": float(np.nanquantile(flat, 0.975))})
        zs_layer = best_layer(summary, {"task": task, "language": SOURCE, "baseline": kind, "setting": ZERO_SHOT})
        in_layer = best_layer(summary, {"task": task, "language": code, "baseline": kind, "setting": IN_LANGUAGE})
        if zs_layer is None or in_layer is None:
            continue
        zi, wi = layers.index(zs_layer), layers.index(in_layer)
        flat = (zb[:, zi] / np.where(wb[:, wi] > 0, wb[:, wi], np.nan)).ravel()
        majority = summary[(summary["task"] == task) & (summary["language"] == code)
                           & (summary["baseline"] == MAJORITY) & (summary["setting"] == IN_LANGUAGE)
                           & (summary["split"] == "test")]["mean"]
        best.append({"task": task, "language": code, "baseline": kind,
                     "zero_shot_layer": zs_layer, "zero_shot": float(zero_mean[zi]),
                     "zero_shot_ci_low": float(np.quantile(zb[:, zi].ravel(), 0.025)),
                     "zero_shot_ci_high": float(np.quantile(zb[:, zi].ravel(), 0.975)),
                     "in_language_layer": in_layer, "in_language": float(within_mean[wi]),
                     "in_language_ci_low": float(np.quantile(wb[:, wi].ravel(), 0.025)),
                     "in_language_ci_high": float(np.quantile(wb[:, wi].ravel(), 0.975)),
                     "majority": float(majority.iloc[0]) if len(majority) else np.nan,
                     "ratio": float(zero_mean[zi] / within_mean[wi]) if within_mean[wi] > 0 else np.nan,
                     "ratio_ci_low": float(np.nanquantile(flat, 0.025)),
                     "ratio_ci_high": float(np.nanquantile(flat, 0.975))})
    return pd.DataFrame(ratios), pd.DataFrame(best)


def retrieval_summary(frame: pd.DataFrame, collected: dict, n_boot: int) -> pd.DataFrame:
    """Mean accuracy @1 over language pairs per baseline (model or twin), centering and layer (test queries),
    its interval (a bootstrap over the test sentences, each with its translations in every pair), the mean on
    the selection queries and ``best``: the layer chosen on them."""
    rows = []
    for (kind, centering, layer), pair_hits in collected.items():
        per_query = pair_hits.mean(axis=0)
        if per_query.size:
            boot = bootstrap_accuracies(per_query[None], n_boot, derive_seed(0, "bootstrap-retrieval"))[0]
            low, high = np.quantile(boot, 0.025), np.quantile(boot, 0.975)
        else:
            low = high = np.nan
        part = frame[(frame["baseline"] == kind) & (frame["centering"] == centering) & (frame["layer"] == layer)]
        rows.append({"baseline": kind, "centering": centering, "layer": layer, "mean": float(part["accuracy"].mean()),
                     "ci_low": float(low), "ci_high": float(high),
                     "selection_mean": float(part["selection_accuracy"].mean()), "pairs": len(part)})
    out = pd.DataFrame(rows)
    out["best"] = False
    for (kind, centering), group in out.groupby(["baseline", "centering"]):
        top = group["selection_mean"].max()
        layer = group[group["selection_mean"] >= top - 1e-12]["layer"].min()
        out.loc[group.index[group["layer"] == layer], "best"] = True
    return out
