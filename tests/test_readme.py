"""The README is executed as written: its command-line tour line by line, its Python tour as one script.

Both run in a fresh folder with nothing beside it, ``$BERTOLOGY_DATA`` unset and the network off, as on a user's
machine: the tour needs only what the package ships. The tour shows small runs; the full-size versions it
mentions in comments are what the small ones stand for.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _blocks(heading: str, language: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def _commands(block: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", block)
    commands = []
    for line in joined.splitlines():
        command = line.split("  #", 1)[0].split(" # ", 1)[0].strip()
        if command and not command.startswith("#"):
            commands.append(command)
    return commands


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    checkout = tmp_path_factory.mktemp("readme") / "checkout"
    checkout.mkdir()
    return checkout


def _env(workdir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "BERTOLOGY_DATA"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(workdir / ".hf"),
               BERTOLOGY_CACHE=str(workdir / ".cache"), OMP_NUM_THREADS="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_the_tour_has_commands():
    commands = _commands(_blocks("A tour of the command line", "bash")[0])
    assert len(commands) >= 10 and all(c.startswith("bertology ") for c in commands)


@pytest.mark.integration
def test_command_line_tour_runs_as_written(workdir):
    assert shutil.which("bertology", path=_env(workdir)["PATH"])
    for command in _commands(_blocks("A tour of the command line", "bash")[0]):
        done = subprocess.run(command, shell=True, cwd=workdir, env=_env(workdir), capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"README line failed: {command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    # The tour ends with the full battery on the real MiniLM: what its page must show.
    report = next(c for c in _commands(_blocks("A tour of the command line", "bash")[0]) if c.startswith("bertology report"))
    page = workdir / report.split(" -o ", 1)[1].split()[0] / "minilm" / "index.html"
    html = page.read_text(encoding="utf-8")
    assert "6 layers, 12 heads, hidden size 384" in html
    for heading in ("Tokenization", "Probing", "Attention"):
        assert f"<h2>{heading}</h2>" in html
    assert "SentLen" in html and "BShift" in html and "upos" in html
    assert "attention-only probe" in html
    assert "Numeracy (Wallace et al. 2019)" in html and "id='knowledge-numeracy'" in html


@pytest.mark.integration
def test_python_tour_runs_as_written(workdir):
    script = "\n".join(_blocks("A tour of the Python API", "python"))
    done = subprocess.run([sys.executable, "-c", script], cwd=workdir, env=_env(workdir), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
