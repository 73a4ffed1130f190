"""The scripts that format stored runs' tables: rows and columns land where the pages say they do."""

from __future__ import annotations


def test_confusion_rows_are_true_labels_and_columns_predictions():
    from benchmarks.experiments.attention_patterns.attention_patterns_results import classifier_tables
    from bertology.attention.pattern_classifiers import PATTERN_TYPES

    # evaluation.json keeps confusion_test[classifier][predicted][true]
    confusion = {predicted: {true: 0 for true in PATTERN_TYPES} for predicted in PATTERN_TYPES}
    confusion["vertical+diagonal"]["diagonal"] = 9  # 9 diagonal maps called vertical+diagonal
    confusion["vertical"]["vertical"] = 39
    evaluation = {
        "dev_selection": [{"classifier": "rules (hand-set)", "synthetic": False, "dev_accuracy": 0.5,
                           "dev_macro_f1": 0.4, "dev_accuracy_sd": float("nan")},
                          {"classifier": "cnn c=16 e=40", "synthetic": True, "dev_accuracy": 0.8254,
                           "dev_macro_f1": 0.7775, "dev_accuracy_sd": 0.0141}],
        "test": [{"classifier": name, "test_accuracy": 0.7, "test_macro_f1": 0.5}
                 for name in ("majority class (vertical)", "rules (hand-set)", "rules (tuned on train+dev)",
                              "logistic regression", "gradient boosting")]
        + [{"classifier": "CNN (shipped, seed 0)", "test_accuracy": 0.8, "test_macro_f1": 0.57,
            "seed_mean": 0.8233, "seed_sd": 0.0205}],
        "confusion_test": {"cnn": confusion},
    }
    tables = classifier_tables(evaluation)
    rows = {row[0]: row[1:] for row in tables["confusion_cnn"]["rows"]}
    assert tables["confusion_cnn"]["header"][1:] == list(PATTERN_TYPES)
    assert rows["diagonal"][PATTERN_TYPES.index("vertical+diagonal")] == "9"
    assert rows["vertical+diagonal"][PATTERN_TYPES.index("diagonal")] == "0"
    assert tables["dev"]["rows"][1] == ["CNN, + synthetic maps (2 seeds)", "0.825 ± 0.014", "0.777"]
    assert tables["test"]["rows"][-1][1] == "**0.800** (3 seeds: 0.823 ± 0.021)"


def test_extraction_tables_put_each_speed_beside_the_naive_loop():
    from benchmarks.perf.bench_extract import published_tables

    results = {"naive_tokens_per_s": 2000.0, "ours_tokens_per_s": 5000.0, "ours_bf16_tokens_per_s": 12000.0,
               "bare_forward_bf16_tokens_per_s": 16000.0, "ours_share_of_bf16_ceiling": 0.15,
               "bf16_max_abs_diff_per_layer": [0.0, 0.02], "fp16_storage_max_abs_diff": 0.001,
               "matmul_bf16_flops_runs": [8e11, 7e11], "matmul_bf16_flops": 8e11, "matmul_fp32_flops": 1.6e11,
               "minilm_gemm_bf16_flops": 8.1e11}
    tables = published_tables(results, "CPU")
    throughput = {row[0]: row[1:] for row in tables["throughput"]["rows"]}
    assert throughput["ours, bf16 autocast"] == ["12,000", "6.00x", "–"]
    assert throughput["ours, fp32"] == ["5,000", "2.50x", "15%"]
    checks = dict(tables["checks"]["rows"])
    assert checks["ours bf16 / bare forward bf16 (the pipeline's share of the model's own speed)"] == "75%"
    assert all("|" not in cell for row in tables["checks"]["rows"] for cell in row)  # a pipe would split the cell
