"""Kill anywhere, lose nothing: ``kill -9`` at several points of a command, then the same command again, ends with
the numbers of an uninterrupted run.

The killed run is a fresh interpreter that runs the command line and sends itself SIGKILL at a named point:
``published:N`` just after the N-th file or folder is renamed into place (every output goes through
``os.replace``), ``unpublished:N`` just before it (a whole temporary file left beside its target), ``step:N`` just
after the N-th optimiser step of the one training loop. The rerun and the uninterrupted reference run in this
process; all three use one intra-op thread, so the deterministic parts compare bit for bit. What is not
deterministic is left out of the comparison by name: wall-clock times and throughputs, which runs were reused
and the paths of the folders.
"""

from __future__ import annotations

import gzip
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from bertology.cli import main

_KILLER = textwrap.dedent("""
    import os, signal, sys
    import torch
    torch.set_num_threads(1)  # as the suite (conftest.py): the same reductions, the same numbers
    point, count = sys.argv[1].split(":")
    count, seen = int(count), [0]
    def reached():
        seen[0] += 1
        if seen[0] == count:
            os.kill(os.getpid(), signal.SIGKILL)
    if point in ("published", "unpublished"):
        real_replace = os.replace
        def replace(*args, **kwargs):
            if point == "unpublished":
                reached()
            real_replace(*args, **kwargs)
            if point == "published":
                reached()
        os.replace = replace
    elif point == "step":
        from bertology.training import Optimiser
        real_step = Optimiser.step
        def step(self, loss):
            real_step(self, loss)
            reached()
        Optimiser.step = step
    if point == "count":  # calibration: how many of each point a whole run passes
        import atexit
        replaces, steps = [0], [0]
        real_replace_ = os.replace
        def counting_replace(*args, **kwargs):
            replaces[0] += 1
            return real_replace_(*args, **kwargs)
        os.replace = counting_replace
        from bertology.training import Optimiser
        real_step_ = Optimiser.step
        def counting_step(self, loss):
            steps[0] += 1
            return real_step_(self, loss)
        Optimiser.step = counting_step
        atexit.register(lambda: print(f"published {replaces[0]} steps {steps[0]}", file=sys.stderr))
    elif point not in ("published", "unpublished", "step"):
        raise SystemExit(f"unknown kill point {point}")
    sys.argv = ["bertology", *sys.argv[2:]]
    from bertology.cli import main
    main()
""")

#: Columns that differ between two runs of the same computation by design: clocks, reuse, where things are.
VOLATILE = re.compile(r"seconds|per_second|throughput|speed|latency|elapsed|io_share|reused|checkpoint|path|^ms")


def _run_killed(tmp_path: Path, point: str, argv: list, env: dict) -> None:
    script = tmp_path / "killer.py"
    script.write_text(_KILLER)
    done = subprocess.run([sys.executable, str(script), point, *map(str, argv)], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **env}, stdin=subprocess.DEVNULL, timeout=300)
    # the point was reached (a command that finished first would say nothing about resuming)
    assert done.returncode == -signal.SIGKILL, (point, done.returncode, done.stderr[-3000:])


def _run(argv: list, env: dict, monkeypatch) -> int:
    """Run the command line here; the optimiser steps it took."""
    from bertology.training import Optimiser

    steps, real_step = [], Optimiser.step

    def counting(self, loss):
        steps.append(1)
        return real_step(self, loss)

    with monkeypatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        patch.setattr("sys.argv", ["bertology", *map(str, argv)])
        patch.setattr(Optimiser, "step", counting)
        try:
            main()
        except SystemExit as exit_:
            assert exit_.code in (0, None), exit_.code
    return len(steps)


def _tables(folder: Path) -> dict[str, pd.DataFrame]:
    """Every Parquet table under ``folder`` but the hidden ones, without its volatile columns."""
    tables = {}
    for path in sorted(folder.rglob("*.parquet")):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts):
            continue
        frame = pd.read_parquet(path)
        tables[str(relative)] = frame.drop(columns=[c for c in frame.columns if VOLATILE.search(str(c))])
    return tables


def _visible_files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)}


def _assert_same(resumed: Path, reference: Path) -> None:
    ours, theirs = _tables(resumed), _tables(reference)
    assert ours.keys() == theirs.keys() and ours
    for name in ours:
        pd.testing.assert_frame_equal(ours[name], theirs[name], check_exact=True, obj=name)
    assert _visible_files(resumed) == _visible_files(reference)


def _kill_and_resume(tmp_path, monkeypatch, command, points, *, env=None, cache=False, compare=None) -> list[int]:
    """The reference run, then for each kill point: killed, rerun, compared with the reference. Returns the
    optimiser steps of the reference run, then of each rerun."""
    env = dict(env or {})
    reference = tmp_path / "reference"
    ref_env = {**env, "BERTOLOGY_CACHE": str(tmp_path / "reference-cache")} if cache else env
    steps = [_run(command(reference), ref_env, monkeypatch)]
    for k, point in enumerate(points):
        out = tmp_path / f"killed-{k}"
        run_env = {**env, "BERTOLOGY_CACHE": str(tmp_path / f"cache-{k}")} if cache else env
        _run_killed(tmp_path, point, command(out), run_env)
        steps.append(_run(command(out), run_env, monkeypatch))
        (compare or _assert_same)(out, reference)
        if cache:  # the stores it cached: the same shards, byte for byte
            assert _shards(tmp_path / f"cache-{k}") == _shards(tmp_path / "reference-cache")
    return steps


