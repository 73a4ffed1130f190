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


# -- subset sizes: one spelling (docs/ARCHITECTURE.md's glossary, "--max-<split>") ------------------------------

#: ``--max-<split>``: a split, in the task's own unit; ``--max-eval``: dev and test alike, each.
SPLIT_SIZES = {"--max-train": "train", "--max-dev": "dev", "--max-test": "test", "--max-eval": "dev and test"}
#: ``--max-sentences``: the first N records of each corpus read, before a task or a split is made from it.
CORPUS_SIZE = "--max-sentences"
#: ``--max-*`` limits that are no subset size: a length of one input or a budget of the computation.
NOT_SUBSET_SIZES = {"--max-length", "--max-words", "--max-attention-words", "--max-steps", "--max-pairs"}
#: Old spellings, hidden, kept for one release: (command, old) -> new.
OLD_SUBSET_SPELLINGS = {
    ("attention", "parse", "--max-sentences"): "--max-eval",
    ("attention", "parse", "--max-train-sentences"): "--max-train",
    ("knowledge", "mlm-probe", "--max-eval-sentences"): "--max-test",
    **{("ablate", command, "--max-examples"): "--max-dev"
       for command in ("heads", "layers", "table", "importance", "prune", "flagged")},
    **{("ablate", command, "--importance-examples"): "--max-train" for command in ("importance", "prune")},
    ("readouts", "squad", "--max-train-questions"): "--max-train",
    ("readouts", "squad", "--max-eval-questions"): "--max-test",
}


def subset_size_breaks(app: typer.Typer) -> list[str]:
    """Every ``--max-*`` option of every command that breaks the rule, as ``"command: option (why)"``."""
    breaks = []
    for path, command in _commands(typer.main.get_command(app)):
        where = " ".join(path)
        for parameter in command.params:
            for option in (o for o in parameter.opts if o.startswith("--max-")):
                if parameter.hidden:
                    # `bertology heads` is the readouts' old group name: the same commands
                    if (*(("readouts", *path[1:]) if path[0] == "heads" else path), option) not in OLD_SUBSET_SPELLINGS:
                        breaks.append(f"{where}: {option} (hidden, but no old spelling listed)")
                elif option in SPLIT_SIZES:
                    help_text = (parameter.help or "").lower()
                    if not all(split in help_text for split in SPLIT_SIZES[option].split(" and ")):
                        breaks.append(f"{where}: {option} (its help does not name the split)")
                elif option != CORPUS_SIZE and option not in NOT_SUBSET_SIZES:
                    breaks.append(f"{where}: {option} (not --max-<split> nor --max-sentences)")
    return breaks


def test_every_subset_size_is_spelled_max_split_or_max_sentences():
    from bertology.cli import app

    assert subset_size_breaks(app) == []


def test_the_subset_size_check_sees_a_bad_spelling():
    planted = typer.Typer()

    @planted.command("one")
    def one(max_examples: int = typer.Option(1, "--max-examples", help="dev examples"),
            max_dev: int = typer.Option(1, "--max-dev", help="how many to score"),
            old: int = typer.Option(None, "--max-questions", hidden=True)) -> None:
        pass

    @planted.command("two")
    def two(max_train: int = typer.Option(1, "--max-train", help="train sentences")) -> None:
        pass

    assert subset_size_breaks(planted) == [
        "one: --max-examples (not --max-<split> nor --max-sentences)",
        "one: --max-dev (its help does not name the split)",
        "one: --max-questions (hidden, but no old spelling listed)"]


def _refusal_of(command: tuple[str, ...], option: str, tmp_path) -> list[str]:
    """Arguments that get ``command`` to refuse ``option 0`` before anything heavy loads."""
    arguments = [*command]
    if command[0] == "ablate":  # a checkpoint folder must exist; the sizes are checked before it is read
        (tmp_path / "config.json").write_text("{}")
        arguments += ["--model", str(tmp_path)]
        arguments += {"layers": ["--layers", "1"], "heads": ["--heads", "L1H0"],
                      "prune": ["--out", str(tmp_path / "pruned")]}.get(command[1], [])
    return arguments + [option, "0"]


@pytest.mark.parametrize("old", sorted(OLD_SUBSET_SPELLINGS), ids=lambda key: " ".join(key))
def test_each_old_subset_spelling_still_works_with_a_note(tmp_path, old):
    from bertology.cli import app

    *command, old_option = old
    new = OLD_SUBSET_SPELLINGS[old]
    before = runner.invoke(app, _refusal_of(tuple(command), old_option, tmp_path))
    assert f"note: {old_option} is deprecated (it goes in the next release); use {new}" in before.stderr
    # the value reached the new option: the refusal names it
    assert isinstance(before.exception, UsageError), before.output
    assert str(before.exception) == f"{new} 0: expected a whole number of at least 1"
    now = runner.invoke(app, _refusal_of(tuple(command), new, tmp_path))
    assert "deprecated" not in now.stderr and str(now.exception) == str(before.exception)
    both = runner.invoke(app, _refusal_of(tuple(command), new, tmp_path)[:-2] + [new, "5", old_option, "5"])
    assert str(both.exception) == f"{old_option} is the old spelling of {new}; give only {new}"
    page = " ".join(runner.invoke(app, [*command, "--help"]).output.split())
    assert new in page and f"{old_option} " not in page


def test_the_renamed_library_sizes_keep_their_old_keywords_with_a_warning(tmp_path):
    from bertology.attention.parsing import run_attention_analysis
    from bertology.attention.spec import AttentionParseSpec
    from bertology.errors import SettingError
    from bertology.knowledge.mlm_probe import mlm_probe
    from bertology.knowledge.spec import MLMProbeSpec

    assert {"max_eval", "max_train"} <= set(AttentionParseSpec.__dataclass_fields__)
    assert not {"max_sentences", "max_train_sentences"} & set(AttentionParseSpec.__dataclass_fields__)
    assert "max_test" in MLMProbeSpec.__dataclass_fields__ and "max_eval_sentences" not in MLMProbeSpec.__dataclass_fields__
    # the old keyword reaches the new field: its refusal names the new one
    with pytest.warns(DeprecationWarning, match=r"max_train_sentences=...\) is deprecated; use max_train="):
        with pytest.raises(SettingError, match="^max_train 0: "):
            run_attention_analysis("minilm", tmp_path / "missing", max_train_sentences=0)
    with pytest.warns(DeprecationWarning, match=r"max_eval_sentences=...\) is deprecated; use max_test="):
        with pytest.raises(SettingError, match="^max_test 0: "):
            mlm_probe("minilm", tmp_path / "missing", max_eval_sentences=0)
