"""Michel et al. (2019), "Are Sixteen Heads Really Better than One?", on any BERT-family model.

- :func:`single_head_ablation`: the metric with each head removed alone (their section 3, Table 1),
  one fine-tuned model per seed, so the table can say which changes exceed the seed-to-seed spread.
- :func:`head_importance`: expected sensitivity ``I_h = E_x |dL(x)/d xi_h|`` (section 4, eq. 2), with
  ``xi`` a gate on each head's context, normalised per layer by the l2 norm as they did.
- :func:`pruning_curve`: metric vs fraction of heads pruned, importance order vs random orders.
- :func:`flagged_vs_random`: remove heads an analysis flagged (e.g. Clark's best head per relation) and
  compare with removing as many random heads, several seeded draws.

The metric comes from a plain ``evaluate_fn(model) -> float`` (higher is better), so nothing here
depends on GLUE; :mod:`bertology.intervention.cli` plugs in the GLUE evaluation.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from bertology.errors import DataError, ModelError
from bertology.intervention.hooks import HeadSpec, _expand, mask_heads, model_layout, scale_heads

EvaluateFn = Callable[[nn.Module], float]
LossFn = Callable[[nn.Module, dict], torch.Tensor]


def _progress(enabled: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    disable=not enabled, transient=True)


def _score(evaluate_fn: EvaluateFn, model: nn.Module) -> float:
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
) -> pd.DataFrame:
    """The metric with each head masked alone, for each fine-tuning seed's model.

    Returns one row per seed x head: ``seed, layer, head, baseline, metric, delta`` (0-based layer and
    head; ``delta = metric - baseline``). Summarise with :func:`summarize_single_head`.
    """
    models = [models] if isinstance(models, nn.Module) else list(models)
    if not models:
        raise DataError("single_head_ablation: no models given")
    seeds = list(range(len(models))) if seeds is None else list(seeds)
    if len(seeds) != len(models):
        raise DataError(f"{len(models)} models but {len(seeds)} seeds; give one seed per model")
    rows = []
    with _progress(progress) as bar:
        for seed, model in zip(seeds, models):
            layout = model_layout(model)
            todo = layout.all_heads() if heads is None else _expand(layout, heads)
            task = bar.add_task(f"single-head ablation (seed {seed})", total=len(todo) + 1)
            baseline = _score(evaluate_fn, model)
            bar.advance(task)
            for layer, head in todo:
                with mask_heads(model, [(layer, head)]):
                    metric = _score(evaluate_fn, model)
                rows.append({"seed": seed, "layer": layer, "head": head, "baseline": baseline,
                             "metric": metric, "delta": metric - baseline})
                bar.advance(task)
    return pd.DataFrame(rows, columns=["seed", "layer", "head", "baseline", "metric", "delta"])


MIN_SEEDS_FOR_TEST = 3


def summarize_single_head(table: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Per head: mean and std of the change over seeds, and whether it is real.

    ``seed_spread`` is the std of the *unablated* metric over fine-tuning seeds: the change a reader
    would see from re-running fine-tuning alone. A change is ``real`` when its mean exceeds that spread
    and a one-sample t-test over seeds rejects zero at ``alpha``. The test needs at least
    ``MIN_SEEDS_FOR_TEST`` (3) seeds: with two, accuracy changes are multiples of 1/n_examples and often
    coincide, which a zero-variance t-test would call certain, so ``real`` is False (not shown); with one
    seed ``real`` is NaN (there is no spread to compare with).
    """
    from scipy import stats

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
        rows.append({"layer": layer, "head": head, "n_seeds": n, "delta_mean": mean, "delta_std": std,
                     "baseline_mean": float(baselines.mean()), "seed_spread": seed_spread,
                     "p_value": p_value, "real": real})
    return pd.DataFrame(rows)


def delta_matrix(summary: pd.DataFrame, value: str = "delta_mean") -> pd.DataFrame:
    """Layers x heads view of a summary column (Michel et al.'s Table 1 layout)."""
    return summary.pivot(index="layer", columns="head", values=value)


# --------------------------------------------------------------------------------------------------
# Section 4: importance by expected sensitivity


