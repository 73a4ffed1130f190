"""Michel et al. (2019), "Are Sixteen Heads Really Better than One?", on any BERT-family model.

- :func:`single_head_ablation`: the metric with each head removed alone (their section 3, Table 1),
  one fine-tuned model per seed, so the table can say which changes exceed the seed-to-seed spread.
- :func:`head_importance`: expected sensitivity ``I_h = E_x |dL(x)/d xi_h|`` (section 4, eq. 2), with
  ``xi`` a gate on each head's context, normalised per layer by the l2 norm as they did.
- :func:`pruning_curve`: metric vs fraction of heads pruned, importance order vs random orders.
- :func:`flagged_vs_random`: remove heads an analysis flagged (e.g. Clark's best head per relation) and
  compare with removing as many random heads, several seeded draws.

The metric comes from a plain ``evaluate_fn(model) -> float`` (higher is better; GLUE's metrics are
fractions, e.g. accuracy 0.79), so nothing here depends on GLUE; :mod:`bertology.finetune.evaluation`
provides the GLUE one.

Numbering (:mod:`bertology.numbering`): layers 1..L as in ``hidden_states``, heads from 0. Every table
has integer ``layer`` and ``head`` columns and a ``head_label`` column (``L4H5``) that ``--heads`` accepts
verbatim. ``[layers, heads]`` arrays (importance) hold layer ``l`` in row ``l - 1``
(:func:`~bertology.intervention.hooks.grid_index`).
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from scipy import stats
from torch import nn

from bertology.errors import DataError, ModelError
from bertology.intervention.hooks import HeadSpec, grid_index, heads_to_scales, mask_heads, model_layout, scale_heads
from bertology.models.encoders import Encoder
from bertology.numbering import head_label, parse_heads, transformer_layers
from bertology.plots import finish_figure
from bertology.progress import progress_bar
from bertology.results import Result

EvaluateFn = Callable[[nn.Module], float]
LossFn = Callable[[nn.Module, dict], torch.Tensor]


def heads_frame(pairs: Iterable[tuple[int, int]], **columns) -> pd.DataFrame:
    """One row per head: ``layer``, ``head``, ``head_label`` (then ``columns``, the same on every row)."""
    rows = [{**columns, "layer": int(layer), "head": int(head), "head_label": head_label(layer, head)}
            for layer, head in sorted(pairs)]
    return pd.DataFrame(rows, columns=[*columns, "layer", "head", "head_label"])


def metric_of(evaluate_fn: EvaluateFn, model: nn.Module) -> float:
    value = evaluate_fn(model)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise DataError(f"evaluate_fn returned {type(value).__name__}; expected a number (higher is better)") from None


# --------------------------------------------------------------------------------------------------
# Section 3: one head at a time


def single_head_ablation(
    models: nn.Module | Sequence[nn.Module],
    evaluate_fn: EvaluateFn,
    seeds: Sequence[int] | None = None,
    heads: HeadSpec | None = None,
    progress: bool = False,
) -> Result:
    """The metric with each head masked alone, for each fine-tuning seed's model.

    Returns a :class:`Result` with tables ``ablation`` (one row per seed x head: ``seed, layer, head,
    head_label, baseline, metric, delta``; ``delta = metric - baseline``) and ``summary``
    (:func:`summarize_single_head`: per head, mean change over seeds against the seed spread).
    ``heads`` limits the heads masked (default: all).
    """
    models = [models] if isinstance(models, nn.Module) else list(models)
    if not models:
        raise DataError("single_head_ablation: no models given")
    seeds = list(range(len(models))) if seeds is None else list(seeds)
    if len(seeds) != len(models):
        raise DataError(f"{len(models)} models but {len(seeds)} seeds; give one seed per model")
    rows = []
    with progress_bar(progress, transient=True) as bar:
        for seed, model in zip(seeds, models):
            layout = model_layout(model)
            todo = layout.all_heads() if heads is None else layout.heads(heads)
            task = bar.add_task(f"single-head ablation (seed {seed})", total=len(todo) + 1)
            baseline = metric_of(evaluate_fn, model)
            bar.advance(task)
            for layer, head in todo:
                with mask_heads(model, [(layer, head)]):
                    metric = metric_of(evaluate_fn, model)
                rows.append({"seed": seed, "layer": layer, "head": head, "head_label": head_label(layer, head),
                             "baseline": baseline, "metric": metric, "delta": metric - baseline})
                bar.advance(task)
    raw = pd.DataFrame(rows, columns=["seed", "layer", "head", "head_label", "baseline", "metric", "delta"])
    return Result("single_head_ablation", tables={"ablation": raw, "summary": summarize_single_head(raw)},
                  meta={"seeds": [int(s) for s in seeds], "n_heads": int(raw.groupby("seed").size().max())
                        if len(raw) else 0})


MIN_SEEDS_FOR_TEST = 3


def summarize_single_head(table: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Per head (``layer, head, head_label``): mean and std of the change over seeds, and whether it is real.

    ``seed_spread`` is the std of the *unablated* metric over fine-tuning seeds: the change a reader
    would see from re-running fine-tuning alone. A change is ``real`` when its mean exceeds that spread
    and a one-sample t-test over seeds rejects zero at ``alpha``. The test needs at least
    ``MIN_SEEDS_FOR_TEST`` (3) seeds: with two, accuracy changes are multiples of 1/n_examples and often
    coincide, which a zero-variance t-test would call certain, so ``real`` is False (not shown); with one
    seed ``real`` is NaN (there is no spread to compare with).
    """
    baselines = table.groupby("seed")["baseline"].first()
    seed_spread = float(baselines.std(ddof=1)) if len(baselines) > 1 else float("nan")
    rows = []
    for (layer, head), group in table.groupby(["layer", "head"], sort=True):
        deltas = group["delta"].to_numpy(dtype=float)
        n = len(deltas)
        mean = float(deltas.mean())
        std = float(deltas.std(ddof=1)) if n > 1 else float("nan")
        if n >= MIN_SEEDS_FOR_TEST and std > 0:
            p_value = float(stats.ttest_1samp(deltas, 0.0).pvalue)
        elif n >= MIN_SEEDS_FOR_TEST:
            p_value = 0.0 if mean != 0 else 1.0  # every seed moved by exactly the same nonzero amount
        else:
            p_value = float("nan")
        if n == 1:
            real = float("nan")
        else:
            real = bool(abs(mean) > seed_spread and p_value < alpha)  # NaN p (2 seeds) is never < alpha
        rows.append({"layer": layer, "head": head, "head_label": head_label(layer, head), "n_seeds": n, "delta_mean": mean, "delta_std": std,
                     "baseline_mean": float(baselines.mean()), "seed_spread": seed_spread,
                     "p_value": p_value, "real": real})
    columns = ["layer", "head", "head_label", "n_seeds", "delta_mean", "delta_std", "baseline_mean",
               "seed_spread", "p_value", "real"]
    summary = pd.DataFrame(rows, columns=columns)
    # one seed: not known (<NA>), rather than a float NaN among booleans
    summary["real"] = pd.array([None if isinstance(v, float) and np.isnan(v) else bool(v) for v in summary["real"]],
                               dtype="boolean")
    return summary


