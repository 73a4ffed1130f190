"""The command line starts light (no torch, transformers, sklearn... until a command runs), every help page
answers, usage errors are one line before anything heavy loads, and `main()` turns an unexpected error into
one line (the traceback with --debug or BERTOLOGY_DEBUG=1) and Ctrl-C into one line and exit code 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

import bertology.cli as cli
from bertology.cli import app, main

HEAVY = ("torch", "transformers", "sklearn", "matplotlib", "scipy", "pandas", "pyarrow")
INTERRUPTED = "interrupted; rerun the same command to resume"


def _sigint(disposition):
    """A ``preexec_fn`` that gives the child ``disposition`` for SIGINT, whatever the runner's is: a runner started
    as a background job of a non-interactive shell (``nohup make test &``, some CI runners) ignores SIGINT, and
    a child inherits an ignored signal across ``exec``."""
    return lambda: signal.signal(signal.SIGINT, disposition)


def _python(code: str, sigint=signal.SIG_DFL) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200")
    env.pop("BERTOLOGY_DEBUG", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                          stdin=subprocess.DEVNULL, preexec_fn=_sigint(sigint))
    assert done.returncode == 0, done.stderr
    return done.stdout


def _heavy_after(code: str) -> list[str]:
    """The heavy libraries a fresh interpreter has imported after running ``code``."""
    out = _python(code + f"\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} "
                         f"& set({list(HEAVY)!r}))))")
    return json.loads(out.strip().splitlines()[-1])


def test_importing_the_cli_loads_no_heavy_library():
    assert _heavy_after("import bertology.cli") == []


def test_usage_errors_are_one_line_before_anything_heavy_loads(tmp_path):
    cases = [
        (["probe", "--tasks", "nope"], "unknown task 'nope'"),
        (["probe", "--probe", "svm"], "--probe 'svm'"),
        (["probe", "--device", "gpu"], "--device 'gpu': unknown device"),
        (["report", "--sections", "nope"], "--sections nope: unknown section nope"),
        (["tasks", "build", "--tasks", "nope"], "unknown probing task 'nope'"),
        (["extract", "--data", str(tmp_path / "missing.conllu")], "file not found"),
        (["info", str(tmp_path / "no-store")], "no such file or folder"),
        (["tasks", "list", str(tmp_path / "no-tasks")], "no such file or folder"),
        (["probe", "--tasks", "upos", "--treebank", str(tmp_path / "no-treebank")], "--treebank"),
        (["geometry", "contextuality", "--data", str(tmp_path / "no.txt")], "--data"),
        (["attention", "patterns", "--classifier", "svm"], "--classifier 'svm'"),
        (["readouts", "glue", "--task", "rte", "--readouts", "nope"], "--readouts 'nope': unknown readout"),
        (["extract", "--data", "x.txt", "--pool", "nope"], "'--pool'"),  # a typer choice
        (["probe", "--seeds", "many"], "'--seeds'"),  # not an integer
        (["probe", "--model", str(tmp_path / "no-model")], "no such folder, and not an alias"),
        (["ablate", "heads", "--model", str(tmp_path / "no-checkpoint"), "--heads", "L1H0"], "no such folder"),
        (["knowledge", "static", "-m", "runs/sst2/baseline/seed-0"], "no such folder"),
        (["finetune-table", str(tmp_path / "no-runs")], "no such folder"),
        (["finetune-table", str(tmp_path)], "no fine-tuning checkpoints"),
        (["knowledge", "mlm-probe", "--seeds", "0"], "--seeds 0"),
        (["knowledge", "mlm-probe", "--corrupt", "some"], "--corrupt 'some'"),
    ]
    code = (
        "import contextlib, io, json, sys\n"
        "from bertology.cli import main\n"
        f"results = []\n"
        f"for argv in {[argv for argv, _ in cases]!r}:\n"
        "    sys.argv = ['bertology', *argv]\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):\n"
        "        try:\n"
        "            main()\n"
        "        except SystemExit as exit_:\n"
        "            results.append((exit_.code, err.getvalue()))\n"
        "print(json.dumps(results))\n"
    )
    out = _python(code + "import sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & "
                         f"set({list(HEAVY)!r}))))")
    *_, results, heavy = out.strip().splitlines()
    for (argv, expected), (status, text) in zip(cases, json.loads(results)):
        assert status in (1, 2), (argv, status, text)
        assert expected in text, (argv, text)
        assert "Traceback" not in text, (argv, text)
        if status == 1:  # our own errors: exactly one line
            assert len(text.strip().splitlines()) == 1 and text.startswith("error: "), (argv, text)
    assert json.loads(heavy) == []


def _commands(command, path: tuple[str, ...] = ()):
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_every_help_page_answers():
    paths = list(_commands(typer.main.get_command(app)))
    assert ("probe",) in paths and ("attention", "patterns") in paths and ("knowledge", "lama") in paths
    for path in paths:
        result = CliRunner().invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage" in result.output, path


def test_the_console_script_help_answers():
    bertology = os.path.join(os.path.dirname(sys.executable), "bertology")
    if not os.path.exists(bertology):
        pytest.skip("the bertology console script is not installed beside this Python")
    for argv in (["--help"], ["probe", "--help"], ["ablate", "heads", "--help"]):
        done = subprocess.run([bertology, *argv], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and "Usage" in done.stdout, (argv, done.stderr)


# -- main(): unexpected errors and Ctrl-C -------------------------------------------------------------------


class _Raising:
    """Stands in for the console `bertology version` prints to: printing raises ``error``."""

    def __init__(self, error: BaseException):
        self.error = error

    def print(self, *args, **kwargs):
        raise self.error


def _run_main(argv, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["bertology", *argv])
    with pytest.raises(SystemExit) as exit_info:
        main()
    captured = capsys.readouterr()
    return exit_info.value.code, captured.err


def test_an_unexpected_error_is_one_line_and_exit_1(monkeypatch, capsys):
    monkeypatch.delenv("BERTOLOGY_DEBUG", raising=False)
    monkeypatch.setattr(cli, "out_console", _Raising(RuntimeError("the disk [sda] is\non fire")))
    code, err = _run_main(["version"], monkeypatch, capsys)
    assert code == 1
    assert err.strip().splitlines() == [
        "error: RuntimeError: the disk [sda] is on fire (rerun with --debug for the traceback)"]


@pytest.mark.parametrize("how", ["--debug", "BERTOLOGY_DEBUG=1"])
def test_debug_shows_the_traceback(how, monkeypatch, capsys):
    monkeypatch.delenv("BERTOLOGY_DEBUG", raising=False)
    monkeypatch.setattr(cli, "out_console", _Raising(RuntimeError("boom")))
    argv = ["version"]
    if how == "--debug":
        argv = ["--debug", *argv]
    else:
        monkeypatch.setenv("BERTOLOGY_DEBUG", "1")
    monkeypatch.setattr("sys.argv", ["bertology", *argv])
    with pytest.raises(RuntimeError, match="boom"):
        main()
    monkeypatch.delenv("BERTOLOGY_DEBUG", raising=False)
    code, err = _run_main(["version"], monkeypatch, capsys)  # --debug does not outlive its run
    assert code == 1 and "rerun with --debug" in err


def test_ctrl_c_in_a_command_is_one_line_and_exit_130(monkeypatch, capsys):
    monkeypatch.setattr(cli, "out_console", _Raising(KeyboardInterrupt()))
    code, err = _run_main(["version"], monkeypatch, capsys)
    assert code == 130 and err.strip().splitlines() == [INTERRUPTED]


def test_ctrl_c_while_the_model_stack_loads_is_one_line_and_exit_130(monkeypatch, capsys):
    from bertology.cli import options

    def interrupted(device):  # what Ctrl-C during `import torch` or the model's loading looks like
        raise KeyboardInterrupt

    monkeypatch.setattr(options, "resolve_device", interrupted)
    code, err = _run_main(["probe", "--tasks", "upos", "--no-progress"], monkeypatch, capsys)
    assert code == 130 and err.strip().splitlines() == [INTERRUPTED]


def test_ctrl_c_while_the_command_line_imports_is_one_line_and_exit_130():
    code = (
        "import importlib.abc, os, signal, sys\n"
        "class Interrupt(importlib.abc.MetaPathFinder):  # Ctrl-C just as typer starts to import\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'typer':\n"
        "            sys.meta_path.remove(self)\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "from bertology.cli import main\n"
        "print('imported')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, preexec_fn=_sigint(signal.SIG_DFL))
    assert done.returncode == 130 and done.stderr.strip().splitlines() == [INTERRUPTED], done.stderr
    assert "imported" not in done.stdout


def test_importing_the_cli_leaves_ctrl_c_as_it_was():
    out = _python("import signal\nimport bertology.cli\nprint(signal.getsignal(signal.SIGINT) is signal.default_int_handler)")
    assert out.strip() == "True"
    # a process started with SIGINT ignored (a background job) keeps it ignored: the CLI installs nothing then
    out = _python("import signal\nimport bertology.cli\nprint(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)",
                  sigint=signal.SIG_IGN)
    assert out.strip() == "True"


def test_user_errors_stay_one_line_without_the_debug_hint(monkeypatch, capsys):
    code, err = _run_main(["probe", "--tasks", "nope"], monkeypatch, capsys)
    assert code == 1 and err.startswith("error: unknown task 'nope'") and "--debug" not in err
