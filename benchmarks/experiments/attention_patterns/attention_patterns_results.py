"""docs/attention_patterns.md's results: the pattern classifiers' evaluation and MiniLM vs its untrained twin.

Two stored runs:

* ``attention_patterns_classifiers``: the dev/test tables and the shipped CNN's test confusion matrix,
  formatted from ``src/bertology/resources/attention_patterns/evaluation.json``, the raw output that
  ``tools/train_pattern_classifier.py`` wrote when it trained the shipped CNN (re-training would replace the
  shipped weights, so the evaluation is read, not re-measured; the record names that file).
* ``attention_patterns_<model>_twin``: measured now. What ``bertology attention patterns --glue rte
  --max-sentences 60`` computes (shipped CNN, the model and its untrained twin, seed 0), and the same on the
  first 60 EWT dev sentences: share of heads per type, overall and per layer.

usage: python -m benchmarks.experiments.attention_patterns.attention_patterns_results [--model minilm] [--max-sentences 60]
"""

from __future__ import annotations

import argparse
import json
import os
import time

from bertology.attention.pattern_classifiers import PATTERN_TYPES
from bertology.attention.patterns import pattern_analysis, pattern_inputs
from bertology.models import load_encoder

from benchmarks.stored import ROOT, save_run, table  # noqa: E402

RESOURCES = ROOT / "src" / "bertology" / "resources" / "attention_patterns"
EVALUATION = RESOURCES / "evaluation.json"


def labelled_set() -> dict:
    """What the page says of the labelled set, counted from its labels.csv."""
    import pandas as pd

    labels = pd.read_csv(RESOURCES / "labels.csv")
    return {"maps": len(labels), "labels": labels["label"].value_counts().to_dict(),
            "splits": labels["split"].value_counts().to_dict(),
            "blind_agrees_with_rules": float((labels["blind_label"] == labels["rule_label"]).mean()),
            "block_by_selection": labels[labels["label"] == "block"]["selection"].value_counts().to_dict(),
            "adjudicated": int(labels["adjudicated"].sum())}


def classifier_tables(evaluation: dict) -> dict[str, dict]:
    dev_names = {(False, "cnn"): "CNN, labelled maps only (2 seeds)", (True, "cnn"): "CNN, + synthetic maps (2 seeds)"}
    dev_rows = []
    for row in evaluation["dev_selection"]:
        name = row["classifier"]
        if name.startswith("cnn"):
            dev_rows.append([dev_names[(row["synthetic"], "cnn")],
                             f"{row['dev_accuracy']:.3f} ± {row['dev_accuracy_sd']:.3f}",
                             f"{row['dev_macro_f1']:.3f}"])
        else:
            dev_rows.append([name, f"{row['dev_accuracy']:.3f}", f"{row['dev_macro_f1']:.3f}"])
    test_by_name = {row["classifier"]: row for row in evaluation["test"]}
    order = ["majority class (vertical)", "rules (hand-set)", "rules (tuned on train+dev)", "logistic regression",
             "gradient boosting"]
    test_rows = [[name, f"{test_by_name[name]['test_accuracy']:.3f}", f"{test_by_name[name]['test_macro_f1']:.3f}"]
                 for name in order]
    (shipped,) = [row for name, row in test_by_name.items() if name.startswith("CNN (shipped")]
    test_rows.append(["**CNN (shipped, seed 0)**",
                      f"**{shipped['test_accuracy']:.3f}** (3 seeds: {shipped['seed_mean']:.3f} ± "
                      f"{shipped['seed_sd']:.3f})", f"{shipped['test_macro_f1']:.3f}"])
    # confusion_test[classifier][predicted][true]: the page's rows are the true labels
    confusion = evaluation["confusion_test"]["cnn"]
    confusion_rows = [[true, *[confusion[predicted][true] for predicted in PATTERN_TYPES]] for true in PATTERN_TYPES]
    return {"dev": table(["classifier", "dev accuracy", "dev macro-F1"], dev_rows),
            "test": table(["classifier", "test accuracy", "test macro-F1"], test_rows),
            "confusion_cnn": table(["true \\ predicted", *PATTERN_TYPES], confusion_rows)}


def shares(types, model: str) -> dict:
    own = types[types["model"] == model]
    overall = own["type"].astype(str).value_counts(normalize=True).reindex(PATTERN_TYPES, fill_value=0.0)
    by_layer = (own.assign(type=own["type"].astype(str)).groupby("layer")["type"]
                .value_counts(normalize=True).unstack(fill_value=0.0).reindex(columns=PATTERN_TYPES, fill_value=0.0))
    return {"overall": overall.to_dict(), "by_layer": {int(layer): row.to_dict() for layer, row in by_layer.iterrows()},
            "maps": len(own)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--max-sentences", type=int, default=60)
    parser.add_argument("--classifiers-only", action="store_true", help="only format the classifiers' tables")
    args = parser.parse_args()

    evaluation = json.loads(EVALUATION.read_text(encoding="utf-8"))
    save_run("attention_patterns_classifiers", raw={**evaluation, "labelled_set": labelled_set()},
             tables=classifier_tables(evaluation),
             formatted_from=[str(EVALUATION.relative_to(ROOT)), str((RESOURCES / "labels.csv").relative_to(ROOT))],
             note="re-formatted from the evaluation that tools/train_pattern_classifier.py wrote with the shipped "
                  "CNN (no date recorded in it) and counted from the labelled set; nothing re-measured")
    if args.classifiers_only:
        return

    load_before = os.getloadavg()
    started = time.perf_counter()
    encoder = load_encoder(args.model)
    measured, rows = {}, []
    for source, (data, glue) in {"rte": ("ewt-dev", "rte"), "ewt-dev": ("ewt-dev", None)}.items():
        texts, ids, described = pattern_inputs(data, glue, args.max_sentences)
        result = pattern_analysis(encoder, texts, ids=ids, untrained_seeds=(0,), source=described)
        types = result["types"]
        models = list(dict.fromkeys(types["model"]))
        measured[source] = {model: shares(types, model) for model in models}
        if source == "rte":
            for model, label in zip(models, [args.model if args.model != "minilm" else "MiniLM",
                                             f"{'MiniLM' if args.model == 'minilm' else args.model}, untrained twin"]):
                rows.append([label, *[f"{measured[source][model]['overall'][kind]:.3f}" for kind in PATTERN_TYPES]])
    seconds = time.perf_counter() - started
    print(f"{seconds:.0f} s; load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    save_run(f"attention_patterns_{args.model}_twin", raw={
        "max_sentences": args.max_sentences, "classifier": "cnn (shipped)", "untrained_seed": 0, "shares": measured,
        "seconds": seconds, "load_average_before": load_before, "load_average_after": os.getloadavg()},
        tables={"rte_overall": table(["model", *PATTERN_TYPES], rows)})


if __name__ == "__main__":
    main()
