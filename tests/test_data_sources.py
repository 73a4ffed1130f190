"""Where data comes from: the package's own corpus for every default; GLUE, SQuAD 2.0 and BLiMP from a path,
$BERTOLOGY_DATA or the Hugging Face `datasets` cache (tested offline on a cache built here); otherwise one
line naming the ways to provide it. Each case runs in a fresh process with its own environment."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from bertology.data import packaged_treebank
from bertology.errors import MissingData

datasets = pytest.importorskip("datasets")


def cache_dataset(cache: Path, repo_id: str, config: str, splits: dict[str, pd.DataFrame]) -> None:
    """Lay ``splits`` out as `datasets` leaves a hub data set it has downloaded (``<cache>/<ns>___<name>/
    <config>/0.0.0/<hash>/``), so ``load_dataset(repo_id, config)`` finds it with the network off."""
    source = cache / "source"
    source.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, frame in splits.items():
        files[split] = str(source / f"{split}.parquet")
        frame.to_parquet(files[split])
    builder = datasets.load_dataset_builder("parquet", data_files=files, cache_dir=str(cache / "build"))
    builder.download_and_prepare()
    built = Path(builder.cache_dir)
    namespace, name = repo_id.split("/")
    target = cache / f"{namespace}___{name}" / config / "0.0.0" / built.name
    shutil.copytree(built, target)
    for arrow in target.glob("parquet-*.arrow"):
        arrow.rename(target / arrow.name.replace("parquet-", f"{name}-"))
    info = json.loads((target / "dataset_info.json").read_text())
    info.update(config_name=config, dataset_name=name)
    (target / "dataset_info.json").write_text(json.dumps(info))
    shutil.rmtree(cache / "build")
    shutil.rmtree(source)


def run_offline(code: str, tmp_path: Path, cache: Path | None = None, data: Path | None = None,
                ) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python with the network off, no data folder (unless ``data``) and an empty (or the
    given) `datasets` cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("BERTOLOGY_DATA", "HF_DATASETS_CACHE", "HF_HOME")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf-home"),
               HF_DATASETS_CACHE=str(cache or tmp_path / "empty-cache"), BERTOLOGY_CACHE=str(tmp_path / "cache"))
    if data is not None:
        env["BERTOLOGY_DATA"] = str(data)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)


def test_glue_is_read_from_the_datasets_cache_offline(tmp_path):
    cache = tmp_path / "hf-datasets"
    cache_dataset(cache, "nyu-mll/glue", "rte", {
        "train": pd.DataFrame({"sentence1": ["A man sleeps.", "It rains."], "sentence2": ["A man rests.", "It is dry."],
                               "label": [0, 1], "idx": [0, 1]}),
        "validation": pd.DataFrame({"sentence1": ["Cats purr."], "sentence2": ["Animals make sounds."],
                                    "label": [0], "idx": [7]}),
    })
    done = run_offline("""
        from bertology.data import read_glue
        train, dev = read_glue("rte", "train"), read_glue("rte", "dev")
        print(len(train), train[1].text_a, train[1].text_b, train[1].label, dev[0].id, dev[0].label)
    """, tmp_path, cache=cache)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "It", "rains.", "It", "is", "dry.", "1", "7", "0"]


def test_glue_without_any_source_names_every_way_to_provide_it(tmp_path):
    done = run_offline("""
        from bertology.data import read_glue
        from bertology.errors import MissingData
        try:
            read_glue("sst2", "train")
        except MissingData as error:
            print(error.dataset, "|", error)
    """, tmp_path)
    assert done.returncode == 0, done.stderr
    key, message = done.stdout.strip().split(" | ", 1)
    assert key == "glue"
    assert message.startswith("GLUE sst2 train not found")
    for way in ("--data-dir", "BERTOLOGY_DATA", "nyu-mll/glue"):
        assert way in message, message
    assert "\n" not in message


def test_a_data_folder_comes_before_datasets(tmp_path):
    folder = tmp_path / "data" / "glue" / "sst2"
    folder.mkdir(parents=True)
    (folder / "dev.tsv").write_text("sentence\tlabel\na fine film\t1\n")
    done = run_offline("""
        from bertology.data import read_glue
        print(read_glue("sst2", "dev")[0].text_a)
    """, tmp_path, data=tmp_path / "data")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "a fine film"


def test_squad_v2_from_the_datasets_cache_is_checked_like_the_file(tmp_path):
    cache = tmp_path / "hf-datasets"
    context = "Normandy is a region in France. It was named after the Normans."
    cache_dataset(cache, "rajpurkar/squad_v2", "squad_v2", {"validation": pd.DataFrame({
        "id": ["q1", "q2", "q3"], "title": ["Normans", "Normans", "Other"],
        "context": [context, context, "Nothing to see."],
        "question": ["Where is Normandy?", "Who founded Rome?", "What is here?"],
        "answers": [{"text": ["France"], "answer_start": [24]}, {"text": [], "answer_start": []},
                    {"text": [], "answer_start": []}]})})
    done = run_offline("""
        from bertology.data import read_squad
        for q in read_squad():
            print(q.id, q.title, q.paragraph, q.is_impossible, q.answer_texts)
    """, tmp_path, cache=cache)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["q1 Normans 0 False ['France']", "q2 Normans 0 True []",
                                        "q3 Other 0 True []"]


def test_lama_has_no_hub_copy_and_says_so(tmp_path):
    done = run_offline("""
        from bertology.knowledge.lama import load_lama
        from bertology.errors import MissingData
        try:
            load_lama()
        except MissingData as error:
            print(error)
    """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "LAMA lama not found" not in done.stdout
    assert done.stdout.startswith("LAMA not found") and "--data" in done.stdout and "no loadable copy" in done.stdout


def test_defaults_read_the_packaged_treebank_and_never_a_shared_folder(tmp_path, monkeypatch):
    from bertology.data import shared_data_dir
    from bertology.probing.inputs import _source_folder

    monkeypatch.delenv("BERTOLOGY_DATA", raising=False)
    assert _source_folder("ud", None) == packaged_treebank()
    with pytest.raises(MissingData, match="WNUT-17 not found.*--wnut"):
        _source_folder("wnut17", None)
    with pytest.raises(Exception, match="BERTOLOGY_DATA"):
        shared_data_dir()
    source = Path(__file__).resolve().parents[1] / "src" / "bertology"
    joins = re.compile(r'"shared"\s*/|/\s*"shared"|\.\./shared')
    readers = [p for p in source.rglob("*.py") if joins.search(p.read_text())]
    assert not readers, f"product code that builds a path to a shared/ folder: {readers}"


def test_the_packaged_finetuning_task_is_bshift_from_ewt(tmp_path, monkeypatch):
    from bertology.finetune import read_examples

    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path))
    train, dev = read_examples("bshift", "train"), read_examples("bshift", "dev")
    assert len(train) > 4 * len(dev) > 0
    assert {e.label for e in dev} == {0, 1} and abs(sum(e.label for e in dev) / len(dev) - 0.5) < 0.05
    assert not {e.text_a for e in train} & {e.text_a for e in dev}, "train and dev share no sentence"
