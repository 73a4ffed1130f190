"""The GPU check, one prepared command: correctness on CUDA, extraction throughput, and the default report.

    python -m tests.gpu_check [--device cuda] [--rounds 3] [--minilm-dir DIR] [--name gpu_check_<gpu>]
    python -m tests.gpu_check --device cpu --smoke      # the CPU-side logic, in a minute, nothing stored

Run from the repository root. Step 1 alone also runs as tests: ``pytest -m gpu`` (tests/test_gpu.py, skipped where no
CUDA device exists); step 2 uses the perf benchmarks' helpers (``benchmarks.perf.bench_extract_overhead``).

1. **Correctness** (CUDA only): extraction (hidden states and word-level attentions) of tiny models of three
   families, and the batched probe, on CUDA against the CPU.
2. **Throughput** of a bert-base-shaped random BERT (12 layers x 768, MiniLM's tokenizer, which is bert-base's
   vocabulary) on UD EWT dev, every layer word-pooled: the naive transformers loop, NeuroX 1.0.9 (when
   importable: ``pip install --no-deps neurox==1.0.9 h5py``; otherwise skipped with a note), ``bertology.extract``
   fp32 and bf16 autocast (the token budget the device gives), and the bare forward pass over the same batches
   (fp32 and bf16). Rounds are interleaved; each figure is the best of its rounds.
3. **Probe fits**: one exact probe fit of three shapes of the report's (:data:`PROBE_SHAPES`), on the device and
   on the host's CPU cores: where the report's 128 fits would run faster.
4. **The default report** on MiniLM (``bertology report``'s defaults, on this device), timed; with
   ``--minilm-dir`` (a folder with MiniLM's config and tokenizer), its random-weight twin where the weights did
   not travel.

The run is stored as ``benchmarks/results/<name>.json`` (device, CPU capability, load average); ``--smoke`` runs
every step on a tiny model and a few sentences and stores nothing (``--name`` to store it anyway).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.perf.bench_extract_overhead import bare_seconds, naive_seconds, our_batches, ours_seconds, proxy_encoder  # noqa: E402
from benchmarks.stored import save_run, table  # noqa: E402

from bertology.data import default_corpus, read_conllu  # noqa: E402
from bertology.extraction import ExtractionSpec, extract  # noqa: E402
from bertology.models import load_encoder  # noqa: E402
from bertology.models.tiny import tiny_encoder  # noqa: E402
from bertology.probing.probes import LayerwiseProbe  # noqa: E402


def compare_extraction(name, encoder, sentences, tmp: Path) -> dict:
    cpu = extract(copy.deepcopy(encoder), sentences, tmp / f"{name}-cpu", attentions=True,
                  dtype="float32", progress=False, device="cpu")
    gpu = extract(copy.deepcopy(encoder), sentences, tmp / f"{name}-gpu", attentions=True,
                  dtype="float32", progress=False, device="cuda")
    hidden = max(float(np.abs(cpu.layer(layer) - gpu.layer(layer)).max()) for layer in cpu.layers)
    attention = max(float(np.abs(cpu.attention(i) - gpu.attention(i)).max()) for i in range(len(sentences)))
    print(f"{name:>12}: max |cpu - cuda| hidden {hidden:.2e}, word-level attention {attention:.2e}")
    return {"hidden_max_abs_diff": hidden, "attention_max_abs_diff": attention}


def check_modernbert(sentences, tmp: Path, device: str = "cuda", tolerance: float = 1e-4) -> None:
    """A tiny ModernBERT (fused Wqkv, global and 8-token sliding-window layers, rotary positions) on ``device``
    against the CPU: extraction with word-level attentions (eager), the sdpa path (real tokens), a masked head at
    the per-head hook point and the gate gradient (head importance)."""
    from bertology.intervention import mask_heads, scale_heads

    encoder = tiny_encoder("modernbert", layers=4)
    compare_extraction("tiny-modernbert", encoder, sentences, tmp)
    texts = [" ".join(s.words) for s in sentences[:16]]
    batch = dict(encoder.tokenizer(texts, padding=True, return_tensors="pt"))
    real = batch["attention_mask"].bool()
    worst = {}
    for name, implementation in (("eager", "eager"), ("sdpa", "sdpa")):
        results = {}
        for where in ("cpu", device):
            model = copy.deepcopy(encoder.model).to(where)
            model.set_attn_implementation(implementation)
            inputs = {k: v.to(where) for k, v in batch.items()}
            with torch.no_grad(), mask_heads(model, "L2H1,L3H0"):
                masked = model(**inputs).last_hidden_state.cpu()
            gates = torch.ones(4, 4, device=where, requires_grad=True)
            with scale_heads(model, gates):
                model(**inputs).last_hidden_state.pow(2).mean().backward()
            results[where] = (masked, gates.grad.cpu())
        worst[f"{name} masked hidden"] = float((results["cpu"][0] - results[device][0])[real].abs().max())
        worst[f"{name} gate gradient"] = float((results["cpu"][1] - results[device][1]).abs().max())
    print("  modernbert: max |cpu - " + device + "| " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
    assert all(v <= tolerance for v in worst.values()), f"modernbert on {device} differs from the cpu: {worst}"


def correctness(sentences, tmp: Path) -> dict:
    found = {f"tiny-{family}": compare_extraction(f"tiny-{family}", tiny_encoder(family), sentences, tmp)
             for family in ("bert", "roberta", "deberta-v2")}
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4, 3000, 64)).astype(np.float32)
    y = (X[2, :, 0] > 0).astype(int) + (X[2, :, 1] > 0).astype(int)
    scores = {}
    for device in ("cpu", "cuda"):
        probe = LayerwiseProbe(seed=0, device=device).fit(X[:, :2000], y[:2000], X[:, 2000:2500], y[2000:2500])
        scores[device] = [float(s) for s in probe.score_layers(X[:, 2500:], y[2500:])]
    print(f"probe accuracy per layer: cpu {np.round(scores['cpu'], 3)}, cuda {np.round(scores['cuda'], 3)}")
    found["probe_accuracy"] = scores
    return found


#: Shapes of the report's exact probe fits (layers, train examples, features, classes): a two-class SentEval task,
#: a token task of UPOS's size and a many-class small one (WC).
PROBE_SHAPES = {"two classes (SentEval)": (7, 4000, 384, 2), "17 classes (UPOS)": (7, 4000, 384, 17),
                "50 classes, 800 examples (WC)": (7, 800, 384, 50)}


def probe_fit_seconds(device: str, smoke: bool, threads: int | None = None) -> dict:
    """Seconds of one exact probe fit (every layer along the L2 grid, then the float64 polish) on ``device`` and
    on the host's CPU (``threads`` torch threads: all of them by default), the best of two, for each shape of
    :data:`PROBE_SHAPES` on random features with a class structure. The default report fits 128 such probes on
    the device its model runs on (session 22's H200: about 1 s a fit on CUDA); this says whether the host's cores
    would do them faster."""
    rng = np.random.default_rng(0)
    found = {}
    before = torch.get_num_threads()
    torch.set_num_threads(threads or os.cpu_count() or 1)
    try:
        for name, (layers, n, dim, classes) in PROBE_SHAPES.items():
            if smoke:
                n, dim = min(n, 300), 32
            centres = rng.normal(size=(classes, dim))
            y = rng.integers(0, classes, size=n + n // 4)
            X = (centres[y][None] + 2.0 * rng.normal(size=(layers, len(y), dim))).astype(np.float32)
            seconds = {}
            for where in dict.fromkeys(("cpu", device)):
                times = []
                for _ in range(2):
                    started = time.perf_counter()
                    LayerwiseProbe(seed=0, device=where).fit(X[:, :n], y[:n], X[:, n:], y[n:])
                    if where == "cuda":
                        torch.cuda.synchronize()
                    times.append(time.perf_counter() - started)
                seconds[where] = min(times)
            print(f"probe fit, {name}: " + ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items()), flush=True)
            found[name] = seconds
    finally:
        torch.set_num_threads(before)
    return {"threads": threads or os.cpu_count(), "seconds": found}


def neurox_seconds(encoder, sentences, tmp: Path, device: str) -> float | None:
    """NeuroX over the same sentences and model (saved to a folder, preloaded on ``device``), or None when not
    installed."""
    try:
        from benchmarks.perf.bench_scale import neurox_seconds as run_neurox
    except ImportError:
        return None
    try:
        import neurox  # noqa: F401
    except ImportError:
        return None
    folder = tmp / "neurox-model"
    encoder.model.save_pretrained(folder)
    encoder.tokenizer.save_pretrained(folder)
    with contextlib.redirect_stderr(io.StringIO()):
        return run_neurox(str(folder), sentences, tmp, device=device)


def throughput(encoder, sentences, rounds: int, tmp: Path, device: str) -> dict:
    """Tokens/s of naive, NeuroX, ours fp32 and bf16, and the bare forward (fp32, bf16) over our batches."""
    batches = {precision: our_batches(encoder, sentences, ExtractionSpec(autocast=autocast))
               for precision, autocast in (("fp32", None), ("bf16", "bfloat16"))}
    tokens = sum(int(mask.sum()) for _, mask in batches["fp32"])
    runs: dict[str, list[float]] = {}
    ours_seconds(encoder, sentences[:200], tmp / "warm", autocast="bfloat16")
    ours_seconds(encoder, sentences[:200], tmp / "warm32")

    def add(name, seconds):
        runs.setdefault(name, []).append(seconds)

    for round_ in range(rounds):
        steps = [("ours_fp32", lambda: ours_seconds(encoder, sentences, tmp / f"fp32-{round_}")),
                 ("ours_bf16", lambda: ours_seconds(encoder, sentences, tmp / f"bf16-{round_}", autocast="bfloat16")),
                 ("bare_fp32", lambda: bare_seconds(encoder, batches["fp32"], None)),
                 ("bare_bf16", lambda: bare_seconds(encoder, batches["bf16"], "bfloat16"))]
        if round_ == 0:
            steps.append(("naive", lambda: naive_seconds(encoder, sentences)))
        for name, step in (steps if round_ % 2 == 0 else steps[::-1]):
            add(name, step())
        print(f"round {round_}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in runs.items()), flush=True)
    nx = neurox_seconds(encoder, sentences, tmp, device)
    # How the batches filled the device's budget (session 18: on a GPU the padding floor and shards of two full
    # batches; before, the 10% padding rule kept EWT dev's batches near 360 tokens whatever the budget).
    padded = sorted(int(ids.numel()) for ids, _ in batches["fp32"])
    result = {"tokens": tokens, "batches_fp32": len(batches["fp32"]), "padded_tokens_fp32": sum(padded),
              "batch_padded_tokens_fp32": {"median": padded[len(padded) // 2], "largest": padded[-1]},
              "seconds": runs,
              "neurox": "not installed: pip install --no-deps neurox==1.0.9 h5py" if nx is None else nx}
    for name, values in runs.items():
        result[f"{name}_tokens_per_s"] = tokens / min(values)
    if nx is not None:
        result["neurox_tokens_per_s"] = tokens / nx
    stats = extract(encoder, sentences, tmp / "budget", progress=False).index["stats"]
    result["token_budget"] = {key: stats.get(key) for key in ("batch_tokens", "batch_tokens_used", "max_batch",
                                                               "out_of_memory_halvings")}
    return result


def report_seconds(device: str, smoke: bool, minilm_dir: str | None, tmp: Path) -> dict:
    from bertology.report.run import run_report

    if smoke:
        encoder, options = tiny_encoder("bert"), {"max_sentences": 10, "seeds": (0,),
                                                  "sections": ["tokenization", "probing"]}
    else:
        encoder, what = minilm(minilm_dir, device)
        if encoder is None:
            return {"skipped": what}
        options = {}
    encoder.model.to(device)
    started = time.perf_counter()
    outcome = run_report(encoder=encoder, out=tmp / "report", device=device, progress=not smoke, **options)
    seconds = time.perf_counter() - started
    print(f"report: {seconds:.0f} s, failed {sorted(outcome.failed)}, skipped {sorted(outcome.skipped)}; "
          + ", ".join(f"{k} {v:.0f} s" for k, v in outcome.timings.items()))
    return {"seconds": seconds, "model": "tiny (smoke)" if smoke else what, "failed": outcome.failed,
            "skipped": outcome.skipped, "section_seconds": outcome.timings}


def minilm(folder: str | None, device: str):
    """MiniLM as installed, else from ``folder`` (its config, tokenizer and, where they travelled, its weights:
    a machine whose transfer limit is below MiniLM's 87 MiB gets them rounded to fp16, run here in fp32), else its
    random twin from the folder's config. Returns ``(encoder, what)``, or ``(None, why)``."""
    try:
        return load_encoder("minilm", device=device), "MiniLM"
    except Exception as error:  # noqa: BLE001 - the package may not have travelled: say so, use the folder
        if not folder:
            return None, f"MiniLM did not load ({type(error).__name__}: {error}); pass --minilm-dir"
    if any(Path(folder).glob("*.safetensors")):
        encoder = load_encoder(folder)
        encoder.model.float().to(device)
        return encoder, "MiniLM (weights carried as fp16, run in fp32)"
    return load_encoder(folder, untrained_seed=0, device=device), "MiniLM's random twin"


def published(result: dict, heading: str) -> dict[str, dict]:
    run = result["throughput"]
    naive = run["naive_tokens_per_s"]
    rows = [["naive transformers loop (fp32, batch 32)", f"{naive:,.0f}", "1x", "–"]]
    if "neurox_tokens_per_s" in run:
        rows.append(["NeuroX 1.0.9 `extract_representations` (HDF5)", f"{run['neurox_tokens_per_s']:,.0f}",
                     f"{run['neurox_tokens_per_s'] / naive:.2f}x", "–"])
    for name, label, bare in (("ours_fp32", "ours, fp32", "bare_fp32"), ("ours_bf16", "ours, bf16 autocast",
                                                                            "bare_bf16")):
        speed = run[f"{name}_tokens_per_s"]
        versus = f" ({speed / run['neurox_tokens_per_s']:.1f}x NeuroX)" if "neurox_tokens_per_s" in run else ""
        rows.append([label, f"{speed:,.0f}", f"{speed / naive:.2f}x{versus}",
                     f"{100 * speed / run[f'{bare}_tokens_per_s']:.0f}% of bare {bare[5:]}"])
    for name in ("bare_fp32", "bare_bf16"):
        rows.append([f"bare forward over our batches, {name[5:]}", f"{run[f'{name}_tokens_per_s']:,.0f}",
                     f"{run[f'{name}_tokens_per_s'] / naive:.2f}x", "100%"])
    tables = {"throughput": table([heading, "tokens/s", "vs naive", "share of the bare forward"], rows)}
    fits = result.get("probe_fits")
    if fits:
        devices = list(dict.fromkeys(where for seconds in fits["seconds"].values() for where in seconds))
        tables["probe_fits"] = table(
            ["one exact probe fit (s)"] + [f"host CPU, {fits['threads']} threads" if where == "cpu" else where
                                           for where in devices],
            [[name] + [f"{seconds[where]:.2f}" for where in devices] for name, seconds in fits["seconds"].items()])
    report = result.get("report", {})
    if "seconds" in report:
        tables["report"] = table(["default report", "seconds"], [[report["model"], f"{report['seconds']:.0f}"]])
    return tables


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny model, few sentences, nothing stored")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=None)
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--minilm-dir", default=None, help="config + tokenizer of MiniLM (random weights used)")
    parser.add_argument("--name", default=None)
    args = parser.parse_args()
    if args.device == "cuda":
        assert torch.cuda.is_available(), "no GPU: use --device cpu --smoke to check the CPU-side logic"
        print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    load_before = os.getloadavg()
    sentences = read_conllu(default_corpus("ewt-dev"))[: (args.sentences or (60 if args.smoke else None))]
    tokenizer = tokenizer_of_minilm(args.minilm_dir)
    result: dict = {"device": args.device, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                    "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.device == "cuda":  # a disagreement is recorded and fails the run at its end, after the timings
            try:
                result["correctness"] = correctness(sentences[:64], tmp)
                check_modernbert(sentences[:64], tmp)
            except Exception as error:  # noqa: BLE001 - recorded, re-raised below
                result["correctness_failed"] = f"{type(error).__name__}: {error}"
                print(f"CORRECTNESS FAILED: {result['correctness_failed']}", flush=True)
        shape = dict(hidden=64, layers=2, heads=2) if args.smoke else dict(hidden=768, layers=12, heads=12)
        encoder = proxy_encoder(tokenizer, **shape)
        encoder.model.to(args.device)
        result["model"] = {"shape": shape, "name": encoder.name}
        result["throughput"] = throughput(encoder, sentences, 1 if args.smoke else args.rounds, tmp, args.device)
        del encoder
        result["probe_fits"] = probe_fit_seconds(args.device, args.smoke)
        store(args, result, load_before)  # stored before the report too: a run stopped there keeps its throughput
        if not args.no_report:
            result["report"] = report_seconds(args.device, args.smoke, args.minilm_dir, tmp)
            store(args, result, load_before)
    if "correctness_failed" in result:
        raise SystemExit(f"the GPU disagrees with the CPU: {result['correctness_failed']}")


def tokenizer_of_minilm(folder: str | None):
    """MiniLM's tokenizer (bert-base's uncased vocabulary), from the installed package or ``folder``."""
    try:
        return load_encoder("minilm").tokenizer
    except Exception:  # noqa: BLE001 - not installed on this machine: the folder carried beside the tree
        if not folder:
            raise
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(folder)


def store(args, result: dict, load_before) -> None:
    result["load_average_before"], result["load_average_after"] = load_before, os.getloadavg()
    shape = result["model"]["shape"]
    device = result["gpu"] or f"CPU ({result['cpu_capability']})"
    tables = published(result, f"EWT dev, {shape['layers']} x {shape['hidden']} random BERT, {device}")
    for key, stored in tables.items():
        print(key, stored)
    if args.smoke and not args.name:
        print("smoke run: nothing stored")
        return
    name = args.name or f"gpu_check_{(result['gpu'] or 'cpu').lower().replace(' ', '_')}"
    save_run(name, raw=result, tables=tables, cpu_capability=result["cpu_capability"])


if __name__ == "__main__":
    main()
