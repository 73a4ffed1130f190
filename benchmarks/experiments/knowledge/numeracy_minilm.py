"""Numeracy on MiniLM (Wallace et al. 2019's decoding probe) beside its untrained twin: docs/knowledge.md.

Runs :func:`bertology.knowledge.numeracy.numeracy` (``bertology knowledge numeracy -m minilm``: the integers
0-999, ridge on each layer, 5-fold out-of-fold predictions, the layer chosen on a dev fifth of the numbers) and
stores the display table and the unrounded ``layers`` table as ``benchmarks/results/<--name>.json``:

    .venv/bin/python -m benchmarks.experiments.knowledge.numeracy_minilm [--seed 0] [--cache DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.stored import save_run, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", default=None)
    parser.add_argument("--name", default="numeracy_minilm_cpu")
    args = parser.parse_args()
    import torch

    from bertology.knowledge.numeracy import NumeracySpec, numeracy, numeracy_table

    cache = Path(args.cache or tempfile.mkdtemp(prefix="bench-numeracy-"))
    start = time.perf_counter()
    result = numeracy("minilm", NumeracySpec(seed=args.seed), device="cpu", cache_dir=cache)
    seconds = time.perf_counter() - start
    shown = numeracy_table(result["layers"])
    twin = shown["untrained twin RMSE"]
    rows = [[row["layer"], f"{row['RMSE']:.1f}", row["RMSE 95% CI"], f"{twin.iloc[i]:.1f}",
             f"{row['training mean RMSE']:.1f}", f"{row['split gap (MAE)']:+.1f}", row["gap 95% CI"]]
            for i, row in shown.iterrows()]
    save_run(args.name, argv=sys.argv, cpu_capability=torch.backends.cpu.get_cpu_capability(), raw={
        "seconds": seconds, "meta": result.meta, "layers": result["layers"].to_dict("records"),
    }, tables={"layers": table(["layer", "RMSE (test numbers)", "95% CI", "untrained twin RMSE",
                                "training mean RMSE", "split gap (MAE, split - whole)", "gap 95% CI"], rows)})
    print(shown.to_string(index=False))
    print(f"{seconds:.0f} s; chosen layer {result.meta['chosen_layer']}")


if __name__ == "__main__":
    main()
