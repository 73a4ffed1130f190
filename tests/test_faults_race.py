"""Two processes at once on one shared resource: a store, a report cache entry, a fine-tuning checkpoint.

Each test starts two fresh interpreters that meet at a barrier (so they really overlap), run the same work on
the same folder, and report what they did. The resource's lock (:func:`bertology.files.exclusive`) makes the
second wait for the first and reuse its result: the work is done once, both get the same numbers, and what is
left on disk is whole. Without the lock (``BERTOLOGY_TEST_NO_LOCK=1`` below turns it into a no-op in the
children: the planted fault) each test fails: both compute, and the store race can even delete the other
process's half-written shard.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# What every child runs first: one intra-op thread (as the suite), the planted fault when asked, then a barrier.
_PRELUDE = textwrap.dedent("""
    import contextlib, json, os, sys, time
    from pathlib import Path
    import torch
    torch.set_num_threads(1)
    import bertology.files as files
    if os.environ.get("BERTOLOGY_TEST_NO_LOCK"):  # the planted fault: no lock at all
        files.exclusive = lambda *args, **kwargs: contextlib.nullcontext()
    def barrier(folder, me, parties=2):
        folder = Path(folder)
        (folder / f"ready-{me}").write_text("")
        deadline = time.time() + 120
        while len(list(folder.glob("ready-*"))) < parties and time.time() < deadline:
            time.sleep(0.01)
""")


def _race(tmp_path: Path, body: str, *args: str, planted: bool = False) -> list[dict]:
    """Run ``body`` (after the prelude) in two processes at once; each prints one JSON line, returned in order."""
    script = tmp_path / "child.py"
    script.write_text(_PRELUDE + textwrap.dedent(body))
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("BERTOLOGY_TEST_NO_LOCK", None)
    if planted:
        env["BERTOLOGY_TEST_NO_LOCK"] = "1"
    children = [subprocess.Popen([sys.executable, str(script), str(barrier), str(me), *args], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
                for me in range(2)]
    reports = []
    for child in children:
        out, err = child.communicate(timeout=300)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        reports.append({"code": child.returncode, "err": err, **(json.loads(lines[-1]) if lines else {})})
    return reports


def _hidden_leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*"))


_STORE = """
    barrier_dir, me, model_dir, out = sys.argv[1:5]
    import bertology.store.writer as store_writer
    from bertology.extraction import extract
    from bertology.models import load_encoder
    written = []
    original = store_writer.write_shard_atomic
    def counting(path, tensors, metadata):
        written.append(path.name)
        time.sleep(0.05)  # widen the window in which the other process could step in
        return original(path, tensors, metadata)
    store_writer.write_shard_atomic = counting
    encoder = load_encoder(model_dir)
    sentences = [f"sentence number {i} is here and it is fine" for i in range(48)]
    barrier(barrier_dir, me)
    store = extract(encoder, sentences, out, progress=False, shard_bytes=4000)
    print(json.dumps({"written": written, "shards": [s.sha256 for s in store.shards], "problems": store.verify()}))
"""


def _check_store_race(tmp_path, tiny_dir, planted):
    out = tmp_path / "store"
    a, b = _race(tmp_path, _STORE, str(tiny_dir), str(out), planted=planted)
    assert a["code"] == 0 and b["code"] == 0, (a["err"][-2000:], b["err"][-2000:])
    shards = a["shards"]
    assert len(shards) > 3 and b["shards"] == shards and a["problems"] == b["problems"] == []
    assert sorted(a["written"] + b["written"]) == sorted(f"shard-{k:05d}.safetensors" for k in range(len(shards)))
    assert _hidden_leftovers(out) == [] and not (tmp_path / ".store.lock").exists()


def test_two_processes_extracting_one_store_write_each_shard_once(tmp_path, tiny_dir):
    _check_store_race(tmp_path, tiny_dir, planted=False)


def test_the_store_race_fails_without_the_lock(tmp_path, tiny_dir):
    with pytest.raises(AssertionError):
        _check_store_race(tmp_path, tiny_dir, planted=True)


_CACHE = """
    barrier_dir, me, root, calls = sys.argv[1:5]
    import pandas as pd
    from bertology.report.cache import ResultCache
    from bertology.results import Result
    def compute():
        with open(calls, "a") as handle:
            handle.write(f"{me}\\n")
        time.sleep(1.0)  # a section's computation: long enough for the other process to arrive
        return Result("numbers", tables={"t": pd.DataFrame({"x": [1.5, 2.5], "who": [me, me]})}, meta={"by": me})
    barrier(barrier_dir, me)
    result = ResultCache(root).get_or_compute("numbers", {"model": "m", "seed": 0}, compute)
    print(json.dumps({"who": result.meta["by"], "x": result["t"]["x"].tolist()}))
