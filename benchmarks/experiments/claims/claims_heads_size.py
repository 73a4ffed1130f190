"""Why the untrained twin's heads-as-parsers verdict is "cannot tell": the claim's rule by treebank size.

    BERTOLOGY_DATA=../shared/data python -m benchmarks.experiments.claims.claims_heads_size [--sizes 100,200,400,1000]

For each size (EWT dev and test sentences, as the report's ``--max-sentences``), Clark et al.'s heads as parsers
(``bertology.attention.parsing.run_attention_analysis``, the report's settings but no statistics and a one-epoch
attention probe, which the claim does not read) on MiniLM and on its untrained twin (seed 0), then the
``syntactic-heads`` rule (``bertology.claims.checks.syntactic_heads``) twice: over every relation with at least 30
test words (the rule before this run) and over Clark et al.'s Table 1 relations only (the rule since), with, per
relation, whether the head's interval lies above its best fixed offset (Bonferroni), at or below it (its own 95%
interval) or covers it. Stores ``benchmarks/results/claims_heads_size_cpu.json`` (docs/claims.md).
``--from-stored`` measures nothing: it judges the relations that file stores again (after the rule changed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from unittest.mock import patch

from benchmarks.stored import RESULTS, save_run, table

import pandas as pd
import torch

from bertology.attention.parsing import run_attention_analysis
from bertology.claims import checks
from bertology.claims.checks import CLARK_RELATIONS, MIN_WORDS
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


def judge(judged: list[dict], clark_only: bool) -> tuple[str, list[dict]]:
    """The ``syntactic-heads`` verdict on the relations of one run (the rule itself, on a best-heads table rebuilt
    from them), over Clark et al.'s relations or over all of them; and the relations it covers."""
    frame = pd.DataFrame({"relation": [j["relation"] for j in judged], "head_label": [j["head"] for j in judged],
                          "held_out_accuracy": [j["head_accuracy"] for j in judged],
                          "held_out_count": [j["words"] for j in judged],
                          "held_out_baseline_accuracy": [j["offset_accuracy"] for j in judged]})
    names = CLARK_RELATIONS if clark_only else tuple(frame["relation"])
    with patch.object(checks, "CLARK_RELATIONS", names):
        verdict = checks.syntactic_heads({"attention": {"best_heads": frame}})
    kept = [j for j in judged if j["relation"] in names]
    z = bonferroni_z(len(kept))
    covering = [j for j in kept if not binomial_interval(j["head_accuracy"], j["words"], z)[0] > j["offset_accuracy"]
                and j["plain_ci"][1] > j["offset_accuracy"]]
    return verdict.verdict, covering


def rows_of(runs: dict, sizes: list[int]) -> list[list[str]]:
    rows = []
    for size in sizes:
        for name in ("minilm", "untrained"):
            judged = runs[f"{name}-{size}"]["relations"]
            every, _ = judge(judged, clark_only=False)
            clark, covering = judge(judged, clark_only=True)
            above = [j for j in judged if j["side"] == "above"]
            shown = ", ".join(f"{j['relation']} {100 * j['head_accuracy']:.1f}% of {j['words']} vs "
                              f"{100 * j['offset_accuracy']:.1f}%" for j in above if j["relation"] not in CLARK_RELATIONS)
            rows.append([str(size), name, every, str(len(judged)), shown or "–", clark,
                         str(sum(j["relation"] in CLARK_RELATIONS for j in judged)),
                         ", ".join(f"{j['relation']} {100 * j['head_accuracy']:.1f}% of {j['words']} vs "
                                   f"{100 * j['offset_accuracy']:.1f}%" for j in covering) or "–"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,200,400,1000")
    parser.add_argument("--from-stored", action="store_true", help="judge the stored relations again; run nothing")
    args = parser.parse_args()
    if args.from_stored:
        record = json.loads((RESULTS / "claims_heads_size_cpu.json").read_text(encoding="utf-8"))
        previous = record["raw"]
        sizes, runs = previous["sizes"], previous["runs"]
        # the command and commit that measured the heads, kept through any number of re-judgings
        provenance = {"run_command": previous.get("run_command", record["command"]),
                      "run_commit": previous.get("run_commit", record["commit"])}
    else:
        sizes = [int(s) for s in args.sizes.split(",")]
        encoder = load_encoder("minilm", device="cpu")
        models = {"minilm": encoder, "untrained": encoder.untrained(0)}
        runs = {}
        for size in sizes:
            for name, model in models.items():
                started = time.perf_counter()
                result = run_attention_analysis(model, max_eval=size, max_train=50, probe_seeds=(0,),
                                                probe_epochs=1, statistics=False, untrained=False,
                                                min_count=min(100, max(10, size // 20)), progress=False)
                runs[f"{name}-{size}"] = {"relations": relations(result["best_heads"]),
                                          "seconds": round(time.perf_counter() - started, 1)}
                print(name, size, runs[f"{name}-{size}"]["seconds"], flush=True)
        provenance = {}
    save_run("claims_heads_size_cpu", argv=sys.argv,
             raw={**provenance, "sizes": sizes, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                  "runs": runs},
             tables={"sizes": table(["sentences", "model", "every relation: verdict", "relations", "above its offset, "
                                     "not Clark's (head vs best offset, test)", "Clark's relations: verdict",
                                     "relations", "covering (head vs best offset, test)"], rows_of(runs, sizes))})


if __name__ == "__main__":
    main()
