"""How close is each layer to static embeddings? (The Convexity report's finding, measured two ways.)

Per layer ``l`` (0 = embeddings), from a ``tokens`` store (one vector per subword token, specials left
out), the cosine of each token occurrence's vector ``x`` with a static vector of its token type:

* ``input_embedding``: (a) the model's own input embedding of the token, the row of
  ``model.get_input_embeddings().weight`` (before position embeddings and LayerNorm);
* ``type_average``: (b) Bommasani et al. (2020)'s reduction at the same layer, the mean of the type's
  vectors over its *other* occurrences in the corpus (leave-one-out, so an occurrence is not compared
  with a mean that contains it; a type seen n times averages n - 1 contexts).

Each is averaged over a type's occurrences, then over types (unweighted, as Ethayarajh's
self-similarity). The **baseline** is the same similarity between random pairs: each occurrence against
the static vector of another token type drawn at random (with the seed) among the kept types.
**Adjusted** = value - baseline. Kept token types: at least ``min_count`` occurrences and not made only of
punctuation (word-piece markers ``##``, ``Ġ``, ``▁`` ignored).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from bertology.errors import DataError
from bertology.geometry.contextuality import is_punctuation
from bertology.geometry.measures import unit_rows
from bertology.geometry.stores import cached_store, prepare_run
from bertology.models import Encoder
from bertology.plots import finish_layer_figure
from bertology.progress import progress_bar
from bertology.results import Result
from bertology.runtime import derive_seed

REFERENCES = ("input_embedding", "type_average")
_MARKERS = ("##", "Ġ", "▁")


def strip_marker(token: str) -> str:
    for marker in _MARKERS:
        if token.startswith(marker) and len(token) > len(marker):
            return token[len(marker):]
    return token


def store_token_ids(store, tokenizer) -> np.ndarray:
    """The vocabulary id of every row of a ``tokens`` store, in row order."""
    if store.pool != "tokens":
        raise DataError(f"{store.path}: pooled {store.pool!r}; token-level measures need a 'tokens' store")
    ids = np.concatenate([np.asarray(tokenizer.convert_tokens_to_ids(list(store.tokens(i))), dtype=np.int64)
                          for i in range(store.n_sentences)]) if store.n_sentences else np.zeros(0, np.int64)
    if len(ids) != int(store.offsets[-1]):
        raise DataError(f"{store.path}: {len(ids)} stored tokens but {int(store.offsets[-1])} rows")
    return ids


@dataclass
class StaticSample:
    """The kept occurrences (store rows), their type (0..T-1), the type's vocabulary id and, per
    occurrence, the random other type it is compared with for the baseline."""

    seed: int
    rows: np.ndarray
    type_of_row: np.ndarray
    type_ids: np.ndarray
    type_tokens: list[str]
    other_type: np.ndarray

    @property
    def n_types(self) -> int:
        return len(self.type_ids)


def plan_static(token_ids: np.ndarray, tokens: Sequence[str], seed: int = 0, min_count: int = 5) -> StaticSample:
    """Keep the token types seen ``min_count`` times (punctuation left out) and draw, for each occurrence,
    another kept type for the random-pair baseline."""
    if min_count < 2:
        raise DataError(f"min_count {min_count}: a leave-one-out type average needs at least 2 occurrences")
    token_ids = np.asarray(token_ids, dtype=np.int64)
    unique, first, inverse, counts = np.unique(token_ids, return_index=True, return_inverse=True,
                                               return_counts=True)
    keep = np.asarray([counts[k] >= min_count and not is_punctuation(strip_marker(tokens[first[k]]))
                       for k in range(len(unique))], dtype=bool)
    if keep.sum() < 2:
        raise DataError(f"fewer than two token types occur {min_count} times; give more text "
                        "(data=, max_sentences=) or lower min_count=")
    new_index = np.full(len(unique), -1, dtype=np.int64)
    new_index[keep] = np.arange(int(keep.sum()))
    type_of_token = new_index[inverse]
    rows = np.flatnonzero(type_of_token >= 0)
    type_of_row = type_of_token[rows]
    n_types = int(keep.sum())
    rng = np.random.default_rng(derive_seed(seed, "static-baseline"))
    other = rng.integers(0, n_types - 1, size=len(rows))
    other = other + (other >= type_of_row)  # never the occurrence's own type
    return StaticSample(seed=seed, rows=rows, type_of_row=type_of_row, type_ids=unique[keep],
                        type_tokens=[tokens[first[k]] for k in np.flatnonzero(keep)], other_type=other)


def _per_type_mean(values: np.ndarray, types: np.ndarray, n_types: int) -> float:
    sums = np.bincount(types, weights=values, minlength=n_types)
    counts = np.bincount(types, minlength=n_types)
    return float(np.mean(sums / np.maximum(counts, 1)))


def static_layer(vectors: np.ndarray, input_embeddings: np.ndarray, sample: StaticSample
                 ) -> dict[str, tuple[float, float]]:
    """reference -> (value, baseline) for one layer's token vectors ``[rows, dim]``.

    ``input_embeddings``: the rows of the input embedding matrix for ``sample.type_ids`` ``[types, dim]``.
    """
    x = np.asarray(vectors[sample.rows], dtype=np.float64)
    units = unit_rows(x)
    t, other, n = sample.type_of_row, sample.other_type, sample.n_types
    embedding_units = unit_rows(input_embeddings)
    own = np.einsum("ij,ij->i", units, embedding_units[t])
    random_pair = np.einsum("ij,ij->i", units, embedding_units[other])
    sums = np.zeros((n, x.shape[1]))
    np.add.at(sums, t, x)
    leave_one_out = unit_rows(sums[t] - x)
    average = np.einsum("ij,ij->i", units, leave_one_out)
    random_average = np.einsum("ij,ij->i", units, unit_rows(sums)[other])
    return {
        "input_embedding": (_per_type_mean(own, t, n), _per_type_mean(random_pair, t, n)),
        "type_average": (_per_type_mean(average, t, n), _per_type_mean(random_average, t, n)),
    }


def input_embedding_matrix(encoder: Encoder) -> np.ndarray:
    return encoder.model.get_input_embeddings().weight.detach().float().cpu().numpy()


def store_static(store, encoder: Encoder, samples: Sequence[StaticSample], layers: Sequence[int] | None,
                 encoder_kind: str, progress: bool = False) -> list[dict]:
    """Both similarities for every layer of ``store`` and every sample, reading each layer once."""
    layers = list(store.layers if layers is None else layers)
    embeddings = input_embedding_matrix(encoder)
    rows: list[dict] = []
    with progress_bar(progress) as bar, threadpool_limits(1):
        task = bar.add_task(f"static similarity ({encoder_kind})", total=len(layers))
        for layer in layers:
            vectors = store.layer(layer)
            for sample in samples:
                for reference, (value, baseline) in static_layer(vectors, embeddings[sample.type_ids],
                                                                 sample).items():
                    rows.append({"weights": encoder_kind, "seed": sample.seed, "layer": layer,
                                 "reference": reference, "value": value, "baseline": baseline,
                                 "adjusted": value - baseline})
            bar.advance(task)
    return rows


def summarize(layers: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over seeds per encoder, reference and layer."""
    return (layers.groupby(["weights", "reference", "layer"], sort=True)
            .agg(value=("value", "mean"), value_std=("value", "std"), baseline=("baseline", "mean"),
                 adjusted=("adjusted", "mean"), adjusted_std=("adjusted", "std"), seeds=("seed", "nunique"))
            .reset_index())


