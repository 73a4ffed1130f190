"""The Ray engine (`--engine ray`): the same store and the same fine-tuning table as the local engine,
resumable after a worker raises or dies. Every test that starts Ray is in this file (one Ray instance
per session, in one xdist worker); the import checks run in subprocesses and need no Ray."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from bertology.errors import StoreError
from bertology.store import Store

SRC = str(Path(__file__).resolve().parents[1] / "src")
WORDS = "the quick brown fox jumps over lazy dog ; cats chase mice and researchers probe bert layers".split()


def sentences(n: int = 48) -> list[str]:
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 30)))) for _ in range(n)]


def _python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_nothing_imports_ray_without_engine_ray(tmp_path):
    """The CLI, its help and a local extraction never import Ray."""
    code = f"""
import sys
from typer.testing import CliRunner
from bertology.cli import app
assert CliRunner().invoke(app, ["extract", "--help"]).exit_code == 0
assert CliRunner().invoke(app, ["finetune", "--help"]).exit_code == 0
import bertology.scale
from bertology.extraction import extract
from bertology.models.tiny import tiny_encoder
extract(tiny_encoder("bert"), ["a small test sentence"], {str(tmp_path / "s")!r}, progress=False)
loaded = sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))
print("RAY", loaded)
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert "RAY []" in done.stdout


