"""The report's interventions recipe: does fine-tuning learn the task? MiniLM on BShift rebuilt from the packaged
UD English EWT (what the report fine-tunes on a machine with nothing beside it), in one process:

baseline: the recipe the report used before (2,000 sentences, 1 epoch, lr 2e-5: 63 steps; on SST-2 it left
          MiniLM at the majority class);
ours:     the report's default (InterventionSettings: every training sentence, 2 epochs, lr 1e-4);
reference: scikit-learn's logistic regression on MiniLM's frozen mean-pooled last layer over the same training
          sentences (what a linear read-out of the untouched model reaches).

Each is scored on the whole dev split (1,016 sentences, majority 50%) with a Wilson 95% interval. Results go to
benchmarks/results/interventions_recipe_minilm_cpu.json (benchmarks/stored.py's format; its table "recipes" is
the one BENCHMARKS.md shows). Usage: python -m benchmarks.experiments.report.interventions_recipe
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from bertology.finetune import FinetuneConfig, finetune, read_examples
from bertology.models import load_encoder
from bertology.report.interventions import InterventionSettings

NAME = "interventions_recipe_minilm_cpu"


def wilson(p: float, n: int) -> tuple[float, float]:
    z = 1.959964
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(centre - half), float(centre + half)


def run(encoder, name: str, max_train, epochs: float, lr: float) -> dict:
    started = time.perf_counter()
    result = finetune(encoder, "bshift", FinetuneConfig(seeds=(0,), epochs=epochs, lr=lr, max_train=max_train,
                                                       save=False, progress=False, eval_each_epoch=True))
    rows = result["results"]
    accuracy = float(rows[rows["metric"] == "accuracy"]["value"].iloc[0])
    n_dev = int(rows["n_dev"].iloc[0])
    history = result["history"]
    return {"recipe": name, "train_sentences": int(rows["n_train"].iloc[0]), "epochs": epochs, "lr": lr,
            "dev_accuracy": accuracy, "ci95": wilson(accuracy, n_dev), "n_dev": n_dev,
            "per_epoch": history[history["metric"] == "accuracy"][["epoch", "train_loss", "value"]].to_dict("records"),
            "seconds": time.perf_counter() - started}


def frozen_logistic(encoder) -> dict:
    from sklearn.linear_model import LogisticRegression

    def features(examples):
        vectors = []
        for start in range(0, len(examples), 64):
            batch = encoder.tokenizer([e.text_a for e in examples[start:start + 64]], padding=True,
                                      truncation=True, max_length=128, return_tensors="pt")
            with torch.inference_mode():
                states = encoder.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            vectors.append(((states * mask).sum(1) / mask.sum(1)).numpy())
        return np.concatenate(vectors)

    train, dev = read_examples("bshift", "train"), read_examples("bshift", "dev")
    probe = LogisticRegression(max_iter=2000).fit(features(train), [e.label for e in train])
    accuracy = float(probe.score(features(dev), [e.label for e in dev]))
    return {"recipe": "logistic regression on frozen mean-pooled last layer (scikit-learn)",
            "train_sentences": len(train), "dev_accuracy": accuracy, "ci95": wilson(accuracy, len(dev)),
            "n_dev": len(dev)}


def short_exponent(value: float) -> str:
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def recipe_table(runs: list[dict], majority: float) -> dict:
    """The published table: one row per recipe, accuracy with its Wilson interval; the best recipe in bold."""
    from benchmarks.stored import table

    labels = {"baseline": "baseline: the report's recipe before", "ours": "**ours** (`InterventionSettings.default()`)",
              "logistic": "reference: scikit-learn logistic regression on frozen mean-pooled last layer"}
    rows = []
    for run_record in runs:
        kind = next(key for key in labels if run_record["recipe"].startswith(key))
        low, high = run_record["ci95"]
        accuracy = f"{100 * run_record['dev_accuracy']:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"
        if kind == "ours":
            accuracy = f"**{accuracy}**"
        if len(run_record.get("per_epoch", [])) > 1:
            accuracy += f" ({100 * run_record['per_epoch'][0]['value']:.1f}% after epoch 1)"
        if kind == "baseline" and high >= majority >= low:
            accuracy += " (the majority class: it learned nothing)" if run_record["dev_accuracy"] == majority else \
                " (its interval holds the majority class)"
        epochs = run_record.get("epochs")
        rows.append([labels[kind], f"{run_record['train_sentences']:,}", f"{epochs:g}" if epochs else "-",
                     short_exponent(run_record["lr"]) if run_record.get("lr") else "-", accuracy])
    return table(["recipe", "training sentences", "epochs", "lr", "dev accuracy [95% CI]"], rows)


def main() -> None:
    torch.set_num_threads(os.cpu_count() or 1)
    encoder = load_encoder("minilm")
    ours = InterventionSettings.default()
    runs = [run(encoder, "baseline (before: 2,000 sentences, 1 epoch, lr 2e-5)", 2000, 1.0, 2e-5),
            run(encoder, "ours (InterventionSettings.default)", ours.train_examples, ours.epochs, ours.lr),
            frozen_logistic(encoder)]
    for r in runs:
        print(f"{r['recipe']:<72} {100 * r['dev_accuracy']:5.1f}% [{100 * r['ci95'][0]:.1f}, "
              f"{100 * r['ci95'][1]:.1f}]  ({r.get('seconds', 0):.0f} s)")
    print(f"ratio of dev accuracy over the majority class (50%): baseline {runs[0]['dev_accuracy'] / 0.5:.2f}x, "
          f"ours {runs[1]['dev_accuracy'] / 0.5:.2f}x")
    from benchmarks.stored import save_run

    save_run(NAME, raw={"majority": 0.5, "runs": runs}, tables={"recipes": recipe_table(runs, 0.5)})


if __name__ == "__main__":
    main()
