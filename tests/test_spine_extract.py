import json
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from bertology.data import Sentence, read_conllu, sentences_from_strings
from bertology.errors import ModelError, StoreError, UsageError
from bertology.extraction import encode_sentences, extract
from bertology.models.tiny import tiny_encoder
from bertology.store import Store

TEXTS = ["The quick brown fox jumps over the lazy dog .", "Antidisestablishmentarianism isn't easy , is it ?",
         "Dogs chase cats .", "A café in Zürich served 3.14 pies !"]


def _reference_word_vectors(encoder, sentence, layer, pool="mean"):
    tok = encoder.tokenizer([list(sentence.words)], is_split_into_words=True, return_tensors="pt")
    out = encoder.forward(tok, attentions=True)
    word_ids = tok.word_ids(0)
    h = out.hidden_states[layer][0]
    rows = []
    for w in range(len(sentence.words)):
        idx = [i for i, x in enumerate(word_ids) if x == w]
        rows.append(h[idx].mean(0) if pool == "mean" else h[idx[0]])
    return torch.stack(rows).numpy(), out.attentions, word_ids


@pytest.mark.parametrize("family", ["bert", "roberta", "deberta-v2"])
def test_word_vectors_match_a_plain_forward_pass(tmp_path, family):
    encoder = tiny_encoder(family)
    sentences = sentences_from_strings(TEXTS)
    store = extract(encoder, sentences, tmp_path / "s", dtype="float32", progress=False, attentions=True)
    assert store.layers == [0, 1, 2]
    for i, sentence in enumerate(sentences):
        ref, _, _ = _reference_word_vectors(encoder, sentence, 2)
        np.testing.assert_allclose(store.sentence_rows(i, 2), ref, atol=1e-5)
    first = extract(encoder, sentences, tmp_path / "f", dtype="float32", pool="word-first", progress=False)
    ref, _, _ = _reference_word_vectors(encoder, sentences[1], 1, pool="first")
    np.testing.assert_allclose(first.sentence_rows(1, 1), ref, atol=1e-5)


def test_word_level_attention_follows_clark(tmp_path, tiny_bert):
    sentences = sentences_from_strings(TEXTS[:2])
    store = extract(tiny_bert, sentences, tmp_path / "s", attentions=True, dtype="float32", progress=False)
    _, attentions, word_ids = _reference_word_vectors(tiny_bert, sentences[1], 1)
    token_map = attentions[0][0].numpy()  # layer 1: [heads, T, T]
    groups = np.array([0 if w is None and i == 0 else (len(sentences[1]) + 1 if w is None else w + 1)
                       for i, w in enumerate(word_ids)])
    g = len(sentences[1]) + 2
    expected = np.zeros((token_map.shape[0], g, g))
    for a in range(g):
        for b in range(g):
            rows, cols = groups == a, groups == b
            expected[:, a, b] = token_map[:, rows][:, :, cols].sum(-1).mean(-1)
    got = store.attention(1)
    assert got.shape == (2, 4, g, g)
    np.testing.assert_allclose(got[0], expected, atol=1e-5)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)
    per_layer = list(store.iter_attention_layer(2))
    np.testing.assert_allclose(per_layer[1], got[1])


