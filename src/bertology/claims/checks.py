"""The verdict functions: one per claim, each a plain function of the result tables a report computed.

``results`` maps a report section id to its tables (``{"probing": {"table2": frame, ...}, "attention":
{...}}``: :attr:`bertology.report.context.ReportContext.results`). A function reads only those tables and
returns a :class:`~bertology.claims.verdicts.Verdict`; none runs a model. A table that is not there gives
``cannot tell`` saying what did not run and which command measures it.

The rules are stated in each docstring and in docs/claims.md; ``tests/test_claims.py`` builds small tables
that produce every verdict of every function.

Length: a catalogue, one short verdict function per claim of the checklist and the table readers they share;
it reads claim by claim beside docs/claims.md, and a file per claim would scatter that.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import pandas as pd

from bertology.claims.verdicts import (
    FAILS,
    HOLDS,
    UNKNOWN,
    Verdict,
    binomial_interval,
    bonferroni_z,
    decide,
    missing,
)

Results = Mapping[str, Mapping[str, pd.DataFrame]]

#: The syntactic probing tasks (Conneau et al.'s grouping of SentEval, plus the treebank tasks).
SYNTACTIC_TASKS = ("tree_depth", "top_constituents", "bigram_shift", "upos", "xpos", "deprel", "structural-distance",
                   "structural-depth")
#: The middle of the network, as relative depth l / L (both ends included).
MIDDLE = (0.25, 0.75)
#: "Little loss" when pruning: at most this many points of the metric.
LITTLE_LOSS = 0.05
#: "About 99%" retention (Q8BERT): the lowest retention the claim allows.
RETENTION_FLOOR = 0.97
#: Numerals are "split more" when their fertility is at least this multiple of the corpus's (below 1: fewer).
NUMERAL_RATIO = 1.2
#: Anisotropy "clearly positive": the mean cosine of two random words' vectors above this.
ANISOTROPY_FLOOR = 0.1
#: Heads as parsers: a relation is judged only with at least this many test words (fewer cannot exclude anything).
MIN_WORDS = 30
#: Heads as parsers: the relations judged, those of Clark et al.'s Table 1 that UD attaches alike (their UD names:
#: bertology.attention.parsing.CLARK_TABLE1 via STANFORD_TO_UD). Not every relation of the treebank: for web-text
#: relations such as list and parataxis no fixed offset finds the head, and a head of the untrained twin beat the
#: best offset on list (37% vs 16% of 271 test words at 1,000 sentences, benchmarks/experiments/claims/claims_heads_size.py).
CLARK_RELATIONS = ("det", "obj", "nsubj", "amod", "compound", "advmod", "aux", "nmod:poss", "aux:pass", "ccomp",
                   "mark", "compound:prt")
#: Syntax by arc length: the edge task read, the shortest and the longest bins compared (their shortest arc, in
#: words: bertology.probing.arcs.ARC_BINS) and the fewest test arcs each must hold.
ARC_TASK, SHORT_ARC, LONG_ARC, MIN_ARCS = "deprel", 1, 9, 30
#: Linear word order: the position probe (bertology.probing.datasets.position_examples).
POSITION_TASK = "position"


def table(results: Results, section: str, name: str) -> pd.DataFrame | None:
    frame = (results.get(section) or {}).get(name)
    return None if frame is None or len(frame) == 0 else frame


def _not_run(claim: str, section: str, name: str, evidence: str, how: str = "") -> Verdict:
    return missing(claim, f"not measured by this run: no {section}.{name} table (the {section} section was not "
                          f"part of this run or produced none){'; ' + how if how else ''}", evidence)


def _f(value) -> float:
    return math.nan if value is None or pd.isna(value) else float(value)


def _chosen(table2: pd.DataFrame, task: str) -> pd.Series | None:
    """The test row of ``task`` at the layer chosen on dev (``best_on_dev``)."""
    rows = table2[(table2["task"] == task) & table2["layer"].notna()]
    if rows.empty:
        return None
    chosen = rows[rows["best_on_dev"].fillna(False).astype(bool)]
    if chosen.empty:  # no dev choice recorded: the highest dev mean
        chosen = rows.loc[[rows["dev_mean"].astype(float).idxmax()]] if "dev_mean" in rows else rows.iloc[[0]]
    return chosen.iloc[0]


# --------------------------------------------------------------------------------------------------
# Probing


def hierarchical(results: Results) -> Verdict:
    """Structural probe UUAS (test, layer chosen on dev) against the linear chain's UUAS: holds when its
    95% interval lies above the chain, does not hold when it lies at or below it."""
    claim, evidence = "hierarchical", "probing-structural"
    t2 = table(results, "probing", "table2")
    row = None if t2 is None else _chosen(t2, "structural-distance")
    if row is None:
        return _not_run(claim, "probing", "table2 structural-distance", evidence)
    chain = _f(row.get("linear_chain"))
    if math.isnan(chain):
        return missing(claim, "the structural probe's table has no linear-chain baseline", evidence)
    verdict = decide(_f(row["ci_low"]), _f(row["ci_high"]), chain)
    reason = {HOLDS: "the structural probe's UUAS interval lies above the linear chain",
              FAILS: "the structural probe's UUAS interval reaches no higher than the linear chain",
              UNKNOWN: "the structural probe's UUAS interval covers the linear chain"}[verdict]
    return Verdict(claim, verdict, f"{reason} (layer {int(row['layer'])}, chosen on dev)", row["mean"], chain,
                   "linear chain UUAS", row["ci_low"], row["ci_high"], evidence=evidence)


def _decodable(claim: str, task: str, results: Results) -> Verdict:
    """Shared by the POS and dependency-label claims: at the layer chosen on dev, the test interval above the
    majority class and the control task, and the interval of the difference from the untrained twin above 0."""
    evidence = "probing-selectivity"
    t2 = table(results, "probing", "table2")
    row = None if t2 is None else _chosen(t2, task)
    if row is None:
        return _not_run(claim, "probing", f"table2 {task}", evidence)
    low, high = _f(row["ci_low"]), _f(row["ci_high"])
    checks = {"majority": decide(low, high, _f(row.get("majority")))}
    if not math.isnan(_f(row.get("control"))):
        checks["control task"] = decide(low, high, _f(row.get("control")))
    if not math.isnan(_f(row.get("delta_ci_low"))):
        checks["untrained twin"] = decide(_f(row.get("delta_ci_low")), _f(row.get("delta_ci_high")), 0.0)
    names = {"majority": "majority", "control task": "control", "untrained twin": "untrained"}
    baselines = {name: _f(row.get(column)) for name, column in names.items() if name in checks}
    strongest = max(baselines, key=lambda k: -1 if math.isnan(baselines[k]) else baselines[k])
    failed = [name for name, v in checks.items() if v == FAILS]
    unclear = [name for name, v in checks.items() if v == UNKNOWN]
    if failed:
        verdict, reason = FAILS, f"not beyond the {', '.join(failed)} (its interval lies at or below)"
    elif unclear:
        verdict, reason = UNKNOWN, f"the interval covers the {', '.join(unclear)}"
    else:
        verdict, reason = HOLDS, f"beyond the {', '.join(checks)} (each interval excludes it)"
    missing_baselines = [name for name in names if name not in checks]
    if missing_baselines:
        reason += f"; no {', '.join(missing_baselines)} in this run"
    return Verdict(claim, verdict, f"{reason} (layer {int(row['layer'])}, chosen on dev)", row["mean"],
                   baselines[strongest], strongest, low, high, evidence=evidence)


def pos_decodable(results: Results) -> Verdict:
    """UPOS: see :func:`_decodable`."""
    return _decodable("pos-decodable", "upos", results)


def deprel_decodable(results: Results) -> Verdict:
    """Dependency labels of arcs: see :func:`_decodable`."""
    return _decodable("deprel-decodable", "deprel", results)


def arc_length(results: Results) -> Verdict:
    """Liu et al.: syntax knowledge is partial, it fails for distant words. The dependency-label edge probe's
    test accuracy by arc length (``probing.arc_length``, :mod:`bertology.probing.arcs`) at the layer chosen on
    dev for ``deprel``: the drop from adjacent arcs (length 1) to the longest (9+ words), with its 95% interval
    (stratified bootstrap of the test arcs in each bin, pooled over seeds). Holds when the interval lies above 0
    (long arcs decoded worse), does not hold when it lies at or below 0; cannot tell when it covers 0 or either
    bin holds fewer than 30 test arcs."""
    claim, evidence = "syntax-partial", "probing-arcs"
    frame = table(results, "probing", "arc_length")
    t2 = table(results, "probing", "table2")
    if frame is None:
        return _not_run(claim, "probing", "arc_length", evidence, "bertology probe --tasks deprel measures it")
    chosen = None if t2 is None else _chosen(t2, ARC_TASK)
    if chosen is None:
        return missing(claim, f"no {ARC_TASK} layer chosen on dev in this run's probing table", evidence)
    layer = int(chosen["layer"])
    rows = frame[(frame["task"] == ARC_TASK) & (frame["layer"] == layer)]
    ours, twin = rows[rows["baseline"] == "none"], rows[rows["baseline"] == "untrained"]
    short, long = ours[ours["min_length"] == SHORT_ARC], ours[ours["min_length"] == LONG_ARC]
    counts = {name: int(part["arcs"].iloc[0]) if len(part) else 0 for name, part in (("1", short), ("9+", long))}
    names = {"1": "adjacent arcs", "9+": f"arcs of {LONG_ARC}+ words"}
    thin = [f"{n} {names[name]}" for name, n in counts.items() if n < MIN_ARCS]
    if thin:
        return missing(claim, f"too few test arcs to compare: {' and '.join(thin)} (at least {MIN_ARCS} each; "
                              f"layer {layer})", evidence)
    short, long = short.iloc[0], long.iloc[0]
    verdict = decide(_f(long["drop_ci_low"]), _f(long["drop_ci_high"]), 0.0)
    reason = (f"dependency labels of arcs of {LONG_ARC}+ words are decoded "
              + {HOLDS: "worse than", FAILS: "at least as well as", UNKNOWN: "perhaps worse than"}[verdict]
              + f" those of adjacent words ({100 * float(long['accuracy']):.1f}% of {counts['9+']} vs "
                f"{100 * float(short['accuracy']):.1f}% of {counts['1']}; layer {layer}, chosen on dev)")
    twin_long = twin[twin["min_length"] == LONG_ARC]
    if len(twin_long):
        reason += f"; the untrained twin drops {100 * float(twin_long['drop'].iloc[0]):+.1f} pts"
    return Verdict(claim, verdict, reason, long["drop"], 0.0, "no drop from adjacent arcs", long["drop_ci_low"],
                   long["drop_ci_high"], unit="points", evidence=evidence)


def _depths(t2: pd.DataFrame, tasks) -> list[dict]:
    """Per task above chance: the chosen layer's relative depth and that of every layer indistinguishable from
    it on test (its test interval reaches the chosen layer's test accuracy)."""
    layers = int(t2["layer"].max())
    out = []
    for task in tasks:
        row = _chosen(t2, task)
        if row is None or layers == 0:
            continue
        majority = _f(row.get("majority"))
        if not math.isnan(majority) and _f(row["ci_low"]) <= majority:
            continue  # at chance: where it peaks says nothing
        rows = t2[(t2["task"] == task) & t2["layer"].notna()]
        tied = rows[rows["ci_high"].astype(float) >= float(row["mean"])]["layer"].astype(int).tolist()
        tied = sorted(set(tied) | {int(row["layer"])})
        out.append({"task": task, "depth": int(row["layer"]) / layers, "tied": [layer / layers for layer in tied]})
    return out


def middle_layers(results: Results) -> Verdict:
    """The syntactic tasks above chance: a task peaks in the middle when its chosen layer and every layer
    indistinguishable from it lie at relative depth 0.25-0.75, outside the middle when none does. Holds when
    more than half of the tasks peak in the middle, does not hold when more than half peak outside it."""
    claim, evidence = "syntax-middle", "probing-tokens"
    t2 = table(results, "probing", "table2")
    if t2 is None:
        return _not_run(claim, "probing", "table2", evidence)
    depths = _depths(t2, [t for t in SYNTACTIC_TASKS if t in set(t2["task"])])
    if not depths:
        return missing(claim, "no syntactic task is decoded above its majority baseline", evidence)
    inside = [d for d in depths if all(MIDDLE[0] <= x <= MIDDLE[1] for x in d["tied"])]
    outside = [d for d in depths if not any(MIDDLE[0] <= x <= MIDDLE[1] for x in d["tied"])]
    n = len(depths)
    verdict = HOLDS if len(inside) > n / 2 else FAILS if len(outside) > n / 2 else UNKNOWN
    values = [d["depth"] for d in depths]
    reason = (f"{len(inside)} of {n} syntactic tasks peak in the middle (relative depth {MIDDLE[0]}-{MIDDLE[1]}, "
              f"with every indistinguishable layer), {len(outside)} outside it")
    return Verdict(claim, verdict, reason, float(np.median(values)), 0.5, "middle of the network", min(values),
                   max(values), interval="range over tasks", unit="number", evidence=evidence)


def surface_lower(results: Results) -> Verdict:
    """Sentence length: the chosen layer in the lower half (relative depth <= 0.5) and its test accuracy above
    the last layer's (the difference's 95% interval, from the two intervals, above 0): holds; the chosen layer
    in the upper half, or the difference's interval at or below 0: does not hold; otherwise cannot tell."""
    claim, evidence = "surface-lower", "probing-senteval"
    t2 = table(results, "probing", "table2")
    row = None if t2 is None else _chosen(t2, "sentence_length")
    if row is None:
        return _not_run(claim, "probing", "table2 sentence_length", evidence)
    rows = t2[(t2["task"] == "sentence_length") & t2["layer"].notna()]
    layers = int(rows["layer"].max())
    last = rows[rows["layer"] == layers].iloc[0]
    depth = int(row["layer"]) / max(1, layers)
    drop = float(row["mean"]) - float(last["mean"])
    half = math.hypot((_f(row["ci_high"]) - _f(row["ci_low"])) / 2, (_f(last["ci_high"]) - _f(last["ci_low"])) / 2)
    low, high = drop - half, drop + half
    if depth > 0.5:
        verdict, reason = FAILS, f"sentence length peaks at layer {int(row['layer'])} of {layers}, in the upper half"
    else:
        verdict = decide(low, high, 0.0)
        reason = (f"sentence length peaks at layer {int(row['layer'])} of {layers}; its accuracy "
                  + {HOLDS: "falls by the last layer (interval above 0)",
                     FAILS: "does not fall by the last layer", UNKNOWN: "may or may not fall by the last layer "
                     "(interval covers 0)"}[verdict])
    return Verdict(claim, verdict, reason, drop, 0.0, "no drop to the last layer", low, high, unit="points",
                   evidence=evidence)


def untrained_surface(results: Results) -> Verdict:
    """Sentence length at the trained model's chosen layer: the gap trained - untrained twin (its 95%
    interval, ``delta_ci_*``) against half the trained model's gain over the majority class. Holds when the
    gap's interval lies below that half (the twin gives more than half the gain), does not hold when it lies at
    or above it."""
    claim, evidence = "untrained-surface", "probing-senteval"
    t2 = table(results, "probing", "table2")
    row = None if t2 is None else _chosen(t2, "sentence_length")
    if row is None:
        return _not_run(claim, "probing", "table2 sentence_length", evidence)
    majority, trained, twin = _f(row.get("majority")), _f(row["mean"]), _f(row.get("untrained"))
    if math.isnan(twin) or math.isnan(_f(row.get("delta_ci_low"))):
        return missing(claim, "no untrained twin in this run's probing tables", evidence)
    gain = trained - majority
    if not gain > 0:
        return Verdict(claim, UNKNOWN, "the trained model is not above the majority class on sentence length",
                       twin, majority, "majority", interval="", evidence=evidence)
    half = gain / 2
    verdict = decide(_f(row["delta_ci_low"]), _f(row["delta_ci_high"]), half, greater=False)
    share = (twin - majority) / gain
    reason = (f"the twin gives {100 * share:.0f}% of the trained model's gain over the majority class at layer "
              f"{int(row['layer'])}; the trained-twin gap's interval "
              + {HOLDS: "lies below half that gain", FAILS: "lies at or above half that gain",
                 UNKNOWN: "covers half that gain"}[verdict])
    return Verdict(claim, verdict, reason, twin, majority + half, "majority + half the trained gain",
                   trained - _f(row["delta_ci_high"]), trained - _f(row["delta_ci_low"]),
                   interval="95% CI (trained minus the gap's interval)", evidence=evidence)


def semantic_beyond_twin(results: Results) -> Verdict:
    """Tense (past/present) at the chosen layer: the interval of trained - untrained twin above 0: holds; at
    or below 0: does not hold."""
    claim, evidence = "tense-learned", "probing-senteval"
    t2 = table(results, "probing", "table2")
    row = None if t2 is None else _chosen(t2, "past_present")
    if row is None:
        return _not_run(claim, "probing", "table2 past_present", evidence)
    low, high = _f(row.get("delta_ci_low")), _f(row.get("delta_ci_high"))
    if math.isnan(low):
        return missing(claim, "no untrained twin in this run's probing tables", evidence)
    verdict = decide(low, high, 0.0)
    reason = {HOLDS: "the trained model beats its untrained twin (the difference's interval is above 0)",
              FAILS: "the trained model does not beat its untrained twin", UNKNOWN: "the difference's interval "
              "covers 0"}[verdict] + f" (layer {int(row['layer'])})"
    return Verdict(claim, verdict, reason, _f(row["mean"]) - _f(row["untrained"]), 0.0, "untrained twin (difference)",
                   low, high, unit="points", evidence=evidence)


# --------------------------------------------------------------------------------------------------
# Attention


def word_order_lower(results: Results) -> Verdict:
    """Lin et al.: lower layers hold the most linear word-order information. The position probe (probing task
    ``position``: each word's position in its sentence, 0-15 and 16+) on the transformer layers (1..L): the test
    accuracy of the lower half's best layer (l <= L/2, chosen on dev) minus the upper half's (l > L/2, chosen on
    dev); its 95% interval combines the two layers' intervals as if independent (the two share their test words,
    so this overstates the spread). Holds when the interval lies above 0, does not hold when it lies at or below 0;
    cannot tell when it covers 0 or neither half decodes positions above the majority class."""
    claim, evidence = "word-order-lower", "probing-tokens"
    t2 = table(results, "probing", "table2")
    rows = None if t2 is None else t2[(t2["task"] == POSITION_TASK) & t2["layer"].notna()]
    if rows is None or rows.empty:
        return _not_run(claim, "probing", f"table2 {POSITION_TASK}", evidence,
                        f"bertology probe --tasks {POSITION_TASK} measures it")
    layers = int(rows["layer"].max())
    if layers < 2:
        return missing(claim, "fewer than two transformer layers: no lower and upper half to compare", evidence)
    lower = _chosen(rows[(rows["layer"] >= 1) & (rows["layer"] <= layers / 2)].assign(best_on_dev=False),
                    POSITION_TASK)
    upper = _chosen(rows[rows["layer"] > layers / 2].assign(best_on_dev=False), POSITION_TASK)
    majority = _f(lower.get("majority"))
    if not math.isnan(majority) and max(_f(lower["ci_low"]), _f(upper["ci_low"])) <= majority:
        return missing(claim, "word positions are not decoded above the majority class in any transformer layer",
                       evidence)
    difference = _f(lower["mean"]) - _f(upper["mean"])
    half = math.hypot((_f(lower["ci_high"]) - _f(lower["ci_low"])) / 2, (_f(upper["ci_high"]) - _f(upper["ci_low"])) / 2)
    low, high = difference - half, difference + half
    verdict = decide(low, high, 0.0)
    reason = ("word positions are decoded "
              + {HOLDS: "better", FAILS: "no better", UNKNOWN: "perhaps better"}[verdict]
              + f" in the lower half (layer {int(lower['layer'])}: {100 * _f(lower['mean']):.1f}%) than in the upper "
                f"half (layer {int(upper['layer'])}: {100 * _f(upper['mean']):.1f}%; each chosen on dev within its half)")
    return Verdict(claim, verdict, reason, difference, 0.0, "upper half's best layer", low, high, unit="points",
                   evidence=evidence)


def syntactic_heads(results: Results) -> Verdict:
    """Heads as parsers (Clark et al.): per relation of Clark et al.'s Table 1 (:data:`CLARK_RELATIONS`) with at
    least 30 test words, the head chosen on dev, scored on test, against the best fixed offset on test. Holds when
    at least one relation's interval (Wilson,
    Bonferroni-corrected over the relations) lies above its offset baseline; does not hold when every relation's
    own 95% interval lies at or below its baseline (to show that all are below, each must be: no correction);
    otherwise cannot tell."""
    claim, evidence = "syntactic-heads", "attention-parsers"
    best = table(results, "attention", "best_heads")
    if best is None or "held_out_accuracy" not in best.columns:
        return _not_run(claim, "attention", "best_heads", evidence)
    rows = best[best["relation"].isin(CLARK_RELATIONS)].dropna(subset=["held_out_accuracy", "held_out_baseline_accuracy"])
    rows = rows[rows["held_out_count"].fillna(0) >= MIN_WORDS]
    if rows.empty:
        return missing(claim, f"no relation of Clark et al.'s Table 1 has {MIN_WORDS} test words to score its head on",
                       evidence)
    # "some relation is above" needs the intervals corrected for the relations tried (Bonferroni); "every relation
    # is at or below" needs each relation's own 95% interval (an intersection-union test needs no correction)
    z = bonferroni_z(len(rows))
    bounds = [binomial_interval(p, n, z) for p, n in zip(rows["held_out_accuracy"], rows["held_out_count"])]
    plain = [binomial_interval(p, n) for p, n in zip(rows["held_out_accuracy"], rows["held_out_count"])]
    rows = rows.assign(ci_low=[b[0] for b in bounds], ci_high=[b[1] for b in bounds], plain_high=[b[1] for b in plain])
    rows = rows.assign(margin=rows["ci_low"] - rows["held_out_baseline_accuracy"])
    above = rows[rows["ci_low"] > rows["held_out_baseline_accuracy"]]
    below = rows[rows["plain_high"] <= rows["held_out_baseline_accuracy"]]
    top = rows.loc[rows["margin"].idxmax()]
    if len(above):
        verdict = HOLDS
        reason = (f"{len(above)} of {len(rows)} relations have a head beyond its best fixed offset on test "
                  f"({', '.join(f'{r.relation} {r.head_label}' for r in above.head(4).itertuples())}"
                  f"{'...' if len(above) > 4 else ''}); intervals Bonferroni-corrected over {len(rows)} relations")
    elif len(below) == len(rows):
        verdict, reason = FAILS, f"every one of {len(rows)} relations' heads is at or below its fixed-offset baseline"
    else:
        verdict, reason = UNKNOWN, (f"no head's interval lies above its offset baseline, {len(rows) - len(below)} "
                                    f"of {len(rows)} cover it")
    return Verdict(claim, verdict, reason + f"; shown: {top['relation']} ({top['head_label']})",
                   top["held_out_accuracy"], top["held_out_baseline_accuracy"], "best fixed offset",
                   top["ci_low"], top["ci_high"], interval="95% CI, Bonferroni", evidence=evidence)


def no_single_head(results: Results) -> Verdict:
    """The best single head over all relations (``best_heads`` relation ``all``, test words) against Clark et
    al.'s attention-only probe (test UAS, mean over seeds): holds when the head's interval lies below the
    probe, does not hold when it lies at or above it."""
    claim, evidence = "no-single-head", "attention-probe"
    best = table(results, "attention", "best_heads")
    summary = table(results, "attention", "probe_summary")
    if best is None or summary is None:
        return _not_run(claim, "attention", "best_heads/probe_summary", evidence)
    every = best[best["relation"] == "all"]
    probe = summary[summary["method"] == "attention-only probe"]
    if every.empty or probe.empty or pd.isna(every.iloc[0].get("held_out_accuracy")):
        return missing(claim, "no best head over all relations or no attention-only probe in this run", evidence)
    head, uas = every.iloc[0], float(probe.iloc[0]["uas"])
    low, high = binomial_interval(float(head["held_out_accuracy"]), float(head["held_out_count"]))
    verdict = decide(low, high, uas, greater=False)
    reason = (f"the best single head ({head['head_label']}) finds a word's syntactic head for "
              + {HOLDS: "fewer words than", FAILS: "at least as many words as", UNKNOWN: "about as many words as"}[verdict]
              + " the attention-only probe that combines every head")
    return Verdict(claim, verdict, reason, head["held_out_accuracy"], uas, "attention-only probe UAS", low, high,
                   evidence=evidence)


def _model_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the report's model (the first ``model`` named), not its untrained twin's."""
    if "model" not in frame.columns:
        return frame
    first = next(iter(dict.fromkeys(frame["model"])))
    return frame[frame["model"] == first]


def heterogeneous_minority(results: Results) -> Verdict:
    """Kovaleva et al.'s pattern types: the share of heterogeneous head maps, mean over heads of each head's
    share (95% interval over heads). Holds when the interval lies below one half, does not hold when it lies at
    or above it."""
    claim, evidence = "heterogeneous-minority", "attention-patterns"
    patterns = table(results, "attention", "patterns")
    if patterns is None:
        return _not_run(claim, "attention", "patterns", evidence)
    ours = _model_rows(patterns)
    shares = (ours["type"] == "heterogeneous").groupby([ours["layer"], ours["head"]]).mean().to_numpy(float)
    value = float(shares.mean())
    half = 1.96 * float(shares.std(ddof=1)) / math.sqrt(len(shares)) if len(shares) > 1 else math.nan
    low, high = max(0.0, value - half), min(1.0, value + half)
    verdict = decide(low, high, 0.5, greater=False)
    reason = ({HOLDS: "fewer than half", FAILS: "at least half", UNKNOWN: "perhaps half"}[verdict]
              + f" of the head maps are heterogeneous (the rest vertical, diagonal or block); {len(shares)} heads")
    return Verdict(claim, verdict, reason, value, 0.5, "one half", low, high, interval="95% CI over heads",
                   evidence=evidence)


def heads_alike(results: Results, permutations: int = 999) -> Verdict:
    """Clark et al.: heads in one layer behave alike. Each head is its vector of attention statistics
    (standardised); the statistic is the mean distance between heads of the same layer over the mean distance
    between heads of different layers. Against its permutation distribution (layers shuffled over heads, seed
    0): holds when below the 2.5th percentile, does not hold when at or above the median (no more alike than
    heads picked at random), otherwise cannot tell."""
    claim, evidence = "heads-alike", "attention-statistics"
    stats = table(results, "attention", "statistics")
    if stats is None:
        return _not_run(claim, "attention", "statistics", evidence)
    wide = stats.pivot_table(index=["layer", "head"], columns="statistic", values="value").dropna(axis=1)
    layers = wide.index.get_level_values("layer").to_numpy()
    if len(set(layers)) < 2 or wide.shape[1] == 0 or len(wide) < 4:
        return missing(claim, "fewer than two layers or no statistics to compare heads by", evidence)
    values = wide.to_numpy(float)
    values = (values - values.mean(0)) / np.where(values.std(0) > 0, values.std(0), 1.0)
    distance = np.sqrt(((values[:, None, :] - values[None, :, :]) ** 2).sum(-1))
    upper = np.triu(np.ones_like(distance, dtype=bool), 1)

    def ratio(labels: np.ndarray) -> float:
        same = labels[:, None] == labels[None, :]
        return float(distance[upper & same].mean() / distance[upper & ~same].mean())

    observed = ratio(layers)
    rng = np.random.default_rng(0)
    null = np.array([ratio(rng.permutation(layers)) for _ in range(permutations)])
    low, median, high = np.percentile(null, [2.5, 50, 97.5])
    verdict = HOLDS if observed < low else FAILS if observed >= median else UNKNOWN
    reason = (f"heads of one layer are {observed:.2f}x as far apart as heads of different layers (by their "
              f"{wide.shape[1]} attention statistics); "
              + {HOLDS: "below the 2.5th percentile of layers shuffled over heads",
                 FAILS: "no closer than heads grouped at random (at or above the shuffled median)",
                 UNKNOWN: "between the shuffled median and its 2.5th percentile"}[verdict])
    return Verdict(claim, verdict, reason, observed, float(median), "layers shuffled (median)", float(low), float(high),
                   interval="95% of shuffles", unit="number", evidence=evidence)


# --------------------------------------------------------------------------------------------------
# Interventions


def _learned(results: Results, claim: str, evidence: str) -> Verdict | None:
    check = table(results, "interventions", "check")
    if check is None:
        return _not_run(claim, "interventions", "check", evidence)
    if not bool(check.iloc[0]["learned"]):
        return missing(claim, "the fine-tuned model did not learn its task (its interval reaches the majority "
                              "class), so nothing is read from masking its heads", evidence)
    return None


def syntax_heads_unneeded(results: Results) -> Verdict:
    """The heads the attention section flags as parsers, masked together on the fine-tuned task, against random
    sets of as many heads: holds when masking them is not more harmful than random sets (empirical p >= 0.05,
    with at least 19 draws so that p < 0.05 is reachable), does not hold when it is (p < 0.05); cannot tell
    with fewer draws or when the model did not learn the task."""
    claim, evidence = "syntax-heads-unneeded", "interventions-flagged"
    refused = _learned(results, claim, evidence)
    if refused is not None:
        return refused
    summary, runs = table(results, "interventions", "flagged_summary"), table(results, "interventions", "flagged_runs")
    if summary is None or runs is None:
        return missing(claim, "no heads were flagged as parsers, so no flagged-vs-random masking ran", evidence)
    row = summary.iloc[0]
    random = runs.loc[runs["condition"] == "random", "delta"].to_numpy(float)
    low, high = (np.percentile(random, [2.5, 97.5]) if len(random) else (math.nan, math.nan))
    draws, p = int(row["n_draws"]), float(row["p_random_as_harmful"])
    if p < 0.05:
        verdict, reason = FAILS, f"masking the {int(row['n_masked'])} flagged heads hurts more than random heads (p = {p:.3f})"
    elif draws < 19:
        verdict, reason = UNKNOWN, (f"underpowered: {draws} random draws cannot reach p < 0.05 (p = {p:.3f}); "
                                    "bertology ablate flagged runs more")
    else:
        verdict, reason = HOLDS, (f"masking the {int(row['n_masked'])} flagged heads hurts no more than random sets "
                                  f"of as many (p = {p:.3f}, {draws} draws)")
    return Verdict(claim, verdict, reason, row["flagged_delta"], row["random_delta_mean"], "random heads (mean)",
                   low, high, interval="2.5-97.5 percentile of random draws", unit="points", evidence=evidence)


def _curve_points(results: Results):
    curve, check = table(results, "interventions", "curve"), table(results, "interventions", "check")
    ordered = curve[curve["order"] == "importance"].sort_values("fraction")
    full = ordered[ordered["fraction"] == 0]["metric"]
    return ordered, (float(full.iloc[0]) if len(full) else math.nan), float(check.iloc[0]["n"])


def prunable(results: Results) -> Verdict:
    """Michel et al.: with half of the heads masked, least important first, the loss from every head (points;
    95% interval of the difference of two proportions on the evaluation examples) below 5 points: holds when
    the interval lies below 5 points, does not hold when at or above; otherwise cannot tell."""
    claim, evidence = "heads-prunable", "interventions-pruning"
    refused = _learned(results, claim, evidence)
    if refused is not None:
        return refused
    if table(results, "interventions", "curve") is None:
        return _not_run(claim, "interventions", "curve", evidence)
    ordered, full, n = _curve_points(results)
    pruned = ordered[(ordered["fraction"] > 0) & (ordered["fraction"] <= 0.5 + 1e-9)]
    if pruned.empty or math.isnan(full):
        return missing(claim, "the pruning curve has no point with up to half of the heads masked", evidence)
    point = pruned.iloc[-1]
    loss = full - float(point["metric"])
    half = 1.96 * math.sqrt((full * (1 - full) + point["metric"] * (1 - point["metric"])) / n)
    low, high = loss - half, loss + half
    verdict = decide(low, high, LITTLE_LOSS, greater=False)
    reason = (f"{100 * point['fraction']:.0f}% of heads masked costs {100 * loss:.1f} points; "
              + {HOLDS: f"the interval lies below {100 * LITTLE_LOSS:.0f} points",
                 FAILS: f"the interval lies at or above {100 * LITTLE_LOSS:.0f} points",
                 UNKNOWN: f"the interval covers {100 * LITTLE_LOSS:.0f} points"}[verdict])
    return Verdict(claim, verdict, reason, loss, LITTLE_LOSS, "little loss (5 points)", low, high, unit="points",
                   evidence=evidence)


def harmful_heads(results: Results) -> Verdict:
    """Michel et al.: some heads hurt the task. Holds when masking some share of the least important heads
    raises the metric beyond the interval of the difference (points above 0); otherwise cannot tell (masking
    each head alone, which could show that none hurts, is not in the report: bertology ablate heads)."""
    claim, evidence = "harmful-heads", "interventions-pruning"
    refused = _learned(results, claim, evidence)
    if refused is not None:
        return refused
    if table(results, "interventions", "curve") is None:
        return _not_run(claim, "interventions", "curve", evidence)
    ordered, full, n = _curve_points(results)
    masked = ordered[ordered["fraction"] > 0]
    if masked.empty or math.isnan(full):
        return missing(claim, "the pruning curve has no masked point", evidence)
    point = masked.loc[masked["metric"].astype(float).idxmax()]
    gain = float(point["metric"]) - full
    half = 1.96 * math.sqrt((full * (1 - full) + point["metric"] * (1 - point["metric"])) / n)
    low, high = gain - half, gain + half
    if low > 0:
        verdict, reason = HOLDS, f"masking {100 * point['fraction']:.0f}% of the heads raises the metric beyond its interval"
    else:
        verdict, reason = UNKNOWN, ("no masked share of heads raises the metric beyond its interval; single heads are "
                                    "not masked one by one in this run (bertology ablate heads does)")
    return Verdict(claim, verdict, reason, gain, 0.0, "every head", low, high, unit="points", evidence=evidence)


def finetuning_top_layers(results: Results) -> Verdict:
    """Linear CKA between the model before and after fine-tuning per layer (``compare.cka``: ``layer``, ``cka``
    and, where given, ``representation``: all ``tokens`` are read), on a fine-tuned task the model learned: holds
    when the last layer changes most (lowest CKA) and below the lower half's mean, does not hold when its CKA is
    at or above the other layers' median; otherwise cannot tell. One CKA per layer, no interval."""
    claim, evidence = "top-layers-task-specific", "interventions-cka"
    cka = table(results, "compare", "cka")
    if cka is None:
        refused = _learned(results, claim, evidence) if table(results, "interventions", "check") is not None else None
        return refused or missing(claim, "not measured by this run: the model was not compared with its fine-tuned "
                                         "version (the interventions section does it once fine-tuning learned its "
                                         "task; bertology compare MODEL CHECKPOINT does it alone)", evidence)
    if "representation" in cka.columns:
        cka = cka[cka["representation"] == "tokens"]
    rows = cka.dropna(subset=["layer"]).sort_values("layer")
    rows = rows[rows["layer"] > 0]
    if len(rows) < 2:
        return missing(claim, "fewer than two transformer layers compared", evidence)
    last = rows.iloc[-1]
    others = rows.iloc[:-1]["cka"].astype(float)
    lower = rows[rows["layer"] <= rows["layer"].max() / 2]["cka"].astype(float)
    if float(last["cka"]) <= float(others.min()) and float(last["cka"]) < float(lower.mean()):
        verdict, reason = HOLDS, "the last layer changes most in fine-tuning (lowest CKA)"
    elif float(last["cka"]) >= float(others.median()):
        verdict, reason = FAILS, "the last layer changes no more than the median layer"
    else:
        verdict, reason = UNKNOWN, "the last layer changes more than most layers but not the most"
    return Verdict(claim, verdict, reason, last["cka"], float(lower.mean()), "lower half (mean CKA)", interval="",
                   unit="number", evidence=evidence)


# --------------------------------------------------------------------------------------------------
# Knowledge and geometry


def contextual_with_depth(results: Results) -> Verdict:
    """Ethayarajh: adjusted self-similarity (a word's vectors across its contexts, minus the layer's
    anisotropy) falls from the first to the last layer. Paired over word types (``contextuality.types``),
    last minus first, 95% normal interval over words: holds below 0, does not hold at or above 0."""
    claim, evidence = "contextual-with-depth", "knowledge-contextuality"
    types = table(results, "knowledge", "contextuality.types")
    summary = table(results, "knowledge", "contextuality")
    if types is None or summary is None:
        return _not_run(claim, "knowledge", "contextuality", evidence)
    trained = types[types["weights"] == "trained"]
    anisotropy = summary[(summary["weights"] == "trained") & (summary["measure"] == "anisotropy")].set_index("layer")["value"]
    layers = sorted(int(x) for x in trained["layer"].unique() if int(x) > 0)
    if len(layers) < 2:
        return missing(claim, "fewer than two transformer layers", evidence)
    first, last = layers[0], layers[-1]
    wide = trained.pivot_table(index="word", columns="layer", values="self_similarity").dropna(subset=[first, last])
    change = (wide[last] - float(anisotropy.get(last, 0.0))) - (wide[first] - float(anisotropy.get(first, 0.0)))
    value = float(change.mean())
    half = 1.96 * float(change.std(ddof=1)) / math.sqrt(len(change)) if len(change) > 1 else math.nan
    verdict = decide(value - half, value + half, 0.0, greater=False)
    reason = (f"adjusted self-similarity of {len(change)} words from layer {first} to layer {last}: "
              + {HOLDS: "falls (more contextual)", FAILS: "does not fall", UNKNOWN: "the change's interval covers 0"}[verdict])
    return Verdict(claim, verdict, reason, value, 0.0, "no change", value - half, value + half,
                   interval="95% CI over words", unit="number", evidence=evidence)


def anisotropic(results: Results) -> Verdict:
    """Ethayarajh: representations are anisotropic, more so in upper layers. The mean cosine of random word
    pairs at the last layer: holds when above 0.1 and above the first transformer layer's, does not hold when
    at or below 0.1; otherwise (above 0.1 but not rising) cannot tell. One sample of random pairs, no interval
    (the seed spread is given when the run had several seeds)."""
    claim, evidence = "anisotropic", "knowledge-contextuality"
    summary = table(results, "knowledge", "contextuality")
    if summary is None:
        return _not_run(claim, "knowledge", "contextuality", evidence)
    rows = summary[(summary["weights"] == "trained") & (summary["measure"] == "anisotropy")].sort_values("layer")
    rows = rows[rows["layer"] > 0]
    if len(rows) < 2:
        return missing(claim, "fewer than two transformer layers", evidence)
    first, last = rows.iloc[0], rows.iloc[-1]
    value, std = float(last["value"]), _f(last.get("value_std"))
    low, high = (value - 1.96 * std, value + 1.96 * std) if not math.isnan(std) else (None, None)
    if value <= ANISOTROPY_FLOOR:
        verdict, reason = FAILS, f"random words' vectors at layer {int(last['layer'])} are close to orthogonal"
    elif value > float(first["value"]):
        verdict, reason = HOLDS, (f"random words' vectors share a mean cosine of {value:.2f} at layer "
                                  f"{int(last['layer'])}, up from {float(first['value']):.2f} at layer {int(first['layer'])}")
    else:
        verdict, reason = UNKNOWN, "anisotropic, but no more in the last layer than in the first"
    return Verdict(claim, verdict, reason, value, ANISOTROPY_FLOOR, "threshold 0.1", low, high,
                   interval="±1.96 seed std" if low is not None else "", unit="number", evidence=evidence)


def _mlm_missing(claim: str, results: Results, evidence: str, what: str) -> Verdict:
    if "knowledge" not in results:
        return _not_run(claim, "knowledge", what, evidence)
    return missing(claim, f"does not apply: no {what} in this run (the model has no masked-LM head, or its data "
                          "is not at hand)", evidence)


def agreement(results: Results) -> Verdict:
    """Goldberg: subject-verb agreement in cloze. Minimal pairs (BLiMP) whose paradigm names agreement, scored
    by pseudo-log-likelihood (trained model): accuracy with its 95% interval against chance (0.5): holds
    above, does not hold at or below."""
    claim, evidence = "agreement", "knowledge"
    paradigms = table(results, "knowledge", "pairs.paradigms")
    if paradigms is None:
        return _mlm_missing(claim, results, evidence, "minimal pairs")
    rows = paradigms[(paradigms["weights"] == "trained") & paradigms["paradigm"].str.contains("agreement")]
    if rows.empty:
        return missing(claim, "the minimal pairs hold no agreement paradigm", evidence)
    n = float(rows["pairs"].sum())
    value = float((rows["accuracy"] * rows["pairs"]).sum() / n)
    low, high = binomial_interval(value, n)
    verdict = decide(low, high, 0.5)
    reason = (f"{int(n)} agreement pairs: the grammatical sentence is preferred "
              + {HOLDS: "above chance", FAILS: "no more often than chance", UNKNOWN: "about as often as chance"}[verdict])
    return Verdict(claim, verdict, reason, value, 0.5, "chance", low, high, evidence=evidence)


def lama_facts(results: Results) -> Verdict:
    """Petroni et al.: an MLM recalls relational facts. LAMA P@1 (mean over relations, all corpora pooled by
    facts) of the trained model, 95% interval over facts, against its untrained twin's P@1 (or chance): holds
    above, does not hold at or below. LAMA's knowledge-base baselines are not run, so "competitive with
    knowledge bases" is read against the paper's numbers, not tested."""
    claim, evidence = "lama", "knowledge"
    corpora = table(results, "knowledge", "lama.corpora")
    if corpora is None:
        return _mlm_missing(claim, results, evidence, "LAMA")
    last = corpora["layer"].max()
    rows = corpora[corpora["layer"] == last]
    trained, twin = rows[rows["weights"] == "trained"], rows[rows["weights"] == "untrained"]
    n = float(trained["facts"].sum())
    value = float((trained["p_at_1"] * trained["facts"]).sum() / n)
    if len(twin):
        base, name = float((twin["p_at_1"] * twin["facts"]).sum() / twin["facts"].sum()), "untrained twin"
    else:
        base, name = float(trained["chance_p_at_1"].mean()), "chance"
    low, high = binomial_interval(value, n)
    verdict = decide(low, high, base)
    reason = (f"P@1 over {int(n)} facts is " + {HOLDS: "above", FAILS: "not above", UNKNOWN: "perhaps above"}[verdict]
              + f" the {name}'s")
    return Verdict(claim, verdict, reason, value, base, name, low, high, evidence=evidence)


def numerals_split(results: Results) -> Verdict:
    """Wallace et al.: numbers are poorly represented, perhaps because WordPiece splits them. Subwords per
    numeral (UPOS NUM) over subwords per word in the corpus: holds at or above 1.2, does not hold at or below
    1.0, cannot tell between. A count over the whole corpus, no sampling interval; whether splitting harms the
    numbers' representation is :func:`numbers_wordpiece`."""
    claim, evidence = "numerals-split", "tokenization"
    by_upos = table(results, "tokenization", "by_upos")
    if by_upos is None:
        return _not_run(claim, "tokenization", "by_upos", evidence)
    num = by_upos[by_upos["upos"] == "NUM"]
    if num.empty:
        return missing(claim, "no numerals (UPOS NUM) in the corpus", evidence)
    overall = float((by_upos["subwords per word"] * by_upos["words"]).sum() / by_upos["words"].sum())
    ratio = float(num.iloc[0]["subwords per word"]) / overall
    verdict = HOLDS if ratio >= NUMERAL_RATIO else FAILS if ratio <= 1.0 else UNKNOWN
    reason = (f"numerals are cut into {ratio:.2f}x as many subwords as the average word "
              f"({float(num.iloc[0]['subwords per word']):.2f} vs {overall:.2f}; {int(num.iloc[0]['words'])} numerals)")
    return Verdict(claim, verdict, reason, ratio, NUMERAL_RATIO, "threshold 1.2x", interval="", unit="number",
                   evidence=evidence)


def numbers_wordpiece(results: Results) -> Verdict:
    """Wallace et al.: numbers are poorly represented, perhaps because WordPiece splits them. The numeracy probe
    (:mod:`bertology.knowledge.numeracy`): at the layer chosen on dev, the split gap (mean absolute decoding error
    of numbers WordPiece cuts minus that of numbers it keeps whole, within each hundred) with its 95% CI: holds
    above 0, does not hold at or below 0; cannot tell when it covers 0, or when the probe did not decode values
    better than the training mean (its RMSE interval not below the baseline's): a gap of a probe that learned
    nothing says nothing about tokenization."""
    claim, evidence = "numbers-wordpiece", "knowledge-numeracy"
    layers = table(results, "knowledge", "numeracy.layers")
    if layers is None:
        return _not_run(claim, "knowledge", "numeracy.layers", evidence, "bertology knowledge numeracy runs it")
    chosen = layers[(layers["weights"] == "trained") & layers["chosen"].astype(bool)]
    if chosen.empty:
        return missing(claim, "the numeracy table has no chosen layer for the trained model", evidence)
    row = chosen.iloc[0]
    value, low, high = _f(row["split_gap"]), _f(row["gap_ci_low"]), _f(row["gap_ci_high"])
    learned = _f(row["rmse_ci_high"]) < _f(row["baseline_rmse"])
    if not learned:
        return Verdict(claim, UNKNOWN, f"the decoding probe at layer {int(row['layer'])} is not better than the "
                       f"training mean (RMSE {_f(row['rmse']):.0f} vs {_f(row['baseline_rmse']):.0f}): nothing "
                       "to compare", value, 0.0, "no gap", low, high, unit="number", evidence=evidence)
    verdict = decide(low, high, 0.0)
    reason = (f"at layer {int(row['layer'])} (RMSE {_f(row['rmse']):.0f} vs {_f(row['baseline_rmse']):.0f} for the "
              f"training mean), split numbers are decoded with {_f(row['split_mae']):.0f} mean absolute error and whole "
              f"ones with {_f(row['whole_mae']):.0f}; the gap within hundreds is "
              + {HOLDS: "above 0", FAILS: "not above 0", UNKNOWN: "perhaps above 0"}[verdict])
    return Verdict(claim, verdict, reason, value, 0.0, "no gap", low, high, unit="number", evidence=evidence)


# --------------------------------------------------------------------------------------------------
# Compression and languages


def quantization(results: Results) -> Verdict:
    """Q8BERT: 8-bit quantization keeps about 99%. Dynamic int8: retention of every measured score (UPOS,
    UUAS, parser heads; paired bootstrap intervals): holds when every interval lies above 97%, does not hold
    when one lies below it; otherwise cannot tell."""
    claim, evidence = "quantization", "compression-table"
    summary = table(results, "compression", "summary")
    if summary is None:
        return missing(claim, "not measured by this run: the compression section runs only when asked "
                              "(bertology report --sections compression)", evidence)
    rows = summary[summary["variant"].astype(str).str.startswith("int8")]
    if rows.empty:
        return missing(claim, "no int8 variant in the compression table", evidence)
    row = rows.iloc[0]
    measures = [m for m in ("upos", "uuas", "parser_heads") if not pd.isna(row.get(f"{m}_ci_low"))]
    if not measures:
        return missing(claim, "the int8 variant has no retention interval", evidence)
    verdicts = [decide(_f(row[f"{m}_ci_low"]), _f(row[f"{m}_ci_high"]), RETENTION_FLOOR) for m in measures]
    verdict = FAILS if FAILS in verdicts else HOLDS if all(v == HOLDS for v in verdicts) else UNKNOWN
    lows = [_f(row[f"{m}_ci_low"]) for m in measures]
    highs = [_f(row[f"{m}_ci_high"]) for m in measures]
    value = float(np.mean([_f(row[f"{m}_retention"]) for m in measures]))
    reason = (f"{row['variant']} keeps {100 * value:.1f}% on average over {', '.join(measures)}; "
              + {HOLDS: "every interval above 97%", FAILS: "an interval below 97%",
                 UNKNOWN: "an interval covers 97%"}[verdict])
    return Verdict(claim, verdict, reason, value, RETENTION_FLOOR, "97% kept", min(lows), max(highs),
                   interval="95% CI (widest over measures)", evidence=evidence)


def _languages_missing(claim: str, results: Results, evidence: str) -> Verdict:
    return missing(claim, "does not apply: the run was given no treebanks of other languages (bertology report "
                          "--languages DIR)", evidence)


def language_identity(results: Results) -> Verdict:
    """Language identity from mean-pooled sentence vectors, at the layer chosen on dev, test accuracy against
    the stronger of the majority class and the untrained twin at that layer: holds above, does not hold at or
    below."""
    claim, evidence = "language-identity", "languages-identity"
    summary = table(results, "languages", "identity_summary")
    if summary is None:
        return _languages_missing(claim, results, evidence)
    dev = summary[(summary["baseline"] == "none") & (summary["split"] == "dev")]
    layer = int(dev.sort_values(["mean", "layer"], ascending=[False, True]).iloc[0]["layer"])
    test = summary[(summary["split"] == "test") & (summary["layer"] == layer)].set_index("baseline")
    row = test.loc["none"]
    baselines = {k: float(test.loc[k, "mean"]) for k in ("majority", "untrained") if k in test.index}
    name = max(baselines, key=baselines.get)
    verdict = decide(_f(row["ci_low"]), _f(row["ci_high"]), baselines[name])
    reason = (f"language identity at layer {layer} is "
              + {HOLDS: "decoded beyond", FAILS: "not decoded beyond", UNKNOWN: "perhaps decoded beyond"}[verdict]
              + f" the {name}")
    return Verdict(claim, verdict, reason, row["mean"], baselines[name], name, row["ci_low"], row["ci_high"],
                   evidence=evidence)


def zero_shot(results: Results) -> Verdict:
    """Zero-shot transfer of the English UPOS probe: per language, the zero-shot test accuracy's interval above
    the stronger of the majority class and the twin's zero-shot accuracy. Holds when more than half of the
    languages are, does not hold when more than half lie at or below; otherwise cannot tell."""
    claim, evidence = "zero-shot", "languages-transfer"
    best = table(results, "languages", "transfer_best")
    if best is None:
        return _languages_missing(claim, results, evidence)
    rows = best[best["task"] == "upos"]
    ours = rows[rows["baseline"] == "none"].set_index("language")
    twin = rows[rows["baseline"] == "untrained"].set_index("language")
    verdicts, ratios = [], []
    for language, row in ours.iterrows():
        base = max(_f(row["majority"]), _f(twin.loc[language, "zero_shot"]) if language in twin.index else -1.0)
        verdicts.append(decide(_f(row["zero_shot_ci_low"]), _f(row["zero_shot_ci_high"]), base))
        ratios.append(_f(row["ratio"]))
    n = len(verdicts)
    above, below = verdicts.count(HOLDS), verdicts.count(FAILS)
    verdict = HOLDS if above > n / 2 else FAILS if below > n / 2 else UNKNOWN
    reason = f"{above} of {n} languages are tagged zero-shot beyond the majority class and the twin, {below} are not"
    return Verdict(claim, verdict, reason, float(np.nanmedian(ratios)), None, "in-language accuracy (ratio 1)",
                   float(np.nanmin(ratios)), float(np.nanmax(ratios)), interval="range over languages", unit="number",
                   evidence=evidence)
