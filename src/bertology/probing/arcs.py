"""Edge probes by dependency arc length: is a long arc's label decoded as well as a short one's?

An arc's length is the distance in words between its dependent and its head, ``|dependent - head|`` (1 = the
two words are neighbours). :func:`arc_length_table` breaks an edge task's test accuracy down by length, in the
bins of :data:`ARC_BINS` (1, 2, 3-4, 5-8, 9+), per layer and per baseline (the probe on the encoder, on its
untrained twin, on control labels, the majority class), each with its arc count and a 95% interval, and the drop
from the shortest bin with its own interval: the table ``arc_length`` of :func:`~bertology.probing.run_probing`.

The intervals are the rest of probing's (:mod:`bertology.probing.summary`): bootstrap resamples of the test arcs
around the point fit (the probe fitted on every training arc), widened by the bootstrap seeds' spread (pooled over
seeds when a run has no point fit), here resampled within each bin (a
stratified bootstrap: each bin keeps its arc count). Bins hold disjoint arcs, so the drop from the shortest bin
is the difference of two independent resamples. Arcs of one sentence are resampled as if independent, as every
probing interval is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from bertology.probing.summary import N_BOOT, bootstrap_accuracies, centred_on_point, fits_in_order, pooled_interval
from bertology.runtime import derive_seed

#: The length bins ``(label, shortest, longest)`` in words; ``None``: no upper end.
ARC_BINS: tuple[tuple[str, int, int | None], ...] = (("1", 1, 1), ("2", 2, 2), ("3-4", 3, 4), ("5-8", 5, 8),
                                                     ("9+", 9, None))
#: The columns of an ``arc_length`` table.
ARC_COLUMNS = ["model", "task", "probe", "baseline", "layer", "bin", "min_length", "max_length", "arcs", "accuracy",
               "ci_low", "ci_high", "drop", "drop_ci_low", "drop_ci_high"]


def arc_lengths(refs: np.ndarray) -> np.ndarray:
    """The length in words of each arc of an edge task's ``refs`` ``[n, 3]`` (sentence, dependent, head)."""
    refs = np.asarray(refs)
    return np.abs(refs[:, 1].astype(np.int64) - refs[:, 2].astype(np.int64))


def arc_bins(lengths: np.ndarray, bins: Sequence[tuple[str, int, int | None]] = ARC_BINS) -> np.ndarray:
    """The index into ``bins`` of each length (-1 for a length no bin holds, such as 0)."""
    lengths = np.asarray(lengths)
    out = np.full(len(lengths), -1, dtype=np.int64)
    for index, (_, low, high) in enumerate(bins):
        out[(lengths >= low) & ((lengths <= high) if high is not None else True)] = index
    return out


def arc_length_table(hits: Mapping[tuple, Mapping[int, np.ndarray]], lengths: np.ndarray, layers: Sequence[int],
                     model: str, task: str, split: str = "test", n_boot: int = N_BOOT,
                     bins: Sequence[tuple[str, int, int | None]] = ARC_BINS) -> pd.DataFrame:
    """Accuracy of an edge task by arc length (the module doc), one row per baseline x layer x non-empty bin.

    ``hits``: which evaluation arcs each fit got right, as the probing experiment collects them:
    ``{(probe, component, baseline, split): {seed: bool [n_layers, n]}}`` (entries of other splits and of the
    scalar mix are left out); ``lengths``: ``[n]`` the arcs' lengths (:func:`arc_lengths`), in the order of the
    hits. ``accuracy`` is the point fit's (the mean over seeds without one); ``ci_low``/``ci_high`` its 95% interval; ``drop`` the shortest
    non-empty bin's accuracy minus this bin's (0 in the shortest), ``drop_ci_low``/``drop_ci_high`` its interval.
    """
    index = arc_bins(lengths, bins)
    present = [b for b in range(len(bins)) if (index == b).any()]
    rows = []
    for (probe, component, baseline, key_split), by_seed in hits.items():
        if key_split != split or component is not None or not by_seed:
            continue
        values, has_point = fits_in_order(by_seed)
        stacked = np.stack([np.asarray(v, dtype=bool) for v in values])  # [fits, layers, n], the point fit first
        if stacked.shape[-1] != len(index):
            raise ValueError(f"{task}: {stacked.shape[-1]} scored arcs for {len(index)} arc lengths")
        boots, means = {}, {}
        for b in present:
            chosen = stacked[..., index == b]
            boot = bootstrap_accuracies(chosen, n_boot, seed=derive_seed(0, "arc-length", task, split, bins[b][0]))
            boots[b] = centred_on_point(boot) if has_point else boot
            means[b] = chosen[0].mean(axis=-1) if has_point else chosen.mean(axis=-1).mean(axis=0)  # [layers]
        first = present[0] if present else None
        for b in present:
            low, high = pooled_interval(boots[b])
            drop_low, drop_high = pooled_interval(boots[first] - boots[b])
            label, shortest, longest = bins[b]
            for li, layer in enumerate(layers):
                rows.append({"model": model, "task": task, "probe": probe, "baseline": baseline, "layer": int(layer),
                             "bin": label, "min_length": shortest, "max_length": longest,
                             "arcs": int((index == b).sum()), "accuracy": float(means[b][li]),
                             "ci_low": float(low[li]), "ci_high": float(high[li]),
                             "drop": float(means[first][li] - means[b][li]), "drop_ci_low": float(drop_low[li]),
                             "drop_ci_high": float(drop_high[li])})
    frame = pd.DataFrame(rows, columns=ARC_COLUMNS)
    return frame.astype({"layer": "Int64", "max_length": "Int64", "min_length": "int64", "arcs": "int64"})
