"""Train and evaluate the Kovaleva pattern classifiers on the labelled set; ship the CNN.

    python tools/train_pattern_classifier.py

Selection (which model family, CNN width/epochs, whether synthetic maps help) uses train -> dev only. The
chosen CNN is refitted on train + dev and scored once on test; every other classifier is scored on test too
for the comparison table. Writes resources/attention_patterns/{cnn.npz,evaluation.json} and prints the
markdown tables that docs/attention_patterns.md quotes.
"""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bertology.attention.pattern_classifiers import (
    PATTERN_TYPES,
    CNNPatternClassifier,
    FeaturePatternClassifier,
    RulePatternClassifier,
)
from bertology.attention.pattern_features import FEATURE_NAMES, attention_features
from bertology.attention.pattern_maps import AttentionSample, resize_map
from bertology.attention.pattern_resources import load_labelled_maps
from bertology.attention.pattern_synthetic import synthetic_maps
from bertology.files import write_json

RESOURCE_DIR = Path(__file__).resolve().parents[1] / "src" / "bertology" / "resources" / "attention_patterns"
N_SYNTHETIC_PER_TYPE = 60


def synthetic_set(seed: int):
    maps, labels, segments = synthetic_maps(N_SYNTHETIC_PER_TYPE, seed=seed)
    images = np.stack([resize_map(a) for a in maps])
    feats = []
    for a, seg in zip(maps, segments):
        special = np.zeros(len(seg), bool)
        special[[0, len(seg) - 1, int(np.argmax(seg)) - 1]] = True
        feats.append(attention_features(AttentionSample(a, special=special, segments=seg))[0, 0])
    return images, np.array(labels, dtype=object), np.stack(feats)


def confusion(truth, predicted) -> pd.DataFrame:
    frame = pd.crosstab(pd.Categorical(truth, categories=PATTERN_TYPES),
                        pd.Categorical(predicted, categories=PATTERN_TYPES),
                        rownames=["true"], colnames=["predicted"], dropna=False)
    return frame


def macro_f1(truth, predicted) -> float:
    from sklearn.metrics import f1_score

    present = sorted(set(truth))
    return float(f1_score(truth, predicted, labels=present, average="macro", zero_division=0))