def test_sentence_pools_and_tokens(tmp_path, tiny_bert):
    sentences = sentences_from_strings(TEXTS)
    cls = extract(tiny_bert, sentences, tmp_path / "c", pool="cls", dtype="float32", progress=False)
    mean = extract(tiny_bert, sentences, tmp_path / "m", pool="mean", dtype="float32", progress=False)
    tokens = extract(tiny_bert, sentences, tmp_path / "t", pool="tokens", dtype="float32", progress=False)
    assert cls.layer(2).shape == (4, 32) and mean.layer(2).shape == (4, 32)
    tok = tiny_bert.tokenizer([list(sentences[0].words)], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        h = tiny_bert.model(**tok, output_hidden_states=True).hidden_states[2][0].numpy()
    np.testing.assert_allclose(cls.layer(2)[0], h[0], atol=1e-5)
    np.testing.assert_allclose(mean.layer(2)[0], h[1:-1].mean(0), atol=1e-5)
    np.testing.assert_allclose(tokens.sentence_rows(0, 2), h[1:-1], atol=1e-5)
    assert len(tokens.tokens(0)) == h.shape[0] - 2


def test_sliding_window_covers_long_sentences(tmp_path):
    encoder = tiny_encoder("bert", max_positions=24)
    words = tuple(f"w{i % 7} dog" .split()[0] if i % 2 else "cats" for i in range(80))
    sentences = [Sentence(words=words, id="long"), Sentence(words=("short", "one"), id="short")]
    store = extract(encoder, sentences, tmp_path / "s", attentions=True, progress=False)
    assert store.word_counts.tolist() == [80, 2]
    assert store.index["stats"]["windowed_sentences"] == 1
    rows = store.sentence_rows(0, 2)
    assert np.isfinite(rows).all() and np.abs(rows).sum(1).min() > 0
    att = store.attention(0)
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-3)
    # a word in the middle is computed in a window where it has context: compare with a direct pass on
    # the window that owns it
    [enc] = encode_sentences(encoder.tokenizer, sentences[:1], encoder.max_length)
    assert len(enc.segments) > 2


def test_store_reads_one_layer_without_touching_others(tmp_path, tiny_bert, monkeypatch):
    store = extract(tiny_bert, sentences_from_strings(TEXTS), tmp_path / "s", progress=False, shard_bytes=200)
    assert len(store.shards) > 1
    seen = []
    original = Store._read

    def spy(self, shard, name):
        seen.append(name)
        return original(self, shard, name)

    monkeypatch.setattr(Store, "_read", spy)
    layer = store.layer(1)
    assert set(seen) == {"layer.1"} and len(seen) == len(store.shards)
    assert layer.shape == (int(store.word_counts.sum()), 32) and layer.dtype == np.float32
    vectors = store.sentence_vectors(1)
    np.testing.assert_allclose(vectors[2], layer[store.offsets[2]:store.offsets[3]].mean(0), rtol=1e-6)


def test_metadata_travels_and_rerun_reuses(tmp_path, tiny_bert):
    sentences = sentences_from_strings(TEXTS)
    store = extract(tiny_bert, sentences, tmp_path / "s", progress=False)
    meta = store.metadata
    assert meta["model"]["fingerprint"] == tiny_bert.fingerprint
    assert meta["layers"] == [0, 1, 2] and meta["pool"] == "word-mean" and meta["dtype"] == "float16"
    assert meta["input"]["hash"] and meta["bertology_version"]
    mtime = (tmp_path / "s" / store.shards[0].file).stat().st_mtime_ns
    again = extract(tiny_bert, sentences, tmp_path / "s", progress=False)
    assert (tmp_path / "s" / again.shards[0].file).stat().st_mtime_ns == mtime
    assert again.verify() == []


def test_other_model_or_input_is_refused(tmp_path, tiny_bert):
    sentences = sentences_from_strings(TEXTS)
    extract(tiny_bert, sentences, tmp_path / "s", progress=False)
    with pytest.raises(StoreError, match="another extraction.*fingerprint"):
        extract(tiny_encoder("bert", seed=1), sentences, tmp_path / "s", progress=False)
    with pytest.raises(StoreError, match="input"):
        extract(tiny_bert, sentences[:2], tmp_path / "s", progress=False)
    with pytest.raises(StoreError, match="not the model given"):
        Store.open(tmp_path / "s", expect_fingerprint="0" * 16)
    store = extract(tiny_bert, sentences[:2], tmp_path / "s", progress=False, overwrite=True)
    assert store.n_sentences == 2


def test_old_format_version_is_refused(tmp_path, tiny_bert):
    extract(tiny_bert, sentences_from_strings(TEXTS), tmp_path / "s", progress=False)
    index = json.loads((tmp_path / "s" / "store.json").read_text())
    index["format_version"] = 0
    (tmp_path / "s" / "store.json").write_text(json.dumps(index))
    with pytest.raises(StoreError, match="format version 0.*re-extract"):
        Store.open(tmp_path / "s")


@pytest.mark.parametrize("layers, message", [([9], "layer 9 is out of range"), ([-1], "-1 is not a layer"),
                                             ("3-1", "runs backwards"), ("", "empty item")])
