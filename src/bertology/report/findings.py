"""Findings first: short sentences generated from the report's result tables, each with its number, its
baseline and its interval, and the in-page anchor of the table or figure it comes from.

:func:`findings` is a plain function over the tables the sections computed (``{section: {table: frame}}``)
and returns :class:`Finding` records; :func:`findings_section` renders them at the top of the report. A
test recomputes every number from the tables and checks the "best layer" rule:

* the best layer is chosen on **dev** (never on test); its **test** accuracy is the number shown;
* it is *marked* only when its test accuracy lies above every other layer's test interval; otherwise the
  sentence says which layers are indistinguishable (the rule of :func:`bertology.probing.summary.best_layer`);
* a best layer whose test interval reaches down to the majority baseline is flagged "at chance".

Intervals: the probing tables' ``ci_low``/``ci_high`` columns when they have them; until then
:func:`probing_scores` computes a 95% normal interval that combines the binomial error of the test
examples with the seed spread (``1.96 * sqrt(p(1 - p) / n + std^2 / seeds)``).
Numbers are fractions in the records (accuracies, shares); the sentences show percent with one decimal.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bertology.probing.names import POWER_HALF_WIDTH
from bertology.probing.report import table2_frame
from bertology.probing.summary import best_layer as summary_best_layer
from bertology.results import percent
from bertology.tasks import TABLE2_COLUMNS, TASK_NAMES

Z95 = 1.96

#: Conneau et al.'s (2018) grouping of the SentEval tasks; the treebank tasks are syntactic.
GROUPS = {
    "sentence_length": "surface", "word_content": "surface",
    "tree_depth": "syntactic", "top_constituents": "syntactic", "bigram_shift": "syntactic",
    "upos": "syntactic", "xpos": "syntactic", "deprel": "syntactic", "structural-distance": "syntactic",
    "structural-depth": "syntactic",
    "past_present": "semantic", "subj_number": "semantic", "obj_number": "semantic", "odd_man_out": "semantic",
    "coordination_inversion": "semantic",
}
GROUP_ORDER = ("surface", "syntactic", "semantic", "other")
#: The in-page anchors of the tables findings link to (the sections give their blocks these ids).
ANCHORS = {
    "senteval": "probing-senteval", "tokens": "probing-tokens", "structural": "probing-structural",
    "parsers": "attention-parsers", "attention_probe": "attention-probe", "patterns": "attention-patterns",
    "flagged": "interventions-flagged", "pruning": "interventions-pruning", "finetuning": "interventions",
    "contextuality": "knowledge-contextuality",
}
STRUCTURAL_METRIC = {"structural-distance": "uuas", "structural-depth": "root_acc"}


@dataclass
class Finding:
    """One headline sentence and the numbers behind it.

    ``value``: the headline number (a fraction for accuracies and shares, a change for deltas);
    ``baseline`` and ``baseline_name``: what it is compared with; ``ci_low``/``ci_high``: its 95% interval
    (or, where said in ``interval``, another range); ``anchor``: the in-page id of its source table or
    figure; ``source``: ``section.table`` it is computed from; ``details``: the other numbers the sentence
    quotes (task, layer, untrained twin...); ``flags``: warnings printed with it (at chance, layers
    indistinguishable, underpowered).
    """

    topic: str
    text: str
    value: float
    baseline: float | None
    baseline_name: str
    ci_low: float | None
    ci_high: float | None
    anchor: str
    source: str
    interval: str = "95% CI"
    details: dict = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)

    @property
    def underpowered(self) -> bool:
        return any(flag.startswith("underpowered") for flag in self.flags)


# --------------------------------------------------------------------------------------------------
# Probing: per-layer scores with intervals, and the best layer


def _interval(mean: float, std: float, n_seeds: float, n: float) -> tuple[float, float]:
    if pd.isna(mean):
        return (np.nan, np.nan)
    variance, known = 0.0, False
    if n and not pd.isna(n) and n > 0:
        variance += mean * (1 - mean) / n
        known = True
    if not pd.isna(std) and n_seeds and n_seeds > 0:
        variance += std ** 2 / n_seeds
        known = True
    if not known:  # neither an example count nor a seed spread: no interval, rather than a zero-width one
        return (np.nan, np.nan)
    half = Z95 * math.sqrt(variance)
    return (max(0.0, mean - half), min(1.0, mean + half))


def probing_scores(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (task, split, layer) of the probing section: ``mean, std, n_seeds, n, ci_low, ci_high,
    interval, untrained, untrained_ci_low, untrained_ci_high, majority, control, metric, group``.

    The one place that reads the probing tables for the report: when the probing tables carry
    ``ci_low``/``ci_high`` (and ``n_test``) they are used as they are; otherwise the interval is computed
    here from the split's size (``datasets``) and the seed spread (a normal approximation); where the
    tables hold no example count either, the seed spread alone. ``interval`` names which it is.
    """
    results = tables["results"]
    sizes = tables.get("datasets")
    counts = {}
    if sizes is not None:
        for row in sizes.itertuples():
            if row.level != "structural":
                counts[(row.task, "dev")] = float(row.dev)
                counts[(row.task, "test")] = float(row.test)
    frames = []
    for split in ("dev", "test"):
        # The probing Result's own table2 (test) and table2_dev; tables without them are tabulated here.
        name = "table2" if split == "test" else "table2_dev"
        frame = tables[name] if name in tables else table2_frame(tables, split)
        frame = frame[frame["layer"].notna()].copy()
        frame["split"] = split
        twin = _twin_std(results, split)
        frame = frame.merge(twin, on=["task", "layer"], how="left")
        sized = frame.get("n_test" if split == "test" else "n_dev")
        n = [counts.get((task, split), np.nan) for task in frame["task"]]
        frame["n"] = sized.where(sized.notna(), n) if sized is not None else n
        for column in ("ci_low", "ci_high"):
            if column not in frame.columns:
                frame[column] = np.nan
        missing = frame["ci_low"].isna() | frame["ci_high"].isna()  # no interval from the probing run
        # What the interval is: the probing run's bootstrap, or computed here (binomial + seed spread, or
        # the seed spread alone where the tables hold no example count).
        has_n = pd.Series(frame["n"], index=frame.index).notna()
        frame["interval"] = np.where(~missing, "95% CI", np.where(has_n, "95% CI (normal approx.)", "±1.96 seed std"))
        bounds = [_interval(m, s, k, c) for m, s, k, c in
                  zip(frame["mean"], frame["std"], frame["n_seeds"], frame["n"])]
        frame.loc[missing, "ci_low"] = [b[0] for b, gap in zip(bounds, missing) if gap]
        frame.loc[missing, "ci_high"] = [b[1] for b, gap in zip(bounds, missing) if gap]
        twin_bounds = [_interval(m, s, k, c) for m, s, k, c in
                       zip(frame["untrained"], frame["untrained_std"], frame["untrained_seeds"], frame["n"])]
        frame["untrained_ci_low"] = [b[0] for b in twin_bounds]
        frame["untrained_ci_high"] = [b[1] for b in twin_bounds]
        frames.append(frame)
    scores = pd.concat(frames, ignore_index=True)
    scores["group"] = [GROUPS.get(task, "other") for task in scores["task"]]
    scores["layer"] = scores["layer"].astype(int)
    return scores