def per_example_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """Cross-entropy (or squared error with one output) of each example: ``[batch]``."""
    if "labels" not in batch:
        raise DataError("importance needs labelled batches: each batch dict must have 'labels'")
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    output = model(**inputs)
    logits = output if isinstance(output, torch.Tensor) else getattr(output, "logits", None)
    if logits is None:
        raise ModelError(f"the model returned {type(output).__name__}; expected logits or an output with .logits")
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

    ``xi`` multiplies each head's context (1 = unchanged) and ``base_mask`` sets its value (e.g. zeros
    for heads already masked, as in iterative pruning). ``per_example=True`` takes the absolute value per
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
        with _progress(progress) as bar:
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
        missing[layer, head] = False
    scores[missing] = np.nan
    if normalize == "layer":
        norms = np.sqrt(np.nansum(scores ** 2, axis=1, keepdims=True))
        scores = scores / (norms + 1e-20)
    return scores


def importance_frame(scores: np.ndarray) -> pd.DataFrame:
    """Tidy ``layer, head, importance, rank`` (rank 0 = most important) from a ``[layers, heads]`` array."""
    layers, heads = np.meshgrid(np.arange(scores.shape[0]), np.arange(scores.shape[1]), indexing="ij")
    df = pd.DataFrame({"layer": layers.ravel(), "head": heads.ravel(), "importance": scores.ravel()})
    df["rank"] = df["importance"].rank(ascending=False, method="first") - 1
    df["rank"] = df["rank"].astype("Int64")
    return df


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
) -> pd.DataFrame:
    """Metric vs fraction of heads pruned (masked), importance order vs random orders.

    Importance order: the least important heads go first. With ``recompute=True`` (Michel et al.'s
    iterative procedure) importance is recomputed on ``batches`` with the heads removed so far masked
    before each step; otherwise one ``importance`` array (given, or computed once) fixes the order.
    Random order: one seeded permutation per seed in ``random_seeds``.

    Returns ``order, seed, fraction, n_pruned, n_heads, metric, pruned`` (``pruned``: "L-H" list);
    ``seed`` is -1 for the importance order.
    """
    layout = model_layout(model)
    all_heads = layout.all_heads()
    n_heads = len(all_heads)
    steps = _fractions(fractions)
    targets = [int(round(f * n_heads)) for f in steps]
    if importance is None and batches is None:
        raise DataError("pruning_curve needs labelled batches (to compute importance) or an importance array")
    rows = []

    def record(order, seed, fraction, pruned):
        with mask_heads(model, pruned):
            metric = _score(evaluate_fn, model)
        rows.append({"order": order, "seed": seed, "fraction": fraction, "n_pruned": len(pruned),
                     "n_heads": n_heads, "metric": metric,
                     "pruned": ",".join(f"{l}-{h}" for l, h in sorted(pruned))})

    with _progress(progress) as bar:
        task = bar.add_task("pruning curves", total=len(steps) * (1 + len(random_seeds)))
        pruned: list[tuple[int, int]] = []
        scores = importance
        for fraction, target in zip(steps, targets):
            if target > len(pruned):
                if scores is None or (recompute and pruned):
                    mask = torch.ones(layout.num_layers, layout.num_heads)
                    for layer, head in pruned:
                        mask[layer, head] = 0.0
                    scores = head_importance(model, batches, loss_fn=loss_fn, base_mask=mask)
                remaining = [lh for lh in all_heads if lh not in set(pruned)]
                # least important first; ties broken by position so the order is deterministic
                remaining.sort(key=lambda lh: (scores[lh], lh))
                pruned = pruned + remaining[: target - len(pruned)]
            record("importance", -1, fraction, list(pruned))
            bar.advance(task)
        for seed in random_seeds:
            permutation = np.random.default_rng(seed).permutation(n_heads)
            order = [all_heads[i] for i in permutation]
            for fraction, target in zip(steps, targets):
                record("random", int(seed), fraction, order[:target])
                bar.advance(task)
    return pd.DataFrame(rows)