def test_bad_layers_are_refused_before_anything_is_written(tmp_path, tiny_bert, layers, message):
    with pytest.raises(UsageError, match=message):
        extract(tiny_bert, sentences_from_strings(TEXTS), tmp_path / "s", layers=layers, progress=False)
    assert not (tmp_path / "s").exists()


def test_layers_in_the_one_numbering(tmp_path, tiny_bert):
    store = extract(tiny_bert, TEXTS, tmp_path / "s", layers="L2,0", attentions=True, progress=False)
    assert store.layers == [0, 2] and store.attention_layers == [2]


_KILLER = textwrap.dedent("""
    import os, signal, sys
    import bertology.extraction.pipeline as ex
    import bertology.store.writer as store_writer
    from bertology.data import read_conllu
    from bertology.models import load_encoder
    mode, model_dir, corpus, out = sys.argv[1:5]
    original = store_writer.write_shard_atomic  # the one shard writer
    calls = []
    def dying(path, tensors, metadata):
        calls.append(path)
        if len(calls) == 3:
            if mode == "mid-write":  # a half-written temporary file, then death
                path.with_name("." + path.name + ".tmp").write_bytes(b"partial")
                os.kill(os.getpid(), signal.SIGKILL)
            entry = original(path, tensors, metadata)
            if mode == "after-rename":  # shard renamed, index not yet updated
                os.kill(os.getpid(), signal.SIGKILL)
            return entry
        return original(path, tensors, metadata)
    store_writer.write_shard_atomic = dying
    encoder = load_encoder(model_dir, attentions=True)
    ex.extract(encoder, read_conllu(corpus)[:60], out, attentions=True, progress=False, shard_bytes=20000)
""")


@pytest.mark.parametrize("mode", ["mid-write", "after-rename"])
def test_kill_9_then_resume_gives_the_same_store(tmp_path, tiny_bert, shared_data, mode):
    model_dir = tmp_path / "model"
    tiny_bert.model.save_pretrained(model_dir)
    tiny_bert.tokenizer.save_pretrained(model_dir)
    corpus = shared_data / "ud_english_ewt" / "en_ewt-ud-dev.conllu.gz"
    script = tmp_path / "killer.py"
    script.write_text(_KILLER)
    result = subprocess.run([sys.executable, str(script), mode, str(model_dir), str(corpus), str(tmp_path / "a")],
                            capture_output=True)
    assert result.returncode == -signal.SIGKILL, result.stderr.decode()[-2000:]
    with pytest.raises(StoreError, match="incomplete"):
        Store.open(tmp_path / "a")
    from bertology.models import load_encoder

    encoder = load_encoder(model_dir, attentions=True)
    sentences = read_conllu(corpus)[:60]
    resumed = extract(encoder, sentences, tmp_path / "a", attentions=True, progress=False, shard_bytes=20000)
    fresh = extract(encoder, sentences, tmp_path / "b", attentions=True, progress=False, shard_bytes=20000)
    assert len(fresh.shards) > 3
    assert not list((tmp_path / "a").glob(".*.tmp"))
    assert [s.sha256 for s in resumed.shards] == [s.sha256 for s in fresh.shards]
    assert resumed.verify() == []


def test_windowed_sentence_takes_each_token_from_the_window_that_owns_it(tmp_path):
    encoder = tiny_encoder("bert", max_positions=24)
    words = tuple("antidisestablishment" if i % 5 == 0 else f"w{i % 7}" for i in range(40))
    sentences = [Sentence(words=("short", "one"), id="short"), Sentence(words=words, id="long")]
    tokens = extract(encoder, sentences, tmp_path / "t", pool="tokens", dtype="float32", progress=False)
    [enc] = encode_sentences(encoder.tokenizer, sentences[1:], encoder.max_length)
    assert len(enc.segments) > 2
    expected = np.zeros((enc.n_tokens, encoder.hidden_size), dtype=np.float32)
    for segment in enc.segments:
        with torch.no_grad():
            hidden = encoder.model(input_ids=torch.tensor([segment.input_ids]),
                                   output_hidden_states=True).hidden_states[2][0].numpy()
        expected[segment.owned_tokens] = hidden[segment.owned_positions]
    np.testing.assert_allclose(tokens.sentence_rows(1, 2), expected, atol=1e-5)
    # every word pool is a reduction of those token rows
    word_of = enc.word_index
    pools = {"word-mean": lambda idx: expected[idx].mean(0), "word-first": lambda idx: expected[idx[0]],
             "word-last": lambda idx: expected[idx[-1]]}
    for pool, reduce in pools.items():
        store = extract(encoder, sentences, tmp_path / pool, pool=pool, dtype="float32", progress=False)
        want = np.stack([reduce(np.flatnonzero(word_of == w)) for w in range(len(words))])
        np.testing.assert_allclose(store.sentence_rows(1, 2), want, atol=1e-5, err_msg=pool)


