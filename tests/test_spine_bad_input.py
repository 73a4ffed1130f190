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
    "blank.txt": (b"one sentence\n\nanother\n", "blank.txt:2: empty sentence"),
    "cols.conllu": (b"1\tDogs\tdog\tNOUN\n\n", "cols.conllu:1: expected 10 tab-separated CoNLL-U columns, found 4"),
    "id.conllu": (GOOD_CONLLU.replace("2\tbark", "x\tbark").encode(), "id.conllu:3: token ID 'x' is not an integer"),
    "form.conllu": (GOOD_CONLLU.replace("\tDogs\t", "\t\t").encode(), "form.conllu:2: empty word form"),
    "cols.tsv": (b"tr\tPAST\tHe walked .\nte\tPRES\n", "cols.tsv:2: expected 3 tab-separated columns"),
    "latin1.txt": ("café au lait\nna\u00efve\n".encode("latin-1"), "latin1.txt:1: not valid UTF-8"),
    "data.csv": (b"a,b\n", "unsupported file type '.csv'"),
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