"""


def _check_cache_race(tmp_path, planted):
    root, calls = tmp_path / "cache", tmp_path / "calls.txt"
    a, b = _race(tmp_path, _CACHE, str(root), str(calls), planted=planted)
    assert a["code"] == 0 and b["code"] == 0, (a["err"][-2000:], b["err"][-2000:])
    assert len(calls.read_text().split()) == 1  # computed once: the other process waited and reused it
    assert a["who"] == b["who"] and a["x"] == b["x"] == [1.5, 2.5]
    assert [p.name for p in root.iterdir()] == [p.name for p in root.iterdir() if not p.name.startswith(".")]


def test_two_processes_on_one_report_cache_entry_compute_it_once(tmp_path):
    _check_cache_race(tmp_path, planted=False)


def test_the_cache_race_fails_without_the_lock(tmp_path):
    with pytest.raises(AssertionError):
        _check_cache_race(tmp_path, planted=True)


_FINETUNE = """
    barrier_dir, me, model_dir, data_dir, out = sys.argv[1:6]
    import bertology.finetune.train as train
    from bertology.finetune import FinetuneConfig, finetune
    from bertology.models import load_encoder
    real_train = train.train_one_seed
    def slow_train(*args, **kwargs):
        time.sleep(0.5)  # a longer run: long enough for the other process to arrive
        return real_train(*args, **kwargs)
    train.train_one_seed = slow_train
    encoder = load_encoder(model_dir)
    config = FinetuneConfig(seeds=(0,), epochs=1, batch_size=4, max_steps=6, lr=1e-3, data_dir=data_dir,
                            progress=False)
    barrier(barrier_dir, me)
    result = finetune(encoder, "sst2", config, out)
    print(json.dumps({"reused": result["runs"]["reused"].tolist(), "values": result["results"]["value"].tolist()}))
"""


@pytest.fixture(scope="module")
def sst2_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("glue")
    (root / "sst2").mkdir()
    rows = "".join(f"a {'good' if i % 2 else 'bad'} film number {i} .\t{i % 2}\n" for i in range(40))
    (root / "sst2" / "train.tsv.gz").write_bytes(gzip.compress(("sentence\tlabel\n" + rows).encode()))
    (root / "sst2" / "dev.tsv").write_text("sentence\tlabel\n" + rows)
    return root


def _check_finetune_race(tmp_path, tiny_dir, sst2_dir, planted):
    out = tmp_path / "runs"
    a, b = _race(tmp_path, _FINETUNE, str(tiny_dir), str(sst2_dir), str(out), planted=planted)
    assert a["code"] == 0 and b["code"] == 0, (a["err"][-2000:], b["err"][-2000:])
    assert sorted(a["reused"] + b["reused"]) == [False, True]  # trained once, reused by the other
    assert a["values"] == b["values"]
    seed_dir = out / "sst2" / "baseline" / "seed-0"
    assert (seed_dir / "finetune.json").is_file() and _hidden_leftovers(out) == []


def test_two_processes_fine_tuning_one_checkpoint_train_it_once(tmp_path, tiny_dir, sst2_dir):
    _check_finetune_race(tmp_path, tiny_dir, sst2_dir, planted=False)


def test_the_checkpoint_race_fails_without_the_lock(tmp_path, tiny_dir, sst2_dir):
    with pytest.raises(AssertionError):
        _check_finetune_race(tmp_path, tiny_dir, sst2_dir, planted=True)