def plot_pruning_curve(curve: pd.DataFrame, path=None, title: str | None = None, metric_name: str = "metric"):
    """Importance order (line) vs random orders (mean ± std band over seeds); saved to ``path`` if given."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

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
    fig.tight_layout()
    if path is not None:
        from pathlib import Path
        import os
        import tempfile

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
        os.close(fd)
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, path)
    return fig


# --------------------------------------------------------------------------------------------------
# Are the flagged heads used?


def flagged_heads(table: pd.DataFrame, one_based: bool = True, exclude_relations: Iterable[str] = ("all",)) -> list[tuple[int, int]]:
    """Unique (layer, head), 0-based, from a best-heads table (Clark et al.'s Table 1).

    The ``best_head`` column of ``bertology.attention.parsing.best_heads_table`` is Clark's display,
    1-based ``"layer-head"``; it is used when present. Otherwise the ``layer``/``head`` columns are read,
    1-based when ``one_based``. Rows whose ``relation`` is in ``exclude_relations`` are skipped.
    """
    if "relation" in table.columns:
        table = table[~table["relation"].isin(set(exclude_relations))]
    if "best_head" in table.columns:
        pairs = set()
        for label in table["best_head"]:
            layer, sep, head = str(label).partition("-")
            if not (sep and layer.isdigit() and head.isdigit()) or int(layer) < 1 or int(head) < 1:
                raise DataError(f"best_head {label!r}: expected Clark's 1-based LAYER-HEAD, e.g. 8-11")
            pairs.add((int(layer) - 1, int(head) - 1))
        return sorted(pairs)
    for column in ("layer", "head"):
        if column not in table.columns:
            raise DataError(f"flagged-heads table has no {column!r} column; columns are {list(table.columns)}")
    offset = 1 if one_based else 0
    pairs = {(int(layer) - offset, int(head) - offset) for layer, head in zip(table["layer"], table["head"])}
    if any(layer < 0 or head < 0 for layer, head in pairs):
        raise DataError("flagged-heads table has layer/head 0 but one_based=True; pass one_based=False")
    return sorted(pairs)


def flagged_vs_random(
    model: nn.Module,
    flagged: HeadSpec,
    evaluate_fn: EvaluateFn,
    n_draws: int = 10,
    seed: int = 0,
    exclude_flagged: bool = True,
    progress: bool = False,
) -> pd.DataFrame:
    """Metric with the flagged heads removed vs with as many random heads removed (``n_draws`` draws).

    Random heads are drawn (seeded) from the heads not flagged when ``exclude_flagged``. Returns rows
    ``condition ("none"|"flagged"|"random"), draw, n_masked, metric, delta, heads``; summarise with
    :func:`summarize_flagged`.
    """
    layout = model_layout(model)
    chosen = _expand(layout, flagged)
    if not chosen:
        raise DataError("no flagged heads given")
    pool = [lh for lh in layout.all_heads() if not (exclude_flagged and lh in set(chosen))]
    if len(pool) < len(chosen):
        raise DataError(f"{len(chosen)} flagged heads but only {len(pool)} other heads to draw from")
    rng = np.random.default_rng(seed)
    rows = []
    with _progress(progress) as bar:
        task = bar.add_task("flagged vs random heads", total=n_draws + 2)
        baseline = _score(evaluate_fn, model)
        bar.advance(task)
        rows.append({"condition": "none", "draw": -1, "n_masked": 0, "metric": baseline, "delta": 0.0, "heads": ""})

        def run(condition, draw, heads):
            with mask_heads(model, heads):
                metric = _score(evaluate_fn, model)
            rows.append({"condition": condition, "draw": draw, "n_masked": len(heads), "metric": metric,
                         "delta": metric - baseline, "heads": ",".join(f"{l}-{h}" for l, h in sorted(heads))})
            bar.advance(task)

        run("flagged", -1, chosen)
        for draw in range(n_draws):
            picks = rng.choice(len(pool), size=len(chosen), replace=False)
            run("random", draw, [pool[i] for i in sorted(picks)])
    return pd.DataFrame(rows)


def summarize_flagged(result: pd.DataFrame) -> dict:
    """Flagged change vs the random draws: their mean, std, and the share of draws that hurt as much."""
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