def _twin_std(results: pd.DataFrame, split: str) -> pd.DataFrame:
    rows = results[(results["baseline"] == "untrained") & (results["split"] == split) & results["layer"].notna()]
    metric = rows["task"].map(lambda t: STRUCTURAL_METRIC.get(t, "accuracy"))
    rows = rows[rows["metric"] == metric]
    out = rows.groupby(["task", "layer"])["value"].agg(untrained_std="std", untrained_seeds="count").reset_index()
    out["layer"] = out["layer"].astype("Int64")
    return out


def _linear_chain(results: pd.DataFrame, task: str) -> float | None:
    rows = results[(results["task"] == task) & (results["baseline"] == "linear-chain") & (results["split"] == "test")
                   & (results["metric"] == STRUCTURAL_METRIC[task])]
    return float(rows["value"].mean()) if len(rows) else None


def best_layer(scores: pd.DataFrame, task: str) -> dict:
    """The layer chosen on dev for ``task`` and whether it may be marked best, by the one rule of
    :func:`bertology.probing.summary.best_layer` (chosen on dev, ties judged on the test intervals).

    Returns ``{"layer", "marked", "indistinguishable", "runner_up", "at_chance"}``: ``indistinguishable``
    lists (sorted) the chosen layer and every layer whose test interval reaches its test accuracy;
    ``marked`` is True when that is the chosen layer alone and it is above chance; ``at_chance`` when its
    test interval reaches down to the majority baseline.
    """
    dev = scores[(scores["task"] == task) & (scores["split"] == "dev")].set_index("layer")["mean"]
    test = scores[(scores["task"] == task) & (scores["split"] == "test")]
    if dev.empty or test.empty:
        return {"layer": None, "marked": False, "indistinguishable": [], "runner_up": None, "at_chance": False}
    table = test.assign(dev_mean=test["layer"].map(dev))
    verdict = summary_best_layer(table, task)
    at_chance = bool(not pd.isna(verdict.majority) and not pd.isna(verdict.ci_low) and not verdict.beats_majority)
    return {"layer": verdict.layer, "marked": verdict.marked is not None, "indistinguishable": list(verdict.layers),
            "runner_up": verdict.runner_up, "at_chance": at_chance}


