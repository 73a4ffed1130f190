"""The languages experiment's settings: one frozen :class:`LanguagesSpec`, checked once, its defaults the
command's, a bad value one error naming the setting (and on the command line its option)."""

from __future__ import annotations

import dataclasses

import pytest

from bertology.errors import DataError, SettingError, UsageError
from bertology.languages.spec import LanguagesSpec


def test_defaults_spellings_and_frozen():
    spec = LanguagesSpec()
    assert (spec.seeds, spec.tasks, spec.max_train, spec.max_dev, spec.train_fraction) == ((0, 1, 2), ("upos",), 5000,
                                                                                          2000, 0.8)
    assert LanguagesSpec(tasks="UPOS, deprel,upos", seeds=[3], layers=[0, 2]) == \
        LanguagesSpec(tasks=("upos", "deprel"), seeds=(3,), layers=(0, 2))
    assert LanguagesSpec(tasks="none").tasks == () == LanguagesSpec(tasks=()).tasks
    assert LanguagesSpec.of(spec, max_train=None).max_train is None and LanguagesSpec.of(None) == spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.seeds = (1,)
    with pytest.raises(UsageError, match="unknown languages setting.*max_trian"):
        LanguagesSpec.of(max_trian=3)


@pytest.mark.parametrize("settings, shown", [
    ({"tasks": "upos,ner"}, "tasks ner: expected any of upos, deprel"),
    ({"tasks": ""}, "tasks '': expected any of upos, deprel"),
    ({"seeds": ()}, r"seeds \(none\)"),
    ({"train_fraction": 0}, "train_fraction 0"),
    ({"max_train": 1}, "max_train 1: expected at least 2 examples"),
    ({"max_dev": 0}, "max_dev 0"),
    ({"max_sentences": 0}, "max_sentences 0: expected a whole number of at least 1"),
    ({"projection_sentences": 0}, "projection_sentences 0"),
    ({"n_boot": 0}, "n_boot 0"),
])
def test_a_bad_setting_is_one_error_naming_it(settings, shown):
    with pytest.raises(SettingError, match=f"^{shown}") as caught:
        LanguagesSpec(**settings)
    assert not isinstance(caught.value, DataError)
    assert str(caught.value.as_option()).startswith("--" + caught.value.setting.replace("_", "-"))


def test_the_command_names_the_option(tmp_path):
    from typer.testing import CliRunner

    from bertology.cli import app

    (tmp_path / "fr_x-ud-test.conllu").write_text("")
    result = CliRunner().invoke(app, ["languages", "--treebanks", str(tmp_path), "--max-train", "1", "-o", str(tmp_path / "o")])
    assert isinstance(result.exception, UsageError)
    assert str(result.exception).startswith("--max-train 1: expected at least 2 examples")
    result = CliRunner().invoke(app, ["languages", "--treebanks", str(tmp_path), "--tasks", "ner"])
    assert str(result.exception).startswith("--tasks ner: expected any of upos, deprel")
    assert not (tmp_path / "o").exists()


def test_run_languages_takes_the_spec_or_its_keywords():
    from bertology.languages import run_languages

    with pytest.raises(SettingError, match="^max_dev 1"):  # checked before anything is read or loaded
        run_languages("minilm", "/nonexistent", max_dev=1)
    with pytest.raises(UsageError, match="unknown languages setting"):
        run_languages("minilm", "/nonexistent", LanguagesSpec(), max_devv=5)
