"""Why the untrained twin's heads-as-parsers verdict is "cannot tell": the claim's rule by treebank size.

    BERTOLOGY_DATA=../shared/data python benchmarks/claims_heads_size.py [--sizes 100,200,400,1000]

For each size (EWT dev and test sentences, as the report's ``--max-sentences``), Clark et al.'s heads as parsers
(``bertology.attention.parsing.run_attention_analysis``, the report's settings but no statistics and a one-epoch
attention probe, which the claim does not read) on MiniLM and on its untrained twin (seed 0), then the
``syntactic-heads`` rule (``bertology.claims.checks.syntactic_heads``): its verdict, and per relation with at least
30 test words whether the head's interval lies above its best fixed offset (Bonferroni), at or below it (its own
95% interval), or covers it. Stores ``benchmarks/results/claims_heads_size_cpu.json`` (docs/claims.md).
"""

from __future__ import annotations

import argparse
import sys
import time

from stored import save_run, table

import torch

from bertology.attention.parsing import run_attention_analysis
from bertology.claims.checks import MIN_WORDS, syntactic_heads
from bertology.claims.verdicts import binomial_interval, bonferroni_z
from bertology.models import load_encoder


def relations(best) -> list[dict]:
    """Per relation the rule judges: its test words, the head's and the offset's test accuracy, and where the
    head's interval lies against the offset (``above`` with Bonferroni, ``below`` by its own 95% interval)."""
    rows = best[(best["relation"] != "all") & (best["held_out_count"].fillna(0) >= MIN_WORDS)]
    rows = rows.dropna(subset=["held_out_accuracy", "held_out_baseline_accuracy"])
    z = bonferroni_z(len(rows))
    out = []
    for r in rows.itertuples():
        corrected = binomial_interval(r.held_out_accuracy, r.held_out_count, z)
        plain = binomial_interval(r.held_out_accuracy, r.held_out_count)
        side = ("above" if corrected[0] > r.held_out_baseline_accuracy else
                "below" if plain[1] <= r.held_out_baseline_accuracy else "covers")
        out.append({"relation": r.relation, "head": r.head_label, "words": int(r.held_out_count),
                    "head_accuracy": float(r.held_out_accuracy), "offset_accuracy": float(r.held_out_baseline_accuracy),
                    "offset": int(r.baseline_offset), "plain_ci": plain, "side": side})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,200,400,1000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    encoder = load_encoder("minilm", device="cpu")
    models = {"minilm": encoder, "untrained": encoder.untrained(0)}
    raw, rows = {}, []
    for size in sizes:
        for name, model in models.items():
            started = time.perf_counter()
            result = run_attention_analysis(model, max_sentences=size, max_train_sentences=50, probe_seeds=(0,),
                                            probe_epochs=1, statistics=False, control=False,
                                            min_count=min(100, max(10, size // 20)), progress=False)
            verdict = syntactic_heads({"attention": {"best_heads": result["best_heads"]}})
            judged = relations(result["best_heads"])
            sides = {side: [j for j in judged if j["side"] == side] for side in ("above", "below", "covers")}
            raw[f"{name}-{size}"] = {"verdict": verdict.as_dict(), "relations": judged,
                                     "seconds": round(time.perf_counter() - started, 1)}
            covering = ", ".join(f"{j['relation']} {100 * j['head_accuracy']:.1f}% of {j['words']} vs "
                                 f"{100 * j['offset_accuracy']:.1f}%" for j in sides["covers"]) or "–"
            rows.append([str(size), name, verdict.verdict, str(len(judged)), str(len(sides["above"])),
                         str(len(sides["below"])), str(len(sides["covers"])), covering])
            print(rows[-1], flush=True)
    save_run("claims_heads_size_cpu", argv=sys.argv,
             raw={"sizes": sizes, "cpu_capability": torch.backends.cpu.get_cpu_capability(), "runs": raw},
             tables={"sizes": table(["sentences", "model", "verdict", "relations judged", "above (Bonferroni)",
                                     "at or below", "covering", "covering relations (head vs best offset, test)"],
                                    rows)})


if __name__ == "__main__":
    main()
