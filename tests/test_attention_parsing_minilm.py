"""Integration: the real MiniLM on a small EWT slice behaves like Clark et al.'s BERT."""

from __future__ import annotations

import pytest

from bertology.attention.parsing import (
    AttentionOnlyProbe, attachment_score, best_heads_table, heads_as_parsers, offset_baselines,
)
from bertology.attention.stats import head_statistics, statistic_matrix

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ewt_store(shared_data, tmp_path_factory):
    from bertology.data import read_conllu
    from bertology.errors import ModelError
    from bertology.extraction import extract
    from bertology.models import load_encoder

    try:
        minilm = load_encoder("minilm")
    except ModelError as error:
        pytest.skip(str(error))

    sentences = read_conllu(shared_data / "ud_english_ewt" / "en_ewt-ud-dev.conllu.gz")[:70]
    store = extract(minilm, sentences, tmp_path_factory.mktemp("ewt") / "dev.store",
                    attentions=True, progress=False)
    return store, sentences


def test_best_det_head_well_above_offset_baseline(ewt_store):
    store, sentences = ewt_store
    parse = heads_as_parsers(store.iter_attentions(), sentences, layers=store.attention_layers)
    assert sorted(set(parse["layer"])) == [1, 2, 3, 4, 5, 6] and sorted(set(parse["head"])) == list(range(12))
    base = offset_baselines(sentences)
    table = best_heads_table(parse, base, min_count=20).set_index("relation")
    det = table.loc["det"]
    assert det["count"] >= 40
    assert det["baseline_offset"] == 1  # determiners precede their noun
    assert det["accuracy"] >= 0.6 and det["accuracy"] - det["baseline_accuracy"] >= 0.12
    assert table.loc["all", "accuracy"] > table.loc["all", "baseline_accuracy"]


def test_statistics_are_distributions(ewt_store):
    store, sentences = ewt_store
    stats = head_statistics(store, sentences)
    shares = sum(statistic_matrix(stats, s).to_numpy() for s in ("attn_cls", "attn_sep", "attn_self"))
    assert (shares <= 1 + 1e-4).all()
    assert (statistic_matrix(stats, "entropy").to_numpy() <= stats.meta["uniform_entropy"] + 1e-6).all()
    assert statistic_matrix(stats, "mean_distance").to_numpy().max() > 0.5


def test_attention_only_probe_beats_single_heads_and_offsets(ewt_store):
    store, sentences = ewt_store
    attentions = list(store.iter_attentions())
    train, test = slice(0, 45), slice(45, 70)
    probe = AttentionOnlyProbe(seed=0).fit(attentions[train], sentences[train])
    uas = attachment_score(probe.predict(attentions[test], sentences[test]), sentences[test])
    # baselines selected on the training slice, scored on the test slice
    chosen = best_heads_table(heads_as_parsers(attentions[train], sentences[train]),
                              offset_baselines(sentences[train]), min_count=0,
                              held_out_parse=heads_as_parsers(attentions[test], sentences[test]),
                              held_out_baselines=offset_baselines(sentences[test])).set_index("relation").loc["all"]
    assert uas > chosen["held_out_baseline_accuracy"] + 0.05
    assert uas > chosen["held_out_accuracy"]
