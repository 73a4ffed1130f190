"""GPU correctness: extraction (hidden states and word-level attentions) and probes on CUDA match the CPU.

    python benchmarks/gpu_check.py [--minilm-dir DIR]

Runs only where torch sees a GPU. Not part of CI (CI has none); results go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
from pathlib import Path

import numpy as np
import torch

from bertology.data import default_corpus, read_conllu
from bertology.extraction import extract
from bertology.models import load_encoder
from bertology.models.tiny import tiny_encoder
from bertology.probing.probes import LayerwiseProbe


def compare_extraction(name, encoder, sentences, tmp: Path) -> None:
    cpu = extract(copy.deepcopy(encoder), sentences, tmp / f"{name}-cpu", attentions=True,
                  dtype="float32", progress=False, device="cpu")
    gpu = extract(copy.deepcopy(encoder), sentences, tmp / f"{name}-gpu", attentions=True,
                  dtype="float32", progress=False, device="cuda")
    hidden = max(float(np.abs(cpu.layer(layer) - gpu.layer(layer)).max()) for layer in cpu.layers)
    attention = max(float(np.abs(cpu.attention(i) - gpu.attention(i)).max()) for i in range(len(sentences)))
    print(f"{name:>12}: max |cpu - cuda| hidden {hidden:.2e}, word-level attention {attention:.2e}")


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minilm-dir", default=None, help="config + tokenizer of MiniLM (random weights used)")
    args = parser.parse_args()
    assert torch.cuda.is_available(), "no GPU"
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    sentences = read_conllu(default_corpus("ewt-dev"))[:64]
    with tempfile.TemporaryDirectory() as tmp:
        for family in ("bert", "roberta", "deberta-v2"):
            compare_extraction(f"tiny-{family}", tiny_encoder(family), sentences, Path(tmp))
        if args.minilm_dir:
            compare_extraction("minilm-rand", load_encoder(args.minilm_dir, untrained_seed=0), sentences, Path(tmp))
        check_modernbert(sentences, Path(tmp))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4, 3000, 64)).astype(np.float32)
    y = (X[2, :, 0] > 0).astype(int) + (X[2, :, 1] > 0).astype(int)
    scores = {}
    for device in ("cpu", "cuda"):
        probe = LayerwiseProbe(seed=0, device=device).fit(X[:, :2000], y[:2000], X[:, 2000:2500], y[2000:2500])
        scores[device] = probe.score_layers(X[:, 2500:], y[2500:])
    print(f"probe accuracy per layer: cpu {np.round(scores['cpu'], 3)}, cuda {np.round(scores['cuda'], 3)}")


if __name__ == "__main__":
    main()