def _num(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _layers_text(layers: list[int]) -> str:
    if len(layers) > 1 and layers == list(range(layers[0], layers[-1] + 1)):
        return f"layers {layers[0]}–{layers[-1]}"
    return ("layers " if len(layers) > 1 else "layer ") + ", ".join(map(str, layers))


def _ci_text(low, high, what: str = "95% CI") -> str:
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return "no interval: one seed"
    return f"{what} {percent(low)}–{percent(high)}"


def _power_flag(low, high, n=None, value=None) -> list[str]:
    """``underpowered: ±X points`` where the interval is wider than the power rule's, with the ``n`` test
    examples it rests on when known (the report probes every test example of its data, so the size says why)
    and, with the accuracy ``value``, the half-width their sampling alone gives (a binomial 95% interval): when
    that alone is wider than the rule, only a larger test split would power the finding, not more training
    examples or seeds."""
    if pd.isna(low) or pd.isna(high):
        return []
    half = (high - low) / 2
    if half <= POWER_HALF_WIDTH:
        return []
    known = n is not None and not pd.isna(n) and n > 0
    size = f" with {int(n):,} test examples" if known else ""
    if known and value is not None and not pd.isna(value):
        alone = 1.96 * math.sqrt(max(0.0, float(value) * (1 - float(value))) / float(n))
        size += f" (their sampling alone: ±{100 * alone:.1f})"
    return [f"underpowered: ±{100 * half:.1f} points{size}"]


def _task_name(task: str) -> str:
    names = {"upos": "UPOS", "xpos": "XPOS", "deprel": "dependency label", "structural-distance": "UUAS",
             "structural-depth": "root accuracy"}
    return TABLE2_COLUMNS.get(task, names.get(task, task))


def _anchor(task: str) -> str:
    if task in TASK_NAMES:
        return ANCHORS["senteval"]
    return ANCHORS["structural"] if task.startswith("structural") else ANCHORS["tokens"]


def probing_findings(tables: dict[str, pd.DataFrame]) -> list[Finding]:
    """Per task: where it peaks (dev-chosen layer, test accuracy, interval, majority, untrained twin); per
    group: how much of the trained model's gain over the majority class its untrained twin already gives."""
    scores = tables["scores"] if "scores" in tables else probing_scores(tables)
    test = scores[scores["split"] == "test"]
    out: list[Finding] = []
    shares: dict[str, list[tuple[str, float]]] = {}
    for task in dict.fromkeys(test["task"]):
        choice = best_layer(scores, task)
        if choice["layer"] is None:
            continue
        row = test[(test["task"] == task) & (test["layer"] == choice["layer"])].iloc[0]
        name = _task_name(task)
        structural = task in STRUCTURAL_METRIC
        majority = None if pd.isna(row["majority"]) else float(row["majority"])
        chain = _linear_chain(tables["results"], task) if structural else None
        if choice["marked"]:
            where = f"peaks at layer {choice['layer']}"
        else:
            where = f"is best on dev at layer {choice['layer']}"
        flags = []
        if len(choice["indistinguishable"]) > 1:
            flags.append(f"{_layers_text(choice['indistinguishable'])} are indistinguishable on test")
        if choice["at_chance"]:
            flags.append("not above the majority baseline")
        interval = row["interval"]
        flags += (_power_flag(row["ci_low"], row["ci_high"], row["n"], row["mean"])
                  if interval != "±1.96 seed std" else [])
        if pd.isna(row["ci_high"]) and not choice["marked"]:
            flags.append("one seed: no interval to tell layers apart")
        baseline_text = (f"majority {percent(majority)}%" if majority is not None
                         else f"linear chain {percent(chain)}%")
        text = (f"{name} {where}: {percent(row['mean'])}% ({_ci_text(row['ci_low'], row['ci_high'], interval)}; "
                f"{baseline_text}; untrained twin {percent(row['untrained'])}%).")
        out.append(Finding(topic=GROUPS.get(task, "other"), text=text, value=float(row["mean"]),
                           baseline=majority if majority is not None else chain,
                           baseline_name="majority" if majority is not None else "linear chain", ci_low=_num(row["ci_low"]),
                           ci_high=_num(row["ci_high"]), anchor=_anchor(task), source="probing.results",
                           interval=interval, flags=flags,
                           details={"task": task, "layer": int(choice["layer"]), "metric": row["metric"],
                                    "split": "test", "marked": bool(choice["marked"]),
                                    "indistinguishable": choice["indistinguishable"],
                                    "untrained": float(row["untrained"]), "n": None if pd.isna(row["n"]) else float(row["n"])}))
        gain = row["mean"] - majority if majority is not None else np.nan
        if majority is not None and gain > 0 and not choice["at_chance"] and not pd.isna(row["untrained"]):
            shares.setdefault(GROUPS.get(task, "other"), []).append((task, (row["untrained"] - majority) / gain))
    for group in GROUP_ORDER:
        if group not in shares:
            continue
        values = [v for _, v in shares[group]]
        median = float(np.median(values))
        names = ", ".join(_task_name(t) for t, _ in shares[group])
        text = (f"The untrained twin already gives {100 * median:.0f}% of the trained model's gain over the "
                f"majority class on {group} tasks (median over {names}; range {100 * min(values):.0f}–"
                f"{100 * max(values):.0f}%), at each task's best layer.")
        out.append(Finding(topic="untrained", text=text, value=median, baseline=0.0, baseline_name="majority class",
                           ci_low=float(min(values)), ci_high=float(max(values)), interval="range over tasks",
                           anchor=ANCHORS["senteval"] if group != "syntactic" else ANCHORS["tokens"],
                           source="probing.results", details={"group": group, "shares": dict(shares[group])}))
    return out


# --------------------------------------------------------------------------------------------------
# Attention


def _binomial(p: float, n: float) -> tuple[float, float]:
    return _interval(p, np.nan, 0, n)


def parser_findings(tables: dict[str, pd.DataFrame]) -> list[Finding]:
    """Heads that parse beyond the fixed-offset baseline: chosen on dev, scored on test, counted when the
    head's test interval lies above the offset baseline's test accuracy."""
    best = tables.get("best_heads")
    out: list[Finding] = []
    if best is None or best.empty or "held_out_accuracy" not in best.columns:
        return out
    rows = best[best["relation"] != "all"].dropna(subset=["held_out_accuracy", "held_out_baseline_accuracy"])
    if rows.empty:
        return out
    lows, highs = zip(*[_binomial(p, n) for p, n in zip(rows["held_out_accuracy"], rows["held_out_count"])])
    rows = rows.assign(ci_low=lows, ci_high=highs, margin=rows["held_out_accuracy"] - rows["held_out_baseline_accuracy"])
    beyond = rows[rows["ci_low"] > rows["held_out_baseline_accuracy"]]
    heads = sorted(set(beyond["head_label"]))
    text = (f"{len(beyond)} of {len(rows)} relations have a head that finds the dependency's other end beyond the "
            f"best fixed-offset baseline on test (the head's 95% interval above the offset's accuracy): "
            f"{', '.join(heads) if heads else 'none'}.")
    out.append(Finding(topic="parsers", text=text, value=float(len(beyond)), baseline=float(len(rows)),
                       baseline_name="relations scored", ci_low=None, ci_high=None, interval="",
                       anchor=ANCHORS["parsers"], source="attention.best_heads",
                       details={"relations": beyond["relation"].tolist(), "heads": heads}))
    for row in beyond.sort_values("margin", ascending=False).head(3).itertuples():
        offset = int(row.baseline_offset) if not pd.isna(row.baseline_offset) else 0
        path = ("from each dependent to its head" if row.direction == "dep->head"
                else "from each head to its dependent")
        text = (f"{row.head_label} attends most {path} for {row.relation}: {percent(row.held_out_accuracy)}% "
                f"of words on test ({_ci_text(row.ci_low, row.ci_high)}; "
                f"offset {offset:+d} baseline {percent(row.held_out_baseline_accuracy)}%).")
        out.append(Finding(topic="parsers", text=text, value=float(row.held_out_accuracy),
                           baseline=float(row.held_out_baseline_accuracy), baseline_name=f"offset {offset:+d}",
                           ci_low=float(row.ci_low), ci_high=float(row.ci_high), anchor=ANCHORS["parsers"],
                           source="attention.best_heads",
                           flags=_power_flag(row.ci_low, row.ci_high, row.held_out_count, row.held_out_accuracy),
                           details={"relation": row.relation, "head_label": row.head_label,
                                    "n": float(row.held_out_count)}))
    summary = tables.get("probe_summary")
    if summary is not None and not summary.empty:
        by = summary.set_index("method")
        if {"attention-only probe", "best fixed offset"} <= set(by.index):
            probe, offset = by.loc["attention-only probe"], by.loc["best fixed offset"]
            n = float(tables["probe"]["n_test"].iloc[0]) if "probe" in tables and "n_test" in tables["probe"] else np.nan
            std = probe["uas_std"]
            seeds = probe["n_seeds"]
            low, high = _interval(probe["uas"], std, seeds, np.nan) if pd.isna(n) else (np.nan, np.nan)
            head = by.loc["best single head"]["uas"] if "best single head" in by.index else np.nan
            spread = f" ± {percent(std)} (seed std)" if not pd.isna(std) else ""
            text = (f"Clark et al.'s attention-only probe reaches {percent(probe['uas'])}% UAS on test{spread}, "
                    f"against {percent(head)}% for the best single head and {percent(offset['uas'])}% for the best "
                    f"fixed offset.")
            out.append(Finding(topic="parsers", text=text, value=float(probe["uas"]), baseline=float(offset["uas"]),
                               baseline_name="best fixed offset", ci_low=None if pd.isna(low) else float(low),
                               ci_high=None if pd.isna(high) else float(high), interval="±1.96 seed std",
                               anchor=ANCHORS["attention_probe"], source="attention.probe_summary",
                               details={"best_single_head": None if pd.isna(head) else float(head)}))
    return out


def pattern_findings(tables: dict[str, pd.DataFrame]) -> list[Finding]:
    """The share of each Kovaleva et al. pattern type among the model's head maps, beside the twin's."""
    overall = tables.get("pattern_overall")
    if overall is None or overall.empty:
        return []
    models = list(dict.fromkeys(overall["model"]))
    ours = overall[overall["model"] == models[0]]
    twin = overall[overall["model"] != models[0]].set_index("type")["proportion"] if len(models) > 1 else pd.Series()
    total = float(ours["count"].sum())
    out = []
    for row in ours.sort_values("proportion", ascending=False).itertuples():
        low, high = _binomial(row.proportion, total)
        twin_share = float(twin[row.type]) if row.type in twin.index else None
        twin_text = f"; untrained twin {percent(twin_share)}%" if twin_share is not None else ""
        text = (f"{row.type}: {percent(row.proportion)}% of {int(total):,} head maps "
                f"({_ci_text(max(0.0, low), min(1.0, high))}{twin_text}).")
        out.append(Finding(topic="patterns", text=text, value=float(row.proportion), baseline=twin_share,
                           baseline_name="untrained twin", ci_low=max(0.0, float(low)), ci_high=min(1.0, float(high)),
                           anchor=ANCHORS["patterns"], source="attention.pattern_overall",
                           details={"type": row.type, "maps": total}))
    return out


# --------------------------------------------------------------------------------------------------
# Interventions and contextuality


def learning_text(check: pd.Series) -> str:
    """The sentence a report prints about :func:`learning_check`: what the model reaches against its baseline."""
    task = FINETUNE_TASK_NAMES.get(check["task"], check["task"])
    numbers = (f"{100 * check['value']:.1f}% vs {check['baseline_name']} {100 * check['baseline']:.1f}% "
               f"(95% CI {100 * check['ci_low']:.1f}–{100 * check['ci_high']:.1f} on {int(check['n'])} examples)")
    if check["metric"] != "accuracy":
        numbers = (f"{check['metric']} {check['value']:.3f} vs {check['baseline']:.1f} (95% CI "
                   f"{check['ci_low']:.3f}–{check['ci_high']:.3f} on {int(check['n'])} examples)")
    if bool(check["learned"]):
        return f"Fine-tuning learned {task}: {numbers}."
    return (f"Fine-tuning did not learn {task}: {numbers}. Nothing is read from a model at chance: no head "
            "importance ranking, pruning curve or masking test is interpreted.")


#: Fine-tuning task id -> the name a reader knows it by.
FINETUNE_TASK_NAMES = {"sst2": "SST-2", "bshift": "BShift (bigram shift, from UD English EWT)", "rte": "RTE", "cola": "CoLA",
              "mrpc": "MRPC", "stsb": "STS-B"}


def intervention_findings(tables: dict[str, pd.DataFrame]) -> list[Finding]:
    """Whether fine-tuning learned the task; then (only if it did) what masking the flagged heads costs
    against random heads of the same number, and the pruning curve."""
    out = []
    check = tables.get("check")
    if check is not None and not check.empty:
        row = check.iloc[0]
        out.append(Finding(topic="finetuning", text=learning_text(row), value=float(row["value"]),
                           baseline=float(row["baseline"]), baseline_name=str(row["baseline_name"]),
                           ci_low=float(row["ci_low"]), ci_high=float(row["ci_high"]), anchor=ANCHORS["finetuning"],
                           source="interventions.check", flags=[] if row["learned"] else ["at chance"],
                           details={"task": row["task"], "n": int(row["n"])}))
        if not bool(row["learned"]):
            return out
    summary = tables.get("flagged_summary")
    runs = tables.get("flagged_runs")
    if summary is not None and not summary.empty and runs is not None:
        row = summary.iloc[0]
        random = runs.loc[runs["condition"] == "random", "delta"].to_numpy(dtype=float)
        low, high = (np.percentile(random, [2.5, 97.5]) if len(random) else (np.nan, np.nan))
        task = FINETUNE_TASK_NAMES.get(str(row.get("task")), str(row.get("task", "the task"))).split(" (")[0]
        verdict = ("more than random heads (empirical p = {:.3f})" if row["p_random_as_harmful"] < 0.05
                   else "no more than random heads do (empirical p = {:.3f})").format(row["p_random_as_harmful"])
        text = (f"Masking the {int(row['n_masked'])} heads flagged as parsers changes {task} {row.get('metric', 'accuracy')} by "
                f"{100 * row['flagged_delta']:+.1f} points (from {percent(row['baseline'])}%): "
                f"{verdict}; {int(row['n_draws'])} random sets of {int(row['n_masked'])} heads change it by "
                f"{100 * row['random_delta_mean']:+.1f} points on average (95% of draws "
                f"{100 * low:+.1f} to {100 * high:+.1f}).")
        flags = [] if row["n_draws"] >= 19 else [f"underpowered: {int(row['n_draws'])} random draws"]
        out.append(Finding(topic="masking", text=text, value=float(row["flagged_delta"]),
                           baseline=float(row["random_delta_mean"]), baseline_name="random heads",
                           ci_low=float(low), ci_high=float(high), interval="2.5-97.5 percentile of random draws",
                           anchor=ANCHORS["flagged"], source="interventions.flagged_runs", flags=flags,
                           details={"p": float(row["p_random_as_harmful"]), "n_masked": int(row["n_masked"]),
                                    "n_draws": int(row["n_draws"])}))
    curve = tables.get("curve")
    if curve is not None and not curve.empty:
        fraction = 0.5 if (curve["fraction"] - 0.5).abs().min() < 1e-9 else float(curve["fraction"].median())
        at = curve[(curve["fraction"] - fraction).abs() < 1e-9]
        imp = at[at["order"] == "importance"]["metric"]
        rnd = at[at["order"] == "random"]["metric"].to_numpy(dtype=float)
        full = curve[(curve["fraction"] == 0) & (curve["order"] == "importance")]["metric"]
        if not imp.empty and len(rnd):
            std = float(rnd.std(ddof=1)) if len(rnd) > 1 else float("nan")
            text = (f"With {100 * fraction:.0f}% of heads masked, least important first (Michel et al.), accuracy is "
                    f"{percent(imp.iloc[0])}% against {percent(rnd.mean())}% ± {percent(std)} for random orders "
                    f"({len(rnd)} seeds; {percent(full.iloc[0]) if not full.empty else '–'}% with every head).")
            out.append(Finding(topic="masking", text=text, value=float(imp.iloc[0]), baseline=float(rnd.mean()),
                               baseline_name="random order", ci_low=float(rnd.min()), ci_high=float(rnd.max()),
                               interval="range over random seeds", anchor=ANCHORS["pruning"],
                               source="interventions.curve",
                               details={"fraction": fraction, "random_std": std, "seeds": int(len(rnd))}))
    return out


def contextuality_findings(tables: dict[str, pd.DataFrame]) -> list[Finding]:
    """Ethayarajh's trend: adjusted self-similarity from the first to the last layer, beside the twin."""
    summary = tables.get("contextuality")
    if summary is None or summary.empty:
        return []
    rows = summary[summary["measure"] == "self_similarity"]
    ours = rows[rows["weights"] == "trained"].sort_values("layer")
    twin = rows[rows["weights"] != "trained"].sort_values("layer")
    if len(ours) < 2:
        return []
    first, last = ours.iloc[0], ours.iloc[-1]
    lowest = ours.loc[ours["adjusted"].idxmin()]
    rho = float(pd.Series(ours["adjusted"].to_numpy()).corr(pd.Series(ours["layer"].to_numpy(dtype=float)),
                                                             method="spearman"))
    trend = "falls" if rho < 0 else "rises"
    twin_text = ""
    if len(twin) >= 2:
        twin_text = (f"; the untrained twin stays at {twin['adjusted'].iloc[0]:.3f}–{twin['adjusted'].iloc[-1]:.3f}")
    std = last.get("adjusted_std", np.nan)
    low, high = (last["adjusted"] - Z95 * std, last["adjusted"] + Z95 * std) if not pd.isna(std) else (None, None)
    text = (f"Representations grow more contextual with depth: adjusted self-similarity {trend} from "
            f"{first['adjusted']:.3f} at layer {int(first['layer'])} to {last['adjusted']:.3f} at layer "
            f"{int(last['layer'])} (Spearman ρ over layers {rho:+.2f}; lowest {lowest['adjusted']:.3f} at layer "
            f"{int(lowest['layer'])}){twin_text}.")
    return [Finding(topic="contextuality", text=text, value=float(last["adjusted"]),
                    baseline=float(twin["adjusted"].iloc[-1]) if len(twin) else None, baseline_name="untrained twin",
                    ci_low=low, ci_high=high, interval="±1.96 seed std", anchor=ANCHORS["contextuality"],
                    source="knowledge.contextuality",
                    details={"first": float(first["adjusted"]), "first_layer": int(first["layer"]),
                             "last_layer": int(last["layer"]), "rho": rho})]


def findings(results: dict[str, dict[str, pd.DataFrame]]) -> list[Finding]:
    """Every finding the tables support, in reading order: probing (where each kind of information peaks,
    what the untrained twin gives), heads as parsers, pattern types, masking, contextuality. ``results``
    maps a section id (``probing``, ``attention``, ``interventions``, ``knowledge``) to its tables; a
    missing section simply gives no findings."""
    out: list[Finding] = []
    if "probing" in results and "results" in results["probing"]:
        out += probing_findings(results["probing"])
    if "attention" in results:
        out += parser_findings(results["attention"])
        out += pattern_findings(results["attention"])
    if "interventions" in results:
        out += intervention_findings(results["interventions"])
    if "knowledge" in results:
        out += contextuality_findings(results["knowledge"])
    return out


# --------------------------------------------------------------------------------------------------
# Rendering

TOPIC_TITLES = {
    "surface": "Surface information (sentence length, word content)",
    "syntactic": "Syntactic information (tree depth, constituents, word order, parts of speech, arcs, trees)",
    "semantic": "Semantic information (tense, subject and object number, odd word, clause order)",
    "other": "Other probing tasks",
    "untrained": "What the untrained twin already gives",
    "parsers": "Heads acting as parsers",
    "patterns": "Attention pattern types (share of head maps)",
    "finetuning": "The fine-tuned task the interventions read (did the model learn it?)",
    "masking": "Whether the model uses them (masking heads on a fine-tuned task)",
    "contextuality": "Contextuality",
}


def _item(finding: Finding) -> str:
    flags = "".join(f" <span class='flag'>[{html.escape(flag)}]</span>" for flag in finding.flags)
    css = " class='flagged'" if finding.flags else ""
    return (f"<li{css}>{html.escape(finding.text)}{flags} <a href='#{html.escape(finding.anchor)}'>"
            f"table/figure</a></li>")


def findings_html(items: list[Finding]) -> str:
    """The findings as lists under topic headings, each sentence linking to its table or figure."""
    parts = []
    for topic, title in TOPIC_TITLES.items():
        chosen = [f for f in items if f.topic == topic]
        if chosen:
            parts.append(f"<h3>{html.escape(title)}</h3><ul class='findings'>"
                         + "".join(_item(f) for f in chosen) + "</ul>")
    weak = [f for f in items if f.underpowered]
    if weak:
        parts.append("<p class='note'>Underpowered (95% interval wider than ±1.5 points with the examples at hand, "
                     "or too few random draws; each flag says how many test examples, and how wide their sampling alone makes "
                     "the interval: where that is wider than ±1.5, only more test data would power it): "
                     + "; ".join(html.escape(f.text.split(":")[0]) for f in weak) + ".</p>")
    return "\n".join(parts)


def findings_frame(items: list[Finding]) -> pd.DataFrame:
    """The findings as a tidy table (one row each; fractions), for the CSV download."""
    return pd.DataFrame([{"topic": f.topic, "text": f.text, "value": f.value, "baseline": f.baseline,
                          "baseline_name": f.baseline_name, "ci_low": f.ci_low, "ci_high": f.ci_high,
                          "interval": f.interval, "source": f.source, "anchor": f.anchor,
                          "flags": "; ".join(f.flags)} for f in items])
