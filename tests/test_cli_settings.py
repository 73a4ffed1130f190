"""The library speaks in settings, the command line in options: a library error names the keyword (a
``SettingError``, a hint's ``name=``) and the same error through a command names that command's option, in one
place (``bertology.cli.options.speaking_options``, every command of a ``CommandApp``)."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from bertology.cli import options
from bertology.errors import DataError, SettingError, UsageError

runner = CliRunner()


def test_a_library_error_names_the_keyword_and_the_command_the_option(tmp_path):
    from bertology.cli import app
    from bertology.knowledge.lama import lama

    folder = tmp_path / "lama"
    folder.mkdir()
    template = "[X] is in [Y] ."
    with pytest.raises(SettingError) as library:
        lama("minilm", folder, template=template, device="cpu")
    assert str(library.value) == ("template: applies to a single relation file given as data=, not to a LAMA "
                                  "folder")
    command = runner.invoke(app, ["knowledge", "lama", "--data", str(folder), "--template", template,
                                  "--device", "cpu"])
    assert isinstance(command.exception, UsageError)
    assert str(command.exception) == ("--template: applies to a single relation file given as --data, not to a "
                                      "LAMA folder")


def test_a_setting_checked_by_the_library_is_refused_naming_the_option(tmp_path):
    """``resolve_device`` is the library's: its SettingError names ``device``; ``probe`` says ``--device``."""
    from bertology.cli import app
    from bertology.runtime import resolve_device

    with pytest.raises(SettingError, match="^device 'gpu7': unknown device"):
        resolve_device("gpu7")
    command = runner.invoke(app, ["probe", "--tasks", "upos", "--device", "gpu7", "--out", str(tmp_path / "out")])
    assert isinstance(command.exception, UsageError)
    assert str(command.exception).startswith("--device 'gpu7': unknown device")


def _planted_app(error: Exception) -> typer.Typer:
    planted = options.CommandApp(settings={"allow_mismatch": "--allow-task-mismatch"})

    @planted.command("run")
    def run(max_sentences: int = typer.Option(None, "--max-sentences"),
            min_count: int = typer.Option(5, "--min-count"),
            untrained: bool = typer.Option(True, "--untrained/--no-untrained"),
            data: str = options.data_option(),
            old: int = options.old_option("--max-examples")) -> None:
        raise error

    @planted.command("other")
    def other() -> None:
        pass

    return planted


@pytest.mark.parametrize("error, shown", [
    (SettingError("min_count", 0, "expected a whole number of at least 1", shown="0"),
     "--min-count 0: expected a whole number of at least 1"),
    (SettingError("untrained", True, "needs a model; leave untrained= out", shown=""),
     "--untrained: needs a model; leave --untrained out"),
    (SettingError("unknown_setting", 3, "expected 2"), "--unknown-setting 3: expected 2"),
    (DataError("no word type occurs 5 times; give more text (max_sentences=, data=) or lower min_count="),
     "no word type occurs 5 times; give more text (--max-sentences, --data) or lower --min-count"),
    (DataError("fine-tuned on rte; give allow_mismatch= to score it anyway"),
     "fine-tuned on rte; give --allow-task-mismatch to score it anyway"),
    # a keyword the command has no option for, an example value, a hidden old spelling: left as they are
    (DataError("pass cache_dir= or seeds=(0, 1) or old="), "pass cache_dir= or seeds=(0, 1) or old="),
])
def test_speaking_options_names_the_commands_options(error, shown):
    result = runner.invoke(_planted_app(error), ["run"])
    assert type(result.exception) is (UsageError if isinstance(error, SettingError) else type(error))
    assert str(result.exception) == shown


def test_every_command_group_speaks_in_options():
    """Each typer app of bertology.cli is a CommandApp, so no command shows a library keyword for its option."""
    from bertology.cli import app

    groups = [("bertology", app)] + [(group.name, group.typer_instance) for group in app.registered_groups]
    plain = [name for name, group in groups if not isinstance(group, options.CommandApp)]
    assert not plain, f"typer apps that do not translate library settings: {plain}; use options.CommandApp"
    assert len(groups) >= 8


def test_an_error_that_escapes_a_command_is_still_shown_with_its_option(capsys, monkeypatch):
    """``bertology.cli.main`` names the option of a SettingError raised outside ``speaking_options`` (a typer
    callback, a command group not yet a CommandApp) by its default spelling."""
    import sys

    from bertology import cli

    monkeypatch.setattr(sys, "argv", ["bertology", "version"])
    monkeypatch.setattr(cli, "app", lambda: (_ for _ in ()).throw(SettingError("batch_size", 0, "expected 1+",
                                                                                 shown="0")))
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 1
    assert "error: --batch-size 0: expected 1+" in capsys.readouterr().err
