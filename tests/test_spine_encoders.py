import time

import pytest
import torch

from bertology.errors import ModelError
from bertology.models import load_encoder
from bertology.models.tiny import FAMILIES, tiny_encoder


def test_untrained_twin_same_seed_same_weights():
    a = load_encoder("minilm", untrained_seed=3)
    b = load_encoder("minilm", untrained_seed=3)
    c = load_encoder("minilm", untrained_seed=4)
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint != c.fingerprint
    for (name, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert torch.equal(pa, pb), name


@pytest.mark.integration
def test_minilm_alias_loads_offline_and_twin_differs(minilm):
    assert minilm.num_layers == 6 and minilm.num_heads == 12 and minilm.hidden_size == 384
    twin = minilm.untrained(seed=0)
    assert twin.config.to_dict()["hidden_size"] == 384
    assert twin.tokenizer is minilm.tokenizer
    assert twin.fingerprint != minilm.fingerprint
    assert load_encoder("minilm").fingerprint == minilm.fingerprint


def test_fingerprint_changes_with_one_weight(tiny_bert):
    other = tiny_encoder("bert")
    assert other.fingerprint == tiny_bert.fingerprint
    with torch.no_grad():
        next(other.model.parameters()).view(-1)[0] += 1.0
    other._fingerprint = None
    assert other.fingerprint != tiny_bert.fingerprint


def test_unknown_hub_id_fails_fast_with_advice(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    with pytest.raises(ModelError) as info:
        load_encoder("some-org/no-such-model-xyz")
    message = str(info.value)
    assert "some-org/no-such-model-xyz" in message and "local path" in message
    assert time.perf_counter() - started < 30  # no retry loop against an unreachable hub


def test_directory_without_config_is_a_clear_error(tmp_path):
    with pytest.raises(ModelError, match="config.json"):
        load_encoder(tmp_path)


def test_local_directory_round_trip(tmp_path, tiny_bert):
    tiny_bert.model.save_pretrained(tmp_path)
    tiny_bert.tokenizer.save_pretrained(tmp_path)
    loaded = load_encoder(tmp_path)
    assert loaded.fingerprint == tiny_bert.fingerprint
    assert loaded.attention_implementation == "sdpa"
    assert load_encoder(tmp_path, attentions=True).attention_implementation == "eager"


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_families_build(family):
    encoder = tiny_encoder(family)
    assert encoder.num_layers == 2 and encoder.num_heads == 4 and encoder.hidden_size == 32


def test_a_new_family_is_one_registry_entry():
    """The recipe in docs/ARCHITECTURE.md: a model type AutoModel loads, registered in models/families.py,
    gets tiny models, extraction and head masking with no other change."""
    from bertology.models.families import FAMILIES, Family, register_family
    from bertology.intervention import mask_heads

    assert "data2vec-text" not in FAMILIES
    with pytest.raises(ValueError, match="unknown family"):
        tiny_encoder("data2vec-text")
    register_family(Family("data2vec-text", prefix_space=True, position_offset=2, tokenizer="bpe",
                           tiny_config=lambda common: {"max_position_embeddings": common["max_position_embeddings"] + 2}))
    try:
        encoder = tiny_encoder("data2vec-text")
        assert encoder.max_length == 128
        batch = encoder.tokenizer(["the quick brown fox"], return_tensors="pt")
        plain = encoder.forward(batch).layer(2)
        with mask_heads(encoder.model, [(1, 1)]):
            masked = encoder.forward(batch).layer(2)
        assert not torch.allclose(plain, masked)
    finally:
        FAMILIES.pop("data2vec-text")
