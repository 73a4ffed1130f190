"""Bad input through the CLI: a clear message naming the file and line, exit code 1, nothing half-written."""

import json

import pytest
from typer.testing import CliRunner

from bertology.cli import app, main

GOOD_CONLLU = "# sent_id = a\n1\tDogs\tdog\tNOUN\tNNS\tNumber=Plur\t2\tnsubj\t_\t_\n2\tbark\tbark\tVERB\tVBP\t_\t0\troot\t_\t_\n\n"


def run_cli(args, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["bertology", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    captured = capsys.readouterr()
    return exit_info.value.code, " ".join((captured.err + captured.out).split())


@pytest.fixture
def tiny_model_dir(tmp_path_factory, tiny_bert):
    path = tmp_path_factory.mktemp("model")
    tiny_bert.model.save_pretrained(path)
    tiny_bert.tokenizer.save_pretrained(path)
    return path


CASES = {
    "empty.txt": (b"", "empty.txt: no sentences found"),
    "blanks.txt": (b"\n\n\n", "blanks.txt: no sentences found (3 blank line(s) skipped)"),
    "noroot.conllu": (GOOD_CONLLU.replace("\t0\troot", "\t1\troot").encode(),
                     "noroot.conllu:2: expected exactly one word with HEAD 0 (the root), found 0"),
    "loop.conllu": (("1\tDogs\t_\tNOUN\t_\t_\t2\tnsubj\t_\t_\n2\tbark\t_\tVERB\t_\t_\t0\troot\t_\t_\n"
                     "3\tvery\t_\tADV\t_\t_\t4\tadvmod\t_\t_\n4\tloud\t_\tADV\t_\t_\t3\tadvmod\t_\t_\n\n").encode(),
                    "loop.conllu:3: HEAD values contain a cycle (3 -> 4 -> 3); expected a tree"),
    "roots.conllu": (GOOD_CONLLU.replace("\t2\tnsubj", "\t0\troot").encode(),
                     "roots.conllu:3: expected exactly one word with HEAD 0 (the root), found 2 (words 1, 2)"),
    "late.txt": (b"fine words\n" * 2000 + "na\u00efve\n".encode("latin-1"), "late.txt:2001: not valid UTF-8"),
    "cols.conllu": (b"1\tDogs\tdog\tNOUN\n\n", "cols.conllu:1: expected 10 tab-separated CoNLL-U columns, found 4"),
    "id.conllu": (GOOD_CONLLU.replace("2\tbark", "x\tbark").encode(), "id.conllu:3: token ID 'x' is not an integer"),
    "form.conllu": (GOOD_CONLLU.replace("\tDogs\t", "\t\t").encode(), "form.conllu:2: empty word form"),
    "cols.tsv": (b"tr\tPAST\tHe walked .\nte\tPRES\n", "cols.tsv:2: expected 3 tab-separated columns"),
    "latin1.txt": ("café au lait\nna\u00efve\n".encode("latin-1"), "latin1.txt:1: not valid UTF-8"),
    "data.csv": (b"a,b\n", "unsupported file type '.csv'"),
    # the format is what most lines look like, not what the first one does
    "senteval-empty-first.txt": (b"tr\tPAST\t\nte\tPRES\tHe walks .\nva\tPAST\tHe walked .\n",
                                 "senteval-empty-first.txt:1: empty sentence in column 3"),
    "conllu-named.txt": (GOOD_CONLLU.replace("\tnsubj\t_\t_\n", "\tnsubj\t_\n").encode() + GOOD_CONLLU.encode(),
                         "conllu-named.txt:2: expected 10 tab-separated CoNLL-U columns, found 9"),
    "mixed.txt": (b"hello world\ntr\tX\tfoo bar\nmore text here\n",
                  "mixed.txt:2: looks like a SentEval (split<TAB>label<TAB>sentence) line, but 2 of the first 3 "
                  "lines are plain text"),
    "label.tsv": (b"tr\tPAST\tHe walked .\nte\t\tHe walks .\n", "label.tsv:2: empty label in column 2"),
    "spaced-label.tsv": (b"tr\tPAST \tHe walked .\n", "spaced-label.tsv:1: label 'PAST ' has spaces around it"),
    # a treebank without its text
    "notext.conllu": (GOOD_CONLLU.replace("\tDogs\t", "\t_\t").replace("\tbark\t", "\t_\t").encode(),
                      "notext.conllu: all 2 word forms are '_' (column FORM): the treebank ships without its text"),
    # ids and heads that int() refuses or the sentence does not hold
    "superscript.conllu": (GOOD_CONLLU.replace("2\tbark", "\u00b2\tbark").encode(),
                           "superscript.conllu:3: token ID '\u00b2' is not an integer"),
    "range.conllu": (("1-\u00b2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n" + GOOD_CONLLU).encode(),
                     "range.conllu:1: malformed token ID"),
    "negative-head.conllu": (GOOD_CONLLU.replace("\t2\tnsubj", "\t-1\tnsubj").encode(),
                             "negative-head.conllu:2: HEAD -1 out of range; expected 0..2"),
    "far-head.conllu": (GOOD_CONLLU.replace("\t2\tnsubj", "\t5\tnsubj").encode(),
                        "far-head.conllu:2: HEAD 5 out of range; expected 0..2"),
    "head.conllu": (GOOD_CONLLU.replace("\t2\tnsubj", "\t\u00b2\tnsubj").encode(),
                    "head.conllu:2: HEAD '\u00b2' is not an integer"),
    # .gz that is not gzip, or is cut short
    "plain.conllu.gz": (GOOD_CONLLU.encode(), "plain.conllu.gz: not a gzip file"),
    "cut.conllu.gz": (__import__("gzip").compress(GOOD_CONLLU.encode() * 200)[:-40],
                      "cut.conllu.gz: truncated gzip file"),
    "cut.txt.gz": (__import__("gzip").compress(b"hello world\n" * 5000)[:100], "cut.txt.gz: truncated gzip file"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_corpus_files(name, tmp_path, tiny_model_dir, monkeypatch, capsys):
    content, expected = CASES[name]
    path = tmp_path / name
    path.write_bytes(content)
    out = tmp_path / "store"
    code, message = run_cli(["extract", "--model", str(tiny_model_dir), "--data", str(path), "--out", str(out)],
                            monkeypatch, capsys)
    assert code == 1
    assert expected in message
    assert "Traceback" not in message
    assert not out.exists(), "nothing may be written for bad input"


def test_multiword_ranges_are_handled(tmp_path, tiny_model_dir, monkeypatch, capsys):
    conllu = ("1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n1\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_\n"
              "2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_\n3\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_\n\n")
    path = tmp_path / "mwt.conllu"
    path.write_text(conllu)
    code, message = run_cli(["extract", "--model", str(tiny_model_dir), "--data", str(path), "--out",
                             str(tmp_path / "s")], monkeypatch, capsys)
    assert code == 0, message
    from bertology.store import Store

    assert Store.open(tmp_path / "s").words(0) == ("do", "n't", "go")


def test_sentence_over_max_length_with_error_policy(tmp_path, tiny_model_dir, monkeypatch, capsys):
    path = tmp_path / "long.txt"
    path.write_text("short one\n" + " ".join(["word"] * 400) + "\n")
    code, message = run_cli(["extract", "--model", str(tiny_model_dir), "--data", str(path), "--out",
                             str(tmp_path / "s"), "--long-policy", "error"], monkeypatch, capsys)
    assert code == 1 and "line 2:" in message and "exceed" in message
    assert not (tmp_path / "s").exists()


def test_unknown_model_name(tmp_path, monkeypatch, capsys):
    path = tmp_path / "a.txt"
    path.write_text("hello world\n")
    code, message = run_cli(["extract", "--model", "no-such-org/no-such-model", "--data", str(path), "--out",
                             str(tmp_path / "s")], monkeypatch, capsys)
    assert code == 1 and "no-such-org/no-such-model" in message and "local path" in message


def test_output_of_another_model_or_input(tmp_path, tiny_model_dir, monkeypatch, capsys):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("hello world\n")
    b.write_text("goodbye world\n")
    out = str(tmp_path / "s")
    assert run_cli(["extract", "--model", str(tiny_model_dir), "--data", str(a), "--out", out], monkeypatch, capsys)[0] == 0
    code, message = run_cli(["extract", "--model", str(tiny_model_dir), "--data", str(b), "--out", out],
                            monkeypatch, capsys)
    assert code == 1 and "belongs to another extraction" in message and "input" in message
    code, message = run_cli(["extract", "--model", "minilm", "--data", str(a), "--out", out], monkeypatch, capsys)
    assert code == 1 and "fingerprint" in message


def test_store_from_older_format(tmp_path, tiny_model_dir, monkeypatch, capsys):
    a = tmp_path / "a.txt"
    a.write_text("hello world\n")
    out = tmp_path / "s"
    run_cli(["extract", "--model", str(tiny_model_dir), "--data", str(a), "--out", str(out)], monkeypatch, capsys)
    index = json.loads((out / "store.json").read_text())
    index["format_version"] = 0
    (out / "store.json").write_text(json.dumps(index))
    code, message = run_cli(["info", str(out)], monkeypatch, capsys)
    assert code == 1 and "format version 0" in message
    code, message = run_cli(["extract", "--model", str(tiny_model_dir), "--data", str(a), "--out", str(out)],
                            monkeypatch, capsys)
    assert code == 1 and "format version 0" in message


def test_info_reports_a_damaged_shard(tmp_path, tiny_model_dir, monkeypatch, capsys):
    a = tmp_path / "a.txt"
    a.write_text("hello world\nsecond sentence here\n")
    out = tmp_path / "s"
    run_cli(["extract", "--model", str(tiny_model_dir), "--data", str(a), "--out", str(out)], monkeypatch, capsys)
    code, message = run_cli(["info", str(out)], monkeypatch, capsys)
    assert code == 0 and "verified" in message
    shard = next(out.glob("shard-*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    code, message = run_cli(["info", str(out)], monkeypatch, capsys)
    assert code == 1 and "SHA-256" in message


def test_typer_app_help_lists_commands():
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0 and "extract" in result.output and "info" in result.output


def _extract(args, model_dir, monkeypatch, capsys):
    return run_cli(["extract", "--model", str(model_dir), "--no-progress", *args], monkeypatch, capsys)


def test_blank_lines_are_skipped_and_said(tmp_path, tiny_model_dir, monkeypatch, capsys):
    path = tmp_path / "para.txt"
    path.write_text("one sentence\n\nanother one\n\n")
    code, message = _extract(["--data", str(path), "--out", str(tmp_path / "s")], tiny_model_dir, monkeypatch, capsys)
    assert code == 0, message
    assert "skipped 2 blank line(s)" in message
    from bertology.store import Store

    assert Store.open(tmp_path / "s").n_sentences == 2


def test_senteval_txt_is_extracted_as_senteval(tmp_path, tiny_model_dir, monkeypatch, capsys):
    path = tmp_path / "bigram_shift.txt"
    path.write_text("te\tO\tThe dog barked .\ntr\tI\tdog The barked .\n")
    code, message = _extract(["--data", str(path), "--out", str(tmp_path / "s")], tiny_model_dir, monkeypatch, capsys)
    assert code == 0, message
    from bertology.store import Store

    assert Store.open(tmp_path / "s").words(0) == ("The", "dog", "barked", ".")  # not ("te", "O", ...)


BAD_OPTIONS = {
    "negative layer": (["--layers", "-1"], "--layers '-1': '-1' is not a layer"),
    "reversed range": (["--layers", "3-1"], "--layers '3-1': range '3-1' runs backwards"),
    "layer past the top": (["--layers", "7"], "--layers '7': layer 7 is out of range; expected layers 0-2"),
    "zero batch": (["--token-budget", "0"], "--token-budget 0: expected a whole number of at least 1"),
    "zero batch, old spelling": (["--batch-tokens", "0"], "--token-budget 0: expected a whole number of at least 1"),
    "negative max sentences": (["--max-sentences", "-1995"], "--max-sentences -1995: expected a whole number"),
    "zero attention words": (["--max-attention-words", "0"], "--max-attention-words 0: expected"),
    "unknown device": (["--device", "tpu"], "--device 'tpu': unknown device"),
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_options_are_one_line_and_write_nothing(case, tmp_path, tiny_model_dir, monkeypatch, capsys):
    args, expected = BAD_OPTIONS[case]
    path = tmp_path / "a.txt"
    path.write_text("hello world\n")
    out = tmp_path / "s"
    code, message = _extract(["--data", str(path), "--out", str(out), *args], tiny_model_dir, monkeypatch, capsys)
    assert code == 1 and expected in message, message
    assert "Traceback" not in message and not out.exists()


def test_max_sentences_takes_the_first_ones(tmp_path, tiny_model_dir, monkeypatch, capsys):
    path = tmp_path / "a.txt"
    path.write_text("one\ntwo\nthree\n")
    code, message = _extract(["--data", str(path), "--out", str(tmp_path / "s"), "--max-sentences", "2"],
                             tiny_model_dir, monkeypatch, capsys)
    assert code == 0, message
    from bertology.store import Store

    assert Store.open(tmp_path / "s").n_sentences == 2


def test_output_that_is_a_file_or_under_a_file(tmp_path, tiny_model_dir, monkeypatch, capsys):
    path = tmp_path / "a.txt"
    path.write_text("hello world\n")
    blocker = tmp_path / "taken"
    blocker.write_text("not a folder")
    for out, expected in ((blocker, "it is a file, not a folder"), (blocker / "s", f"{blocker} is a file")):
        code, message = _extract(["--data", str(path), "--out", str(out)], tiny_model_dir, monkeypatch, capsys)
        assert code == 1 and expected in message and "Traceback" not in message, message
    assert blocker.read_text() == "not a folder"


def test_read_only_output_folder(tmp_path, tiny_model_dir, monkeypatch, capsys):
    import os

    path = tmp_path / "a.txt"
    path.write_text("hello world\n")
    locked = tmp_path / "locked"
    locked.mkdir()
    if os.geteuid() == 0:  # root writes anywhere: the operating system's answer is simulated
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False
                            if str(p).startswith(str(locked)) and mode & os.W_OK else real_access(p, mode, **kw))
    else:
        locked.chmod(0o555)
    try:
        for out in (locked, locked / "s"):
            code, message = _extract(["--data", str(path), "--out", str(out)], tiny_model_dir, monkeypatch, capsys)
            assert code == 1 and "permission denied" in message and "Traceback" not in message, message
    finally:
        locked.chmod(0o755)
    assert list(locked.iterdir()) == []


def test_disk_full_during_extract_leaves_no_partial_shard(tmp_path, tiny_model_dir, monkeypatch, capsys):
    import errno
    import os

    path = tmp_path / "a.txt"
    path.write_text("".join(f"sentence number {i} is here\n" for i in range(40)))
    out = tmp_path / "s"
    real_fsync = os.fsync
    written = []

    def full_for_the_second_shard(fd):
        name = os.readlink(f"/proc/self/fd/{fd}")
        if ".shard-" in name:
            written.append(os.fstat(fd).st_size)
            if len(written) == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_for_the_second_shard)
    monkeypatch.setattr("bertology.extraction.spec.SHARD_TARGET_BYTES", 4000)
    code, message = _extract(["--data", str(path), "--out", str(out)], tiny_model_dir, monkeypatch, capsys)
    assert code == 1 and "Traceback" not in message, message
    assert "no space left on the device" in message and "run the same command again to resume" in message
    assert written[1] > 0  # the shard was half on disk when the space ran out
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    assert sorted(p.name for p in out.glob("shard-*")) == ["shard-00000.safetensors"]
    monkeypatch.setattr(os, "fsync", real_fsync)
    code, message = run_cli(["info", str(out)], monkeypatch, capsys)
    assert code == 1 and "shard 1: not complete" in message  # whole shards and missing ones, nothing partial
    assert "SHA-256" not in message and "index says" not in message and "missing" not in message
    code, message = _extract(["--data", str(path), "--out", str(out)], tiny_model_dir, monkeypatch, capsys)
    assert code == 0, message
    assert run_cli(["info", str(out)], monkeypatch, capsys)[0] == 0


def test_huge_attention_maps_are_refused_before_writing(tmp_path, tiny_model_dir, monkeypatch, capsys):
    path = tmp_path / "long.txt"
    path.write_text("short one\n" + " ".join(["word"] * 2000) + "\n")
    out = tmp_path / "s"
    code, message = _extract(["--data", str(path), "--out", str(out), "--attentions"], tiny_model_dir, monkeypatch,
                             capsys)
    assert code == 1 and "Traceback" not in message
    assert "long.txt:2: a sentence of 2,000 words" in message and "0.13 GB" in message
    assert "--max-attention-words" in message and not out.exists()
    path.write_text("short one\n" + " ".join(["word"] * 40) + "\n")
    code, message = _extract(["--data", str(path), "--out", str(out), "--attentions", "--max-attention-words", "30"],
                             tiny_model_dir, monkeypatch, capsys)
    assert code == 1 and "a sentence of 40 words" in message and not out.exists()
    code, message = _extract(["--data", str(path), "--out", str(out), "--attentions", "--max-attention-words", "40"],
                             tiny_model_dir, monkeypatch, capsys)
    assert code == 0, message
    # without attentions nothing is that big: no limit
    path.write_text(" ".join(["word"] * 2000) + "\n")
    code, message = _extract(["--data", str(path), "--out", str(tmp_path / "v")], tiny_model_dir, monkeypatch, capsys)
    assert code == 0, message


def test_help_states_the_attention_limit():
    from bertology.extraction import MAX_ATTENTION_WORDS

    result = CliRunner().invoke(app, ["extract", "--help"], terminal_width=200)
    assert f"default {MAX_ATTENTION_WORDS};" in " ".join(result.output.replace("│", " ").split())


def test_model_folder_without_tokenizer_files(tmp_path, tiny_bert, monkeypatch, capsys):
    folder = tmp_path / "weights-only"
    tiny_bert.model.save_pretrained(folder)
    path = tmp_path / "a.txt"
    path.write_text("the quick brown fox\n")
    code, message = _extract(["--data", str(path), "--out", str(tmp_path / "s")], folder, monkeypatch, capsys)
    assert code == 1 and "Traceback" not in message
    assert f"{folder}: the tokenizer has 5 tokens" in message and "no tokenizer files" in message
    assert not (tmp_path / "s").exists()


def test_a_damaged_cached_shard_is_recomputed_with_a_warning(tmp_path, tiny_model_dir, monkeypatch, capsys):
    from bertology.store import Store

    path = tmp_path / "a.txt"
    path.write_text("hello world\nsecond sentence here\n")
    out = tmp_path / "s"
    assert _extract(["--data", str(path), "--out", str(out)], tiny_model_dir, monkeypatch, capsys)[0] == 0
    expected = Store.open(out).layer(1)
    shard = next(out.glob("shard-*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # same size, another byte
    shard.write_bytes(bytes(data))
    code, message = _extract(["--data", str(path), "--out", str(out)], tiny_model_dir, monkeypatch, capsys)
    assert code == 0, message
    assert f"warning: {out}: 1 of 1 shard(s) damaged (shard-00000.safetensors: SHA-256 differs from the index); " \
           "recomputing them" in message and "Traceback" not in message and "UserWarning" not in message
    assert (Store.open(out).layer(1) == expected).all()
    assert run_cli(["info", str(out)], monkeypatch, capsys)[0] == 0


def test_info_on_a_store_without_its_sentences(tmp_path, tiny_model_dir, monkeypatch, capsys):
    path = tmp_path / "a.txt"
    path.write_text("hello world\n")
    out = tmp_path / "s"
    assert _extract(["--data", str(path), "--out", str(out)], tiny_model_dir, monkeypatch, capsys)[0] == 0
    (out / "sentences.json").unlink()
    code, message = run_cli(["info", str(out)], monkeypatch, capsys)
    assert code == 1 and "Traceback" not in message and "FileNotFoundError" not in message
    assert f"{out / 'sentences.json'}: missing; the store is incomplete or damaged" in message
    code, message = _extract(["--data", str(path), "--out", str(out)], tiny_model_dir, monkeypatch, capsys)
    assert code == 0 and "sentences.json: missing; rewriting it from the input" in message, message
    assert run_cli(["info", str(out)], monkeypatch, capsys)[0] == 0


def test_a_directory_as_data_says_what_it_holds(tmp_path, tiny_model_dir, monkeypatch, capsys):
    folder = tmp_path / "corpora"
    folder.mkdir()
    code, message = _extract(["--data", str(folder), "--out", str(tmp_path / "s")], tiny_model_dir, monkeypatch,
                             capsys)
    assert code == 1 and f"{folder}: is a directory and holds no corpus files" in message, message
    assert "unsupported file type" not in message
    (folder / "a.conllu").write_text(GOOD_CONLLU)
    (folder / "b.txt.gz").write_bytes(b"")
    (folder / "notes.md").write_text("x")
    code, message = _extract(["--data", str(folder), "--out", str(tmp_path / "s")], tiny_model_dir, monkeypatch,
                             capsys)
    assert code == 1 and "is a directory, not a file" in message and "it holds a.conllu, b.txt.gz" in message
    assert "notes.md" not in message and not (tmp_path / "s").exists()


def test_packaged_corpus_names_are_accepted_as_data(tmp_path, tiny_model_dir, monkeypatch, capsys):
    from bertology.attention.patterns import pattern_inputs
    from bertology.store import Store

    code, message = _extract(["--data", "ewt-test", "--max-sentences", "3", "--out", str(tmp_path / "s")],
                             tiny_model_dir, monkeypatch, capsys)
    assert code == 0, message
    assert Store.open(tmp_path / "s").n_sentences == 3
    texts, ids, source = pattern_inputs("ewt-train", max_sentences=2)
    assert len(texts) == 2 and ids[0].startswith("weblog") and source == "ewt-train"
    code, message = _extract(["--data", "ewt-tran", "--out", str(tmp_path / "t")], tiny_model_dir, monkeypatch,
                             capsys)
    assert code == 1 and "ewt-tran: file not found" in message
    assert "a packaged corpus (ewt-train, ewt-dev, ewt-test)" in message
    code, message = _extract(["--data", str(tmp_path / "corpus.csv"), "--out", str(tmp_path / "t")], tiny_model_dir,
                             monkeypatch, capsys)
    assert code == 1 and "or a packaged corpus (ewt-train, ewt-dev, ewt-test)" in message


def test_some_missing_forms_are_counted_in_one_warning(tmp_path):
    from bertology.data import read_conllu
    from bertology.errors import BertologyWarning

    text = GOOD_CONLLU.replace("\tbark\t", "\t_\t") + GOOD_CONLLU.replace("# sent_id = a", "# text = a _ b") \
        .replace("\tbark\t", "\t_\t") + GOOD_CONLLU
    path = tmp_path / "some.conllu"
    path.write_text(text)
    with pytest.warns(BertologyWarning, match=r"some.conllu: 1 of 6 word forms are '_' \(column FORM; first at "
                                              r"line 3\)"):
        sentences = read_conllu(path)
    assert sentences[0].words == ("Dogs", "_")


def test_a_model_folder_with_damaged_weights(tmp_path, tiny_bert, monkeypatch, capsys):
    folder = tmp_path / "damaged"
    tiny_bert.model.save_pretrained(folder)
    tiny_bert.tokenizer.save_pretrained(folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # cut short
    path = tmp_path / "a.txt"
    path.write_text("hello world\n")
    code, message = _extract(["--data", str(path), "--out", str(tmp_path / "s")], folder, monkeypatch, capsys)
    assert code == 1 and "Traceback" not in message and "SafetensorError" not in message, message
    assert f"{folder}: cannot load the model weights in model.safetensors" in message and "damaged" in message


def test_damaged_checkpoint_weights_are_one_line_naming_the_file(tmp_path, tiny_bert):
    from bertology.errors import ModelError
    from bertology.intervention.pruning import load_pruned
    from bertology.models.encoders import load_weights_file

    folder = tmp_path / "checkpoint"
    tiny_bert.model.save_pretrained(folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # cut short, as a full disk leaves it
    with pytest.raises(ModelError, match=r"model.safetensors.*damaged or cut short|damaged or cut short"):
        load_pruned(folder)
    with pytest.raises(ModelError, match=r"model\.safetensors: cannot read these weights .*damaged or cut short"):
        load_weights_file(weights)


def test_a_squad_file_that_is_not_gzip_is_one_line(tmp_path):
    from bertology.data import read_squad
    from bertology.errors import DataError

    path = tmp_path / "dev-v2.0.json.gz"
    path.write_text('{"version": "v2.0", "data": []}')
    with pytest.raises(DataError, match=r"dev-v2.0.json.gz: not a gzip file"):
        read_squad(path)
