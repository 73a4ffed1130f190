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


# -- the one handle with a head: load_encoder(..., head=...) ------------------------------------------------


@pytest.fixture(scope="module")
def tiny_mlm_dir(tmp_path_factory):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from knowledge_models import save_tiny_mlm

    return save_tiny_mlm(tmp_path_factory.mktemp("handle") / "mlm")


@pytest.fixture(scope="module")
def bare_dir(tmp_path_factory, tiny_bert):
    folder = tmp_path_factory.mktemp("handle") / "bare"
    tiny_bert.model.save_pretrained(folder)
    tiny_bert.tokenizer.save_pretrained(folder)
    return folder


def _batch(encoder, sentences=("The quick brown fox .", "Dogs chase cats ; cats chase mice .")):
    return encoder.tokenizer(list(sentences), padding=True, return_tensors="pt")


def test_masked_lm_handle_serves_logits_states_and_the_logit_lens(tiny_mlm_dir):
    encoder = load_encoder(tiny_mlm_dir, head="masked-lm")
    assert encoder.head == "masked-lm" and type(encoder.model).__name__ == "BertForMaskedLM"
    assert type(encoder.body).__name__ == "BertModel" and encoder.num_layers == 2
    batch = _batch(encoder)
    out = encoder.forward(batch, logits=True)
    assert out.logits.shape == (*batch["input_ids"].shape, len(encoder.tokenizer))
    assert len(out.hidden_states) == 3
    body = encoder.forward(batch, body=True)
    assert torch.allclose(encoder.head_logits(body.hidden_states[-1]), out.logits, atol=1e-5)
    twin, again = encoder.untrained(seed=1), encoder.untrained(seed=1)
    assert twin.head == "masked-lm" and type(twin.model).__name__ == "BertForMaskedLM"
    assert twin.fingerprint == again.fingerprint != encoder.fingerprint


def test_masked_lm_head_is_refused_for_a_bare_encoder_in_one_line(bare_dir):
    with pytest.raises(ModelError) as error:
        load_encoder(bare_dir, head="masked-lm")
    assert "no masked-LM head" in str(error.value) and "\n" not in str(error.value)


def test_classification_and_qa_heads_train_and_score_through_forward(bare_dir):
    from bertology.errors import UsageError

    with pytest.raises(UsageError, match="num_labels"):
        load_encoder(bare_dir, head="classification")
    with pytest.raises(UsageError, match="head="):
        load_encoder(bare_dir, head="tagging")
    torch.manual_seed(0)
    classifier = load_encoder(bare_dir, head="classification", num_labels=3)
    batch = dict(_batch(classifier), labels=torch.tensor([0, 2]))
    out = classifier.forward(batch, hidden_states=False, logits=True, grad=True)
    assert out.logits.shape == (2, 3) and out.loss.requires_grad
    out.loss.backward()
    assert classifier.body.embeddings.word_embeddings.weight.grad is not None
    with torch.no_grad():
        assert not classifier.forward(batch, hidden_states=False).loss.requires_grad  # inference by default
    qa = load_encoder(bare_dir, head="qa")
    batch = _batch(qa)
    assert qa.forward(batch, hidden_states=False, logits=True).logits.shape == (*batch["input_ids"].shape, 2)
    # the bare body of every head is the same encoder as the bare handle
    bare = load_encoder(bare_dir)
    states = bare.forward(batch).hidden_states[-1]
    assert torch.allclose(qa.forward(batch, body=True).hidden_states[-1], states, atol=1e-6)


def test_a_handle_on_a_module_built_elsewhere_keeps_its_mode(bare_dir):
    from torch import nn

    from bertology.models import Encoder

    class Wrapper(nn.Module):  # like the fine-tuning classifier: sets its own output switches
        def __init__(self, backbone):
            super().__init__()
            self.backbone = backbone
            self.out = nn.Linear(backbone.config.hidden_size, 2)

        def forward(self, input_ids=None, attention_mask=None, token_type_ids=None):
            states = self.backbone(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=False)
            return self.out(states.last_hidden_state[:, 0])

    bare = load_encoder(bare_dir)
    wrapper = Wrapper(bare.model).train()
    handle = Encoder.of(wrapper)
    assert Encoder.of(handle) is handle and handle.tokenizer is None and wrapper.training
    logits = handle.forward(_batch(bare), hidden_states=False, logits=True).logits
    assert logits.shape == (2, 2)


def test_as_encoder_is_the_one_way_to_a_handle(tmp_path):
    from bertology.finetune.model import GlueModel
    from bertology.models import as_encoder

    tiny = tiny_encoder("bert", seed=3)
    assert as_encoder(tiny) is tiny  # a handle is taken as it is
    classifier = GlueModel(tiny.model, num_labels=2)
    wrapped = as_encoder(classifier, tokenizer=tiny.tokenizer, name="after")
    assert wrapped.model is tiny.model and wrapped.name == "after"  # a fine-tuned classifier by its encoder
    with pytest.raises(ModelError, match="after: an in-memory model needs its tokenizer"):
        as_encoder(classifier, name="after")
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    loaded = as_encoder(str(tmp_path))  # a folder is loaded by load_encoder
    assert loaded.fingerprint == tiny.fingerprint
    pair = as_encoder((tiny.model, tiny.tokenizer), name="pair", head="masked-lm")  # a (module, tokenizer) pair
    assert pair.model is tiny.model and pair.tokenizer is tiny.tokenizer and pair.head == "masked-lm"
    assert pair.name == "pair" and as_encoder((tiny.model, tiny.tokenizer)).name == "model"
    moved = tiny_encoder("bert", seed=4)
    assert moved.to("meta") is moved and moved.device.type == "meta"  # Encoder.to moves the model, returns the handle
    assert as_encoder(tiny, device="cpu") is tiny and tiny.device.type == "cpu"
