"""The exact probe's two products per evaluation, with the features as they lie and turned round.

Every evaluation of the exact probe's loss (:class:`bertology.probing.problems._Problems`) multiplies each layer's
features ``X`` ``[n, dim]`` by the weight matrices of its problems side by side ``W`` ``[dim, width]`` (the logits),
and every gradient multiplies the residual ``R`` ``[n, width]`` back (``X^T R``). The width is the classes times
the problems of a layer solved together (one fit: 2 to 47 on the report's tasks; a group of eight: up to 376).
On torch's CPU batched products a narrow product with the features ``[n, dim]`` as they lie runs far below the
machine's speed; turned round on a transposed copy of the features (``W^T X^T`` and ``R^T X``, the copy
``[dim, n]`` made once per fit) it runs faster. This times both ways for every shape of the report's probes (the
training set capped as the report caps it; every layer of MiniLM, seven), in float32 (the solve) and float64 (the
polish), on one thread (as ``bench_probe_exact``) and on torch's default threads (as the report), each the best of
``--repeats`` runs, in the same process, and checks that the two give the same numbers (the largest relative
difference). The solver turns round the products up to ``problems.NARROW`` columns wide (by dtype). Random features: the products' speed does not depend on the values. Stored as
``benchmarks/results/<--name>.json``:

    .venv/bin/python -m benchmarks.perf.bench_probe_layout --name probe_layout_cpu
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from benchmarks.stored import save_run, table

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = "the same two products with the features as they lie ([n, dim]), as the solver computed them before"

#: (what, n, dim, classes, problems side by side): the report's probes on MiniLM (training capped at 4,000
#: examples; SentEval tasks smaller), one fit and the groups the report solves together.
SHAPES = [
    ("SentLen, one fit", 2166, 384, 6, 1),
    ("SentLen, point fit and three seeds", 2166, 384, 6, 4),
    ("two-class task (BShift, Tense, ...), one fit", 4000, 384, 2, 1),
    ("two-class task, point fit and three seeds", 4000, 384, 2, 4),
    ("UPOS, one fit", 4000, 384, 17, 1),
    ("UPOS, the twin's four fits", 4000, 384, 17, 4),
    ("UPOS, the encoder's eight fits", 4000, 384, 17, 8),
    ("XPOS, one fit", 4000, 384, 47, 1),
    ("XPOS, the twin's four fits", 4000, 384, 47, 4),
    ("XPOS, the encoder's eight fits", 4000, 384, 47, 8),
    ("dependency labels (arcs), one fit", 4000, 1152, 31, 1),
    ("dependency labels, the twin's four fits", 4000, 1152, 31, 4),
    ("dependency labels, the encoder's eight fits", 4000, 1152, 31, 8),
]


def best_ms(run, repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


def measure(n: int, dim: int, width: int, dtype: torch.dtype, repeats: int, layers: int = 7) -> dict:
    generator = torch.Generator().manual_seed(0)
    X = torch.randn(layers, n, dim, dtype=dtype, generator=generator)
    W = torch.randn(layers, dim, width, dtype=dtype, generator=generator)
    R = torch.randn(layers, n, width, dtype=dtype, generator=generator)
    bias = torch.randn(layers, 1, width, dtype=dtype, generator=generator)
    XT = X.transpose(1, 2).contiguous()

    def as_they_lie():
        return torch.baddbmm(bias, X, W), torch.bmm(X.transpose(1, 2), R)

    def turned():  # as problems._Problems computes a product it turns round
        logits = torch.bmm(W.transpose(1, 2), XT).add_(bias.transpose(1, 2)).transpose(1, 2).contiguous()
        gradient = torch.bmm(R.transpose(1, 2), XT.transpose(1, 2)).transpose(1, 2).contiguous()
        return logits, gradient

    apart = max(float(((a - b).abs().max() / a.abs().max())) for a, b in zip(as_they_lie(), turned()))
    before, after = best_ms(as_they_lie, repeats), best_ms(turned, repeats)
    return {"as_they_lie_ms": before, "turned_ms": after, "speedup": before / after, "relative_difference": apart}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", default=f"1,{torch.get_num_threads()}")
    parser.add_argument("--name", default="probe_layout_cpu")
    args = parser.parse_args()
    raw, rows = [], []
    for threads in sorted({int(t) for t in args.threads.split(",")}):
        torch.set_num_threads(threads)
        for what, n, dim, classes, problems in SHAPES:
            for dtype in (torch.float32, torch.float64):
                result = measure(n, dim, classes * problems, dtype, args.repeats)
                record = {"what": what, "n": n, "dim": dim, "classes": classes, "problems": problems,
                          "width": classes * problems, "dtype": str(dtype).removeprefix("torch."), "threads": threads,
                          **result}
                raw.append(record)
                rows.append([what, f"{n:,} x {dim:,} x {classes * problems}", record["dtype"], threads,
                             f"{result['as_they_lie_ms']:.1f}", f"{result['turned_ms']:.1f}",
                             f"{result['speedup']:.2f}x", f"{result['relative_difference']:.0e}"])
                print(rows[-1], flush=True)
    save_run(args.name, argv=sys.argv, raw=raw, cpu_capability=torch.backends.cpu.get_cpu_capability(), tables={
        "layout": table(["products of", "n x dim x width", "dtype", "threads", "as they lie (ms)",
                         "turned round (ms)", "speed-up", "largest relative difference"], rows),
    })


if __name__ == "__main__":
    main()
