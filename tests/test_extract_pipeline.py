"""The extraction pipeline of issue 31: the same vectors as the old per-shard pooling, batches prepared in line
(a CPU) or on a second thread (a GPU), the token budget following the device and halving when the device runs out of memory."""

import copy
import json
import threading
import warnings

import numpy as np
import pytest
import torch

from bertology.data import Sentence, default_corpus, read_conllu
from bertology.errors import ModelError, UsageError
from bertology.extraction import ExtractionSpec, extract, pipeline
from bertology.extraction.alignment import (WordPieces, _tokenize_slowly, _tokenize_words, _whole_words, encode_sentences,
                                            pool_rows)
from bertology.models.batching import (CPU_BATCH_TOKENS, CPU_MAX_BATCH, TokenBudget, device_token_budget,
                                       is_out_of_memory, pad_batch)
from bertology.models.tiny import FAMILIES, tiny_encoder

POOLS = ("word-mean", "word-first", "word-last", "cls", "mean", "tokens")


def _old_pooling(encoder, sentences, layers, pool):
    """The pooling before issue 31 (the old ``_ShardPooler``), as a reference: every model input on its own,
    each position's vector summed into the row :func:`pool_rows` gives it, each row divided by its count."""
    encoded = encode_sentences(encoder.tokenizer, list(sentences), encoder.max_length)
    out = {layer: [] for layer in layers}
    for sentence in encoded:
        rows = pool_rows(sentence, pool)
        n_rows = int(rows.max()) + 1
        sums = {layer: torch.zeros(n_rows, encoder.hidden_size) for layer in layers}
        counts = torch.zeros(n_rows)
        for segment in sentence.segments:
            with torch.no_grad():
                states = encoder.model(input_ids=torch.tensor([segment.input_ids]), output_hidden_states=True)
            target = rows[segment.global_positions]
            keep = target >= 0
            local = torch.as_tensor(segment.local_positions[keep])
            where = torch.as_tensor(target[keep])
            for layer in layers:
                sums[layer].index_add_(0, where, states.hidden_states[layer][0, local].float())
            counts.index_add_(0, where, torch.ones(len(where)))
        for layer in layers:
            out[layer].append((sums[layer] / counts.clamp(min=1)[:, None]).numpy())
    return {layer: np.concatenate(parts) for layer, parts in out.items()}


def _corpus(n=120):
    """EWT sentences and two longer than a 24-position model takes (windowed)."""
    sentences = read_conllu(default_corpus("ewt-dev"))[:n]
    long_words = tuple("antidisestablishment" if i % 5 == 0 else f"w{i % 7}" for i in range(40))
    return [*sentences[:50], Sentence(words=long_words, id="long"), *sentences[50:],
            Sentence(words=long_words[:23], id="long2")]


@pytest.mark.parametrize("pool", POOLS)
def test_the_store_holds_the_vectors_of_the_old_pooling(tmp_path, pool):
    encoder = tiny_encoder("bert", max_positions=24)
    sentences = _corpus()
    # small batches and shards: many batches per shard, several shards, windowed sentences across batches
    store = extract(encoder, sentences, tmp_path / "s", pool=pool, dtype="float32", batch_tokens=96,
                    shard_bytes=20_000, progress=False)
    assert len(store.index["shards"]) > 2
    assert store.index["stats"]["windowed_sentences"] >= 2
    want = _old_pooling(encoder, sentences, store.layers, pool)
    for layer in store.layers:
        np.testing.assert_allclose(store.layer(layer), want[layer], atol=2e-6, rtol=1e-5, err_msg=f"{pool} {layer}")


