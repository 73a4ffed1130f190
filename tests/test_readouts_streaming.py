"""Activation stores and the streaming reader: exactly once per epoch, correct rows, shard-level shuffling,
resuming (the reader, readout training and the store writer), and stores of another model refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertology.errors import ModelError, StoreError
from bertology.readouts.activations import read_labels, write_activations
from bertology.readouts.catalog import build_readout
from bertology.readouts.streaming import StreamingReader
from bertology.readouts.train import ReadoutTrainConfig, check_store_model, train_readout
from bertology.store import Store
from bertology.store import writer as store_writer

N_INPUTS = 40


def _inputs(tokenizer, n: int = N_INPUTS, seed: int = 0):
    rng = np.random.default_rng(seed)
    words = "the quick brown fox jumps over lazy dog she said that dogs chase mice eat cheese".split()
    texts = [" ".join(rng.choice(words, size=int(rng.integers(3, 14)))) for _ in range(n)]
    encoded = tokenizer(texts)
    ids = [list(x) for x in encoded["input_ids"]]
    starts = [int(rng.integers(1, len(x) - 1)) for x in ids]
    return ids, {"start": starts, "end": starts}


def _store(tmp_path, encoder, name="store", shard_bytes=6000, n=N_INPUTS, seed=0, **kwargs):
    ids, labels = _inputs(encoder.tokenizer, n, seed)
    records = [{"id": f"x{i}", "words": []} for i in range(len(ids))]
    return write_activations(encoder, ids, None, records, labels, tmp_path / name, pool="tokens",
                             shard_bytes=shard_bytes, progress=False, **kwargs), ids


@pytest.fixture(scope="module")
def store_and_ids(tmp_path_factory, tiny_bert):
    return _store(tmp_path_factory.mktemp("stream"), tiny_bert)


def test_store_rows_are_the_encoders_hidden_states(store_and_ids, tiny_bert):
    store, ids = store_and_ids
    assert store.pool == "tokens" and store.layers == [0, 1, 2] and len(store.shards) > 4
    assert list(store.row_counts) == [len(x) for x in ids]
    i = 7
    states = tiny_bert.forward({"input_ids": torch.tensor([ids[i]]), "attention_mask": torch.ones(1, len(ids[i]),
                                                                                                  dtype=torch.long)})
    for layer in store.layers:
        expected = states.layer(layer)[0].to(torch.float16).float().numpy()
        assert np.allclose(store.sentence_rows(i, layer), expected, atol=1e-3)
    assert read_labels(store)["labels"]["start"][i] >= 1


def test_bertology_info_reads_and_verifies_the_store(store_and_ids):
    from typer.testing import CliRunner

    from bertology.cli import app

    store, _ = store_and_ids
    result = CliRunner().invoke(app, ["info", str(store.path)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert f"{len(store.shards)} shards verified" in result.output


def test_every_example_exactly_once_per_epoch_with_its_own_rows(store_and_ids):
    store, ids = store_and_ids
    reader = StreamingReader(store, batch_size=3, seed=1, buffer_shards=2, queue_depth=2)
    for epoch in (0, 1):
        seen = []
        for batch in reader.epoch(epoch):
            seen.extend(batch.indices.tolist())
            for row, i in enumerate(batch.indices):
                n = len(ids[i])
                assert batch.mask[row].sum() == n
                assert torch.all(batch.x[row, :, n:] == 0)
                expected = np.stack([store.sentence_rows(int(i), layer) for layer in store.layers])
                assert np.array_equal(batch.x[row, :, :n].numpy(), expected)
        assert sorted(seen) == list(range(store.n_sentences))
    assert len(reader) == sum(1 for _ in reader.epoch(0))


def test_order_is_shuffled_by_shard_and_within_a_buffer_and_fixed_by_seed(store_and_ids):
    store, _ = store_and_ids
    shard_of = {i: k for k, s in enumerate(store.shards) for i in range(s.start, s.stop)}

    def order(seed, epoch, buffer_shards):
        reader = StreamingReader(store, batch_size=4, seed=seed, buffer_shards=buffer_shards)
        return [b.indices.tolist() for b in reader.epoch(epoch)]

    assert order(0, 0, 2) == order(0, 0, 2)
    assert order(0, 0, 2) != order(0, 1, 2) and order(0, 0, 2) != order(1, 0, 2)
    flat = [i for batch in order(0, 0, 1) for i in batch]
    assert flat != sorted(flat)
    # one shard per buffer: a batch never mixes shards; two: some batches do
    assert all(len({shard_of[i] for i in batch}) == 1 for batch in order(0, 0, 1))
    assert any(len({shard_of[i] for i in batch}) > 1 for batch in order(0, 0, 2))
    unshuffled = StreamingReader(store, batch_size=4, shuffle=False)
    assert [i for b in unshuffled.epoch(0) for i in b.indices] == list(range(store.n_sentences))


def test_resuming_an_epoch_skips_batches_without_reading_them(store_and_ids):
    store, _ = store_and_ids
    full_reader = StreamingReader(store, batch_size=2, seed=3, buffer_shards=1)
    full = [b.indices.tolist() for b in full_reader.epoch(0)]
    reader = StreamingReader(store, batch_size=2, seed=3, buffer_shards=1)
    tail = [(b.number, b.indices.tolist()) for b in reader.epoch(0, start_batch=len(full) - 3)]
    assert [indices for _, indices in tail] == full[-3:]
    assert [number for number, _ in tail] == [len(full) - 3, len(full) - 2, len(full) - 1]
    assert reader.bytes_read < full_reader.bytes_read / 2


def test_leaving_an_epoch_early_stops_the_prefetcher(store_and_ids):
    store, _ = store_and_ids
    reader = StreamingReader(store, batch_size=1, queue_depth=1)
    for number, _ in enumerate(reader.epoch(0)):
        if number == 2:
            break
    # a new epoch starts cleanly afterwards
    assert sum(len(b.indices) for b in reader.epoch(1)) == store.n_sentences


def test_a_damaged_shard_is_a_clear_error_from_the_prefetcher(tmp_path, tiny_bert):
    store, _ = _store(tmp_path, tiny_bert)
    path = store.path / store.shards[0].file
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(StoreError, match="shard missing or of the wrong size"):
        list(StreamingReader(store, batch_size=4, shuffle=False).epoch(0))


def test_readout_training_resumes_after_an_interruption(tmp_path, store_and_ids, monkeypatch):
    store, _ = store_and_ids
    config = ReadoutTrainConfig(epochs=2, lr=1e-2, batch_size=4, checkpoint_every=3, progress=False)

    def fresh():
        return build_readout("lp", len(store.layers), store.dim, "span", seed=0)

    reference = fresh()
    reference_stats = train_readout(reference, store, config)

    import bertology.readouts.train as train_module

    real_loss, calls = train_module.readout_loss, {"n": 0}

    def failing_loss(*args):
        calls["n"] += 1
        if calls["n"] == 8:
            raise KeyboardInterrupt
        return real_loss(*args)

    checkpoint = tmp_path / "head.pt"
    monkeypatch.setattr(train_module, "readout_loss", failing_loss)
    with pytest.raises(KeyboardInterrupt):
        train_readout(fresh(), store, config, checkpoint=checkpoint)
    monkeypatch.setattr(train_module, "readout_loss", real_loss)
    resumed = fresh()
    stats = train_readout(resumed, store, config, checkpoint=checkpoint)
    assert stats.resumed_from == 6 and stats.steps == reference_stats.steps
    for a, b in zip(reference.parameters(), resumed.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    again = train_readout(fresh(), store, config, checkpoint=checkpoint)
    assert again.reused
    with pytest.raises(ModelError, match="a readout checkpoint of other settings"):
        train_readout(fresh(), store, ReadoutTrainConfig(epochs=1, progress=False), checkpoint=checkpoint)


def test_store_writing_resumes_after_an_interruption(tmp_path, tiny_bert, monkeypatch):
    clean, _ = _store(tmp_path, tiny_bert, name="clean")
    real_write, calls = store_writer.write_shard_atomic, {"n": 0}

    def failing_write(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk went away")
        return real_write(*args, **kwargs)

    monkeypatch.setattr(store_writer, "write_shard_atomic", failing_write)
    with pytest.raises(OSError):
        _store(tmp_path, tiny_bert, name="resumed")
    monkeypatch.setattr(store_writer, "write_shard_atomic", real_write)
    with pytest.raises(StoreError, match="incomplete"):
        Store.open(tmp_path / "resumed")
    written = {s["file"] for s in Store.open(tmp_path / "resumed", allow_incomplete=True).index["shards"]
               if s["sha256"]}
    assert len(written) == 2
    resumed, _ = _store(tmp_path, tiny_bert, name="resumed")
    assert [s.sha256 for s in resumed.shards] == [s.sha256 for s in clean.shards]
    assert not list((tmp_path / "resumed").glob(".*.tmp"))


def test_a_store_of_another_model_is_refused(tmp_path, store_and_ids, tiny_bert):
    from bertology.models.tiny import tiny_encoder

    store, _ = store_and_ids
    other = tiny_encoder("bert", seed=5)
    with pytest.raises(StoreError, match="holds activations of other inputs: model"):
        _store(store.path.parent, other)
    with pytest.raises(StoreError, match="but the readout was trained on fingerprint"):
        check_store_model(store, other.fingerprint)
