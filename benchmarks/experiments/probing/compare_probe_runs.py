"""How far two `bertology probe` runs of the same tasks apart are, task by task, beside the intervals.

Reads each run folder's ``table2.csv`` (as ``bertology probe --out`` writes it) and stores, per task: the test
size, the median 95% interval half-width of run A, the largest difference in test accuracy over the layers
(points), how many layers' established delta signs differ, and both best-layer labels. Used to show how much
a probe's optimisation path alone moves its numbers (docs/probing.md, "What the intervals do not include"):

    .venv/bin/python -m benchmarks.experiments.probing.compare_probe_runs RUN_A RUN_B --label-a "LU start" --label-b "Cholesky start" \\
        --name probe_start_sensitivity_minilm_cpu --note "..."
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.stored import save_run, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument("--label-a", default="A")
    parser.add_argument("--label-b", default="B")
    parser.add_argument("--name", required=True, help="stored run: benchmarks/results/<name>.json")
    parser.add_argument("--note", default="", help="what differs between the two runs")
    args = parser.parse_args()
    import pandas as pd

    from bertology.probing.summary import best_layer
    from bertology.tasks import TABLE2_COLUMNS

    frames = {}
    for label, folder in ((args.label_a, args.run_a), (args.label_b, args.run_b)):
        path = folder / "table2.csv"
        if not path.is_file():
            sys.exit(f"{path}: no table2.csv (expected a `bertology probe --out` folder)")
        frame = pd.read_csv(path, dtype={"delta_sign": str})
        frame["delta_sign"] = frame["delta_sign"].fillna("")
        frames[label] = frame
    a, b = frames[args.label_a], frames[args.label_b]
    layered_a, layered_b = (f[f["layer"].notna()].set_index(["task", "layer"]).sort_index() for f in (a, b))
    if list(layered_a.index) != list(layered_b.index):
        sys.exit("the two runs hold different tasks or layers")
    rows, raw = [], {}
    for task in dict.fromkeys(a["task"]):
        ta, tb = layered_a.loc[task], layered_b.loc[task]
        gap = (ta["mean"] - tb["mean"]).abs()
        half = ((ta["ci_high"] - ta["ci_low"]) / 2).median()
        signs = int((ta["delta_sign"] != tb["delta_sign"]).sum())
        labels = (best_layer(a, task).label(), best_layer(b, task).label())
        raw[task] = {"max_abs_diff": float(gap.max()), "mean_abs_diff": float(gap.mean()), "median_half_width": float(half),
                     "n_test": int(ta["n_test"].iloc[0]), "delta_signs_differ": signs, "best_layer": labels}
        rows.append([TABLE2_COLUMNS.get(task, task), f"{raw[task]['n_test']:,}", f"±{100 * half:.1f}",
                     f"{100 * gap.max():.1f}", f"{100 * gap.mean():.1f}", str(signs), labels[0], labels[1]])
    save_run(args.name, argv=sys.argv, raw=raw, note=args.note, runs={args.label_a: str(args.run_a),
                                                                     args.label_b: str(args.run_b)},
             tables={"gaps": table(["task", "test", "95% CI (median half-width)", "largest gap (points)",
                                    "mean gap (points)", "delta signs that differ",
                                    f"best layer, {args.label_a}", f"best layer, {args.label_b}"], rows)})


if __name__ == "__main__":
    main()