def test_bf16_extraction_leaves_the_encoder_as_it_was(tmp_path):
    encoder = tiny_encoder("bert")
    encoder.model.set_attn_implementation("sdpa")
    sentences = sentences_from_strings(TEXTS)
    exact = extract(encoder, sentences, tmp_path / "f", dtype="float32", progress=False)
    bf16 = extract(encoder, sentences, tmp_path / "b", dtype="float32", autocast="bfloat16", progress=False)
    assert encoder.attention_implementation == "sdpa"  # eager only for the run
    assert bf16.metadata["autocast"] == "bfloat16"
    difference = np.abs(bf16.layer(2) - exact.layer(2))
    assert 0 < difference.max() < 0.1  # bf16 really ran, and stayed close


def test_compiled_model_gives_the_same_vectors(tmp_path):
    encoder = tiny_encoder("bert")
    sentences = sentences_from_strings(TEXTS)
    eager = extract(encoder, sentences, tmp_path / "e", dtype="float32", progress=False)
    compiled = extract(encoder, sentences, tmp_path / "c", dtype="float32", progress=False, compile_model=True)
    assert encoder._compiled is not None
    np.testing.assert_allclose(compiled.layer(2), eager.layer(2), atol=1e-5)


def test_many_small_shards_hold_the_same_vectors_as_one(tmp_path, tiny_bert):
    # shards alternate between two reused buffers while a second thread writes them
    sentences = sentences_from_strings(TEXTS * 6)
    one = extract(tiny_bert, sentences, tmp_path / "one", progress=False)
    many = extract(tiny_bert, sentences, tmp_path / "many", progress=False, shard_bytes=600)
    assert len(one.shards) == 1 and len(many.shards) > 6
    for layer in one.layers:
        np.testing.assert_array_equal(many.layer(layer), one.layer(layer))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_shards_are_plain_safetensors(tmp_path, dtype):
    from safetensors import safe_open
    from safetensors.torch import load_file

    from bertology.store.store import file_sha256, write_shard_atomic

    tensors = {"layer.0": torch.randn(5, 3).to(dtype), "attention.1": torch.rand(7), "empty": torch.zeros(0, 4)}
    entry = write_shard_atomic(tmp_path / "s.safetensors", tensors, {"format_version": "1"})
    loaded = load_file(tmp_path / "s.safetensors")
    assert set(loaded) == set(tensors)
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype and torch.equal(loaded[name], tensor)
    with safe_open(tmp_path / "s.safetensors", "pt") as handle:
        assert handle.metadata() == {"format_version": "1"}
    assert entry["sha256"] == file_sha256(tmp_path / "s.safetensors")
    assert entry["bytes"] == (tmp_path / "s.safetensors").stat().st_size
    assert not list(tmp_path.glob(".*.tmp"))


def test_plain_strings_are_sentences(tmp_path, tiny_bert):
    store = extract(tiny_bert, ["a sentence", "the dog barks"], tmp_path / "s", progress=False)
    assert store.words(1) == ("the", "dog", "barks") and store.n_sentences == 2
    from bertology.errors import DataError

    with pytest.raises(DataError, match="got one string; wrap it in a list"):
        extract(tiny_bert, "a sentence", tmp_path / "t", progress=False)
    with pytest.raises(DataError, match="sentence 1: expected a Sentence or a string"):
        extract(tiny_bert, ["a sentence", 7], tmp_path / "t", progress=False)
    assert not (tmp_path / "t").exists()


