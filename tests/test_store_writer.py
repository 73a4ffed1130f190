"""The one store writer: planning, resuming (damaged shards, unreadable index, lost sentences), atomic shards,
shared by extraction and the frozen-feature activations."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertology.errors import BertologyWarning, DataError, SettingError, StoreError, UsageError
from bertology.extraction import ExtractionSpec, extract
from bertology.readouts.activations import LABELS_NAME, read_labels, write_activations
from bertology.store import Store
from bertology.store.names import INDEX_NAME, SENTENCES_NAME
from bertology.store.writer import StoreWriter, model_record, plan_shards

TEXTS = ["the dog barks", "a cat sleeps on the mat", "birds fly", "she said that dogs chase cats",
         "it rains", "we walked home after the long game"]


def _activations(encoder, out, **kwargs):
    encoded = encoder.tokenizer(TEXTS)
    ids = [list(x) for x in encoded["input_ids"]]
    records = [{"id": f"x{i}", "words": []} for i in range(len(ids))]
    return write_activations(encoder, ids, None, records, {"label": [i % 2 for i in range(len(ids))]}, out,
                             pool="mean", shard_bytes=400, progress=False, **kwargs)


def test_plan_shards_cuts_at_the_byte_target_and_keeps_one_input_per_shard_at_least():
    assert plan_shards([1, 1, 1, 1], 10, 20) == [(0, 2), (2, 4)]
    assert plan_shards([5, 1], 10, 20) == [(0, 1), (1, 2)]  # an input over the target gets a shard of its own
    assert plan_shards([1, 1, 1], 10, 25, extra_bytes=[10, 0, 0]) == [(0, 1), (1, 3)]


def test_shards_ramp_up_from_the_head_and_down_to_a_small_last_one():
    """The first shard is the head (encoded before the model starts), each next at most twice the one before;
    the last ones halve, so a run ends on a small write; a few inputs left over join the shard before."""
    sizes = [b - a for a, b in plan_shards([12] * 2001, 384, 48 << 20, ramp=128)]
    assert sizes == [128, 256, 512, 552, 276, 138, 139] and sum(sizes) == 2001
    bounds = plan_shards([12] * 12543, 5376, 48 << 20, ramp=128)
    sizes = [b - a for a, b in bounds]
    assert sizes[:3] == [128, 256, 512] and max(sizes) * 12 * 5376 <= 48 << 20 and sizes[-1] < 2 * 128
    assert [a for a, _ in bounds[1:]] == [b for _, b in bounds[:-1]] and bounds[-1][1] == 12543
    assert plan_shards([1] * 100, 10, 1 << 20, ramp=128) == [(0, 100)]  # a small input: one shard
    assert plan_shards([1] * 6, 10, 20, ramp=2) == [(0, 2), (2, 4), (4, 6)]  # the byte target still cuts


def test_one_model_record_for_every_store(tiny_bert, tmp_path):
    store = extract(tiny_bert, TEXTS, tmp_path / "e", progress=False)
    activations = _activations(tiny_bert, tmp_path / "a")
    assert store.index["model"] == activations.index["model"] == model_record(tiny_bert)
    assert {"fingerprint", "tokenizer_fingerprint", "word_types", "num_parameters"} <= set(model_record(tiny_bert))


@pytest.mark.parametrize("writer", ["extract", "activations"])
def test_an_unreadable_index_is_refused_in_one_line_and_replaced_with_overwrite(tiny_bert, tmp_path, writer):
    out = tmp_path / "s"
    write = (lambda **kw: extract(tiny_bert, TEXTS, out, progress=False, **kw)) if writer == "extract" else \
        (lambda **kw: _activations(tiny_bert, out, **kw))
    first = write()
    expected = first.layer(1)
    (out / INDEX_NAME).write_text("{not json", encoding="utf-8")
    with pytest.raises(StoreError, match=r"unreadable index.*\(overwrite=\)"):
        write()
    again = write(overwrite=True)
    assert np.array_equal(again.layer(1), expected)


def test_activations_resume_damaged_shards_and_lost_files(tiny_bert, tmp_path):
    out = tmp_path / "a"
    first = _activations(tiny_bert, out)
    assert len(first.shards) > 1
    expected = first.layer(2)
    shard = out / first.index["shards"][1]["file"]
    shard.write_bytes(shard.read_bytes()[:-8] + b"\0" * 8)
    (out / SENTENCES_NAME).unlink()
    (out / LABELS_NAME).write_text("[", encoding="utf-8")
    with pytest.warns(BertologyWarning, match="damaged"):
        again = _activations(tiny_bert, out)
    assert np.array_equal(again.layer(2), expected)
    assert again.verify() == [] and read_labels(again)["labels"]["label"][1] == 1
    assert [s["id"] for s in json.loads((out / SENTENCES_NAME).read_text())] == [f"x{i}" for i in range(len(TEXTS))]


def test_activations_of_another_model_are_refused(tiny_bert, tmp_path):
    from bertology.models.tiny import tiny_encoder

    _activations(tiny_bert, tmp_path / "a")
    with pytest.raises(StoreError, match="holds activations of other inputs: model"):
        _activations(tiny_encoder("bert", seed=1), tmp_path / "a")


def test_writer_records_a_shard_only_once_it_is_whole(tiny_bert, tmp_path):
    key = {"model": model_record(tiny_bert), "layers": [0], "pool": "cls", "attentions": False, "dtype": "float32",
           "long_policy": "error", "autocast": None}
    writer = StoreWriter(tmp_path / "w", key, "hash")
    writer.start([{"id": "a", "words": []}, {"id": "b", "words": []}], np.ones(2), [(0, 1), (1, 2)], {"path": None})
    assert writer.todo == [0, 1]
    written = []
    with writer.shards_in_background(on_written=written.append) as put:
        put(0, {"layer.0": torch.zeros(1, tiny_bert.hidden_size)})
        assert json.loads((tmp_path / "w" / INDEX_NAME).read_text())["shards"][1]["sha256"] is None
        put(1, {"layer.0": torch.ones(1, tiny_bert.hidden_size)})
    writer.finish({"seconds": 0})
    assert written == [0, 1] and writer.todo == []
    store = Store.open(tmp_path / "w")
    assert store.verify() == [] and np.array_equal(store.layer(0), [[0] * tiny_bert.hidden_size, [1] * tiny_bert.hidden_size])
    resumed = StoreWriter(tmp_path / "w", key, "hash")
    assert resumed.complete
    with pytest.raises(StoreError, match="belongs to another extraction: input"):
        StoreWriter(tmp_path / "w", key, "another hash")


def test_a_last_shard_is_named_in_the_index_by_finish(tiny_bert, tmp_path):
    key = {"model": model_record(tiny_bert), "layers": [0], "pool": "cls", "attentions": False, "dtype": "float32",
           "long_policy": "error", "autocast": None}
    writer = StoreWriter(tmp_path / "w", key, "hash")
    writer.start([{"id": "a", "words": []}, {"id": "b", "words": []}], np.ones(2), [(0, 1), (1, 2)], {"path": None})
    with writer.shards_in_background() as put:
        put(0, {"layer.0": torch.zeros(1, tiny_bert.hidden_size)})
        put(1, {"layer.0": torch.ones(1, tiny_bert.hidden_size)}, last=True)
    on_disk = json.loads((tmp_path / "w" / INDEX_NAME).read_text())
    assert on_disk["shards"][0]["sha256"] and on_disk["shards"][1]["sha256"] is None  # not whole for a resume yet
    assert StoreWriter(tmp_path / "w", key, "hash").todo == [1]
    writer.finish({"seconds": 0})
    store = Store.open(tmp_path / "w")
    assert store.verify() == [] and store.index["stats"] == {"seconds": 0}
    assert StoreWriter(tmp_path / "w", key, "hash").complete


def test_the_spec_checks_once_and_normalises():
    spec = ExtractionSpec(layers=[3, 0], attentions=True, autocast="bf16")
    assert spec.layers == (3, 0) and spec.autocast is None  # attention maps stay float32
    assert spec.layer_list(6) == [0, 3] and spec.attention_layer_list([0, 3]) == [3]
    assert ExtractionSpec(autocast="bf16").autocast == "bfloat16"
    assert ExtractionSpec.of(spec, pool="cls").pool == "cls"
    with pytest.raises(UsageError, match="unknown extraction setting.*poool"):
        ExtractionSpec.of(poool="cls")
    with pytest.raises(UsageError, match="batch_tokens 0"):
        ExtractionSpec(batch_tokens=0)
    with pytest.raises(UsageError, match="layers 'x'"):
        ExtractionSpec(layers="x")
    with pytest.raises(SettingError, match="pool 'tokens': attentions are stored at word level"):
        ExtractionSpec(pool="tokens", attentions=True)
    with pytest.raises(SettingError, match="pool 'words'") as caught:
        ExtractionSpec(pool="words")
    assert not isinstance(caught.value, DataError), "a setting, not bad input data"
    assert str(caught.value.as_option()).startswith("--pool 'words'")
    with pytest.raises(Exception, match="frozen|cannot assign"):
        spec.pool = "cls"


def test_a_spec_and_keywords_give_the_same_store(tiny_bert, tmp_path):
    spec = ExtractionSpec(layers="0,2", pool="word-first", dtype="float32")
    by_spec = extract(tiny_bert, TEXTS, tmp_path / "a", spec, progress=False)
    by_keywords = extract(tiny_bert, TEXTS, tmp_path / "b", layers="0,2", pool="word-first", dtype="float32",
                          progress=False)
    assert by_spec.layers == by_keywords.layers == [0, 2]
    assert np.array_equal(by_spec.layer(2), by_keywords.layer(2))
    with pytest.raises(UsageError, match="spec: expected an ExtractionSpec"):
        extract(tiny_bert, TEXTS, tmp_path / "c", "0,2", progress=False)


@pytest.mark.parametrize("rows", [3, 2048])  # under and over HASH_THREAD_BYTES: hashed inline, hashed on a thread
def test_a_shards_recorded_sha256_is_its_files_and_a_failed_write_leaves_nothing(tmp_path, monkeypatch, rows):
    import errno
    import hashlib

    from safetensors.torch import load_file

    from bertology.errors import OutputError
    from bertology.store.store import HASH_THREAD_BYTES, write_shard_atomic

    tensors = {f"layer.{i}": torch.randn(rows, 384).to(torch.float16) for i in range(3)}
    assert (rows * 384 * 2 * 3 > HASH_THREAD_BYTES) == (rows > 3)
    entry = write_shard_atomic(tmp_path / "shard.safetensors", tensors, {"format_version": "1"})
    data = (tmp_path / "shard.safetensors").read_bytes()
    assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["bytes"] == len(data)
    assert all(torch.equal(load_file(tmp_path / "shard.safetensors")[name], tensor) for name, tensor in tensors.items())

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("os.fsync", full)
    with pytest.raises(OutputError, match="space"):
        write_shard_atomic(tmp_path / "second.safetensors", tensors, {"format_version": "1"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard.safetensors"]


def test_several_writers_refill_a_buffer_only_once_its_shard_is_on_disk(tiny_bert, tmp_path, monkeypatch):
    """Three writers cycling four buffers (as extraction does on a GPU): the first shards' writes are slowed, so
    later ones finish first; every shard holds what was put, the index names them all, on_written in order."""
    import time

    key = {"model": model_record(tiny_bert), "layers": [0], "pool": "cls", "attentions": False, "dtype": "float32",
           "long_policy": "error", "autocast": None}
    writer = StoreWriter(tmp_path / "w", key, "hash")
    n = 9
    writer.start([{"id": str(i), "words": []} for i in range(n)], np.ones(n), [(i, i + 1) for i in range(n)],
                 {"path": None})
    write = writer.write

    def slow_first(k, tensors):
        time.sleep(0.2 if k % 3 == 0 else 0.0)
        return write(k, tensors)

    monkeypatch.setattr(writer, "write", slow_first)
    buffers = [torch.empty(1, tiny_bert.hidden_size) for _ in range(4)]
    written = []
    with writer.shards_in_background(on_written=written.append, writers=3) as put:
        for k in range(n):
            buffer = buffers[k % 4]
            buffer.fill_(k)  # refilled: the shard that used it last must be written already
            put(k, {"layer.0": buffer}, last=k == n - 1)
    writer.finish({"seconds": 0})
    assert written == list(range(n)) and writer.todo == []
    store = Store.open(tmp_path / "w")
    assert store.verify() == [] and np.array_equal(store.layer(0)[:, 0], np.arange(n))
    for bad in (0, 1.5, True):
        with pytest.raises(UsageError, match="writers"), writer.shards_in_background(writers=bad):
            pass


def test_an_extraction_with_several_writers_is_the_same_store(tiny_bert, tmp_path, monkeypatch):
    import bertology.extraction.pipeline as pipeline

    texts = TEXTS * 8
    one = extract(tiny_bert, texts, tmp_path / "one", shard_bytes=2000, progress=False)
    monkeypatch.setattr(pipeline, "CPU_WRITERS", 3)
    three = extract(tiny_bert, texts, tmp_path / "three", shard_bytes=2000, progress=False)
    assert len(three.index["shards"]) > 4 and three.verify() == []
    assert all(np.array_equal(one.layer(layer), three.layer(layer)) for layer in one.layers)
