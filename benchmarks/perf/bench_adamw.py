"""One AdamW step over MiniLM's parameters on CPU: the per-tensor loop (torch's default on CPU) against the fused
kernel (``Optimisation(fused=True)``, what the report's brief fine-tuning and the MLM probe use), same process.

Every parameter of MiniLM gets a fixed random gradient; each variant takes ``--warmup`` steps, then ``--steps``
timed ones (the mean per step, the best of ``--rounds`` rounds, alternated), from the same parameters and the
same recipe's groups (weight decay 0.01 on matrices, none on vectors). Agreement: the largest difference of any
parameter after ``--steps`` steps, fused against per-tensor (rounding: the fused kernel's last digits differ).

    .venv/bin/python -m benchmarks.perf.bench_adamw [--steps 10] [--rounds 3]

Stored as ``benchmarks/results/adamw_minilm_cpu.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from benchmarks.stored import save_run, table

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py).
BASELINE = "torch's per-tensor AdamW step (its default on CPU) over the same parameters and gradients"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--name", default="adamw_minilm_cpu")
    args = parser.parse_args()
    import torch

    from bertology.models import load_encoder

    torch.manual_seed(0)
    start_params = [p.detach().clone() for p in load_encoder("minilm", device="cpu").model.parameters()]
    grads = [torch.randn_like(p) * 1e-3 for p in start_params]

    def fresh(fused: bool):
        params = [torch.nn.Parameter(p.clone()) for p in start_params]
        for p, g in zip(params, grads):
            p.grad = g
        groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.01},
                  {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
        return params, torch.optim.AdamW(groups, lr=2e-5, fused=fused) if fused else torch.optim.AdamW(groups, lr=2e-5)

    times = {"per-tensor": [], "fused": []}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name in times:
            _, optimizer = fresh(name == "fused")
            for _ in range(args.warmup):
                optimizer.step()
            start = time.perf_counter()
            for _ in range(args.steps):
                optimizer.step()
            times[name].append((time.perf_counter() - start) / args.steps)
    ends = {}
    for name in times:
        params, optimizer = fresh(name == "fused")
        for _ in range(args.steps):
            optimizer.step()
        ends[name] = params
    gap = max(float((a - b).abs().max()) for a, b in zip(ends["per-tensor"], ends["fused"]))
    per_tensor, fused = min(times["per-tensor"]), min(times["fused"])
    n = sum(p.numel() for p in start_params)
    rows = [[f"MiniLM ({n / 1e6:.1f} M parameters, {len(start_params)} tensors), {torch.get_num_threads()} threads",
             f"{1000 * per_tensor:.1f}", f"{1000 * fused:.1f}", f"{per_tensor / fused:.1f}x", f"{gap:.0e}"]]
    print(rows[0], flush=True)
    save_run(args.name, argv=sys.argv, cpu_capability=torch.backends.cpu.get_cpu_capability(),
             raw={"seconds_per_step": times, "parameters": n, "tensors": len(start_params), "steps": args.steps,
                  "largest_difference": gap, "load_average_before": load_before,
                  "load_average_after": os.getloadavg()},
             tables={"speed": table(["one AdamW step", "per-tensor (ms)", "fused (ms)", "fused vs per-tensor",
                                     f"largest difference after {args.steps} steps"], rows)})


if __name__ == "__main__":
    main()
