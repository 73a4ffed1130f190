"""Every command on a tiny ModernBERT built in code (issue 33's acceptance): exit status, seconds and whether the
tables' numbers are finite.

    python -m benchmarks.experiments.models.modernbert_commands [--only extract,stats] [--out DIR]

The model: ``ModernBertForMaskedLM`` with 4 layers (global, local, global, local; local window 8 tokens), 64 hidden,
4 heads, random weights, saved with MiniLM's tokenizer (the package's embedded default). Fine-tuning makes the
classifier the ``ablate`` commands and ``compare`` read. Data: the shared folder ($BERTOLOGY_DATA) for UD EWT
and GLUE, three minimal pairs written here (BLiMP is not offline). Stored as
``benchmarks/results/modernbert_commands_cpu.json``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import transformers

from benchmarks.stored import save_run, table

BERTOLOGY = str(Path(sys.executable).with_name("bertology"))
SENTENCE = "The quick brown fox jumps over the lazy dog near the old river bank today ."
PAIRS = [("Dogs chase cats .", "Dogs chases cats ."), ("Mice eat cheese .", "Mice eats cheese ."),
         ("The men were here .", "The men was here .")]


def build(folder: Path) -> Path:
    from bertology.models.sources import alias_path

    tokenizer = transformers.AutoTokenizer.from_pretrained(alias_path("minilm"))
    config = transformers.ModernBertConfig(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=512, local_attention=8, global_attn_every_n_layers=2,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=None, eos_token_id=None,
        cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id)
    torch.manual_seed(0)
    transformers.ModernBertForMaskedLM(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def commands(model: Path, out: Path, data: Path) -> dict[str, list[str]]:
    tuned = str(out / "ft" / "sst2" / "baseline" / "seed-0")
    m = str(model)
    return {
        "extract --attentions": ["extract", "-m", m, "-d", str(data / "s.txt"), "--attentions"],
        "attention stats": ["attention", "stats", "-m", m, "-d", "ewt-dev", "--max-sentences", "30"],
        "attention parse": ["attention", "parse", "-m", m, "--max-eval", "30", "--max-train", "30",
                            "--seeds", "1"],
        "attention patterns": ["attention", "patterns", "-m", m, "--max-sentences", "20", "--seeds", "1"],
        "attention view": ["attention", "view", "-m", m, "--text", SENTENCE],
        "finetune": ["finetune", "-m", m, "--task", "sst2", "--seeds", "1", "--max-train", "64", "--max-steps", "8",
                     "--epochs", "1"],
        "ablate heads": ["ablate", "heads", "-m", tuned, "--heads", "L2H1", "--max-dev", "32"],
        "ablate layers": ["ablate", "layers", "-m", tuned, "--layers", "2", "--max-dev", "32"],
        "ablate importance": ["ablate", "importance", "-m", tuned, "--max-train", "32", "--max-dev",
                              "32", "--seeds", "1"],
        "ablate flagged": ["ablate", "flagged", "-m", tuned, "--heads", "L2H1,L3H0", "--draws", "3",
                           "--max-sentences", "30", "--max-dev", "32"],
        "compare": ["compare", m, tuned, "-d", str(data / "s.txt")],
        "knowledge lama": ["knowledge", "lama", "-m", m, "--max-sentences", "30", "--seeds", "1"],
        "knowledge pairs": ["knowledge", "pairs", "-m", m, "-d", str(data / "pairs.jsonl"), "--seeds", "1"],
        "knowledge mlm-probe": ["knowledge", "mlm-probe", "-m", m, "--quick", "--seeds", "1", "--max-sentences", "40",
                                "--max-test", "20"],
        "knowledge static": ["knowledge", "static", "-m", m, "--max-sentences", "60", "--seeds", "1"],
        "geometry contextuality": ["geometry", "contextuality", "-m", m, "--max-sentences", "60", "--seeds", "1"],
        "readouts glue": ["readouts", "glue", "--task", "sst2", "-m", m, "--quick", "--seeds", "1"],
        "compress": ["compress", "-m", m, "--methods", "int8-dynamic,heads-importance:0.5,drop-top:1",
                     "--max-train", "64", "--max-dev", "32", "--max-test", "32"],
        "report --max-sentences 20": ["report", "-m", m, "--max-sentences", "20"],
    }


def infinite_values(folder: Path) -> int:
    """Infinite numbers in the tables a command wrote (NaN is how tables say 'undefined', e.g. a spread over one
    seed, so it is not counted)."""
    count = 0
    for path in folder.rglob("*.csv"):
        numbers = pd.read_csv(path).select_dtypes("number").to_numpy(dtype=float)
        count += int(np.isinf(numbers).sum())
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="", help="comma-separated command names (default: all)")
    parser.add_argument("--out", default=None, help="keep the outputs here (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        model = build(out / "tiny-modernbert")
        (out / "s.txt").write_text(SENTENCE + "\nResearchers probe BERT layers to find syntax , semantics and world "
                                   "knowledge in many languages .\nShe said that the committee would meet on Tuesday .\n")
        (out / "pairs.jsonl").write_text("".join(f'{{"sentence_good": "{g}", "sentence_bad": "{b}"}}\n'
                                                 for g, b in PAIRS))
        wanted = [name for name in args.only.split(",") if name]
        rows, raw = [], {}
        for index, (name, argv) in enumerate(commands(model, out, out).items()):
            if wanted and name not in wanted and name.split()[-1] not in wanted:
                continue
            folder = out / f"run-{index:02d}"
            if name == "finetune":
                folder = out / "ft"
            start = time.perf_counter()
            done = subprocess.run([BERTOLOGY, *argv, "-o", str(folder), *(["--no-progress"] if _progress(argv) else [])],
                                  capture_output=True, text=True)
            seconds = time.perf_counter() - start
            last = (done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or [""])[-1]
            infinite = infinite_values(folder) if folder.exists() else None
            raw[name] = {"argv": argv, "exit": done.returncode, "seconds": seconds, "infinite_values": infinite,
                         "last_line": last[:300]}
            rows.append([name, str(done.returncode), f"{seconds:.0f}", str(infinite)])
            print(f"{name}: exit {done.returncode}, {seconds:.0f} s, infinite values {infinite}: {last[:160]}",
                  flush=True)
        if not wanted:
            save_run("modernbert_commands_cpu", argv=sys.argv, raw=raw,
                     tables={"commands": table(["command", "exit", "seconds", "infinite values"], rows)})


def _progress(argv: list[str]) -> bool:
    return argv[:2] not in (["attention", "view"], ["ablate", "heads"], ["ablate", "layers"])


if __name__ == "__main__":
    main()
