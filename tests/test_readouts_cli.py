"""`bertology readouts squad` and `bertology readouts glue` end to end on a tiny model: outputs, resuming, and
one clear error for bad input."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from bertology.errors import DataError, UsageError
from bertology.results import Result

runner = CliRunner()


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory):
    from readouts_toy import toy_squad

    return toy_squad(tmp_path_factory.mktemp("toy") / "toy.json.gz", articles=8, paragraphs=4)


def invoke(*args, ok: bool = True):
    from bertology.cli.readouts import app

    result = runner.invoke(app, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, (result.output, result.exception)
    return result


def test_squad_end_to_end_writes_the_table_and_resumes(tmp_path, tiny_dir, toy_data):
    out = tmp_path / "squad"
    args = ("squad", "-m", tiny_dir, "--data", toy_data, "-o", out, "--quick", "--readouts", "lp,adapter-shared-64",
            "--checkpoints", "0.5,1", "--curve", "0.25", "--no-progress", "--device", "cpu")
    first = invoke(*args)
    assert "not comparable to official SQuAD" in " ".join(first.output.split())
    result = Result.load(out)
    scores = result["scores"]
    assert str(scores["seed"].dtype) == "Int64"
    own = scores[scores["checkpoint"] == scores["test_checkpoint"]]
    assert set(own["component"]) == {"fine-tuned", "lp", "adapter-shared-64"}
    assert set(own["checkpoint"]) == {0.5, 1.0}
    span = own[own["task"] == "span"]
    assert span[["exact", "f1", "has_ans_f1", "no_ans_accuracy"]].notna().all().all()
    assert span["exact"].between(0, 1).all() and (span["f1"] >= span["exact"] - 1e-9).all()
    lp = own[(own["component"] == "lp") & (own["task"] == "span")].iloc[0]
    assert lp["trainable_params"] == 3 + 1 + 2 * 32 + 2  # 3 layers + gamma + span output
    assert 0 < lp["param_share"] < 0.01 and 0 <= lp["io_share"] <= 1
    classify = own[own["task"] == "classify"]
    assert len(classify) == 2 and classify["answerable_accuracy"].between(0, 1).all()
    # heads trained on 0.5-epoch activations are also scored on the 1-epoch ones (the seed's 4.4)
    assert len(scores[(scores["checkpoint"] == 0.5) & (scores["test_checkpoint"] == 1.0)]) == 3
    weights = result["layer_weights"]
    lp_weights = weights[(weights["component"] == "lp") & (weights["task"] == "span")]
    assert str(weights["layer"].dtype) == "Int64" and sorted(lp_weights["layer"].unique()) == [0, 1, 2]
    assert lp_weights.groupby("checkpoint")["weight"].sum().round(6).eq(1).all()
    assert (out / "lp_layer_weights.png").stat().st_size > 1000
    assert set(result["curve"]["fraction"]) == {0.25, 0.5, 1.0}
    assert set(result["windows"]["split"]) == {"train", "dev", "test"}
    meta = json.loads((out / "meta.json").read_text())["meta"]
    assert not set(meta["train_articles"]) & set(meta["test_articles"])
    assert not set(meta["dev_articles"]) & (set(meta["train_articles"]) | set(meta["test_articles"]))
    # a second run reuses every finished part and gives the same table
    modified = {p: p.stat().st_mtime_ns for p in (out / "finetune").rglob("*.safetensors")}
    invoke(*args)
    again = Result.load(out)["scores"]
    pd.testing.assert_frame_equal(again.drop(columns=["train_seconds"]), scores.drop(columns=["train_seconds"]))
    assert {p: p.stat().st_mtime_ns for p in (out / "finetune").rglob("*.safetensors")} == modified


def test_squad_bad_input_is_one_clear_error(tmp_path, tiny_dir):
    bad = tmp_path / "v11.json"
    bad.write_text(json.dumps({"version": "1.1", "data": []}))
    result = invoke("squad", "-m", tiny_dir, "--data", bad, "-o", tmp_path / "o", "--max-length", 96, ok=False)
    assert isinstance(result.exception, DataError) and "expected SQuAD 'v2.0'" in str(result.exception)
    result = invoke("squad", "-m", tiny_dir, "--readouts", "lp,adapter-64", ok=False)
    assert isinstance(result.exception, UsageError) and "--readouts 'adapter-64'" in str(result.exception)
    result = invoke("squad", "-m", tiny_dir, "--data", bad, "--seeds", "0", ok=False)
    assert isinstance(result.exception, UsageError) and "--seeds 0" in str(result.exception)
    result = invoke("squad", "-m", tiny_dir, "--max-length", "384", "--data", tmp_path / "missing.json",
                    "-o", tmp_path / "o", ok=False)
    assert isinstance(result.exception, UsageError) and str(result.exception).startswith("--max-length 384: ")
    assert "takes at most 128 tokens" in str(result.exception)  # the library names max_length; the command its option
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").rglob("*.safetensors"))
    # every setting's own check: tests/test_readouts_spec.py


def test_squad_checkpoint_zero_alone_fine_tunes_nothing(tmp_path, tiny_dir, toy_data):
    out = tmp_path / "squad"
    invoke("squad", "-m", tiny_dir, "--data", toy_data, "-o", out, "--quick", "--checkpoints", "0", "--mode",
           "answerable", "--no-progress", "--device", "cpu")
    scores = Result.load(out)["scores"]
    assert set(scores["checkpoint"]) == {0.0} and set(scores["component"]) == {"lp", "ap"}
    assert set(scores["task"]) == {"span"}  # no answerable-or-not framing when every question has an answer
    assert not (out / "finetune").exists() and (out / "activations" / "epoch-0" / "dev").is_dir()


def test_glue_frozen_readouts_beside_fine_tuning(tmp_path, tiny_dir, shared_data):
    from bertology.finetune import FinetuneConfig, finetune
    from bertology.models import load_encoder

    tuned = tmp_path / "finetune"
    finetune(load_encoder(tiny_dir), "rte", FinetuneConfig(seeds=(0,), epochs=1, max_train=64, progress=False,
                                                           device="cpu", eval_each_epoch=False), tuned)
    out = tmp_path / "glue"
    invoke("glue", "--task", "rte", "-m", tiny_dir, "-o", out, "--quick", "--seeds", 2, "--finetune-dir", tuned,
           "--no-progress", "--device", "cpu")
    scores = Result.load(out)["scores"]
    readouts = scores[scores["component"].isin(["lp", "ap"])]
    assert set(readouts["seed"]) == {0, 1} and set(readouts["metric"]) == {"accuracy"}
    assert readouts["value"].between(0, 1).all() and (readouts["n_train"] == 180).all()
    assert (readouts["n_dev"] == 100).all() and (readouts["n_early_stopping"] == 20).all()  # early stopping on 10% of the 200 training examples
    references = scores[scores["component"].str.startswith("sklearn")]
    assert len(references) == 3 and references["value"].between(0, 1).all()
    finetuned = scores[scores["component"].str.startswith("fine-tuned")]
    assert len(finetuned) == 1 and finetuned["param_share"].iloc[0] == 1.0
    assert Result.load(out).meta["task"] == "rte"


def test_glue_file_with_missing_columns_is_one_clear_error(tmp_path, tiny_dir):
    root = tmp_path / "glue" / "sst2"
    root.mkdir(parents=True)
    (root / "train.tsv.gz").write_bytes(__import__("gzip").compress(b"sentence\tlabel\ngood film\t1\n"))
    (root / "dev.tsv").write_text("sentence\nbad film\n")
    result = invoke("glue", "--task", "sst2", "-m", tiny_dir, "--data-dir", tmp_path / "glue", "-o", tmp_path / "o",
                    "--no-progress", ok=False)
    assert isinstance(result.exception, DataError) and "dev.tsv:1: header is" in str(result.exception)


def test_squad_fine_tuning_resumes_mid_run_to_the_same_weights(tmp_path, tiny_dir, toy_data, monkeypatch):
    """An interrupted SQuAD fine-tuning continues from its saved state (through the shared step loop) and
    ends with the weights of an uninterrupted run."""
    import torch

    import bertology.readouts.finetune_qa as finetune_qa_module
    from bertology.readouts.finetune_qa import QAFinetuneConfig, finetune_qa, load_qa_model
    from bertology.readouts.qa import encode_windows
    from bertology.readouts.squad import load_questions
    from bertology.models import load_encoder

    encoder = load_encoder(tiny_dir)
    train, _ = load_questions(toy_data)
    windows = encode_windows(encoder.tokenizer, train[:40], max_length=64, stride=16)
    config = QAFinetuneConfig(checkpoints=(1.0,), batch_size=4, save_every=3, device="cpu", progress=False)
    straight = finetune_qa(encoder, windows, None, tmp_path / "straight", config)

    real_loss, calls = finetune_qa_module.span_loss, {"n": 0}

    def failing_loss(*args):
        calls["n"] += 1
        if calls["n"] == 5:  # after the state saved at step 3
            raise KeyboardInterrupt
        return real_loss(*args)

    monkeypatch.setattr(finetune_qa_module, "span_loss", failing_loss)
    with pytest.raises(KeyboardInterrupt):
        finetune_qa(encoder, windows, None, tmp_path / "resumed", config)
    assert torch.load(tmp_path / "resumed" / "train-state.pt", weights_only=False)["step"] == 3
    monkeypatch.setattr(finetune_qa_module, "span_loss", real_loss)
    resumed = finetune_qa(encoder, windows, None, tmp_path / "resumed", config)
    assert resumed.checkpoints[0].step == straight.checkpoints[0].step == len(windows) // 4 + (len(windows) % 4 > 0)
    a, b = load_qa_model(straight.checkpoints[0].path), load_qa_model(resumed.checkpoints[0].path)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        torch.testing.assert_close(x, y, msg=name)


# -- the old spellings: `bertology heads`, --heads, --classify-heads, --head-epochs, --head-lr, --head-checkpoints


def _bertology(*args):
    from bertology.cli import app as bertology

    return runner.invoke(bertology, [str(a) for a in args])


def _notes(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("note: ")]


def test_old_heads_command_and_options_run_the_same_with_a_note_each(tmp_path, tiny_dir, toy_data):
    common = ("squad", "-m", tiny_dir, "--data", toy_data, "--quick", "--checkpoints", "0", "--mode", "answerable",
              "--no-progress", "--device", "cpu")
    new = _bertology("readouts", *common, "-o", tmp_path / "new", "--readouts", "lp", "--readout-epochs", 1,
                     "--readout-lr", "0.002", "--readout-checkpoints", "0", "--test-share", "0.3", "--dev-share", "0.4",
                     "--max-train", 20, "--max-test", 10)
    old = _bertology("heads", *common, "-o", tmp_path / "old", "--heads", "lp", "--head-epochs", 1,
                     "--head-lr", "0.002", "--head-checkpoints", "0", "--eval-share", "0.3", "--heldout-share", "0.4",
                     "--max-train-questions", 20, "--max-eval-questions", 10)
    assert new.exit_code == 0 and old.exit_code == 0, (new.output, old.output)
    assert _notes(new.stderr) == []
    assert _notes(old.stderr) == [
        "note: `bertology heads` is deprecated (it goes in the next release); use `bertology readouts`",
        *(f"note: --{old_name} is deprecated (it goes in the next release); use --{new_name}"
          for old_name, new_name in (("heads", "readouts"), ("head-checkpoints", "readout-checkpoints"),
                                     ("head-epochs", "readout-epochs"), ("head-lr", "readout-lr"),
                                     ("eval-share", "test-share"), ("heldout-share", "dev-share"),
                                     ("max-train-questions", "max-train"), ("max-eval-questions", "max-test")))]
    timing = ["train_seconds", "io_share"]
    new_scores, old_scores = (Result.load(tmp_path / name)["scores"].drop(columns=timing) for name in ("new", "old"))
    assert set(new_scores["component"]) == {"lp"}
    assert (new_scores["n_train"] == 20).all() and (new_scores["n_test"] == 10).all()  # the sizes reached the run
    pd.testing.assert_frame_equal(old_scores, new_scores)
    new_meta, old_meta = (Result.load(tmp_path / name).meta for name in ("new", "old"))
    assert new_meta["test_articles"] == old_meta["test_articles"] and new_meta["dev_articles"] == old_meta["dev_articles"]
    # 8 articles: ceil(0.3 x 8) = 3 test (default 0.25: 2), then ceil(0.4 x 5) = 2 dev (default 0.2: 1)
    assert (len(new_meta["test_articles"]), len(new_meta["dev_articles"])) == (3, 2)


def test_old_spellings_are_hidden_and_refused_beside_the_new_ones(tiny_dir):
    listing = _bertology("--help")
    assert listing.exit_code == 0 and "readouts" in listing.output
    assert not any(line.strip("│ ").startswith("heads ") for line in listing.output.splitlines())
    for command in ("squad", "glue"):
        page = " ".join(_bertology("readouts", command, "--help").output.split())
        assert "--readouts" in page and "--heads" not in page and "--head-" not in page
    both = _bertology("readouts", "glue", "--task", "rte", "-m", tiny_dir, "--readouts", "lp", "--heads", "ap")
    assert isinstance(both.exception, UsageError)
    assert "--heads is the old spelling of --readouts; give only --readouts" in str(both.exception)
    classify = _bertology("heads", "squad", "-m", tiny_dir, "--classify-heads", "nope")
    assert "note: --classify-heads is deprecated" in classify.stderr
    assert isinstance(classify.exception, UsageError) and "--classify-readouts 'nope'" in str(classify.exception)


# -- the splits' old names (train/heldout/eval before the glossary's train/dev/test)

@pytest.mark.parametrize("command, old, new, value, refusal", [
    ("squad", "--eval-share", "--test-share", "1.5", "--test-share 1.5: expected a fraction of the articles"),
    ("squad", "--heldout-share", "--dev-share", "0", "--dev-share 0.0: expected a fraction of the articles"),
    ("squad", "--max-train-questions", "--max-train", "0", "--max-train 0: expected a whole number"),
    ("squad", "--max-eval-questions", "--max-test", "0", "--max-test 0: expected a whole number"),
    ("squad", "--eval-file", "--test-file", "missing.json", "--test-file without --train-file"),
    ("glue", "--heldout-share", "--early-stopping-share", "1", "--early-stopping-share 1.0: expected a fraction in [0, 1)"),
])
def test_old_split_spellings_work_with_a_note_and_are_refused_beside_the_new_ones(tiny_dir, command, old, new, value,
                                                                                  refusal):
    """Each old spelling reaches its new option (the same one-line refusal of a bad value names the new one),
    with one note on stderr; given beside the new spelling it is refused; help shows only the new one."""
    task = ("--task", "rte") if command == "glue" else ()
    base = ("readouts", command, *task, "-m", tiny_dir)
    old_run = _bertology(*base, old, value)
    assert _notes(old_run.stderr) == [f"note: {old} is deprecated (it goes in the next release); use {new}"]
    assert isinstance(old_run.exception, UsageError) and str(old_run.exception).startswith(refusal)
    new_run = _bertology(*base, new, value)
    assert _notes(new_run.stderr) == [] and str(new_run.exception) == str(old_run.exception)
    both = _bertology(*base, new, value, old, value)
    assert isinstance(both.exception, UsageError)
    assert str(both.exception) == f"{old} is the old spelling of {new}; give only {new}"
    import typer.main

    from bertology.cli.readouts import app

    params = {opt: param for param in typer.main.get_command(app).commands[command].params for opt in param.opts}
    assert params[old].hidden and not params[new].hidden
    assert f"{old} " not in " ".join(_bertology("readouts", command, "--help").output.split())
