"""The two claims the quick checklist run cannot tell, at the default report's probing budget (docs/claims.md).

    BERTOLOGY_DATA=../shared/data python -m benchmarks.experiments.claims.claims_probing_minilm [--seeds 2]

The report's probing settings without ``--max-sentences`` (``bertology.report.sections.report_probing_spec``: the
quick caps, 4,000 training and 1,000 test examples per task, control task and untrained twin, two seeds) for the two
tasks the claims read, ``deprel`` (by arc length) and ``position``, on MiniLM; then the claims ``syntax-partial``
and ``word-order-lower`` on those tables. Stores ``benchmarks/results/claims_probing_minilm_cpu.json`` (the arc
lengths at deprel's layer chosen on dev, the position probe per layer, the two verdicts) and the tables they read
to ``tests/data/claims/minilm-probing/`` (``tests/test_claims.py`` checks that the stored verdicts are theirs).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time

from benchmarks.stored import ROOT, save_run, table

import torch

from bertology.claims.evaluate import check_claims, format_interval, format_number
from bertology.claims.registry import claim
from bertology.probing.experiment import run_probing
from bertology.probing.spec import ProbingSpec
from bertology.results import percent

CLAIMS = ("syntax-partial", "word-order-lower")
TABLES = ROOT / "tests" / "data" / "claims" / "minilm-probing"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    spec = ProbingSpec(tasks=("deprel", "position"), seeds=tuple(range(args.seeds)), quick=True, twin_per_seed=False,
                       control="token", scalar_mix=False, probe_options={"max_iter": 100})
    started = time.perf_counter()
    result = run_probing("minilm", spec, progress=False, device="cpu")
    seconds = round(time.perf_counter() - started, 1)
    tables = {"table2": result["table2"], "arc_length": result["arc_length"]}
    shutil.rmtree(TABLES, ignore_errors=True)
    TABLES.mkdir(parents=True)
    for name, frame in tables.items():
        frame.to_parquet(TABLES / f"probing__{name}.parquet", index=False)
    claims = check_claims({"probing": tables}, model="minilm")["claims"].set_index("claim").loc[list(CLAIMS)]
    verdicts = [[c, row["verdict"], format_number(row["value"], row["unit"]),
                 f"{format_number(row['baseline'], row['unit'])} ({row['baseline_name']})",
                 format_interval(row), row["reason"]]
                for c, row in claims.iterrows()]
    t2, arcs = tables["table2"], tables["arc_length"]
    layer = int(t2[(t2["task"] == "deprel") & (t2["best_on_dev"] == True)]["layer"].iloc[0])  # noqa: E712
    at = arcs[(arcs["task"] == "deprel") & (arcs["layer"] == layer)]
    by = {b: part.set_index("bin") for b, part in at.groupby("baseline")}
    arc_rows = [[label, str(int(row["arcs"])), f"{percent(row['accuracy'])} [{percent(row['ci_low'])}, "
                 f"{percent(row['ci_high'])}]", percent(by["untrained"].loc[label, "accuracy"]),
                 percent(by["majority"].loc[label, "accuracy"]),
                 f"{100 * row['drop']:+.1f} [{100 * row['drop_ci_low']:+.1f}, {100 * row['drop_ci_high']:+.1f}]"]
                for label, row in by["none"].iterrows()]
    position = t2[(t2["task"] == "position") & t2["layer"].notna()].sort_values("layer")
    position_rows = [[str(int(r.layer)), f"{percent(r.mean)} [{percent(r.ci_low)}, {percent(r.ci_high)}]",
                      f"{percent(r.dev_mean)}", percent(r.untrained), percent(r.majority)]
                     for r in position.itertuples()]
    save_run("claims_probing_minilm_cpu", argv=sys.argv,
             raw={"settings": {"seeds": args.seeds, "tasks": list(spec.tasks), "quick": True,
                               "n_test": {t: int(n) for t, n in
                                          result["datasets"].set_index("task")["test"].items()}},
                  "seconds": seconds, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                  "deprel_layer": layer, "claims": claims.reset_index().to_dict(orient="records"),
                  "statistics": {c: claim(c).statistic for c in CLAIMS}},
             tables={"verdicts": table(["claim", "MiniLM", "number", "baseline", "interval", "why"], verdicts),
                     "arcs": table(["arc length (words)", "test arcs", f"MiniLM, layer {layer} (%)",
                                    "untrained twin (%)", "majority class (%)", "drop from adjacent arcs (points)"],
                                   arc_rows),
                     "position": table(["layer", "MiniLM, test (%)", "MiniLM, dev (%)", "untrained twin (%)",
                                        "majority class (%)"], position_rows)})
    print(f"stored benchmarks/results/claims_probing_minilm_cpu.json and {TABLES} ({seconds:.0f} s)")


if __name__ == "__main__":
    main()