def u_shape(summary: pd.DataFrame, reference: str = "input_embedding", encoder: str = "trained",
            column: str = "adjusted", min_regain: float = 0.01) -> dict:
    """Does the curve fall from the first layer and rise again at the last (the Convexity report's "last
    layer regains similarity")? Yes when the minimum is at an inner layer and the last layer sits at
    least ``min_regain`` above it. Returns the verdict, the minimum's layer and the values."""
    part = summary[(summary["weights"] == encoder) & (summary["reference"] == reference)].sort_values("layer")
    values = part[column].to_numpy(dtype=float)
    layers = part["layer"].astype(int).to_numpy()
    if len(values) < 3:
        return {"u_shape": False, "minimum_layer": int(layers[np.argmin(values)]) if len(values) else None}
    low = int(np.argmin(values))
    return {"u_shape": bool(0 < low < len(values) - 1 and values[-1] - values[low] >= min_regain),
            "minimum_layer": int(layers[low]), "first": float(values[0]), "minimum": float(values[low]),
            "last": float(values[-1]), "regained": float(values[-1] - values[low])}


def static_similarity(model: str | os.PathLike | Encoder = "minilm", data: str | os.PathLike | None = None, *,
                      sentences=None, seeds: Sequence[int] = (0, 1, 2), layers=None, untrained: bool = True,
                      min_count: int = 5, max_sentences: int | None = None, device: str | None = "auto",
                      cache_dir: str | os.PathLike | None = None, progress: bool = False) -> Result:
    """Similarity of every layer to (a) the input embeddings and (b) per-type context averages, raw and
    adjusted by random token pairs, for the model and its untrained twins (one per seed).

    Tables: ``layers`` (weights, seed, layer, reference, value, baseline, adjusted) and ``summary``.
    """
    run = prepare_run(model, data, sentences, seeds=seeds, layers=layers, max_sentences=max_sentences, device=device)
    seeds, sentences, input_path, run_device, encoder, chosen = (run.seeds, run.sentences, run.input_path, run.device,
                                                                 run.encoder, run.layers)
    store = cached_store(encoder, sentences, pool="tokens", cache_dir=cache_dir, input_path=input_path,
                         device=run_device, progress=progress)
    token_ids = store_token_ids(store, encoder.tokenizer)
    tokens = [tok for i in range(store.n_sentences) for tok in store.tokens(i)]
    samples = [plan_static(token_ids, tokens, seed, min_count) for seed in seeds]
    rows = store_static(store, encoder, samples, chosen, "trained", progress)
    if untrained:
        for sample in samples:
            twin = encoder.untrained(sample.seed).to(run_device)
            twin_store = cached_store(twin, sentences, pool="tokens", cache_dir=cache_dir, input_path=input_path,
                                      device=run_device, progress=progress)
            rows += store_static(twin_store, twin, [sample], chosen, "untrained", progress)
    table = pd.DataFrame(rows)
    summary = summarize(table)
    meta = {
        "model": encoder.describe(),
        "data": str(input_path) if input_path else None,
        "sentences": len(sentences),
        "tokens": int(len(token_ids)),
        "token_types": samples[0].n_types,
        "kept_occurrences": int(len(samples[0].rows)),
        "seeds": list(seeds),
        "settings": {"min_count": min_count, "pool": "tokens", "untrained": untrained,
                     "type_average": "leave-one-out mean over the type's other occurrences, same layer",
                     "baseline": "each occurrence against another random kept type's static vector"},
        "u_shape": {ref: u_shape(summary, ref) for ref in REFERENCES},
        "numbering": "layer l = hidden_states[l]; 0 = embeddings",
    }
    return Result("static-similarity", tables={"layers": table, "summary": summary}, meta=meta)


