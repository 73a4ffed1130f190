"""One extraction per model and corpus (issue 31 point 2): the shared stores every analysis reads."""

import collections

import numpy as np
import pytest

import bertology.extraction.pipeline as pipeline
from bertology.data import default_corpus, read_conllu
from bertology.extraction import extract
from bertology.extraction.shared import shared_store
from bertology.models.tiny import tiny_encoder
from bertology.store import Store
from bertology.store.view import StoreView


@pytest.fixture
def extractions(monkeypatch):
    """Every extraction that runs the model: (fingerprint, pool, attentions, layers, the word sequences)."""
    runs = []
    run = pipeline._run

    def counted(plan, *args, **kwargs):
        runs.append((plan.encoder.fingerprint, plan.spec.pool, plan.spec.attentions, tuple(plan.layers),
                     [tuple(s.words) for s in plan.sentences]))
        return run(plan, *args, **kwargs)

    monkeypatch.setattr(pipeline, "_run", counted)
    return runs


def _twice(runs):
    """Word sequences a model ran on twice under the same settings."""
    seen = collections.Counter()
    for fingerprint, pool, attentions, layers, words in runs:
        seen.update((fingerprint, pool, attentions, sentence) for sentence in set(words))
    return [key for key, count in seen.items() if count > 1]


def test_a_subset_of_sentences_or_layers_is_read_from_the_store_that_holds_it(tmp_path, extractions):
    encoder = tiny_encoder("bert")
    sentences = read_conllu(default_corpus("ewt-dev"))[:50]
    first = shared_store(encoder, sentences[:30], tmp_path)
    assert isinstance(first, Store) and len(extractions) == 1
    again = shared_store(encoder, sentences[:30], tmp_path)
    assert again.path == first.path and len(extractions) == 1
    later = shared_store(encoder, sentences[20:50], tmp_path)  # ten held, twenty new
    assert isinstance(later, StoreView) and len(extractions) == 2 and len(extractions[-1][4]) == 20
    fewer = shared_store(encoder, sentences[35:5:-3], tmp_path, layers="0,2")  # no model run at all
    assert len(extractions) == 2 and fewer.layers == [0, 2]
    shared_runs = list(extractions)
    direct = extract(encoder, sentences[20:50], tmp_path / "direct", progress=False)
    picked = extract(encoder, sentences[35:5:-3], tmp_path / "picked", progress=False)
    for layer in direct.layers:
        np.testing.assert_array_equal(later.layer(layer), direct.layer(layer))
        np.testing.assert_array_equal(later.sentence_vectors(layer), direct.sentence_vectors(layer))
    for layer in (0, 2):
        np.testing.assert_array_equal(fewer.layer(layer), picked.layer(layer))
    assert [later.words(i) for i in range(later.n_sentences)] == [tuple(s.words) for s in sentences[20:50]]
    np.testing.assert_array_equal(later.offsets, direct.offsets)
    # other settings, another model: their own stores
    shared_store(encoder, sentences[:30], tmp_path, pool="tokens")
    shared_store(tiny_encoder("bert").untrained(3), sentences[:30], tmp_path)
    shared_runs += extractions[-2:]
    assert len(shared_runs) == 4 and not _twice(shared_runs)


def test_a_damaged_shared_store_is_recomputed_on_reuse(tmp_path, extractions):
    encoder = tiny_encoder("bert")
    sentences = read_conllu(default_corpus("ewt-dev"))[:20]
    store = shared_store(encoder, sentences, tmp_path)
    want = store.layer(1)
    shard = next(store.path.glob("shard-*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.warns(Warning, match="recomput|damaged|SHA"):
        again = shared_store(encoder, sentences[5:15], tmp_path)
    np.testing.assert_array_equal(again.layer(1), want[store.offsets[5]:store.offsets[15]])


def _report(tmp_path, monkeypatch, name, sections=None):
    from bertology.report import build_report

    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / name / "cache"))
    encoder = tiny_encoder("bert", layers=2, hidden=32, heads=4, attentions=False)
    build_report(encoder=encoder, out=tmp_path / name, max_sentences=30, seeds=(0,), progress=False,
                 sections=sections)
    return encoder


def test_the_report_extracts_each_sentence_once_per_model_and_settings(tmp_path, extractions, monkeypatch):
    """The default report on a tiny model (every section it runs): probing, knowledge, geometry and the rest
    read one set of stores; no sentence is run through the same model twice under the same settings (the
    attention section's word-level maps are their own setting), and each model x corpus x settings is one
    extraction: the stores a later section adds hold only sentences no earlier one extracted."""
    encoder = _report(tmp_path, monkeypatch, "report")
    assert extractions and not _twice(extractions), f"extracted twice: {_twice(extractions)[:3]}"
    word_mean = [run for run in extractions if run[1] == "word-mean" and not run[2]]
    dev = [tuple(s.words) for s in read_conllu(default_corpus("ewt-dev"))[:30]]
    trained = [run for run in word_mean if run[0] == encoder.fingerprint]
    # the knowledge section asked for the first 30 dev sentences; those probing had extracted were not run again
    held = {w for run in trained for w in run[4]}
    assert set(dev) <= held
    first_with_dev = next(k for k, run in enumerate(trained) if set(run[4]) & set(dev))
    later = {w for run in trained[first_with_dev + 1:] for w in run[4]}
    assert not later & set(trained[first_with_dev][4])


def test_the_extraction_count_catches_a_section_that_keeps_its_own_copy(tmp_path, extractions, monkeypatch):
    """The check above fails when a section extracts its own store of sentences another section's store holds:
    here the knowledge and geometry section's stores get a name of their own (as before issue 31)."""
    import bertology.geometry.stores as stores

    shared = stores.shared_store
    monkeypatch.setattr(stores, "shared_store", lambda *args, tag="", **kwargs: shared(*args, tag=tag or "own-copy",
                                                                                       **kwargs))
    _report(tmp_path, monkeypatch, "own", sections=["probing", "knowledge"])
    assert _twice(extractions)