def test_engine_ray_without_ray_is_one_line(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a small test sentence\n")
    code = f"""
import sys
sys.modules["ray"] = None  # as if the extra were not installed
sys.argv = ["bertology", "extract", "--data", {str(corpus)!r}, "--out", {str(tmp_path / "s")!r}, "--engine", "ray"]
from bertology.cli import main
main()
"""
    done = _python(code)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install 'bertology[ray]'" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def _same_store(a: Store, b: Store) -> None:
    assert [(s.start, s.stop, s.file) for s in a.shards] == [(s.start, s.stop, s.file) for s in b.shards]
    assert a.complete and b.complete and not b.verify()
    assert {k: v for k, v in a.index.items() if k not in ("created", "stats", "shards")} == \
        {k: v for k, v in b.index.items() if k not in ("created", "stats", "shards")}
    for layer in a.layers:
        np.testing.assert_allclose(a.layer(layer), b.layer(layer), atol=2e-3)
    if a.has_attentions:
        for x, y in zip(a.iter_attentions(), b.iter_attentions()):
            np.testing.assert_allclose(x, y, atol=1e-5)
    assert not list(b.path.glob(".*.tmp"))


@pytest.mark.ray
def test_ray_store_equals_local_and_resumes_after_failures(ray_session, tiny_bert, tmp_path):
    from bertology.extraction import extract
    from bertology.scale import extract_ray

    corpus = sentences()
    options = dict(attentions=True, shard_bytes=40_000, progress=False)
    local = extract(tiny_bert, corpus, tmp_path / "local", **options)
    assert len(local.shards) >= 5
    store = extract_ray(tiny_bert, corpus, tmp_path / "ray", workers=2, **options)
    _same_store(local, store)
    assert store.index["stats"]["engine"] == "ray" and store.index["stats"]["workers"] == 2
    # CPU, same batches: byte-identical shards
    assert [s.sha256 for s in store.shards] == [s.sha256 for s in local.shards]

    # An actor raises on shard 2: the run fails, the index lists only whole shards, the rerun completes.
    broken = tmp_path / "broken"
    with pytest.raises(Exception, match="injected failure on shard 2"):
        extract_ray(tiny_bert, corpus, broken, workers=2, fail={"shard": 2, "mode": "raise"}, **options)
    partial = Store.open(broken, allow_incomplete=True)
    assert not partial.shards[2].complete
    assert all(partial.path.joinpath(s.file).stat().st_size == s.bytes for s in partial.shards if s.complete)
    with pytest.raises(StoreError, match="incomplete"):
        Store.open(broken)
    # The failed run's actor pool can outlive it in the same process and keep its CPUs (docs/scale.md,
    # "Known issue"); a rerun from the command line is a new process, which a fresh Ray instance stands for.
    ray_session.shutdown()
    ray_session.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    _same_store(local, extract_ray(tiny_bert, corpus, broken, workers=2, **options))

    # An actor dies while writing shard 1 (a partial temporary file left behind): Ray restarts it, the
    # shard is redone in the same run and the leftover removed.
    killed = tmp_path / "killed"
    store = extract_ray(tiny_bert, corpus, killed, workers=2,
                        fail={"shard": 1, "mode": "exit", "marker": str(tmp_path / "died-once")}, **options)
    assert (tmp_path / "died-once").exists()
    _same_store(local, store)


@pytest.mark.ray
def test_cli_extract_engine_ray_and_info(ray_session, tiny_bert, tmp_path):
    """The CLI path: each actor loads the model folder itself (its fingerprint checked against the driver's)."""
    from bertology.cli import app

    model_dir = tmp_path / "model"
    tiny_bert.model.save_pretrained(model_dir)
    tiny_bert.tokenizer.save_pretrained(model_dir)
    data = tmp_path / "corpus.txt"
    data.write_text("\n".join(sentences(20)) + "\n")
    runner = CliRunner()
    base = ["extract", "--model", str(model_dir), "--data", str(data), "--no-progress"]
    assert runner.invoke(app, [*base, "--out", str(tmp_path / "local")]).exit_code == 0
    result = runner.invoke(app, [*base, "--out", str(tmp_path / "ray"), "--engine", "ray", "--workers", "1"])
    assert result.exit_code == 0, result.output
    _same_store(Store.open(tmp_path / "local"), Store.open(tmp_path / "ray"))
    info = runner.invoke(app, ["info", str(tmp_path / "ray")])
    assert info.exit_code == 0 and "verified" in info.output
    bad = runner.invoke(app, [*base, "--out", str(tmp_path / "x"), "--engine", "ray", "--workers", "0"])
    assert bad.exit_code != 0 and "--workers 0" in str(bad.exception)


POSITIVE, NEGATIVE = ["good", "great", "fine", "nice"], ["bad", "awful", "poor", "sad"]
FILLER = ["the", "film", "was", "a", "story", "it", "and", "very"]


def _toy_sst2(root: Path) -> Path:
    rng = np.random.default_rng(0)

    def rows(n):
        out = []
        for i in range(n):
            words = list(rng.choice(FILLER, size=int(rng.integers(2, 6))))
            words.insert(0, str(rng.choice(POSITIVE if i % 2 else NEGATIVE)))
            out.append(f"{' '.join(words)}\t{i % 2}\n")
        return "".join(out)

    (root / "sst2").mkdir(parents=True)
    with gzip.open(root / "sst2" / "train.tsv.gz", "wt", encoding="utf-8") as handle:
        handle.write("sentence\tlabel\n" + rows(64))
    (root / "sst2" / "dev.tsv").write_text("sentence\tlabel\n" + rows(32))
    return root


@pytest.mark.ray
def test_ray_sweeps_equal_local_finetune_ablation_heads(ray_session, tiny_bert, tmp_path):
    """A 2 variants x 2 seeds fine-tuning sweep (one Ray task per run, through the CLI): the table equals the
    local runs'. Then the single-head ablation table and the frozen-feature readouts sweep, each against local."""
    from bertology.finetune import FinetuneConfig, collect_results, finetune, variants_table
    from bertology.cli.finetune import app

    glue = _toy_sst2(tmp_path / "glue")
    model_dir = tmp_path / "model"
    tiny_bert.model.save_pretrained(model_dir)
    tiny_bert.tokenizer.save_pretrained(model_dir)
    from bertology.models import load_encoder

    encoder = load_encoder(model_dir)
    settings = dict(seeds=(0, 1), epochs=1, lr=1e-3, batch_size=16, max_steps=3, data_dir=str(glue), progress=False,
                    eval_each_epoch=False)
    for variant in ("baseline", "drop-last:1"):
        finetune(encoder, "sst2", FinetuneConfig(variant=variant, **settings), tmp_path / "local")
    args = ["finetune", "--model", str(model_dir), "--task", "sst2", "--variant", "baseline,drop-last:1",
            "--seeds", "2", "--epochs", "1", "--lr", "1e-3", "--batch-size", "16", "--max-steps", "3",
            "--final-eval-only", "--data-dir", str(glue), "--out", str(tmp_path / "ray"), "--no-progress",
            "--engine", "ray", "--workers", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "(reused)" not in result.output and result.output.count("seed ") >= 4

    def table(folder):
        return variants_table(collect_results(folder)).sort_values("variant").reset_index(drop=True)

    local, ray = table(tmp_path / "local"), table(tmp_path / "ray")
    assert len(local) == 2 and (local["n_seeds"] == 2).all()
    pd.testing.assert_frame_equal(local, ray, check_exact=False, atol=1e-6)
    saved = pd.read_csv(tmp_path / "ray" / "table1.csv").sort_values("variant").reset_index(drop=True)
    np.testing.assert_allclose(saved["sst2"], local["sst2"], atol=1e-6)
    meta = json.loads((tmp_path / "ray" / "sst2" / "drop-last-1" / "seed-1" / "finetune.json").read_text())
    assert meta["recipe"]["variant"] == "drop-last:1" and meta["device"] == "cpu"
    # A rerun schedules nothing: every run is finished.
    from bertology.scale import finetune_sweep_ray

    assert finetune_sweep_ray(encoder, ["sst2"], ["baseline", "drop-last:1"], FinetuneConfig(**settings),
                              tmp_path / "ray", workers=2) == []

    # The single-head ablation table of the two baseline seeds: one Ray task per checkpoint x layer.
    from bertology.cli.intervention import app as ablate

    seeds = [str(tmp_path / "ray" / "sst2" / "baseline" / f"seed-{s}") for s in (0, 1)]
    base = ["table", "--model", seeds[0], "--model", seeds[1], "--data-dir", str(glue), "--no-progress"]
    assert CliRunner().invoke(ablate, [*base, "--out", str(tmp_path / "ablate-local")]).exit_code == 0
    done = CliRunner().invoke(ablate, [*base, "--out", str(tmp_path / "ablate-ray"), "--engine", "ray"])
    assert done.exit_code == 0, done.output
    for name in ("ablation", "summary"):
        local_table = pd.read_parquet(tmp_path / "ablate-local" / f"{name}.parquet")
        ray_table = pd.read_parquet(tmp_path / "ablate-ray" / f"{name}.parquet")
        assert len(local_table) == (16 if name == "ablation" else 8)  # 2 seeds x 2 layers x 4 heads
        pd.testing.assert_frame_equal(local_table, ray_table, check_exact=False, atol=1e-9)

    # The frozen-feature readouts sweep: activations extracted once, then one Ray task per readout x seed.
    from bertology.cli.readouts import app as readouts

    base = ["glue", "--task", "sst2", "-m", str(model_dir), "--data-dir", str(glue), "--readouts", "lp,ap", "--seeds", "2",
            "--epochs", "1", "--batch-size", "16", "--no-progress"]
    assert CliRunner().invoke(readouts, [*base, "-o", str(tmp_path / "heads-local")]).exit_code == 0
    done = CliRunner().invoke(readouts, [*base, "-o", str(tmp_path / "heads-ray"), "--engine", "ray", "--workers", "2"])
    assert done.exit_code == 0, done.output
    timing = ["train_seconds", "io_share"]
    local_scores = pd.read_parquet(tmp_path / "heads-local" / "scores.parquet").drop(columns=timing)
    ray_scores = pd.read_parquet(tmp_path / "heads-ray" / "scores.parquet").drop(columns=timing)
    heads_rows = local_scores[local_scores["component"].isin(["lp", "ap"])]
    assert len(heads_rows) == 4  # 2 heads x 2 seeds; the other rows are the scikit-learn references
    pd.testing.assert_frame_equal(local_scores, ray_scores, check_exact=False, atol=1e-9)


@pytest.mark.ray
def test_ray_refuses_workers_the_cluster_has_no_room_for(ray_session, tiny_bert, tmp_path):
    """A GPU on a cluster without one, or more CPUs per worker than the cluster has: one line within seconds
    naming what was asked and what the cluster has (Ray's autoscaler would wait forever), nothing written."""
    import time

    from bertology.errors import UsageError
    from bertology.scale import extract_ray

    for asked, expected in (({"gpus_per_worker": 1}, r"^gpus_per_worker 1: .* 2 CPUs and 0 GPUs.*gpus_per_worker= 0"),
                            ({"cpus_per_worker": 3}, r"^cpus_per_worker 3: .* has 2 CPUs .*at most 2")):
        started = time.perf_counter()
        with pytest.raises(UsageError, match=expected):
            extract_ray(tiny_bert, sentences(4), tmp_path / "store", progress=False, **asked)
        assert time.perf_counter() - started < 10
        assert not (tmp_path / "store").exists()


@pytest.mark.ray
def test_unreachable_address_fails_within_seconds(tiny_bert, tmp_path):
    """An address nothing answers at (Ray would retry for minutes), and `auto` with no cluster here: one line,
    exit 1, within seconds, before Ray starts; no store folder."""
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'bertology[ray]')")
    import socket
    import time

    from bertology.errors import UsageError
    from bertology.scale.cluster import check_reachable

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.perf_counter()
    with pytest.raises(UsageError, match=rf"^address 127.0.0.1:{port}: no Ray cluster answers at .*:{port}"):
        check_reachable(f"127.0.0.1:{port}")
    with pytest.raises(UsageError, match="^address 'nonsense': expected auto or HOST:PORT"):
        check_reachable("nonsense")  # no port
    assert time.perf_counter() - started < 10

    corpus = tmp_path / "c.txt"
    corpus.write_text("a small test sentence\n")
    tiny_bert.model.save_pretrained(tmp_path / "model")
    tiny_bert.tokenizer.save_pretrained(tmp_path / "model")
    code = f"""
import sys
sys.argv = ["bertology", "extract", "-m", {str(tmp_path / "model")!r}, "--data", {str(corpus)!r},
            "--out", {str(tmp_path / "s")!r}, "--engine", "ray",
            "--address", "127.0.0.1:{port}", "--no-progress"]
from bertology.cli import main
main()
"""
    started = time.perf_counter()
    done = _python(code)
    assert done.returncode == 1, done.stderr
    assert f"--address 127.0.0.1:{port}: no Ray cluster answers" in done.stderr and "Traceback" not in done.stderr
    assert time.perf_counter() - started < 60  # the interpreter, torch and the model; Ray alone retries for minutes
    assert not (tmp_path / "s").exists()