def test_iter_attentions_reads_each_shard_once_and_is_linear(tmp_path, tiny_bert, monkeypatch):
    import bertology.store.store as store_module

    texts = [f"sentence {i} has a few more words" for i in range(30)]
    store = extract(tiny_bert, texts, tmp_path / "s", attentions=True, progress=False, shard_bytes=20000)
    assert len(store.shards) > 2
    expected = [store.attention(i) for i in range(store.n_sentences)]

    class CountingList(list):
        touched = 0

        def __getitem__(self, item):
            CountingList.touched += 1
            return super().__getitem__(item)

        def __iter__(self):
            for item in super().__iter__():
                CountingList.touched += 1
                yield item

    opened = []
    real_open = store_module.safe_open
    monkeypatch.setattr(store_module, "safe_open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    reopened = Store.open(tmp_path / "s")
    reopened._sentences = CountingList(reopened._sentences)
    got = list(reopened.iter_attentions())
    assert len(opened) == len(store.shards)  # one read per shard, not one per sentence
    assert CountingList.touched <= 2 * store.n_sentences  # was n^2: every sentence re-counted every sentence
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


def test_a_store_of_another_tokenizer_is_not_reused(tmp_path, tiny_bert):
    import copy

    from bertology.models import Encoder

    tokenizer = copy.deepcopy(tiny_bert.tokenizer)
    tokenizer.add_tokens(["zebra"])
    other = Encoder.from_model(tiny_bert.model, tokenizer, name="tiny-bert")  # same weights, other tokenizer
    assert other.fingerprint != tiny_bert.fingerprint
    store = extract(tiny_bert, TEXTS, tmp_path / "s", progress=False)
    assert store.metadata["model"]["tokenizer_fingerprint"]
    with pytest.raises(StoreError, match="another extraction.*another tokenizer"):
        extract(other, TEXTS, tmp_path / "s", progress=False)
    with pytest.raises(StoreError, match="not the model given"):
        Store.open(tmp_path / "s", expect_fingerprint=other.fingerprint)


def test_a_tokenizer_that_makes_most_words_unknown_is_refused(tmp_path, tiny_bert):
    from transformers import AutoTokenizer

    from bertology.models import Encoder

    folder = tmp_path / "weights-only"
    tiny_bert.model.save_pretrained(folder)
    bare = AutoTokenizer.from_pretrained(folder)  # what a folder without tokenizer files gives: 5 tokens
    assert len(bare) == 5
    broken = Encoder(model=tiny_bert.model, tokenizer=bare, name="weights-only", source=str(folder))
    with pytest.raises(ModelError, match=f"{folder}: the tokenizer maps 12 of 12 words \\(100%\\) wholly to its "
                                         "unknown token '\\[UNK\\]'"):
        extract(broken, ["the quick brown fox jumps", "dogs chase cats", "a café in zürich"], tmp_path / "s",
                progress=False)
    assert not (tmp_path / "s").exists()
    store = extract(broken, ["the dog"], tmp_path / "s", progress=False, max_unknown_fraction=None)
    assert store.n_sentences == 1
    # a real tokenizer with the odd unknown word passes
    extract(tiny_bert, ["the dog \u2603"], tmp_path / "ok", progress=False)


def test_extraction_runs_through_encoder_forward_and_restores_attention(tmp_path, monkeypatch):
    from bertology.models import Encoder

    encoder = tiny_encoder("bert")
    encoder.model.set_attn_implementation("sdpa")
    calls = []
    real_forward = Encoder.forward

    def spy(self, inputs, **kwargs):
        calls.append((kwargs.get("attentions"), self.attention_implementation))
        return real_forward(self, inputs, **kwargs)

    monkeypatch.setattr(Encoder, "forward", spy)
    store = extract(encoder, TEXTS, tmp_path / "s", attentions=True, progress=False)
    assert calls and all(attentions and implementation == "eager" for attentions, implementation in calls)
    assert encoder.attention_implementation == "sdpa"  # given back as it was
    np.testing.assert_allclose(store.attention(0).sum(-1), 1.0, atol=1e-5)


def _flip_a_byte(path, position=-3):
    """Change one byte of ``path`` in place: the same size, other contents."""
    data = bytearray(path.read_bytes())
    data[position] ^= 0x40
    path.write_bytes(bytes(data))


def test_a_damaged_shard_is_recomputed_not_reused(tmp_path, tiny_bert):
    from bertology.errors import BertologyWarning

    sentences = sentences_from_strings([f"sentence number {i} is here" for i in range(40)])
    store = extract(tiny_bert, sentences, tmp_path / "s", progress=False, shard_bytes=4000)
    expected = store.layer(1)
    assert len(store.shards) > 2
    damaged = tmp_path / "s" / store.shards[1].file
    size = damaged.stat().st_size
    _flip_a_byte(damaged)
    assert damaged.stat().st_size == size
    with pytest.warns(BertologyWarning, match=r"1 of \d+ shard\(s\) damaged \(shard-00001.safetensors: SHA-256 "
                                              r"differs from the index\); recomputing them"):
        again = extract(tiny_bert, sentences, tmp_path / "s", progress=False, shard_bytes=4000)
    np.testing.assert_array_equal(again.layer(1), expected)
    assert again.verify() == []
    # a shard lost altogether is recomputed the same way
    damaged.unlink()
    with pytest.warns(BertologyWarning, match="shard-00001.safetensors: missing"):
        again = extract(tiny_bert, sentences, tmp_path / "s", progress=False, shard_bytes=4000)
    np.testing.assert_array_equal(again.layer(1), expected)


def test_a_lost_sentences_file_is_rewritten_on_reuse(tmp_path, tiny_bert):
    from bertology.errors import BertologyWarning

    sentences = sentences_from_strings(TEXTS)
    store = extract(tiny_bert, sentences, tmp_path / "s", pool="tokens", progress=False)
    tokens = store.tokens(1)
    (tmp_path / "s" / "sentences.json").unlink()
    with pytest.raises(StoreError, match="sentences.json: missing; the store is incomplete or damaged"):
        Store.open(tmp_path / "s")
    with pytest.warns(BertologyWarning, match="sentences.json: missing; rewriting it from the input"):
        again = extract(tiny_bert, sentences, tmp_path / "s", pool="tokens", progress=False)
    assert again.tokens(1) == tokens and again.words(0) == store.words(0)
    (tmp_path / "s" / "sentences.json").write_text("[{\"id\": ")
    with pytest.raises(StoreError, match="sentences.json: unreadable"):
        Store.open(tmp_path / "s")


def test_a_damaged_sentence_means_cache_is_recomputed(tmp_path, tiny_bert):
    from bertology.errors import BertologyWarning
    from bertology.probing.inputs import SentenceMeans, _extract_pools

    pools = {"senteval": {"test": sentences_from_strings(TEXTS)}}
    first = _extract_pools(tiny_bert, pools, None, tmp_path, False, "cpu", {"senteval"})["senteval", "test"]
    expected = first.layer(2).copy()
    means = first.path
    del first
    _flip_a_byte(means)
    with pytest.raises(ValueError, match="SHA-256 differs"):
        SentenceMeans(means)
    with pytest.warns(BertologyWarning, match="sentence-means.npy: damaged .*SHA-256 differs.*; recomputing it"):
        again = _extract_pools(tiny_bert, pools, None, tmp_path, False, "cpu", {"senteval"})["senteval", "test"]
    np.testing.assert_array_equal(again.layer(2), expected)


def test_a_compiled_model_that_disagrees_with_the_eager_one_is_not_used(monkeypatch):
    """torch.compile can generate wrong kernels (ATEN_CPU_CAPABILITY=avx2 on an AVX-512 host: vectors of 1e15 with
    torch 2.13): the handle checks the compiled model once on a check sentence and keeps the eager one, warning."""
    import torch

    from bertology.errors import BertologyWarning

    encoder = tiny_encoder("bert")

    class Wrong(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, **inputs):
            out = self.model(**inputs)
            out.hidden_states = tuple(h * 1e15 for h in out.hidden_states)
            return out

    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: Wrong(model))
    with pytest.warns(BertologyWarning, match="running it uncompiled"):
        assert encoder.compiled() is encoder.model
    good = tiny_encoder("bert")
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: model)  # a compiler that keeps the outputs
    assert good.compiled() is good.model and good._compile_difference(good.model) == 0.0
