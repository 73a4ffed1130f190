"""A full disk in every command that writes: one line naming the path, no half-written file, an earlier result
left as it was, and the same command later (with room again) finishes.

The disk fills up where the files are written (as tests/test_bad_input_commands.py does for `attention stats`):
the N-th table written (``DataFrame.to_parquet``, what every result is made of) or the first model checkpoint
(``safetensors``' writer behind ``save_pretrained``) raises ``ENOSPC``.
"""

from __future__ import annotations

import gzip
import errno
from pathlib import Path

import pandas as pd
import pytest

from bertology.cli import main

NO_SPACE = "no space left on the device"


def _run(args, monkeypatch, capsys) -> tuple[int, str]:
    monkeypatch.setattr("sys.argv", ["bertology", *map(str, args)])
    code = 0
    try:
        main()
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.err + captured.out


def _full_at(patch, nth: int) -> None:
    """The ``nth`` table written (and every later one) finds the disk full."""
    real, calls = pd.DataFrame.to_parquet, []

    def to_parquet(self, *args, **kwargs):
        calls.append(1)
        if len(calls) >= nth:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *args, **kwargs)

    patch.setattr(pd.DataFrame, "to_parquet", to_parquet)


def _full_in_checkpoints(patch) -> None:
    import transformers.modeling_utils as modeling_utils

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    patch.setattr(modeling_utils, "safe_save_file", full)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()} \
        if folder.exists() else {}


def _hidden(folder: Path) -> list[str]:
    """Temporary files and folders (``.name.xyz.tmp``, ``.name.xyz/``) under ``folder`` and beside it."""
    found = [str(p) for p in folder.rglob(".*")] if folder.exists() else []
    return found + [str(p) for p in folder.parent.glob(f".{folder.name}*")]


def _refused_whole(args, out, monkeypatch, capsys, inject) -> str:
    """Run with the disk filling up as ``inject`` says: exit 1, one line naming a path under ``out``, nothing half
    written, every file already there as it was."""
    before = _snapshot(out)
    with monkeypatch.context() as patch:
        inject(patch)
        code, message = _run(args, monkeypatch, capsys)
    lines = message.strip().splitlines()
    assert code == 1 and "Traceback" not in message, message
    refusal = [line for line in lines if line.startswith("error: ")]
    assert len(refusal) == 1 and NO_SPACE in refusal[0] and str(out) in refusal[0], message
    assert _hidden(out) == [], _hidden(out)
    after = _snapshot(out)
    assert {name: after[name] for name in before} == before  # nothing that was there changed
    return refusal[0]


def _check_command(args, out, monkeypatch, capsys, *, checkpoints: bool = False, tables=(1, 2)):
    """Full disk on a fresh output (in a checkpoint when it writes some, then at each of ``tables``), then a whole
    run, then a full disk over that finished result: each refused whole; the result is still the finished one."""
    if checkpoints:  # first: a later run reuses the checkpoints an earlier one finished
        _refused_whole(args, out, monkeypatch, capsys, _full_in_checkpoints)
    for nth in tables:
        _refused_whole(args, out, monkeypatch, capsys, lambda patch: _full_at(patch, nth))
        assert not (out / "meta.json").exists()  # no result: its tables appear together or not at all
    code, message = _run(args, monkeypatch, capsys)
    assert code == 0, message
    assert (out / "meta.json").is_file() and _hidden(out) == []
    _refused_whole(args, out, monkeypatch, capsys, lambda patch: _full_at(patch, 1))


@pytest.fixture(scope="module")
def sst2_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("glue")
    (root / "sst2").mkdir()
    rows = "".join(f"a {'good' if i % 2 else 'bad'} film number {i} .\t{i % 2}\n" for i in range(40))
    (root / "sst2" / "train.tsv.gz").write_bytes(gzip.compress(("sentence\tlabel\n" + rows).encode()))
    (root / "sst2" / "dev.tsv").write_text("sentence\tlabel\n" + rows)
    return root


def test_finetune_on_a_full_disk(tmp_path, tiny_dir, sst2_dir, monkeypatch, capsys):
    out = tmp_path / "ft"
    args = ["finetune", "-m", tiny_dir, "--task", "sst2", "--seeds", "1", "--max-steps", "3", "--batch-size", "4",
            "--data-dir", sst2_dir, "-o", out, "--no-progress"]
    _check_command(args, out, monkeypatch, capsys, checkpoints=True)


