"""docs/readouts.md's GLUE results: frozen readouts on SST-2 beside a converged scikit-learn logistic regression on
the same features and beside fine-tuning with a recipe that converges.

Runs what ``bertology readouts glue --task sst2 -m minilm --max-train 2000 --seeds 3 --pool {cls,mean}
--finetune-dir FT`` runs (:func:`run_glue_readouts`, readouts for at most 50 epochs with early stopping on a
seeded 10% of the 2,000 training sentences, patience 5, features standardised), where FT is
``bertology finetune -m minilm -t sst2 --max-train 2000 --epochs 2 --lr 1e-4 --seeds 3``. Stores the page's
table in ``benchmarks/results/heads_glue_sst2_minilm_cpu.json`` with every readout's per-seed accuracy, epochs,
the references' chosen C, the fine-tuning losses and the bootstrap intervals in ``raw``.

usage: python -m benchmarks.experiments.readouts.heads_glue_experiment --finetune-dir FT [--out DIR] [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from bertology.readouts.activations import read_labels
from bertology.readouts.glue import REFERENCES, GlueReadoutsConfig, run_glue_readouts
from bertology.readouts.intervals import PairedBootstrap
from bertology.readouts.train import ReadoutTrainConfig
from bertology.probing.summary import bootstrap_intervals
from bertology.store.store import Store

from benchmarks.stored import save_run, table  # noqa: E402

HEADS = ("lp", "ap", "last", "adapter-shared-64", "adapter-shared-386-skip", "cnn")
NAMES = {"lp": "LP", "ap": "AP", "last": "last layer only", "adapter-shared-64": "adapter shared 64",
         "adapter-shared-386-skip": "adapter shared 386 + skip", "cnn": "CNN"}


def pct(value: float) -> str:
    return f"{100 * value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/heads/glue"))
    parser.add_argument("--finetune-dir", type=Path, default=None)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-train", type=int, default=2000)
    parser.add_argument("--name", default="heads_glue_sst2_minilm_cpu")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    raw: dict = {"pools": {}}
    rows = []
    for pool in ("cls", "mean"):
        config = GlueReadoutsConfig(readouts=HEADS, seeds=tuple(range(args.seeds)), pool=pool,
                                    max_train=args.max_train,
                                    readout=ReadoutTrainConfig(epochs=50, lr=1e-3, batch_size=32, patience=5,
                                                               standardise=True),
                                    progress=False)
        out = args.out / pool
        ft = args.finetune_dir if args.finetune_dir is not None and args.finetune_dir.is_dir() else None
        result = run_glue_readouts("minilm", "sst2", out, config, finetune_dir=ft)
        scores = result["scores"]
        scores = scores[scores["metric"] == "accuracy"]
        dev = Store.open(out / "activations" / "dev")
        labels = np.asarray(read_labels(dev)["labels"]["label"])
        majority = float(max(np.mean(labels == 0), np.mean(labels == 1)))
        # raw keeps the stored run's names ("heads", n_heldout), so a rerun stores the same keys
        pool_raw = {"scores": scores.rename(columns={"n_early_stopping": "n_heldout"}).to_dict("records"),
                    "majority": majority, "heads": {}}
        for name in HEADS:
            correct = {seed: np.load(out / "readouts" / name / f"seed-{seed}" / "dev_predictions.npy") == labels
                       for seed in config.seeds}
            low, high = bootstrap_intervals(correct, seed=0)
            part = scores[scores["component"] == name]
            reference_name = REFERENCES.get(name)
            entry = {"accuracy": part["value"].tolist(), "mean": float(part["value"].mean()),
                     "std": float(part["value"].std()), "interval": [float(low), float(high)],
                     "epochs_run": part["epochs_run"].tolist(), "best_epoch": part["best_epoch"].tolist(),
                     "params": int(part["trainable_params"].iloc[0]), "share": float(part["param_share"].iloc[0])}
            if reference_name is not None:
                ref_correct = np.load(out / "references" / name / "dev_predictions.npy") == labels
                ref_row = scores[scores["component"] == reference_name].iloc[0]
                head_mean_correct = np.mean([correct[s] for s in config.seeds], axis=0)
                difference = PairedBootstrap({"head": head_mean_correct, "ref": ref_correct}, seed=0
                                             ).difference("head", "ref")
                entry["reference"] = {"name": reference_name, "accuracy": float(ref_row["value"]),
                                      "C": float(ref_row["regularisation"]), "difference": difference}
            pool_raw["heads"][name] = entry
        tuned = scores[scores["component"].str.startswith("fine-tuned")]
        if len(tuned):
            pool_raw["finetuned"] = {"accuracy": tuned["value"].tolist(), "mean": float(tuned["value"].mean()),
                                     "std": float(tuned["value"].std()),
                                     "params": int(tuned["trainable_params"].iloc[0])}
        raw["pools"][pool] = pool_raw
    if args.finetune_dir is not None:
        # the fine-tuned checkpoints' dev predictions: a paired bootstrap against each head on the same sentences
        from bertology.finetune.model import load_finetuned
        from bertology.finetune.train import evaluate

        labels = np.asarray(read_labels(Store.open(args.out / "mean" / "activations" / "dev"))["labels"]["label"])
        tuned_correct = []
        for seed_dir in sorted((args.finetune_dir / "sst2" / "baseline").glob("seed-*")):
            model, tokenizer, _ = load_finetuned(seed_dir)
            predicted = evaluate(model, tokenizer, "sst2", return_predictions=True)["predictions"]
            tuned_correct.append(np.asarray(predicted) == labels)
        tuned_mean = np.mean(tuned_correct, axis=0)
        versus = {}
        for pool in ("cls", "mean"):
            for name in HEADS:
                head_mean = np.mean([np.load(args.out / pool / "readouts" / name / f"seed-{seed}" / "dev_predictions.npy")
                                     == labels for seed in range(args.seeds)], axis=0)
                versus[f"{pool}/{name}"] = PairedBootstrap({"fine-tuned": tuned_mean, "head": head_mean}, seed=0
                                                           ).difference("fine-tuned", "head")
        low, high = bootstrap_intervals(dict(enumerate(tuned_correct)), seed=0)
        raw["finetuned_vs_heads"] = versus
        raw["finetuned_interval"] = [float(low), float(high)]
        losses = {}
        for meta_path in sorted(args.finetune_dir.rglob("finetune.json")):
            meta = json.loads(meta_path.read_text())
            losses[meta_path.parent.name] = [{k: point.get(k) for k in ("epoch", "train_loss", "accuracy")}
                                             for point in meta.get("history", [])]
            losses[meta_path.parent.name].append({"train_seconds": meta.get("train_seconds")})
        raw["finetune_history"] = losses

    def cell(pool: str, name: str) -> str:
        entry = raw["pools"][pool]["heads"][name]
        low, high = entry["interval"]
        return f"{pct(entry['mean'])} ± {pct(entry['std'])} [{pct(low)}, {pct(high)}]"

    def reference(pool: str, name: str) -> str:
        entry = raw["pools"][pool]["heads"][name].get("reference")
        if entry is None:
            return "–"
        d = entry["difference"]
        return f"{pct(entry['accuracy'])} ({100 * d['difference']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}])"

    def epochs(pool: str, name: str) -> str:
        entry = raw["pools"][pool]["heads"][name]
        return "/".join(str(int(b)) for b in entry["best_epoch"])

    for name in HEADS:
        entry = raw["pools"]["cls"]["heads"][name]
        rows.append([NAMES[name], f"{entry['params']:,} ({100 * entry['share']:.2g}%)", cell("cls", name),
                     reference("cls", name), epochs("cls", name), cell("mean", name), reference("mean", name),
                     epochs("mean", name)])
    tuned = raw["pools"]["mean"].get("finetuned")
    if tuned is not None:
        text = f"{pct(tuned['mean'])} ± {pct(tuned['std'])}"
        if "finetuned_interval" in raw:
            low, high = raw["finetuned_interval"]
            text += f" [{pct(low)}, {pct(high)}]"
        seeds = len(tuned["accuracy"])
        rows.insert(0, [f"fine-tuned MiniLM (2 epochs, lr 1e-4; {seeds} seeds)", f"{tuned['params']:,} (100%)", text,
                        "–", "–", text, "–", "–"])
    majority = pct(raw["pools"]["mean"]["majority"])
    rows.insert(0, ["majority class", "0", majority, "–", "–", majority, "–", "–"])
    header = ["model/head", "trainable params (% of encoder)", "[CLS]: accuracy ± sd [95% CI]",
              "[CLS]: sklearn reference (head − reference [95% CI])", "[CLS]: best epoch per seed",
              "mean: accuracy ± sd [95% CI]", "mean: sklearn reference (head − reference [95% CI])",
              "mean: best epoch per seed"]
    tables = {"sst2": table(header, rows)}
    if "finetuned_vs_heads" in raw:
        tables["finetuned_vs_heads"] = table(
            ["head", "fine-tuned − head, [CLS] vectors [95% CI]", "fine-tuned − head, mean vectors [95% CI]"],
            [[NAMES[name]] + [
                (lambda d: f"{100 * d['difference']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"
                 + (" established" if d["established"] else ""))(raw["finetuned_vs_heads"][f"{pool}/{name}"])
                for pool in ("cls", "mean")] for name in HEADS])
    save_run(args.name, argv=sys.argv, raw=raw, tables=tables)


if __name__ == "__main__":
    main()
