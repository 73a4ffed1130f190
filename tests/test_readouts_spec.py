"""The readouts experiments' settings: one frozen spec each (:mod:`bertology.readouts.spec`), checked once, its
defaults and ``--quick`` presets the command's, a bad value one error naming the setting (and, on the command
line, its option); the library's config made from it as the command runs it."""

from __future__ import annotations

import dataclasses

import pytest

from bertology.errors import DataError, SettingError, UsageError
from bertology.readouts.names import SEED_READOUTS
from bertology.readouts.spec import GLUE_PRESETS, GLUE_READOUTS, SQUAD_PRESETS, GlueReadoutsSpec, SquadReadoutsSpec


def _options(command) -> set[str]:
    """Every option name a typer command declares."""
    import typer.main

    return {name for param in typer.main.get_command(_app()).commands[command].params for name in param.opts}


def _app():
    from bertology.cli.readouts import app

    return app


def test_squad_defaults_are_the_seed_s_experiment_and_quick_shrinks_the_sizes():
    spec = SquadReadoutsSpec()
    assert spec.readouts == SEED_READOUTS and spec.classify_readouts == ("lp",)
    assert spec.checkpoints == (0.0, 0.3, 1.0) and spec.finetune_checkpoints == (0.3, 1.0) and spec.pretrained
    assert (spec.max_length, spec.stride, spec.batch_size, spec.readout_epochs, spec.patience) == (384, 128, 16, 10, 2)
    assert spec.max_train is None and spec.readout_checkpoints is None and spec.curve == ()
    quick = SquadReadoutsSpec(quick=True, max_length=96, readouts="LP")
    assert (quick.max_length, quick.stride, quick.max_train, quick.readout_epochs) == (96, 32, 64, 2)
    assert quick.readouts == ("lp",) and quick.given == {"max_length", "readouts"}
    assert quick.presets()["max_length"] == (96, True) and quick.presets()["stride"] == (32, False)
    assert set(quick.presets()) == set(SQUAD_PRESETS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.mode = "answerable"
    # strings (the command line's) and sequences (the library's) make the same spec
    assert SquadReadoutsSpec(checkpoints="0,1", curve="0.5", readout_checkpoints="1", classify_readouts="") == \
        SquadReadoutsSpec(checkpoints=(0, 1.0), curve=(0.5,), readout_checkpoints=(1,), classify_readouts=())


def test_glue_defaults_and_quick():
    spec = GlueReadoutsSpec()
    assert spec.readouts == GLUE_READOUTS and spec.seeds == (0, 1, 2) and spec.pool == "cls"
    assert (spec.epochs, spec.patience, spec.max_train, spec.max_dev, spec.batch_size) == (50, 5, None, None, 32)
    quick = GlueReadoutsSpec(quick=True, epochs=3)
    assert (quick.max_train, quick.max_dev, quick.epochs, quick.patience) == (200, 100, 3, 1)
    assert quick.readouts == GLUE_READOUTS[:2] and quick.given == {"epochs"}
    assert set(quick.presets()) == set(GLUE_PRESETS)


@pytest.mark.parametrize("kind, settings, shown", [
    (SquadReadoutsSpec, {"readouts": "lp,adapter-64"}, "readouts 'adapter-64': unknown readout"),
    (SquadReadoutsSpec, {"readouts": ""}, "readouts '': expected comma-separated readout names"),
    (SquadReadoutsSpec, {"classify_readouts": "nope"}, "classify_readouts 'nope'"),
    (SquadReadoutsSpec, {"checkpoints": "0.3,x"}, "checkpoints '0.3,x': expected fractions"),
    (SquadReadoutsSpec, {"checkpoints": "-1"}, "checkpoints '-1'"),
    (SquadReadoutsSpec, {"checkpoints": "0,1", "readout_checkpoints": "0.5"},
     r"readout_checkpoints '0.5': expected some of the checkpoints \(0,1\)"),
    (SquadReadoutsSpec, {"curve": "0"}, "curve '0': expected fractions of an epoch above 0"),
    (SquadReadoutsSpec, {"mode": "squad1"}, "mode 'squad1': expected one of squad2, answerable"),
    (SquadReadoutsSpec, {"test_share": 1.5}, "test_share 1.5: expected a fraction"),
    (SquadReadoutsSpec, {"dev_share": 0}, "dev_share 0: expected a fraction"),
    (SquadReadoutsSpec, {"seeds": ()}, r"seeds \(none\)"),
    (SquadReadoutsSpec, {"max_length": 0}, "max_length 0: expected a whole number of at least 1"),
    (SquadReadoutsSpec, {"stride": -1}, "stride -1: expected a whole number of at least 0"),
    (SquadReadoutsSpec, {"patience": -1}, r"patience -1: .* \(0: no early stopping\)"),
    (SquadReadoutsSpec, {"readout_epochs": 0}, "readout_epochs 0"),
    (SquadReadoutsSpec, {"batch_size": 2.5}, "batch_size 2.5"),
    (SquadReadoutsSpec, {"finetune_batch_size": 0}, "finetune_batch_size 0"),
    (SquadReadoutsSpec, {"max_train": 0}, "max_train 0"),
    (SquadReadoutsSpec, {"max_test": -3}, "max_test -3"),
    (SquadReadoutsSpec, {"readout_lr": 0}, "readout_lr 0: expected a positive learning rate"),
    (SquadReadoutsSpec, {"finetune_lr": -1e-5}, "finetune_lr -1e-05"),
    (GlueReadoutsSpec, {"pool": "max"}, "pool 'max': expected cls or mean"),
    (GlueReadoutsSpec, {"readouts": "lp,svm"}, "readouts 'svm'"),
    (GlueReadoutsSpec, {"early_stopping_share": 1}, r"early_stopping_share 1: expected a fraction in \[0, 1\)"),
    (GlueReadoutsSpec, {"epochs": 0}, "epochs 0"),
    (GlueReadoutsSpec, {"patience": -2}, "patience -2"),
    (GlueReadoutsSpec, {"max_train": 0}, "max_train 0"),
    (GlueReadoutsSpec, {"max_dev": 0}, "max_dev 0"),
    (GlueReadoutsSpec, {"lr": 0}, "lr 0"),
    (GlueReadoutsSpec, {"batch_size": 0}, "batch_size 0"),
    (GlueReadoutsSpec, {"seeds": []}, r"seeds \(none\)"),
])
def test_a_bad_setting_is_one_error_naming_it_and_its_option(kind, settings, shown):
    with pytest.raises(SettingError, match=f"^{shown}") as caught:
        kind(**settings)
    error = caught.value
    assert isinstance(error, UsageError) and not isinstance(error, DataError)  # a setting, not bad input data
    option = kind.option(error.setting)
    assert str(error.as_option()).startswith(f"{option} ")
    command = "squad" if kind is SquadReadoutsSpec else "glue"
    assert option in _options(command), f"{option} is not an option of `readouts {command}`"


def test_every_field_is_an_option_of_its_command_with_the_spec_s_default():
    import typer.main

    for kind, command in ((SquadReadoutsSpec, "squad"), (GlueReadoutsSpec, "glue")):
        params = {param.opts[0]: param for param in typer.main.get_command(_app()).commands[command].params}
        defaults = kind()
        for field in dataclasses.fields(kind):
            if field.name in ("given", "seeds"):
                continue
            option = kind.option(field.name)
            assert option in params, f"{option} missing from `readouts {command}`"
            default = params[option].default
            if field.name in kind.PRESETS:
                assert default is None, f"{option}: None on the command line means the spec's preset"
            elif field.name in ("readout_lr", "test_share", "dev_share", "early_stopping_share"):
                # None: an old spelling (--head-lr, --eval-share, --heldout-share) may give it; the help says the default
                assert default is None and f"default {getattr(defaults, field.name):g}" in params[option].help
            elif field.name == "checkpoints":
                assert kind(checkpoints=default).checkpoints == defaults.checkpoints
            elif field.name == "curve":
                assert kind(curve=default).curve == defaults.curve
            elif field.name != "quick":
                assert default == getattr(defaults, field.name), option
        assert params["--seeds"].default == len(defaults.seeds)


def test_the_squad_config_is_made_from_the_spec():
    from bertology.readouts.squad import SquadReadoutsConfig

    spec = SquadReadoutsSpec(checkpoints="0,0.5", curve="0.25", seeds=(4, 5), patience=0, readout_lr=2e-3,
                             finetune_lr=1e-4, quick=True, readout_checkpoints="0.5")
    config = SquadReadoutsConfig.from_spec(spec, "cpu", progress=False)
    assert config.readouts == ("lp", "ap") and config.classify_readouts == ("lp",) and config.seeds == (4, 5)
    assert (config.max_length, config.stride, config.max_train, config.max_test) == (128, 32, 64, 32)
    assert config.pretrained and config.readout_checkpoints == (0.5,) and config.device == "cpu" and not config.progress
    assert config.finetune.checkpoints == (0.5,) and config.finetune.evaluate_at == (0.25,)
    assert (config.finetune.lr, config.finetune.batch_size, config.finetune.seed) == (1e-4, 8, 4)  # the first seed
    assert (config.readout.epochs, config.readout.patience, config.readout.lr, config.readout.batch_size) == \
        (2, None, 2e-3, 8)  # patience 0: no early stopping
    assert config.readout.standardise
    assert SquadReadoutsConfig.from_spec(SquadReadoutsSpec(checkpoints="0")).finetune is None
    with pytest.raises(SettingError, match="^mode 'squad1'"):  # the library's config names the setting too
        SquadReadoutsConfig(mode="squad1")


def test_the_glue_config_is_made_from_the_spec():
    from bertology.readouts.glue import GlueReadoutsConfig

    spec = GlueReadoutsSpec(readouts="lp", pool="mean", seeds=(1,), max_train=50, patience=3, lr=0.01,
                            batch_size=8, references=False, standardise=False, early_stopping_share=0)
    config = GlueReadoutsConfig.from_spec(spec, data_dir="/data/glue", device="cpu", progress=False)
    assert (config.readouts, config.pool, config.seeds, config.max_train, config.max_dev) == (("lp",), "mean", (1,), 50,
                                                                                            None)
    assert (config.data_dir, config.early_stopping_share, config.references, config.device) == ("/data/glue", 0, False, "cpu")
    assert (config.readout.epochs, config.readout.patience, config.readout.lr, config.readout.batch_size) == \
        (50, 3, 0.01, 8)
    assert not config.readout.standardise
    with pytest.raises(SettingError, match="^pool 'max'"):
        GlueReadoutsConfig(pool="max")


def test_the_command_refuses_a_bad_setting_in_one_line_before_loading_anything(tmp_path):
    from typer.testing import CliRunner

    result = CliRunner().invoke(_app(), ["squad", "-m", "minilm", "-o", str(tmp_path / "o"), "--mode", "squad1"])
    assert isinstance(result.exception, UsageError) and str(result.exception).startswith("--mode 'squad1': ")
    result = CliRunner().invoke(_app(), ["glue", "-t", "rte", "-m", "minilm", "--quick",
                                         "--patience", "-1"])
    assert isinstance(result.exception, UsageError) and str(result.exception).startswith("--patience -1: ")
    assert not (tmp_path / "o").exists()


def test_quick_says_the_sizes_it_chose_and_which_were_given(capsys):
    from bertology.cli.readouts import _say_quick

    _say_quick(SquadReadoutsSpec(quick=True, stride=40, max_length=96, readouts="lp"))
    said = " ".join(capsys.readouterr().out.split())
    assert said.startswith("--quick: --max-length 96 (given), --stride 40 (given), --batch-size 8,")
    assert "--max-train 64, --max-test 32," in said and "--readouts lp (given)" in said and "--classify-readouts lp," in said
    _say_quick(GlueReadoutsSpec(quick=True, epochs=2, max_train=500))
    said = " ".join(capsys.readouterr().out.split())
    assert said == "--quick: --max-train 500 (given), --max-dev 100, --epochs 2 (given), --patience 1, --readouts lp,ap"
    _say_quick(SquadReadoutsSpec(stride=64))
    assert "--max-train all, --max-test all," in capsys.readouterr().out


# -- the splits' old keywords (train/heldout/eval before the glossary's train/dev/test) still work, with a warning

OLD_KEYWORDS = [("SquadReadoutsSpec", "eval_share", "test_share", 0.3), ("SquadReadoutsSpec", "heldout_share", "dev_share", 0.3),
                ("SquadReadoutsSpec", "max_train_questions", "max_train", 7),
                ("SquadReadoutsSpec", "max_eval_questions", "max_test", 7),
                ("SquadReadoutsConfig", "eval_share", "test_share", 0.3),
                ("SquadReadoutsConfig", "heldout_share", "dev_share", 0.3),
                ("SquadReadoutsConfig", "max_train_questions", "max_train", 7),
                ("SquadReadoutsConfig", "max_eval_questions", "max_test", 7),
                ("SquadReadoutsConfig", "max_heldout_questions", "max_dev", 7),
                ("GlueReadoutsSpec", "heldout_share", "early_stopping_share", 0.3),
                ("GlueReadoutsConfig", "heldout_share", "early_stopping_share", 0.3)]


def _kind(name: str):
    import bertology.readouts.glue as glue
    import bertology.readouts.spec as spec
    import bertology.readouts.squad as squad

    return next(getattr(module, name) for module in (spec, squad, glue) if hasattr(module, name))


@pytest.mark.parametrize("kind, old, new, value", OLD_KEYWORDS)
def test_an_old_keyword_gives_its_new_field_with_a_deprecation_warning(kind, old, new, value):
    kind = _kind(kind)
    with pytest.warns(DeprecationWarning, match=f"{kind.__name__}\\({old}=...\\) is deprecated .*; use {new}="):
        made = kind(**{old: value})
    assert getattr(made, new) == value and made == kind(**{new: value})
    assert old not in {f.name for f in dataclasses.fields(kind)}
    with pytest.raises(SettingError, match=f"^{old} {value}: the old name of {new}; give only {new}"):
        kind(**{old: value, new: value})


def test_run_squad_readouts_takes_its_test_file_by_the_old_keyword_with_a_warning(tmp_path):
    from bertology.readouts.squad import run_squad_readouts

    missing = tmp_path / "missing.json"
    with pytest.warns(DeprecationWarning, match=r"run_squad_readouts\(eval_path=...\) is deprecated"):
        with pytest.raises(UsageError, match="test_path= without train_path="):  # it reached test_path
            run_squad_readouts("minilm", tmp_path / "out", eval_path=missing)
    with pytest.raises(SettingError, match="eval_path .*: the old name of test_path"):
        run_squad_readouts("minilm", tmp_path / "out", test_path=missing, eval_path=missing)
    with pytest.raises(TypeError, match="unexpected keyword argument 'evil_path'"):
        run_squad_readouts("minilm", tmp_path / "out", evil_path=missing)
    assert not (tmp_path / "out").exists()
