"""One word per thing on the command line: a short flag means one option everywhere, and an old spelling keeps
working for one release with a note (docs/ARCHITECTURE.md's glossary)."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from bertology.errors import UsageError

runner = CliRunner()


def _commands(command, path: tuple[str, ...] = ()):
    """``(path, command)`` for every command under ``command`` (typer's own click), hidden groups included."""
    if hasattr(command, "commands"):
        for name, child in command.commands.items():
            yield from _commands(child, path + (name,))
    else:
        yield path, command


def short_flag_meanings(app: typer.Typer) -> dict[str, set[str]]:
    """Short flag -> the long spellings it stands for in the help of every command (hidden options left out)."""
    meanings: dict[str, set[str]] = {}
    for path, command in _commands(typer.main.get_command(app)):
        for parameter in command.params:
            if parameter.param_type_name != "option" or parameter.hidden:
                continue
            longs = [o for o in parameter.opts if o.startswith("--")]
            for short in (o for o in parameter.opts if len(o) == 2):
                meanings.setdefault(short, set()).update(longs)
    return meanings


def test_each_short_flag_stands_for_one_word():
    from bertology.cli import app

    meanings = short_flag_meanings(app)
    assert meanings["-t"] == {"--task", "--tasks"}  # the singular where a command takes one task
    for short, longs in meanings.items():
        assert len({spelling.rstrip("s") for spelling in longs}) == 1, (short, longs)


def test_the_check_sees_a_short_flag_with_two_meanings():
    planted = typer.Typer()

    @planted.command("one")
    def one(task: str = typer.Option("x", "--task", "-t")) -> None:
        pass

    @planted.command("two")
    def two(treebank: str = typer.Option("x", "--treebank", "-t")) -> None:
        pass

    assert short_flag_meanings(planted)["-t"] == {"--task", "--treebank"}


@pytest.mark.parametrize("command, option", [
    (("attention", "parse"), "--treebank"), (("tasks", "build"), "--treebank"), (("languages",), "--treebanks")])
def test_the_old_treebank_spelling_still_works_with_a_note(tmp_path, command, option):
    from bertology.cli import app

    missing = tmp_path / "missing"
    old = runner.invoke(app, [*command, "-t", str(missing)])
    assert f"note: -t is deprecated (it goes in the next release); use {option}" in old.stderr
    # the value reached the new option: the same one-line refusal names it
    assert isinstance(old.exception, UsageError) and str(old.exception) == f"{option} {missing}: no such file or folder"
    new = runner.invoke(app, [*command, option, str(missing)])
    assert "deprecated" not in new.stderr and str(new.exception) == str(old.exception)
    both = runner.invoke(app, [*command, option, str(missing), "-t", str(missing)])
    assert isinstance(both.exception, UsageError)
    assert str(both.exception) == f"-t is the old spelling of {option}; give only {option}"
    page = " ".join(runner.invoke(app, [*command, "--help"]).output.split())
    assert option in page and " -t " not in page


def test_the_attention_parsers_twin_option_is_untrained_and_control_its_old_spelling(tmp_path):
    """``attention parse --control`` meant the untrained twin, while ``probe --control`` means control tasks."""
    from bertology.attention.parsing import run_attention_analysis
    from bertology.attention.spec import AttentionParseSpec
    from bertology.cli import app
    from bertology.errors import DataError

    missing = tmp_path / "missing"
    old = runner.invoke(app, ["attention", "parse", "--control", "--treebank", str(missing)])
    assert "note: --control is deprecated (it goes in the next release); use --untrained" in old.stderr
    assert str(old.exception) == f"--treebank {missing}: no such file or folder"
    both = runner.invoke(app, ["attention", "parse", "--untrained", "--control"])
    assert str(both.exception) == "--control is the old spelling of --untrained; give only --untrained"
    assert {"untrained", "untrained_seed"} <= set(AttentionParseSpec.__dataclass_fields__)
    assert "control" not in AttentionParseSpec.__dataclass_fields__
    with pytest.warns(DeprecationWarning, match="control=...\\) is deprecated; use untrained="):
        with pytest.raises((DataError, FileNotFoundError, OSError)):
            run_attention_analysis("minilm", missing, control=True, probe_seeds=())


def test_compress_names_its_quantized_engine_apart_from_where_work_runs():
    """``--engine`` is local|ray everywhere (bertology.cli.options.engine_option); compress's PyTorch quantized
    engine is ``--quantized-engine``, its old ``--engine`` kept for one release."""
    from bertology.cli import app

    old = runner.invoke(app, ["compress", "--engine", "x86", "--max-train", "0"])
    assert "note: --engine is deprecated (it goes in the next release); use --quantized-engine" in old.stderr
    assert isinstance(old.exception, UsageError) and "--max-train 0" in str(old.exception)
    both = runner.invoke(app, ["compress", "--quantized-engine", "x86", "--engine", "x86"])
    assert str(both.exception) == "--engine is the old spelling of --quantized-engine; give only --quantized-engine"
    page = " ".join(runner.invoke(app, ["compress", "--help"]).output.split())
    assert "--quantized-engine" in page and "--engine " not in page
