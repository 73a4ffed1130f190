"""docs/readouts.md's SQuAD results: BERT Vision's question on MiniLM - can readouts on the frozen activations of
every layer of the *pretrained* encoder (checkpoint 0, no fine-tuning) match fine-tuning?

Runs what this command runs (:func:`run_squad_readouts` with the same settings; finished parts are reused)::

    bertology readouts squad -m minilm --mode answerable --test-share 0.4 --dev-share 0.2 \\
        --max-train 1000 --checkpoints 0,1 --readout-checkpoints 0 \\
        --readouts lp,ap,last,adapter-shared-64,cnn[,...] --classify-readouts '' --batch-size 16 --seeds 1 \\
        --finetune-lr 2e-4 --finetune-batch-size 16 --threads 1

(answerable-only, SQuAD 1.1-style; 7 of the 16 articles for the test split, 2 of the other 9 the dev split, for
early stopping; readouts for at most 10 epochs, patience 2, features standardised; fine-tuning 1 epoch at lr
2e-4), then a paired bootstrap over the test questions (1,000 resamples, seed 0) for every system's F1 and
the differences the page discusses. Stores ``benchmarks/results/heads_squad_answerable_minilm_cpu.json``; its
tables and ``raw`` keep the words of the stored run (``held out`` for dev, ``evaluation``/``eval`` for test), so
a rerun gives the same tables.

usage: python -m benchmarks.experiments.readouts.heads_squad_experiment [--out DIR] [--heads lp,ap,...] [--name NAME]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from bertology.readouts.catalog import build_readout
from bertology.readouts.finetune_qa import QAFinetuneConfig
from bertology.readouts.intervals import PairedBootstrap, per_question_matrix
from bertology.readouts.squad import SquadReadoutsConfig, prepare_windows, run_squad_readouts, score_logits
from bertology.readouts.train import ReadoutTrainConfig, predict_readout
from bertology.runtime import derive_seed
from bertology.store.store import Store

from benchmarks.stored import save_run, table  # noqa: E402

#: The library's names since train/dev/test -> the stored run's (its raw keys stay as they were).
OLD_COLUMNS = {"test_checkpoint": "eval_checkpoint", "dev_f1": "heldout_f1", "n_train": "n_train_questions",
               "n_test": "n_eval_questions"}
OLD_SPLITS = {"dev": "heldout", "test": "eval"}

NAMES = {"lp": "LP", "ap": "AP", "last": "last layer only", "adapter-shared-64": "adapter shared 64",
         "adapter-shared-386-skip": "adapter shared 386 + skip", "adapter-independent-64": "adapter independent 64",
         "cnn": "CNN", "stack": "stack", "fine-tuned": "fine-tuned MiniLM",
         "untrained": "untrained LP head (chance)"}


def pct(value: float) -> str:
    return f"{100 * value:.1f}"


def share_text(fraction: float) -> str:
    percent = 100 * fraction
    return f"{percent:.0f}%" if percent >= 10 else f"{percent:.2g}%"


def system_name(system: str) -> str:
    """``lp@0`` -> ``LP``; ``fine-tuned@2`` -> ``fine-tuned MiniLM (2 epochs)``."""
    name, checkpoint = system.split("@")
    if name != "fine-tuned":
        return NAMES.get(name, name)
    epochs = float(checkpoint)
    return f"{NAMES[name]} ({epochs:g} epoch{'' if epochs == 1 else 's'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/heads/squad-answerable"))
    parser.add_argument("--heads", default="lp,ap,last,adapter-shared-64,cnn")
    parser.add_argument("--finetune", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--name", default="heads_squad_answerable_minilm_cpu")
    parser.add_argument("--finetune-checkpoints", default="1",
                        help="epochs at which the fine-tuned encoder is saved and scored (the schedule runs to the last)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    heads = tuple(args.heads.split(","))
    checkpoints = tuple(float(epoch) for epoch in args.finetune_checkpoints.split(","))
    finetune = QAFinetuneConfig(checkpoints=checkpoints, lr=2e-4, batch_size=16, seed=0, device="cpu", progress=False)
    config = SquadReadoutsConfig(readouts=heads, classify_readouts=(), seeds=(0,), mode="answerable", test_share=0.4,
                                 dev_share=0.2, max_train=1000, pretrained=True,
                                 readout_checkpoints=(0.0,), finetune=finetune if args.finetune else None,
                                 readout=ReadoutTrainConfig(epochs=10, lr=1e-3, batch_size=16, patience=2,
                                                            standardise=True),
                                 device="cpu", progress=False)
    result = run_squad_readouts("minilm", args.out, config)
    scores, questions = result["scores"], result["questions"]
    own = scores[(scores["checkpoint"] == scores["test_checkpoint"]) & (scores["task"] == "span")]

    # chance: an LP head as initialised (no training), standardised like the others
    windows = prepare_windows(__import__("bertology.models", fromlist=["load_encoder"]).load_encoder("minilm").tokenizer,
                              config)
    test_store = Store.open(args.out / "activations" / "epoch-0" / "test")
    untrained = build_readout("lp", len(test_store.layers), test_store.dim, "span",
                              seed=derive_seed(0, "head-init", "lp", "span"))
    from bertology.readouts.train import feature_stats

    untrained.scaler.set(*feature_stats(Store.open(args.out / "activations" / "epoch-0" / "train")))
    chance, chance_questions = score_logits(windows["test"], *predict_readout(untrained, test_store), "answerable")

    systems = per_question_matrix(questions[questions["checkpoint"] == questions["test_checkpoint"]]
                                  .assign(system=lambda f: f["component"] + "@" + f["checkpoint"].map("{:g}".format)),
                                  key="system")
    order = [q.id for q in windows["test"].questions]
    if len(systems[next(iter(systems))]) != len(order):
        raise SystemExit("per-question scores do not cover the test questions")
    chance_f1 = chance_questions.set_index("id").loc[sorted(order), "f1"].to_numpy()  # pivot sorts ids
    systems["untrained@0"] = chance_f1
    boot = PairedBootstrap(systems, n_boot=1000, seed=0)
    frozen = [f"{name}@0" for name in heads if f"{name}@0" in systems]
    tuned = [name for name in systems if name.startswith("fine-tuned@")]
    pairs = [(name, "untrained@0") for name in tuned + frozen]
    pairs += [(name, tuned[-1]) for name in frozen] if tuned else []
    pairs += [(a, b) for a, b in (("lp@0", "ap@0"), ("lp@0", "last@0"), ("adapter-shared-64@0", "lp@0"),
                                  ("cnn@0", "lp@0"), ("adapter-shared-386-skip@0", "adapter-shared-64@0"))
              if a in systems and b in systems]
    differences = boot.differences(pairs)
    # raw keeps the stored run's names (eval_checkpoint, heldout_f1, heldout/eval...), so a rerun stores the same keys
    scores = scores.rename(columns=OLD_COLUMNS)
    raw = {"scores": scores.to_dict("records"), "systems": boot.systems().to_dict("records"),
           "differences": differences.to_dict("records"), "chance": chance,
           "windows": result["windows"].replace({"split": OLD_SPLITS}).to_dict("records"), "history": result["history"].to_dict("records"),
           "finetune_losses": result["finetune_losses"].to_dict("records"),
           "articles": {f"{OLD_SPLITS.get(k, k)}_articles": result.meta[f"{k}_articles"] for k in ("train", "dev", "test")},
           "layer_weights": result["layer_weights"].to_dict("records"), "seconds": result.meta["seconds"]}

    rows = []
    for system in ["untrained@0", *tuned, *frozen]:
        name, checkpoint = system.split("@")
        stats = boot.system(system)
        interval = f"{pct(stats['mean'])} [{pct(stats['low'])}, {pct(stats['high'])}]"
        if name == "untrained":
            share = share_text(untrained.parameter_share(result.meta['model']['num_parameters']))
            rows.append([NAMES[name], "0 (pretrained, frozen)", f"{untrained.num_parameters:,} ({share})", interval,
                         pct(chance["exact"]), "–", "–", "–"])
            continue
        row = own[(own["component"] == name) & (own["checkpoint"] == float(checkpoint))].iloc[0]
        where = "0 (pretrained, frozen)" if float(checkpoint) == 0 else system_name(system).split("(")[1].rstrip(")") + " fine-tuned"
        share = share_text(row['param_share'])
        epochs = "–" if name == "fine-tuned" else f"{int(row['best_epoch'])} of {int(row['epochs_run'])}"
        rows.append([system_name(system), where, f"{int(row['trainable_params']):,} ({share})", interval,
                     pct(row["exact"]), "–" if row["dev_f1"] is None or np.isnan(row["dev_f1"])
                     else pct(row["dev_f1"]), epochs, f"{row['train_seconds']:.0f}"])
    header = ["system", "checkpoint", "trainable params (% of encoder)", "F1 [95% CI]", "EM", "held-out F1",
              "best epoch of run", "train s"]
    difference_rows = [[f"{system_name(a)} − {system_name(b)}",
                        f"{100 * d:+.1f}", f"[{100 * lo:+.1f}, {100 * hi:+.1f}]", "yes" if est else "no"]
                       for a, b, d, lo, hi, est in differences[["a", "b", "difference", "low", "high",
                                                                "established"]].itertuples(index=False)]
    split_rows = []
    for part, key, what in (("train", "train_articles", "training (1,000 questions drawn, seeded)"),
                            ("dev", "dev_articles", "held out (early stopping)"),
                            ("test", "test_articles", "evaluation")):
        stats = windows[part].stats
        split_rows.append([what, f"{len(result.meta[key])}: {', '.join(result.meta[key])}",
                           f"{len(windows[part].questions):,}", f"{len(windows[part]):,}",
                           f"{stats.get('dropped_windows', 0):,}"])
    tables = {"split": table(["part", "articles", "answerable questions", "windows",
                              "windows without the answer dropped"], split_rows),
              "squad": table(header, rows),
              "differences": table(["difference (F1 points)", "observed", "95% CI (paired bootstrap)",
                                    "established"], difference_rows)}
    save_run(args.name, argv=sys.argv, raw=raw, tables=tables)
    np.save(args.out / "bootstrap_systems.npy", boot.values)


if __name__ == "__main__":
    main()
