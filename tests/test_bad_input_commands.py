"""Bad input to the commands: each case is refused in one line naming the option, file or field (exit 1),
before anything is written; nothing is dropped without a word, nothing is left half-written."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from bertology.cli import main


def run_cli(args, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["bertology", *map(str, args)])
    code = 0
    try:
        main()
    except SystemExit as exit_info:
        code = exit_info.code
    captured = capsys.readouterr()
    return code, " ".join((captured.err + captured.out).split())


def refused(args, monkeypatch, capsys, *expected: str) -> str:
    code, message = run_cli(args, monkeypatch, capsys)
    assert code == 1, message
    assert "Traceback" not in message
    for part in expected:
        assert part in message, message
    return message


# -- 1. a checkpoint scored on another task ------------------------------------------------------------------


@pytest.fixture(scope="module")
def rte_checkpoint(tmp_path_factory):
    """A tiny 2-class checkpoint in the fine-tuning format that records task rte."""
    import torch
    import transformers

    from bertology.finetune.model import GlueModel, save_checkpoint
    from bertology.models.tiny import tiny_tokenizer

    tokenizer = tiny_tokenizer("bert")
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                     vocab_size=len(tokenizer), max_position_embeddings=128)
    torch.manual_seed(0)
    model = GlueModel(transformers.BertModel(config), num_labels=2).eval()
    out = tmp_path_factory.mktemp("ckpt") / "rte-seed0"
    save_checkpoint(model, tokenizer, out, {"task": "rte", "seed": 0, "base_model": "tiny"})
    return out


@pytest.fixture(scope="module")
def glue_root(tmp_path_factory):
    """A GLUE root with a few SST-2 and RTE dev rows (enough to score on)."""
    root = tmp_path_factory.mktemp("glue")
    (root / "sst2").mkdir()
    (root / "sst2" / "dev.tsv").write_text("sentence\tlabel\n" + "".join(
        f"the cat sat on the mat number {i} .\t{i % 2}\n" for i in range(6)))
    (root / "rte").mkdir()
    (root / "rte" / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n" + "".join(
        f"{i}\tthe dog ran home .\tthe dog ran .\t{'entailment' if i % 2 else 'not_entailment'}\n" for i in range(6)))
    return root


@pytest.mark.parametrize("command", [["heads", "--heads", "L1H0"], ["layers", "--layers", "1"], ["table"],
                                     ["importance"], ["flagged", "--heads", "L1H0"]])
def test_ablate_refuses_another_task_than_the_checkpoints(command, rte_checkpoint, glue_root, tmp_path, monkeypatch,
                                                          capsys):
    out = tmp_path / "out"
    common = ["--model", rte_checkpoint, "--data-dir", glue_root, "--out", out]
    refused(["ablate", *command, *common, "--task", "sst2"], monkeypatch, capsys,
            "--task sst2", "fine-tuned on rte", "--allow-task-mismatch")
    # a regression, or another number of labels: never, even when asked
    refused(["ablate", *command, *common, "--task", "stsb", "--allow-task-mismatch"], monkeypatch, capsys,
            "--task stsb", "2-class classifier", "stsb is a regression")
    assert not out.exists()


def test_prune_refuses_another_task_before_anything(rte_checkpoint, glue_root, tmp_path, monkeypatch, capsys):
    out = tmp_path / "pruned"
    refused(["ablate", "prune", "--model", rte_checkpoint, "--data-dir", glue_root, "--out", out, "--task", "stsb"],
            monkeypatch, capsys, "--task stsb", "regression")
    assert not out.exists()


def test_ablate_allows_a_same_shaped_task_when_asked(rte_checkpoint, glue_root, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    code, message = run_cli(["ablate", "heads", "--model", rte_checkpoint, "--heads", "L1H0", "--data-dir", glue_root,
                             "--out", out, "--task", "sst2", "--allow-task-mismatch"], monkeypatch, capsys)
    assert code == 0, message
    assert json.loads((out / "meta.json").read_text())["meta"]["task"] == "sst2"
    # the recorded task needs neither option
    code, message = run_cli(["ablate", "heads", "--model", rte_checkpoint, "--heads", "L1H0", "--data-dir", glue_root,
                             "--out", tmp_path / "rte"], monkeypatch, capsys)
    assert code == 0, message


def test_ablate_table_refuses_checkpoints_of_different_tasks(rte_checkpoint, tmp_path, monkeypatch, capsys):
    import shutil

    other = tmp_path / "sst2-seed1"
    shutil.copytree(rte_checkpoint, other)
    meta = json.loads((other / "finetune.json").read_text())
    (other / "finetune.json").write_text(json.dumps({**meta, "task": "sst2", "seed": 1}))
    refused(["ablate", "table", "--model", rte_checkpoint, "--model", other, "--out", tmp_path / "out"],
            monkeypatch, capsys, "different tasks", "rte", "sst2")


# -- 2. a decoder where an encoder is expected -----------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    """A tiny random GPT-2 (byte-level BPE, no [CLS] token) saved to a folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2Model, PreTrainedTokenizerFast

    from bertology.models.tiny import training_corpus

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(training_corpus(), trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    bpe.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                        unk_token="<|endoftext|>", model_max_length=64)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
                        eos_token_id=0)
    path = tmp_path_factory.mktemp("gpt2")
    GPT2Model(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    assert tokenizer.cls_token is None
    return path


def test_cls_pooling_of_a_decoder_is_refused(gpt2_dir, tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("The cat sat .\nA dog ran home .\n")
    out = tmp_path / "store"
    refused(["extract", "-m", gpt2_dir, "-d", corpus, "--pool", "cls", "-o", out, "--no-progress"], monkeypatch, capsys,
            "--pool cls", "no [CLS] token", "mean", "word-mean", "word-first", "word-last", "tokens")
    assert not out.exists()
    code, message = run_cli(["extract", "-m", gpt2_dir, "-d", corpus, "--pool", "mean", "-o", out, "--no-progress"],
                            monkeypatch, capsys)
    assert code == 0, message


# -- 3. dropped silently ---------------------------------------------------------------------------------------


def test_lama_refuses_unknown_relations_listing_the_known_ones(tiny_dir, tmp_path, monkeypatch, capsys):
    lama = tmp_path / "lama"
    (lama / "TREx").mkdir(parents=True)
    (lama / "relations.jsonl").write_text("".join(json.dumps({"relation": name, "template": f"[X] {name} [Y] ."}) + "\n"
                                                  for name in ("P19", "P20")))
    (lama / "TREx" / "P19.jsonl").write_text(json.dumps({"sub_label": "Dante", "obj_label": "Florence"}) + "\n")
    out = tmp_path / "out"
    message = refused(["knowledge", "lama", "-m", tiny_dir, "-d", lama, "--relations", "P19,P9999", "-o", out],
                      monkeypatch, capsys, "--relations P9999", "T-REx: P19")
    assert "P20" not in message.split("holds", 1)[1]  # listed are the relations the folder has data for
    assert not out.exists()


# what --quick chooses and what it says: tests/test_readouts_spec.py (the spec itself, no stubbed experiment)


def test_quick_stride_beyond_the_window_is_refused_not_shrunk(tiny_dir, toy_squad_file, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    refused(["readouts", "squad", "-m", tiny_dir, "--data", toy_squad_file, "--quick", "--stride", "400", "-o", out,
             "--no-progress"], monkeypatch, capsys, "stride 400")
    assert not out.exists()


def test_attention_parse_refuses_a_negative_min_count(tiny_dir, tmp_path, monkeypatch, capsys):
    refused(["attention", "parse", "-m", tiny_dir, "--min-count", "-1", "-o", tmp_path / "out"], monkeypatch, capsys,
            "--min-count -1", "at least 1")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", [["extract", "-d", "CORPUS"], ["attention", "stats", "-d", "CORPUS"]])
def test_untrained_seed_refuses_minus_one_like_every_seed(command, tiny_dir, tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat .\n")
    args = [corpus if part == "CORPUS" else part for part in command]
    refused([*args, "-m", tiny_dir, "--untrained-seed", "-1", "-o", tmp_path / "out"], monkeypatch, capsys,
            "--untrained-seed -1", "non-negative")
    assert not (tmp_path / "out").exists()


# -- 4. nothing left behind after an error -------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_squad_file(tmp_path_factory):
    from readouts_toy import toy_squad

    return toy_squad(tmp_path_factory.mktemp("toy") / "toy.json", articles=4, paragraphs=2)


def _squad_json(**change):
    question = {"id": "q1", "question": "Where?", "answers": [{"text": "France", "answer_start": 24}],
                "is_impossible": False, **change}
    return {"version": "v2.0", "data": [{"title": "Normans", "paragraphs": [
        {"context": "Normandy is a region in France.", "qas": [question]}]}]}


BAD_SQUAD = {
    "v11.json": (json.dumps({**_squad_json(), "version": "1.1"}), "version is '1.1'"),
    "broken.json": ('{"version": "v2.0",\n "data": [', "not valid JSON"),
    "offset.json": (json.dumps(_squad_json(answers=[{"text": "France", "answer_start": 20}])), "does not match"),
}


@pytest.mark.parametrize("name", sorted(BAD_SQUAD))
def test_readouts_squad_bad_data_leaves_no_output_folder(name, tiny_dir, tmp_path, monkeypatch, capsys):
    text, expected = BAD_SQUAD[name]
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "out"
    refused(["readouts", "squad", "-m", tiny_dir, "--data", path, "--quick", "-o", out, "--no-progress"], monkeypatch,
            capsys, expected)
    assert not out.exists()


def test_readouts_squad_train_file_without_test_file(tiny_dir, toy_squad_file, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    refused(["readouts", "squad", "-m", tiny_dir, "--train-file", toy_squad_file, "--quick", "-o", out], monkeypatch,
            capsys, "--train-file without --test-file")
    assert not out.exists()


@pytest.fixture(scope="module")
def glue_data(tmp_path_factory):
    import gzip

    root = tmp_path_factory.mktemp("glue-heads")
    (root / "sst2").mkdir()
    rows = "".join(f"a good film number {i} .\t{i % 2}\n" for i in range(12))
    (root / "sst2" / "train.tsv.gz").write_bytes(gzip.compress(("sentence\tlabel\n" + rows).encode()))
    (root / "sst2" / "dev.tsv").write_text("sentence\tlabel\n" + rows)
    return root


def test_readouts_glue_bad_row_leaves_no_output_folder(tiny_dir, tmp_path, monkeypatch, capsys):
    root = tmp_path / "glue"
    (root / "sst2").mkdir(parents=True)
    (root / "sst2" / "train.tsv.gz").write_bytes(__import__("gzip").compress(b"sentence\tlabel\ngood film\t1\n"))
    (root / "sst2" / "dev.tsv").write_text("sentence\tlabel\nbad film\tmaybe\n")
    out = tmp_path / "out"
    refused(["readouts", "glue", "--task", "sst2", "-m", tiny_dir, "--data-dir", root, "-o", out, "--no-progress"],
            monkeypatch, capsys, "dev.tsv:2")
    assert not out.exists()


def _finetune_run(folder: Path, task: str, seed: int = 0, fingerprint: str = "x") -> None:
    folder.mkdir(parents=True)
    (folder / "finetune.json").write_text(json.dumps({"task": task, "seed": seed, "base_model": "tiny",
                                                      "base_fingerprint": fingerprint, "variant": "baseline",
                                                      "metrics": {"accuracy": 0.5}}))


def test_readouts_glue_refuses_a_finetune_dir_without_the_task(tiny_dir, glue_data, tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    _finetune_run(runs / "rte" / "baseline" / "seed-0", "rte", 0)
    _finetune_run(runs / "rte" / "baseline" / "seed-1", "rte", 1)
    out = tmp_path / "out"
    args = ["readouts", "glue", "--task", "sst2", "-m", tiny_dir, "--data-dir", glue_data, "-o", out, "--quick",
            "--no-progress"]
    refused([*args, "--finetune-dir", runs], monkeypatch, capsys, "--finetune-dir", "no sst2 fine-tuning runs",
            "rte (2 runs)")
    assert not out.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    refused([*args, "--finetune-dir", empty], monkeypatch, capsys, "--finetune-dir", "no finished fine-tuning")
    assert not out.exists()
    _finetune_run(runs / "sst2" / "baseline" / "seed-0", "sst2", 0, fingerprint="another-model")
    refused([*args, "--finetune-dir", runs], monkeypatch, capsys, "its sst2 runs were fine-tuned from tiny")
    assert not out.exists()


def test_readouts_glue_cls_pool_of_a_decoder_is_refused(gpt2_dir, glue_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    refused(["readouts", "glue", "--task", "sst2", "-m", gpt2_dir, "--data-dir", glue_data, "-o", out, "--no-progress"],
            monkeypatch, capsys, "--pool cls", "no [CLS] token")
    assert not out.exists()


def test_attention_stats_on_a_full_disk_leaves_nothing(tiny_dir, tmp_path, monkeypatch, capsys):
    import pandas as pd

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat .\na dog ran home .\n")
    out = tmp_path / "stats"
    args = ["attention", "stats", "-m", tiny_dir, "-d", corpus, "-o", out, "--no-progress"]

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(pd.DataFrame, "to_parquet", full)
        refused(args, monkeypatch, capsys, "no space left on the device")
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["c.txt"]  # no temporary folder either
    # over an earlier result: it is kept as it was
    code, message = run_cli(args, monkeypatch, capsys)
    assert code == 0, message
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert Path("statistics.parquet") in before and any(p.parts[0] == "figures" for p in before)
    with monkeypatch.context() as patch:
        patch.setattr(pd.DataFrame, "to_parquet", full)
        refused(args, monkeypatch, capsys, "no space left on the device")
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


# -- 6. messages that point the right way -----------------------------------------------------------------------


def test_attention_stats_long_sentence_names_its_own_option(tiny_dir, tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "long.txt"
    corpus.write_text("a short one .\n" + " ".join(["word"] * 2001) + "\n")
    out = tmp_path / "out"
    args = ["attention", "stats", "-m", tiny_dir, "-d", corpus, "-o", out, "--no-progress"]
    message = refused(args, monkeypatch, capsys, "long.txt:2", "2,001 words", "--max-words 512", "--max-words 2001")
    assert "--max-attention-words" not in message and "--attentions" not in message
    assert not out.exists()
    code, message = run_cli([*args, "--max-words", "20"], monkeypatch, capsys)
    assert code == 0, message
    assert "1 sentence(s) of more than 20 words skipped" in message
    meta = json.loads((out / "meta.json").read_text())["meta"]
    assert (meta["n_sentences"], meta["skipped_sentences"], meta["max_words"]) == (1, 1, 20)


def test_attention_view_too_long_says_what_the_viewer_supports(tiny_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "view"
    message = refused(["attention", "view", "-m", tiny_dir, "--text", " ".join(["word"] * 2201), "-o", out],
                      monkeypatch, capsys, "--text", "2,201 subword tokens", "at most 128 tokens", "no sliding window",
                      "first 126 words")
    assert "sliding-window policy" not in message
    assert not out.exists()


def test_finetune_max_length_names_its_minimum(tiny_dir, tmp_path, monkeypatch, capsys):
    refused(["finetune", "-m", tiny_dir, "--task", "rte", "--max-length", "1", "-o", tmp_path / "ft"], monkeypatch,
            capsys, "--max-length 1: must be at least 8")
    assert not (tmp_path / "ft").exists()
    from bertology.errors import UsageError
    from bertology.finetune.train import FinetuneConfig

    with pytest.raises(UsageError, match="^max_length 4: must be at least 8"):  # the library names the field
        FinetuneConfig(max_length=4)


@pytest.mark.parametrize("command", [["geometry", "contextuality"], ["knowledge", "static"],
                                     ["knowledge", "mlm-probe"], ["probe", "--tasks", "upos"]])
def test_a_cache_dir_that_is_a_file_is_named(command, tiny_dir, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    cache.write_text("not a folder")
    out = tmp_path / "out"
    message = refused([*command, "-m", tiny_dir, "--cache-dir", cache, "-o", out], monkeypatch, capsys,
                      f"--cache-dir {cache}: it is a file")
    assert "--out" not in message
    assert not out.exists()