def plot_static(summary: pd.DataFrame, path: str | os.PathLike, title: str = "") -> Path:
    """Two panels, (a) input embedding and (b) type average: adjusted similarity per layer (solid, error
    bars = std over seeds) and raw (dotted), model vs untrained twin."""
    matplotlib.use("Agg")  # on a machine with a display too: the figure goes to a file
    labels = {"input_embedding": "(a) vs the token's input embedding",
              "type_average": "(b) vs its type's average over contexts"}
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=False)
    for axis, reference in zip(axes, REFERENCES):
        for kind, colour in (("trained", "C0"), ("untrained", "C1")):
            part = summary[(summary["weights"] == kind) & (summary["reference"] == reference)].sort_values("layer")
            if part.empty:
                continue
            name = "model" if kind == "trained" else "untrained twin"
            x = part["layer"].astype(int)
            axis.errorbar(x, part["adjusted"], yerr=part["adjusted_std"].fillna(0), fmt="-o", ms=4, capsize=2,
                          color=colour, label=f"{name}, adjusted")
            axis.plot(x, part["value"], ":", color=colour, alpha=0.7, label=f"{name}, raw")
        axis.set_title(labels[reference], fontsize=9)
        axis.set_ylabel("cosine")
    return finish_layer_figure(figure, axes, path, title, legend_size=7)