def test_readouts_glue_on_a_full_disk(tmp_path, tiny_dir, sst2_dir, monkeypatch, capsys):
    out = tmp_path / "rg"
    args = ["readouts", "glue", "--task", "sst2", "-m", tiny_dir, "--data-dir", sst2_dir, "--quick",
            "--readouts", "lp", "--seeds", "1", "-o", out, "--no-progress"]
    _check_command(args, out, monkeypatch, capsys, tables=(1,))  # one table: scores


def test_readouts_squad_on_a_full_disk(tmp_path, tiny_dir, monkeypatch, capsys):
    from readouts_toy import toy_squad

    data = toy_squad(tmp_path / "toy.json", articles=4, paragraphs=2)
    out = tmp_path / "rs"
    args = ["readouts", "squad", "-m", tiny_dir, "--data", data, "--quick", "--readouts", "lp", "-o", out,
            "--no-progress"]
    _check_command(args, out, monkeypatch, capsys, checkpoints=True)


def test_compress_on_a_full_disk(tmp_path, tiny_dir, monkeypatch, capsys):
    out = tmp_path / "cp"
    args = ["compress", "-m", tiny_dir, "--methods", "fp16", "--max-train", "30", "--max-dev", "20", "--max-test",
            "20", "--rounds", "1", "-o", out, "--no-progress"]
    _check_command(args, out, monkeypatch, capsys, checkpoints=True)


def test_mlm_probe_on_a_full_disk(tmp_path, monkeypatch, capsys):
    from knowledge_models import save_tiny_encoder, write_toy_corpus

    model = save_tiny_encoder(tmp_path / "tiny-bert", seed=1)
    corpus = write_toy_corpus(tmp_path / "toy.txt")
    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "mlm"
    args = ["knowledge", "mlm-probe", "-m", model, "-d", corpus, "-o", out, "--quick", "--device", "cpu",
            "--no-progress"]
    _check_command(args, out, monkeypatch, capsys)


def test_report_on_a_full_disk(tmp_path, tiny_dir, monkeypatch, capsys):
    out = tmp_path / "reports"
    args = ["report", "-m", tiny_dir, "-o", out, "--sections", "tokenization", "--max-sentences", "20", "--seeds", "1",
            "--no-progress"]
    # a full disk is the run's, not one section's: the report stops in one line instead of showing a failed box
    for nth in (1, 2):
        _refused_whole(args, out, monkeypatch, capsys, lambda patch: _full_at(patch, nth))
        assert not list(out.rglob("index.html")) and not list(out.rglob("meta.json"))
    code, message = _run(args, monkeypatch, capsys)
    assert code == 0, message
    [page] = out.rglob("index.html")
    assert _hidden(out) == []
    # the page itself on a full disk: the earlier one stays
    real_write_text = Path.write_text

    def no_room_for_the_page(self, *args, **kwargs):
        if self.name.startswith(".index.html."):  # the temporary name of the page being written
            real_write_text(self, "<html>half a pa")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write_text(self, *args, **kwargs)

    message = _refused_whole([*args, "--fresh"], out, monkeypatch, capsys,
                             lambda patch: patch.setattr(Path, "write_text", no_room_for_the_page))
    assert str(page) in message


def test_claims_on_a_full_disk(tmp_path, tiny_dir, monkeypatch, capsys):
    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "claims"
    args = ["claims", "-m", tiny_dir, "-o", out, "--sections", "tokenization", "--max-sentences", "20", "--seeds", "1",
            "--no-progress"]
    for nth in (1, 2):  # in the model's report, then in the checklist's table
        _refused_whole(args, out, monkeypatch, capsys, lambda patch: _full_at(patch, nth))
        assert not list(out.rglob("claims.csv")) and not list(out.rglob("claims.html"))
    code, message = _run(args, monkeypatch, capsys)
    assert code == 0, message
    [table] = out.rglob("claims.csv")
    assert (table.parent / "claims.html").is_file() and _hidden(out) == []
    # over the finished checklist (the report's parts reused, its page written again: whole, with this run's
    # timings): one line naming the checklist's path, no temporary file, the earlier checklist as it was
    checklist = lambda: {n: b for n, b in _snapshot(table.parent).items() if n.startswith("claims.")}  # noqa: E731
    before = checklist()
    with monkeypatch.context() as patch:
        _full_at(patch, 1)
        code, message = _run(args, monkeypatch, capsys)
    refusal = [line for line in message.strip().splitlines() if line.startswith("error: ")]
    assert code == 1 and "Traceback" not in message, message
    assert len(refusal) == 1 and NO_SPACE in refusal[0] and str(table.parent / "claims") in refusal[0], message
    assert _hidden(out) == [] and checklist() == before and len(before) == 3  # csv, parquet, html