def delta_matrix(summary: pd.DataFrame, value: str = "delta_mean") -> pd.DataFrame:
    """Layers (1..L) x heads view of a summary column (Michel et al.'s Table 1 layout)."""
    return summary.pivot(index="layer", columns="head", values=value)


# --------------------------------------------------------------------------------------------------
# Section 4: importance by expected sensitivity


def per_example_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """Cross-entropy (or squared error with one output) of each example: ``[batch]``."""
    if "labels" not in batch:
        raise DataError("importance needs labelled batches: each batch dict must have 'labels'")
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    logits = Encoder.of(model).forward(inputs, hidden_states=False, logits=True, grad=True).logits
    if logits is None:
        raise ModelError(f"{type(model).__name__} returned no logits; expected a model with a head (or one that "
                         "returns its scores)")
    labels = batch["labels"].to(logits.device)
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # half-precision losses lose the small gradients importance is made of
    if logits.shape[-1] == 1 or labels.is_floating_point():
        return (logits.squeeze(-1) - labels.to(logits.dtype)) ** 2
    return nn.functional.cross_entropy(logits, labels.long(), reduction="none")


def head_importance(
    model: nn.Module,
    batches: Iterable[dict],
    loss_fn: LossFn = per_example_loss,
    normalize: str = "layer",
    per_example: bool = True,
    base_mask: torch.Tensor | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Head importance ``I_h = E_x |dL(x)/d xi_h|`` as a ``[layers, heads]`` array (NaN for pruned heads).

    Row ``l - 1`` is layer ``l`` (``scores[grid_index(l, h)]``; :func:`importance_frame` gives the tidy
    ``layer, head, head_label, importance, rank`` table). ``xi`` multiplies each head's context
    (1 = unchanged) and ``base_mask`` (a grid like the result, e.g. from ``heads_to_scales``) sets its
    value: zeros for heads already masked, as in iterative pruning. ``per_example=True`` takes the absolute value per
    example, as in eq. 2 (one backward per batch: ``xi`` gets a batch dimension); ``False`` per batch, as
    the authors' code did. ``normalize="layer"`` divides each layer by its l2 norm (their section 4.2,
    after Molchanov et al. 2017); ``"none"`` keeps raw values.
    """
    if normalize not in ("layer", "none"):
        raise DataError(f"normalize={normalize!r}; expected 'layer' or 'none'")
    layout = model_layout(model)
    shape = (layout.num_layers, layout.num_heads)
    base = torch.ones(shape) if base_mask is None else base_mask.detach().float().clone()
    if tuple(base.shape) != shape:
        raise ModelError(f"base_mask of shape {tuple(base.shape)}; expected {list(shape)}")
    device = next(model.parameters()).device
    base = base.to(device)
    was_training = model.training
    model.eval()  # dropout off: the sensitivity of the model as evaluated
    total = torch.zeros(shape, dtype=torch.float64, device=device)
    count = 0
    batches = list(batches)
    try:
        with progress_bar(progress, transient=True) as bar:
            task = bar.add_task("head importance", total=len(batches))
            for batch in batches:
                batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
                size = int(batch["labels"].shape[0])
                xi = (base.expand(size, *shape) if per_example else base).clone().requires_grad_(True)
                with torch.enable_grad(), scale_heads(model, xi):
                    losses = loss_fn(model, batch)
                    objective = losses.sum() if per_example else losses.mean()
                    (grad,) = torch.autograd.grad(objective, xi)
                grad = grad.abs().double()
                total += grad.sum(0) if per_example else grad
                count += size if per_example else 1
                bar.advance(task)
    finally:
        model.train(was_training)
    if count == 0:
        raise DataError("head_importance: no batches given")
    scores = (total / count).cpu().numpy()
    missing = np.ones(shape, dtype=bool)
    for layer, head in layout.all_heads():
        missing[grid_index(layer, head)] = False
    scores[missing] = np.nan
    if normalize == "layer":
        norms = np.sqrt(np.nansum(scores ** 2, axis=1, keepdims=True))
        scores = scores / (norms + 1e-20)
    return scores


def importance_frame(scores: np.ndarray) -> pd.DataFrame:
    """Tidy ``layer, head, head_label, importance, rank`` (rank 0 = most important; pruned heads: NaN
    importance, no rank) from a ``[layers, heads]`` array of :func:`head_importance`."""
    pairs = [(layer, head) for layer in transformer_layers(scores.shape[0]) for head in range(scores.shape[1])]
    frame = heads_frame(pairs)
    frame["importance"] = [float(scores[grid_index(layer, head)]) for layer, head in pairs]
    frame["rank"] = (frame["importance"].rank(ascending=False, method="first") - 1).astype("Int64")
    return frame


# --------------------------------------------------------------------------------------------------
# Pruning curves


def _fractions(fractions: Sequence[float] | None) -> list[float]:
    values = [round(0.1 * i, 10) for i in range(11)] if fractions is None else [float(f) for f in fractions]
    if any(not 0.0 <= f <= 1.0 for f in values):
        raise DataError(f"fractions {values}: expected values between 0 and 1")
    return sorted(set(values))


def pruning_curve(
    model: nn.Module,
    evaluate_fn: EvaluateFn,
    batches: Sequence[dict] | None = None,
    fractions: Sequence[float] | None = None,
    random_seeds: Sequence[int] = (0, 1, 2),
    recompute: bool = True,
    importance: np.ndarray | None = None,
    loss_fn: LossFn = per_example_loss,
    progress: bool = False,
) -> Result:
    """Metric vs fraction of heads pruned (masked), importance order vs random orders.

    Importance order: the least important heads go first. With ``recompute=True`` (Michel et al.'s
    iterative procedure) importance is recomputed on ``batches`` with the heads removed so far masked
    before each step; otherwise one ``importance`` array (given, or computed once) fixes the order.
    Random order: one seeded permutation per seed in ``random_seeds``.

    Returns a :class:`Result` with tables ``curve`` (``order, seed, fraction, n_pruned, n_heads,
    metric``; ``fraction`` of heads pruned in [0, 1]; ``seed`` is <NA> for the importance order),
    ``pruned`` (the heads masked at each step, one row per head: ``order, seed, fraction, layer, head,
    head_label``) and ``importance`` (:func:`importance_frame` of the first ranking).
    """
    layout = model_layout(model)
    all_heads = layout.all_heads()
    n_heads = len(all_heads)
    steps = _fractions(fractions)
    targets = [int(round(f * n_heads)) for f in steps]
    if importance is None and batches is None:
        raise DataError("pruning_curve needs labelled batches (to compute importance) or an importance array")
    rows, pruned_rows = [], []

    def record(order, seed, fraction, pruned):
        with mask_heads(model, pruned):
            metric = metric_of(evaluate_fn, model)
        rows.append({"order": order, "seed": seed, "fraction": fraction, "n_pruned": len(pruned),
                     "n_heads": n_heads, "metric": metric})
        pruned_rows.append(heads_frame(pruned, order=order, seed=seed, fraction=fraction))

    first = importance
    with progress_bar(progress, transient=True) as bar:
        task = bar.add_task("pruning curves", total=len(steps) * (1 + len(random_seeds)))
        pruned: list[tuple[int, int]] = []
        scores = importance
        for fraction, target in zip(steps, targets):
            if target > len(pruned):
                if scores is None or (recompute and pruned):
                    scores = head_importance(model, batches, loss_fn=loss_fn,
                                             base_mask=heads_to_scales(layout, pruned))
                    first = scores if first is None else first
                remaining = [lh for lh in all_heads if lh not in set(pruned)]
                # least important first; ties broken by position so the order is deterministic
                remaining.sort(key=lambda lh: (scores[grid_index(*lh)], lh))
                pruned = pruned + remaining[: target - len(pruned)]
            record("importance", None, fraction, list(pruned))
            bar.advance(task)
        for seed in random_seeds:
            permutation = np.random.default_rng(seed).permutation(n_heads)
            order = [all_heads[i] for i in permutation]
            for fraction, target in zip(steps, targets):
                record("random", int(seed), fraction, order[:target])
                bar.advance(task)
    curve = pd.DataFrame(rows, columns=["order", "seed", "fraction", "n_pruned", "n_heads", "metric"])
    tables = {"curve": curve, "pruned": pd.concat(pruned_rows, ignore_index=True)}
    if first is not None:
        tables["importance"] = importance_frame(first)
    return Result("pruning_curve", tables=tables,
                  meta={"n_heads": n_heads, "fractions": steps, "random_seeds": [int(s) for s in random_seeds],
                        "recompute": bool(recompute)})


def plot_pruning_curve(curve: pd.DataFrame | Result, path=None, title: str | None = None,
                       metric_name: str = "metric"):
    """Importance order (line) vs random orders (mean ± std band over seeds); saved to ``path`` if given.

    ``curve`` is :func:`pruning_curve`'s result or its ``curve`` table. The x axis shows percent of heads.
    """
    matplotlib.use("Agg", force=False)  # on a machine with a display too: the figure goes to a file
    if isinstance(curve, Result):
        curve = curve["curve"]
    fig, ax = plt.subplots(figsize=(6, 4))
    imp = curve[curve["order"] == "importance"].sort_values("fraction")
    ax.plot(imp["fraction"] * 100, imp["metric"], marker="o", label="importance order (Michel et al.)")
    rnd = curve[curve["order"] == "random"]
    if not rnd.empty:
        stats = rnd.groupby("fraction")["metric"].agg(["mean", "std", "count"]).reset_index()
        stats["std"] = stats["std"].fillna(0.0)
        ax.plot(stats["fraction"] * 100, stats["mean"], linestyle="--", color="grey",
                label=f"random order (mean ± std, {int(stats['count'].max())} seeds)")
        ax.fill_between(stats["fraction"] * 100, stats["mean"] - stats["std"], stats["mean"] + stats["std"],
                        color="grey", alpha=0.25)
    ax.set_xlabel("heads pruned (%)")
    ax.set_ylabel(metric_name)
    ax.set_title(title or "Metric vs heads pruned")
    ax.legend()
    ax.grid(alpha=0.3)
    if path is None:
        fig.tight_layout()
    else:
        finish_figure(fig, path)
    return fig


# --------------------------------------------------------------------------------------------------
# Are the flagged heads used?


def flagged_heads(table: pd.DataFrame, exclude_relations: Iterable[str] = ("all",)) -> list[tuple[int, int]]:
    """The unique (layer, head) pairs a table lists, e.g. ``attention parse``'s best head per relation.

    Read from the integer ``layer`` and ``head`` columns, which every bertology table keeps in the one
    numbering (layers 1..L as in ``hidden_states``, heads from 0): no conversion. A table with only a
    ``head_label`` column (``L4H5``) is read from the labels; when both are there they must agree. Rows
    whose ``relation`` is in ``exclude_relations`` are skipped.
    """
    if "relation" in table.columns:
        table = table[~table["relation"].isin(set(exclude_relations))]
    has_columns = "layer" in table.columns and "head" in table.columns
    if not has_columns and "head_label" not in table.columns:
        raise DataError(f"flagged-heads table has neither integer 'layer' and 'head' columns nor a 'head_label' "
                        f"column; its columns are {list(table.columns)}")
    if table.empty:
        return []
    if has_columns:
        if table["layer"].isna().any() or table["head"].isna().any():
            raise DataError("flagged-heads table has rows without a layer or head")
        pairs = [(int(layer), int(head)) for layer, head in zip(table["layer"], table["head"])]
        pairs = parse_heads(pairs, option="flagged-heads table")
    if "head_label" in table.columns:
        labelled = parse_heads(",".join(str(v) for v in table["head_label"]), option="flagged-heads table head_label")
        if has_columns and labelled != pairs:
            raise DataError(f"flagged-heads table: head_label lists {labelled} but layer/head columns list {pairs}")
        pairs = labelled
    return [(int(layer), int(head)) for layer, head in pairs]


def flagged_vs_random(
    model: nn.Module,
    flagged: HeadSpec,
    evaluate_fn: EvaluateFn,
    n_draws: int = 10,
    seed: int = 0,
    exclude_flagged: bool = True,
    progress: bool = False,
) -> Result:
    """Metric with the flagged heads removed vs with as many random heads removed (``n_draws`` draws).

    Random heads are drawn (seeded) from the heads not flagged when ``exclude_flagged``. Returns a
    :class:`Result` with tables ``runs`` (``condition`` "none" | "flagged" | "random", ``draw`` (<NA> but
    for random draws), ``n_masked, metric, delta``), ``masked`` (the heads masked in each run, one row per
    head: ``condition, draw, layer, head, head_label``) and ``summary`` (:func:`summarize_flagged`).
    """
    layout = model_layout(model)
    chosen = layout.heads(flagged)
    if not chosen:
        raise DataError("no flagged heads given")
    pool = [lh for lh in layout.all_heads() if not (exclude_flagged and lh in set(chosen))]
    if len(pool) < len(chosen):
        raise DataError(f"{len(chosen)} flagged heads but only {len(pool)} other heads to draw from")
    rng = np.random.default_rng(seed)
    rows, masked = [], []
    with progress_bar(progress, transient=True) as bar:
        task = bar.add_task("flagged vs random heads", total=n_draws + 2)
        baseline = metric_of(evaluate_fn, model)
        bar.advance(task)
        rows.append({"condition": "none", "draw": None, "n_masked": 0, "metric": baseline, "delta": 0.0})

        def run(condition, draw, heads):
            with mask_heads(model, heads):
                metric = metric_of(evaluate_fn, model)
            rows.append({"condition": condition, "draw": draw, "n_masked": len(heads), "metric": metric,
                         "delta": metric - baseline})
            masked.append(heads_frame(heads, condition=condition, draw=draw))
            bar.advance(task)

        run("flagged", None, chosen)
        for draw in range(n_draws):
            picks = rng.choice(len(pool), size=len(chosen), replace=False)
            run("random", draw, [pool[i] for i in sorted(picks)])
    runs = pd.DataFrame(rows, columns=["condition", "draw", "n_masked", "metric", "delta"])
    runs["draw"] = pd.array(runs["draw"], dtype="Int64")
    masked_table = pd.concat(masked, ignore_index=True)
    masked_table["draw"] = pd.array(masked_table["draw"], dtype="Int64")
    summary = summarize_flagged(runs)
    return Result("flagged_vs_random", tables={"runs": runs, "masked": masked_table,
                                               "summary": pd.DataFrame([summary])},
                  meta={"seed": int(seed), "n_draws": int(n_draws), "exclude_flagged": bool(exclude_flagged)})


def summarize_flagged(result: pd.DataFrame | Result) -> dict:
    """Flagged change vs the random draws: their mean, std, and the share of draws that hurt as much.

    ``result`` is :func:`flagged_vs_random`'s result or its ``runs`` table.
    """
    if isinstance(result, Result):
        result = result["runs"]
    flagged = float(result.loc[result["condition"] == "flagged", "delta"].iloc[0])
    random = result.loc[result["condition"] == "random", "delta"].to_numpy(dtype=float)
    return {
        "baseline": float(result.loc[result["condition"] == "none", "metric"].iloc[0]),
        "n_masked": int(result.loc[result["condition"] == "flagged", "n_masked"].iloc[0]),
        "flagged_delta": flagged,
        "random_delta_mean": float(random.mean()) if len(random) else float("nan"),
        "random_delta_std": float(random.std(ddof=1)) if len(random) > 1 else float("nan"),
        "n_draws": int(len(random)),
        # empirical one-sided p: how often random heads hurt at least as much (+1 smoothing)
        "p_random_as_harmful": float((np.sum(random <= flagged) + 1) / (len(random) + 1)) if len(random) else float("nan"),
    }