def _md(frame: pd.DataFrame) -> str:
    def cell(v):
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def main() -> None:
    torch.set_num_threads(1)
    images, table = load_labelled_maps()
    feats = table[[f"f_{k}" for k in FEATURE_NAMES]].to_numpy(np.float32)
    labels = table["label"].to_numpy(object)
    idx = {s: np.flatnonzero(table["split"].to_numpy() == s) for s in ("train", "dev", "test")}
    syn_images, syn_labels, syn_feats = synthetic_set(seed=1)

    def part(split):
        return images[idx[split]], feats[idx[split]], labels[idx[split]]

    (tr_x, tr_f, tr_y), (dv_x, dv_f, dv_y), (te_x, te_f, te_y) = part("train"), part("dev"), part("test")

    # ---- selection on dev ------------------------------------------------------------------------------
    dev_rows = []
    candidates = {}
    candidates["rules (hand-set)"] = lambda f, y: RulePatternClassifier()
    candidates["rules (tuned on train)"] = lambda f, y: RulePatternClassifier().fit(f, y)
    candidates["logistic regression"] = lambda f, y: FeaturePatternClassifier("logistic").fit(f, y)
    candidates["gradient boosting"] = lambda f, y: FeaturePatternClassifier("boosting").fit(f, y)
    for name, make in candidates.items():
        model = make(tr_f, tr_y)
        pred = model.predict_features(dv_f)
        dev_rows.append({"classifier": name, "synthetic": False, "dev_accuracy": float(np.mean(pred == dv_y)),
                         "dev_macro_f1": macro_f1(dv_y, pred)})
    cnn_configs = []
    # A small grid: the machine is 2 shared CPU cores.
    for synthetic in (False, True):
        cnn_configs.append((synthetic, 16, 40))
    for synthetic, channels, epochs in cnn_configs:
        x, y = (np.concatenate([tr_x, syn_images]), np.concatenate([tr_y, syn_labels])) if synthetic else (tr_x, tr_y)
        scores = []
        for seed in (0, 1):
            model = CNNPatternClassifier(channels=channels, epochs=epochs, random_state=seed).fit(x, y)
            pred = model.predict_images(dv_x)
            scores.append((float(np.mean(pred == dv_y)), macro_f1(dv_y, pred)))
        acc, f1 = np.mean(scores, axis=0)
        dev_rows.append({"classifier": f"cnn c={channels} e={epochs}", "synthetic": synthetic,
                         "dev_accuracy": float(acc), "dev_accuracy_sd": float(np.std([s[0] for s in scores])),
                         "dev_macro_f1": float(f1)})
        print(dev_rows[-1], flush=True)
    dev_table = pd.DataFrame(dev_rows)
    cnn_rows = dev_table[dev_table["classifier"].str.startswith("cnn")]
    best = cnn_rows.sort_values(["dev_accuracy", "dev_macro_f1"], ascending=False).iloc[0]
    channels = int(best["classifier"].split("c=")[1].split()[0])
    epochs = int(best["classifier"].split("e=")[1])
    use_synthetic = bool(best["synthetic"])
    print("selected CNN:", best.to_dict())

    # ---- final fit on train+dev, one look at test --------------------------------------------------------
    fit_x, fit_f, fit_y = np.concatenate([tr_x, dv_x]), np.concatenate([tr_f, dv_f]), np.concatenate([tr_y, dv_y])
    if use_synthetic:
        cnn_x, cnn_y = np.concatenate([fit_x, syn_images]), np.concatenate([fit_y, syn_labels])
    else:
        cnn_x, cnn_y = fit_x, fit_y
    test_rows, confusions = [], {}
    finals = {
        "rules (hand-set)": RulePatternClassifier(),
        "rules (tuned on train+dev)": RulePatternClassifier().fit(fit_f, fit_y),
        "logistic regression": FeaturePatternClassifier("logistic").fit(fit_f, fit_y),
        "gradient boosting": FeaturePatternClassifier("boosting").fit(fit_f, fit_y),
    }
    for name, model in finals.items():
        pred = model.predict_features(te_f)
        test_rows.append({"classifier": name, "test_accuracy": float(np.mean(pred == te_y)),
                          "test_macro_f1": macro_f1(te_y, pred)})
        confusions[name] = confusion(te_y, pred)
    seed_scores = []
    for seed in (0, 1, 2):
        model = CNNPatternClassifier(channels=channels, epochs=epochs, random_state=seed).fit(cnn_x, cnn_y)
        pred = model.predict_images(te_x)
        seed_scores.append(float(np.mean(pred == te_y)))
        if seed == 0:
            shipped, shipped_pred = model, pred
    test_rows.append({"classifier": f"CNN (shipped, seed 0; c={channels}, e={epochs}, synthetic={use_synthetic})",
                      "test_accuracy": seed_scores[0], "test_macro_f1": macro_f1(te_y, shipped_pred),
                      "seed_mean": float(np.mean(seed_scores)), "seed_sd": float(np.std(seed_scores))})
    confusions["cnn"] = confusion(te_y, shipped_pred)
    majority = pd.Series(fit_y).value_counts().index[0]
    test_rows.append({"classifier": f"majority class ({majority})", "test_accuracy": float(np.mean(te_y == majority)),
                      "test_macro_f1": macro_f1(te_y, np.full(len(te_y), majority, dtype=object))})
    test_table = pd.DataFrame(test_rows)
    shipped.save(RESOURCE_DIR / "cnn.npz")

    rules_tuned = finals["rules (tuned on train+dev)"]
    evaluation = {
        "n_maps": int(len(table)), "split_sizes": {k: int(len(v)) for k, v in idx.items()},
        "test_label_counts": pd.Series(te_y).value_counts().to_dict(),
        "dev_selection": dev_table.to_dict(orient="records"),
        "test": test_table.to_dict(orient="records"),
        "confusion_test": {k: v.to_dict() for k, v in confusions.items()},
        "tuned_rule_thresholds": {k: getattr(rules_tuned, k) for k in ("single_min", "mixed_min", "block_min",
                                                                         "block_rest_min")},
        "shipped_cnn": {"channels": channels, "epochs": epochs, "synthetic_per_type": N_SYNTHETIC_PER_TYPE
                        if use_synthetic else 0, "trained_on": "train+dev"},
        "machine": {"python": platform.python_version(), "torch": torch.__version__},
    }
    # bertology.attention.pattern_resources.classifier_evaluation() reads the "CNN (shipped ..." test row back.
    write_json(RESOURCE_DIR / "evaluation.json", evaluation)
    print("\n## dev selection\n")
    print(_md(dev_table))
    print("\n## test\n")
    print(_md(test_table))
    for name in ("cnn", "rules (tuned on train+dev)", "gradient boosting"):
        print(f"\n### confusion ({name}), rows = true label\n")
        print(_md(confusions[name].reset_index()))
    print("\ntuned thresholds:", evaluation["tuned_rule_thresholds"])


if __name__ == "__main__":
    main()
