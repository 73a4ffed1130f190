"""ModernBERT (and what is built on it: Ettin, mmBERT, gte-modernbert) in the capabilities that differ for it:
fused Wqkv heads read and masked at the one per-head hook point, sliding-window layers beside global ones in
word-level maps and Clark statistics, rotary positions without an offset, no token-type ids, and the masked-LM
head (``head`` then ``decoder``) on any layer."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import transformers

from bertology.attention.stats import head_statistics, statistic_matrix
from bertology.data import sentences_from_strings
from bertology.extraction import extract
from bertology.intervention import head_contexts, hook_points, mask_heads, model_layout
from bertology.models import Encoder, load_encoder
from bertology.models.tiny import tiny_encoder, training_corpus

#: 24 corpus words: more than three times the tiny ModernBERT's local window (8 tokens: 4 each side)
LONG = "Researchers probe BERT layers to find syntax , semantics and world knowledge ; dogs chase cats ; " \
       "cats chase mice ; mice eat cheese ."
HALF_WINDOW = 4


@pytest.fixture(scope="module")
def modernbert():
    return tiny_encoder("modernbert", layers=3)


def test_tiny_modernbert_alternates_global_and_local_layers(modernbert):
    config = modernbert.config
    assert config.layer_types == ["full_attention", "sliding_attention", "full_attention"]
    assert config.sliding_window == HALF_WINDOW
    assert len(modernbert.tokenizer(LONG.split(), is_split_into_words=True)["input_ids"]) > 3 * 2 * HALF_WINDOW


def test_hook_z_holds_each_heads_attention_times_its_values(modernbert):
    """L{l}H{h} is the head whose map is attentions[l - 1][:, h]: its slice of the context at the hook point is
    that map times its values (the v block of Wqkv), on a local and a global layer alike."""
    model = modernbert.model
    batch = modernbert.tokenizer([LONG], return_tensors="pt")
    values = {}
    handles = [hook_points(model)[f"layer.{layer}.attn.qkv"].register_forward_hook(
        lambda m, a, out, layer=layer: values.__setitem__(layer, out.detach().unflatten(-1, (3, 4, -1))[:, :, 2]))
        for layer in (1, 2)]
    try:
        with head_contexts(model) as contexts:
            attentions = modernbert.forward(batch, attentions=True).attentions
    finally:
        for handle in handles:
            handle.remove()
    for layer in (1, 2):
        for head in range(4):
            expected = attentions[layer - 1][:, head] @ values[layer][:, :, head]
            torch.testing.assert_close(contexts[layer][:, :, head], expected, atol=1e-5, rtol=1e-5)
    with mask_heads(model, "L2H1"), head_contexts(model, [2]) as masked:
        modernbert.forward(batch)
    assert list(masked) == [2] and torch.count_nonzero(masked[2][..., 1, :]) == 0
    torch.testing.assert_close(masked[2][..., [0, 2, 3], :], contexts[2][..., [0, 2, 3], :])


def test_local_layers_see_only_their_window_in_word_maps_and_clark_statistics(modernbert, tmp_path):
    sentence = sentences_from_strings([LONG])
    store = extract(modernbert, sentence, tmp_path / "s", attentions=True, dtype="float32", progress=False)
    words = len(sentence[0].words)
    assert all(len(modernbert.tokenizer.tokenize(w)) == 1 for w in sentence[0].words)  # word i is token i + 1
    maps = store.attention(0)  # [layers, heads, words + 2, words + 2]
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-5)
    distance = np.abs(np.arange(words + 2)[:, None] - np.arange(words + 2)[None, :])
    assert np.all(maps[1][:, distance > HALF_WINDOW] == 0)  # layer 2 is local
    assert np.all(maps[1][:, distance <= HALF_WINDOW] > 0)
    assert np.all(maps[[0, 2]] > 0)  # layers 1 and 3 are global: every word sees every word
    statistics = head_statistics(store)
    cls = statistic_matrix(statistics, "attn_cls")
    # only the first 5 of 26 rows can reach [CLS] on the local layer
    assert (cls.loc[2] <= (HALF_WINDOW + 1) / (words + 2) + 1e-6).all()
    assert np.isfinite(statistics.tables["statistics"]["value"]).all()


def test_rotary_positions_have_no_offset_and_token_types_are_dropped(modernbert):
    assert modernbert.max_length == modernbert.config.max_position_embeddings  # no position reserved
    batch = dict(modernbert.tokenizer([LONG], return_tensors="pt"))
    plain = modernbert.forward(batch).hidden_states[-1]
    # a BERT tokenizer saved beside a ModernBERT (MiniLM's, say) makes token-type ids: they are not passed on
    batch["token_type_ids"] = torch.ones_like(batch["input_ids"])
    torch.testing.assert_close(modernbert.forward(batch).hidden_states[-1], plain)


def test_masked_lm_head_applies_to_any_layer(tmp_path):
    source = tiny_encoder("modernbert", layers=2)
    torch.manual_seed(0)
    mlm = transformers.ModernBertForMaskedLM(source.config).eval()
    mlm.save_pretrained(tmp_path / "mb")
    source.tokenizer.save_pretrained(tmp_path / "mb")
    encoder = load_encoder(tmp_path / "mb", head="masked-lm")
    batch = encoder.tokenizer([training_corpus()[0]], return_tensors="pt")
    out = encoder.forward(batch, logits=True)
    assert out.logits.shape[-1] == len(encoder.tokenizer)
    torch.testing.assert_close(encoder.head_logits(out.hidden_states[-1]), out.logits)
    assert torch.isfinite(encoder.head_logits(out.hidden_states[1])).all()
    bare = load_encoder(tmp_path / "mb")
    assert model_layout(bare.model).num_layers == 2 and Encoder.of(bare.model).head is None


def test_sdpa_and_eager_agree_under_masking_on_real_tokens(modernbert):
    """The hook point needs no attention weights: sdpa (ModernBERT's default; its sliding window a mask) gives the
    eager outputs with heads masked, on every real token of a padded batch."""
    batch = dict(modernbert.tokenizer([LONG, "Dogs chase cats ."], padding=True, return_tensors="pt"))
    real = batch["attention_mask"].bool()
    outputs = {}
    for implementation in ("eager", "sdpa"):
        model = copy.deepcopy(modernbert.model)
        model.set_attn_implementation(implementation)
        with torch.no_grad(), mask_heads(model, "L1H0,L2H3"):
            outputs[implementation] = model(**batch).last_hidden_state[real]
    torch.testing.assert_close(outputs["sdpa"], outputs["eager"], atol=1e-5, rtol=1e-5)