def _shards(folder: Path) -> dict[str, bytes]:
    found = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*.safetensors")
             if not any(part.startswith(".") for part in p.relative_to(folder).parts)}
    assert found, f"no store under {folder}"
    return found


# -- the commands, each on a tiny random model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def sst2_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("glue")
    (root / "sst2").mkdir()
    rows = "".join(f"a {'good' if i % 2 else 'bad'} film number {i} .\t{i % 2}\n" for i in range(40))
    (root / "sst2" / "train.tsv.gz").write_bytes(gzip.compress(("sentence\tlabel\n" + rows).encode()))
    (root / "sst2" / "dev.tsv").write_text("sentence\tlabel\n" + rows)
    return root


def test_finetune_killed_anywhere_resumes_to_the_same_numbers(tmp_path, tiny_dir, sst2_dir, monkeypatch):
    def command(out):
        return ["finetune", "-m", tiny_dir, "--task", "sst2", "--seeds", "2", "--max-steps", "6", "--batch-size", "4",
                "--lr", "1e-3", "--data-dir", sst2_dir, "--checkpoint-every", "2", "-o", out, "--no-progress"]

    # Files published in a whole run: seed 0's states at steps 2 and 4, its finetune.json (in the temporary folder)
    # and its checkpoint folder, the same for seed 1, then the tables. Killed mid-way through seed 0 (step 5); just before seed 1's checkpoint is published (its whole
    # temporary folder left behind: collect_results counted it as a run until it skipped hidden folders);
    # mid-way through seed 1 (its step 3).
    steps = _kill_and_resume(tmp_path, monkeypatch, command, ["step:5", "unpublished:8", "step:9"])
    # what was done is not redone: the reruns resume from the last state saved (seed 0 at step 4; seed 1 at step 4,
    # then at step 2), and a finished seed is reused
    assert steps == [12, 2 + 6, 2, 4]


def test_readouts_glue_killed_anywhere_resumes_to_the_same_numbers(tmp_path, tiny_dir, sst2_dir, monkeypatch):
    def command(out):
        return ["readouts", "glue", "--task", "sst2", "-m", tiny_dir, "--data-dir", sst2_dir, "--quick", "--readouts",
                "lp", "--seeds", "1", "--no-references", "-o", out, "--no-progress"]

    # while the activation stores are written; after the readout's first training step
    _kill_and_resume(tmp_path, monkeypatch, command, ["published:5", "step:1"])


def test_readouts_squad_killed_anywhere_resumes_to_the_same_numbers(tmp_path, tiny_dir, monkeypatch):
    from readouts_toy import toy_squad

    data = toy_squad(tmp_path / "toy.json", articles=4, paragraphs=2)

    def command(out):
        return ["readouts", "squad", "-m", tiny_dir, "--data", data, "--quick", "--readouts", "lp", "-o", out,
                "--no-progress"]

    # mid-way through the SQuAD fine-tuning; a temporary file left while the readouts' results are written
    _kill_and_resume(tmp_path, monkeypatch, command, ["step:5", "unpublished:60"])


def test_compress_killed_anywhere_resumes_to_the_same_numbers(tmp_path, tiny_dir, monkeypatch):
    def command(out):
        return ["compress", "-m", tiny_dir, "--methods", "fp16,magnitude:0.5", "--max-train", "30", "--max-dev", "20",
                "--max-test", "20", "--rounds", "1", "-o", out, "--no-progress"]

    # a checkpoint folder about to be published; late, while the tables are written
    _kill_and_resume(tmp_path, monkeypatch, command, ["unpublished:3", "published:85"])  # of 96


def test_mlm_probe_killed_anywhere_resumes_to_the_same_numbers(tmp_path, monkeypatch):
    from knowledge_models import save_tiny_encoder, write_toy_corpus

    model = save_tiny_encoder(tmp_path / "tiny-bert", seed=1)
    corpus = write_toy_corpus(tmp_path / "toy.txt")

    def command(out):
        return ["knowledge", "mlm-probe", "-m", model, "-d", corpus, "-o", out, "--quick", "--device", "cpu",
                "--no-progress"]

    # while the cached stores are written; mid-way through the probes' training
    _kill_and_resume(tmp_path, monkeypatch, command, ["published:4", "step:3"], cache=True)


def test_report_killed_anywhere_resumes_to_the_same_numbers(tmp_path, tiny_dir, monkeypatch):
    def command(out):
        return ["report", "-m", tiny_dir, "-o", out, "--sections", "tokenization,probing", "--max-sentences", "20",
                "--seeds", "1", "--no-progress"]

    # a cached section about to be published; late in the probing section
    _kill_and_resume(tmp_path, monkeypatch, command, ["unpublished:2", "published:80"])