def _pool_one_layer_at_a_time(self, batch):
    """``ShardComputer._pool`` before every layer shared one buffer (no attentions): a buffer, a division, a
    cast and a copy into the shard per layer; the reference for the one-buffer pooling."""
    device = self.device
    hidden_states, _ = pipeline._forward(self.encoder, self.model, batch.ids, batch.mask, [])
    index = batch.indices
    states = [hidden_states[layer].reshape(-1, hidden_states[layer].shape[-1]) for layer in self.layers]
    means = []
    if len(index["rows"]):
        weights = index["weights"][:, None]
        for layer_states in states:
            sums = torch.zeros(len(index["rows"]), layer_states.shape[-1], device=device)
            sums.index_add_(0, index["local"], layer_states.index_select(0, index["gather"]).float())
            means.append(sums.div_(weights).to(self.result.dtype))
    spilled = [layer_states.index_select(0, index["spill_gather"]).float() for layer_states in states] \
        if len(index["spill_target"]) else []
    if spilled and not self.spilled:
        self.spill = torch.zeros(len(self.layers) + 1, self.rows, self.encoder.hidden_size, device=device) \
            if self.spill is None or self.spill.shape[1] < self.rows else self.spill.zero_()
        self.spilled = True
    for position, rows in enumerate(means):
        self.result[position].index_copy_(0, index["rows"], rows)
    for position, rows in enumerate(spilled):
        self.spill[position].index_add_(0, index["spill_target"], rows)
    if spilled:
        self.spill[-1, :, 0].index_add_(0, index["spill_target"], torch.ones(len(index["spill_target"])))
    self.counts["tokens"] += batch.tokens
    self.counts["padded_tokens"] += batch.padded


@pytest.mark.parametrize(("pool", "dtype"), [("word-mean", "float16"), ("word-first", "float32"), ("tokens", "float16"),
                                             ("mean", "float32")])
def test_every_layer_pooled_in_one_buffer_stores_the_same_bytes(tmp_path, monkeypatch, pool, dtype):
    encoder = tiny_encoder("bert", max_positions=24)
    sentences = _corpus()  # windowed sentences too
    settings = dict(pool=pool, dtype=dtype, batch_tokens=256, shard_bytes=20_000, progress=False)
    store = extract(encoder, sentences, tmp_path / "new", **settings)
    monkeypatch.setattr(pipeline.ShardComputer, "_pool", _pool_one_layer_at_a_time)
    before = extract(encoder, sentences, tmp_path / "old", **settings)
    assert len(store.index["shards"]) > 2 and store.index["stats"]["windowed_sentences"] >= 2
    assert [s["sha256"] for s in store.index["shards"]] == [s["sha256"] for s in before.index["shards"]]
    for layer in store.layers:
        np.testing.assert_array_equal(store.layer(layer), before.layer(layer))


@pytest.mark.parametrize("pool", ["word-mean", "tokens"])
def test_batches_made_ahead_on_a_thread_store_the_same_bytes_as_in_line(tmp_path, monkeypatch, pool):
    encoder = tiny_encoder("bert", max_positions=24)
    sentences = _corpus()  # windowed sentences too
    settings = dict(pool=pool, batch_tokens=256, shard_bytes=20_000, progress=False)
    made, batches = [], pipeline._Parts._batches

    def noted(self, k):
        made.append((self.background, threading.current_thread() is threading.main_thread()))
        yield from batches(self, k)

    monkeypatch.setattr(pipeline._Parts, "_batches", noted)
    inline = extract(encoder, sentences, tmp_path / "inline", **settings)
    assert made == [(False, True)] * len(inline.index["shards"])  # a CPU: on the compute thread
    made.clear()
    monkeypatch.setattr(pipeline, "_batches_ahead", lambda device: True)  # as beside a GPU
    ahead = extract(encoder, sentences, tmp_path / "ahead", **settings)
    assert made == [(True, False)] * len(ahead.index["shards"]) and len(made) > 2
    assert [s["sha256"] for s in ahead.index["shards"]] == [s["sha256"] for s in inline.index["shards"]]
    assert ahead.index["stats"]["windowed_sentences"] == inline.index["stats"]["windowed_sentences"] >= 2


