"""docs/attention.md's results: Clark et al.'s Table 1 and the attention-only probe for MiniLM on UD EWT.

Runs what ``bertology attention parse -m minilm --max-sentences 500 --max-train-sentences 1000 --seeds 3
--compare-clark --control`` runs (:func:`run_attention_analysis` with the same settings) and stores the page's
two tables in ``benchmarks/results/attention_parse_results_<model>_ewt.json``, with the numbers its prose
quotes in ``raw``: per relation, the margin of the best head over the best offset on test, the drop from
dev (selection) to test (held out), and the share of attention on [CLS] per layer.

usage: python -m benchmarks.experiments.attention.attention_parse_results [--model minilm] [--max-sentences 500]
                                                     [--max-train-sentences 1000] [--seeds 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from bertology.attention.parsing import run_attention_analysis

from benchmarks.stored import save_run, table  # noqa: E402

#: The relations the page shows (``all`` first, then Clark's headline relations that UD keeps).
SHOWN = ("all", "det", "obj", "nsubj", "nmod:poss", "aux", "case")


def percent(value: float) -> str:
    return f"{100 * value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--max-sentences", type=int, default=500)
    parser.add_argument("--max-train-sentences", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="also save the Result folder here")
    args = parser.parse_args()
    load_before = os.getloadavg()
    started = time.perf_counter()
    result = run_attention_analysis(args.model, max_eval=args.max_sentences,
                                    max_train=args.max_train_sentences,
                                    probe_seeds=tuple(range(args.seeds)), untrained=True, progress=False)
    seconds = time.perf_counter() - started
    if args.out:
        result.save(args.out)

    best = result["best_heads"]
    model_name, twin_name = list(dict.fromkeys(best["model"]))
    ours = best[best["model"] == model_name].set_index("relation")
    twin = best[best["model"] == twin_name].set_index("relation")
    missing = [relation for relation in SHOWN if relation not in ours.index]
    if missing:
        raise SystemExit(f"relations {missing} have fewer than min_count dev words at these sizes")
    heads = table(
        ["relation", "words (dev)", "best head", "dev", "offset baseline (dev)", "test", "offset baseline (test)",
         "untrained twin, test"],
        [[relation, int(row["count"]), f"{row['head_label']} {row['direction']}", percent(row["accuracy"]),
          f"{percent(row['baseline_accuracy'])} ({int(row['baseline_offset']):+d})",
          percent(row["held_out_accuracy"]), percent(row["held_out_baseline_accuracy"]),
          percent(twin.loc[relation, "held_out_accuracy"])]
         for relation, row in ((relation, ours.loc[relation]) for relation in SHOWN)])

    summary = result["probe_summary"].set_index(["model", "method"])

    def probe_row(model: str, label: str) -> list[str]:
        probe = summary.loc[(model, "attention-only probe")]
        head = summary.loc[(model, "best single head")]
        offset = summary.loc[(model, "best fixed offset")]
        shown = f"{percent(probe['uas'])} ± {percent(probe['uas_std'])}"
        if label == args.model:
            shown += f" (no punct: {percent(probe['uas_no_punct'])})"
            return [label, shown, f"{percent(head['uas'])} ({head['head_label']})",
                    f"{percent(offset['uas'])} ({int(offset['offset']):+d})"]
        return [label, shown, percent(head["uas"]), percent(offset["uas"])]

    probe = table(["model", "attention-only probe", "best single head (selected on train)",
                   "best offset (selected on train)"],
                  [probe_row(model_name, args.model), probe_row(twin_name, "untrained twin")])

    statistics = result["statistics"]
    cls_share = (statistics[(statistics["model"] == model_name) & (statistics["statistic"] == "attn_cls")]
                 .groupby("layer")["value"].agg(["mean", "max"]))
    raw = {
        "settings": {"max_sentences": args.max_sentences, "max_train_sentences": args.max_train_sentences,
                     "seeds": args.seeds, "control": True, "min_count": 100},
        "models": [model_name, twin_name], "seconds": seconds,
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "test_margin_over_offset_points": {
            relation: 100 * (row["held_out_accuracy"] - row["held_out_baseline_accuracy"])
            for relation, row in ours.iterrows()},
        "dev_minus_test_points": {relation: 100 * (row["accuracy"] - row["held_out_accuracy"])
                                  for relation, row in ours.iterrows()},
        "words_dev": {relation: int(row["count"]) for relation, row in ours.iterrows()},
        "attn_cls_by_layer": {int(layer): {"mean_over_heads": row["mean"], "max_over_heads": row["max"]}
                              for layer, row in cls_share.iterrows()},
        "best_heads": best.to_dict("records"),
        "probe_summary": result["probe_summary"].to_dict("records"),
    }
    print(f"{seconds:.0f} s; load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    save_run(f"attention_parse_results_{args.model}_ewt", raw=raw, tables={"best_heads": heads, "probe": probe})


if __name__ == "__main__":
    main()