@pytest.mark.parametrize("pool", ["word-mean", "tokens"])
def test_in_line_a_shards_batches_are_all_made_before_the_first_runs_and_store_the_same_bytes(tmp_path, monkeypatch,
                                                                                              pool):
    encoder = tiny_encoder("bert", max_positions=24)
    sentences = _corpus()  # windowed sentences too
    settings = dict(pool=pool, batch_tokens=256, shard_bytes=20_000, progress=False)
    events, batches, run = [], pipeline.ShardComputer.batches, pipeline.ShardComputer.run

    def made(self, *args):
        for batch in batches(self, *args):
            events.append("made")
            yield batch

    def ran(self, batch):
        events.append("ran")
        return run(self, batch)

    monkeypatch.setattr(pipeline.ShardComputer, "batches", made)
    monkeypatch.setattr(pipeline.ShardComputer, "run", ran)
    at_once = extract(encoder, sentences, tmp_path / "at-once", **settings)
    shards = "".join("m" if e == "made" else "r" for e in events)
    assert shards.count("rm") == len(at_once.index["shards"]) - 1 > 1  # made, then run, shard after shard
    events.clear()
    monkeypatch.setattr(pipeline._Parts, "at_once", False)  # each batch made just before it runs
    lazy = extract(encoder, sentences, tmp_path / "lazy", **settings)
    assert "".join("m" if e == "made" else "r" for e in events) == "mr" * (len(events) // 2)
    assert [s["sha256"] for s in lazy.index["shards"]] == [s["sha256"] for s in at_once.index["shards"]]


def test_an_error_while_making_batches_ahead_reaches_the_caller_and_finishes_no_store(tmp_path, monkeypatch):
    encoder = tiny_encoder("bert", max_positions=24)
    monkeypatch.setattr(pipeline, "_batches_ahead", lambda device: True)

    def fail(self):
        raise ModelError("refused on the batches' thread")

    monkeypatch.setattr(pipeline._Parts, "_check_unknown", fail)  # runs before the last shard's batches
    with pytest.raises(ModelError, match="refused on the batches' thread"):
        extract(encoder, _corpus(), tmp_path / "s", batch_tokens=256, shard_bytes=20_000, progress=False)
    index = json.loads((tmp_path / "s" / "store.json").read_text())
    assert not index["stats"] and len(index["shards"]) > 2 and not index["shards"][-1]["sha256"]  # never finished


def test_float16_storage_is_the_float32_vectors_rounded(tmp_path):
    encoder = tiny_encoder("roberta")
    sentences = _corpus(60)
    exact = extract(encoder, sentences, tmp_path / "f32", dtype="float32", progress=False)
    half = extract(encoder, sentences, tmp_path / "f16", progress=False)
    for layer in exact.layers:
        np.testing.assert_array_equal(half.layer(layer), exact.layer(layer).astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("family", ["minilm", *FAMILIES])
def test_each_distinct_word_tokenized_once_gives_the_tokenizers_own_pieces(family, request):
    tokenizer = (request.getfixturevalue("minilm") if family == "minilm" else tiny_encoder(family)).tokenizer
    sentences = read_conllu(default_corpus("ewt-dev"))[:300]
    word_lists = [list(s.words) for s in sentences] + [["a", "\x07", "b"], ["\x07"]]  # words that map to nothing
    unk = tokenizer.unk_token or tokenizer.pad_token
    tokenizer.backend_tokenizer.enable_padding(length=64)  # a tokenizer left padding (MiniLM's file does)
    fast = _tokenize_words(tokenizer, word_lists, unk)
    slow = [_tokenize_slowly(tokenizer, words, unk) for words in word_lists]
    for (ids, index, lost), (want_ids, want_index, want_lost) in zip(fast, slow):
        assert ids == want_ids and lost == want_lost
        np.testing.assert_array_equal(index, want_index)
    if family in ("minilm", "bert", "distilbert", "electra"):  # WordPiece maps a control character to nothing
        assert fast[-2][2] == 1  # ... so it became the unknown token
    # A corpus encoded a part at a time, each distinct word tokenized once across the parts: the same pieces
    pieces = WordPieces()
    parts = [_tokenize_words(tokenizer, word_lists[a:b], unk, pieces) for a, b in ((0, 100), (100, 250), (250, 302))]
    assert len(pieces.words) == len({w for words in word_lists for w in words})
    for (ids, index, lost), (want_ids, want_index, want_lost) in zip([x for part in parts for x in part], slow):
        assert ids == want_ids and lost == want_lost
        np.testing.assert_array_equal(index, want_index)


@pytest.mark.parametrize("variant", ["uncased", "cased", "added word", "added token"])
def test_words_looked_up_whole_in_the_vocabulary_are_the_tokenizers_own_pieces(minilm, variant):
    """WordPiece words of ASCII letters and digits are looked up whole (``_whole_words``); the pieces are the
    tokenizer's own, cased or not, and an added token that could match inside such a word turns the look-up off."""
    from tokenizers import normalizers

    tokenizer = copy.deepcopy(minilm.tokenizer)
    if variant == "cased":
        tokenizer.backend_tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False)
    elif variant == "added word":
        tokenizer.add_tokens(["dog"])
    elif variant == "added token":
        tokenizer.add_tokens(["<ent>"])
    words = list(dict.fromkeys(w for s in read_conllu(default_corpus("ewt-dev")) for w in s.words))
    words += ["a" * 100, "b" * 101, "A1b2C3", "Ünïcode", "DOG", "dogs", "hotdog", "ent", "x<ent>y"]
    found = _whole_words(tokenizer.backend_tokenizer, words)
    assert (len(found) > len(words) / 2) == (variant != "added word")
    unk = tokenizer.unk_token
    [(ids, index, lost)] = _tokenize_words(tokenizer, [words], unk)
    want_ids, want_index, want_lost = _tokenize_slowly(tokenizer, words, unk)
    assert ids == want_ids and lost == want_lost
    np.testing.assert_array_equal(index, want_index)


def _failing_above(encoder, limit, seen):
    """The model raises torch's out-of-memory error on a batch of more than ``limit`` padded tokens."""
    model = encoder.model
    forward = model.forward

    def flaky(*args, input_ids=None, **kwargs):
        seen.append(input_ids.numel())
        if input_ids.numel() > limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory (injected above {limit} tokens)")
        return forward(*args, input_ids=input_ids, **kwargs)

    model.forward = flaky
    return encoder


def test_out_of_memory_halves_the_budget_and_retries_the_batch(tmp_path):
    sentences = read_conllu(default_corpus("ewt-dev"))[:200]
    clean = extract(tiny_encoder("bert"), sentences, tmp_path / "clean", dtype="float32", progress=False)
    seen = []
    encoder = _failing_above(tiny_encoder("bert"), 700, seen)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = extract(encoder, sentences, tmp_path / "s", dtype="float32", batch_tokens=4096, progress=False)
    lines = [str(w.message) for w in caught if "out of device memory" in str(w.message)]
    assert len(lines) == store.index["stats"]["out_of_memory_halvings"] >= 1
    assert all("\n" not in line and "token budget" in line for line in lines)
    assert max(seen) > 700  # it did fail, and then ran in pieces
    stats = json.loads((tmp_path / "s" / "store.json").read_text())["stats"]
    # The budget used is a halving below the batch that failed (a budget bounds padded tokens, so it may sit
    # just above the fake 700-token limit while every batch under it fits).
    assert stats["batch_tokens"] == 4096 and stats["batch_tokens_used"] < max(seen) and stats["batch_tokens_used"] < 4096
    for layer in clean.layers:
        np.testing.assert_allclose(store.layer(layer), clean.layer(layer), atol=2e-6)


def test_a_single_input_that_does_not_fit_is_one_line(tmp_path):
    encoder = _failing_above(tiny_encoder("bert"), 3, [])
    with pytest.raises(ModelError, match="out of device memory on a single input") as error:
        extract(encoder, ["the dog barks"], tmp_path / "s", progress=False)
    assert "\n" not in str(error.value)


def test_token_budget_only_catches_out_of_memory():
    budget = TokenBudget(100, what="test")

    def fail(indices):
        raise ValueError("not memory")

    with pytest.raises(ValueError, match="not memory"):
        budget.run([10, 10], fail)
    assert budget.halvings == 0 and is_out_of_memory(torch.OutOfMemoryError("x"))
    assert not is_out_of_memory(RuntimeError("x"))
    ran = []

    def small(indices):
        if len(indices) > 1:
            raise torch.OutOfMemoryError("too big")
        ran.append(indices.tolist())

    with pytest.warns(Warning, match="token budget 100 -> "):
        budget.run([10, 10, 10, 10], small)
    assert sorted(sum(ran, [])) == [0, 1, 2, 3] and budget.tokens < 100
    assert budget.record()["out_of_memory_halvings"] == budget.halvings >= 1
    with pytest.raises(UsageError, match="token budget 0"):
        TokenBudget(0)


def test_the_budget_follows_the_device(tmp_path, tiny_bert):
    assert device_token_budget("cpu", 10_000) == (CPU_BATCH_TOKENS, CPU_MAX_BATCH)
    assert ExtractionSpec().batch_tokens is None and ExtractionSpec().max_batch is None
    with pytest.raises(UsageError, match="batch_tokens 0"):
        ExtractionSpec(batch_tokens=0)
    store = extract(tiny_bert, ["the dog barks"], tmp_path / "s", progress=False)
    stats = store.index["stats"]
    assert (stats["batch_tokens"], stats["max_batch"], stats["device"]) == (CPU_BATCH_TOKENS, CPU_MAX_BATCH, "cpu")
    store = extract(tiny_bert, ["the dog barks"], tmp_path / "t", batch_tokens=64, progress=False)
    assert store.index["stats"]["batch_tokens"] == store.index["stats"]["batch_tokens_used"] == 64


def test_a_default_shard_holds_the_rows_it_is_asked_for(tmp_path, tiny_bert, monkeypatch):
    from bertology.extraction.spec import SHARD_MAX_BYTES
    from bertology.store.names import SHARD_TARGET_BYTES

    spec = ExtractionSpec()
    assert spec.shard_bytes is None and spec.shard_target(0, 768) == SHARD_TARGET_BYTES
    assert spec.shard_target(2 * 16_384, 13 * 768 * 2) == 2 * 16_384 * 13 * 768 * 2 > SHARD_TARGET_BYTES  # bert-base
    assert spec.shard_target(10**9, 10**6) == SHARD_MAX_BYTES
    assert ExtractionSpec(shard_bytes=4096).shard_target(10**6, 10**3) == 4096  # as given
    # Extraction asks for none on a CPU: a small target cuts the corpus into many shards, as it always did.
    monkeypatch.setattr("bertology.extraction.spec.SHARD_TARGET_BYTES", 2000)
    store = extract(tiny_bert, [f"word{i} and more words here" for i in range(60)], tmp_path / "s", progress=False)
    assert len(store.index["shards"]) > 3


def test_a_gpu_plan_has_shards_of_two_full_batches(tmp_path, tiny_bert, monkeypatch):
    # Planning only (nothing runs on the device): the encoder said to be on CUDA with a 65,536-token budget, as
    # device_token_budget gives on a large GPU; the store's target made tiny so that the CPU plan cuts many shards.
    from bertology.extraction import pipeline

    monkeypatch.setattr("bertology.extraction.spec.SHARD_TARGET_BYTES", 2000)
    sentences = [f"word{i} and more words here" for i in range(300)]
    cpu = pipeline.plan_extraction(tiny_bert, sentences, tmp_path / "cpu")
    monkeypatch.setattr(type(tiny_bert), "device", property(lambda self: torch.device("cuda")))
    monkeypatch.setattr(pipeline, "device_token_budget", lambda device, bytes_per_token: (65_536, None))
    gpu = pipeline.plan_extraction(tiny_bert, sentences, tmp_path / "gpu")
    assert len(cpu.index["shards"]) > 10
    # Two batches of 65,536 rows outweigh the corpus: only the ramp cuts it (128 sentences first, then halves).
    assert len(gpu.index["shards"]) < len(cpu.index["shards"])
    assert max(s["stop"] - s["start"] for s in gpu.index["shards"]) > 10 * max(s["stop"] - s["start"]
                                                                            for s in cpu.index["shards"])


def test_pad_batch_fills_rows_at_once():
    batch = pad_batch([[5, 6, 7], [8], []], 0, token_type_ids=[[0, 1, 1], [1], []])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [0, 0, 0]]
    assert batch["token_type_ids"].tolist() == [[0, 1, 1], [1, 0, 0], [0, 0, 0]]
    # Rows given as lists (filled in one pass over their items) or as arrays and tensors: the same batch.
    for rows in ([np.array([5, 6, 7]), np.array([8]), np.array([], dtype=np.int64)],
                 [torch.tensor([5, 6, 7]), torch.tensor([8]), torch.tensor([], dtype=torch.long)],
                 [[5, 6, 7], np.array([8]), []]):
        other = pad_batch(rows, 0, token_type_ids=[[0, 1, 1], [1], []], width=4)
        assert other["input_ids"].tolist() == [[5, 6, 7, 0], [8, 0, 0, 0], [0, 0, 0, 0]]
        assert other["token_type_ids"].tolist() == [[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]]
