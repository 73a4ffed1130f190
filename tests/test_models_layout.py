"""bertology.models.layout: the layer stack and the config's sizes of every family, from its Family entry."""

from __future__ import annotations

import copy

import pytest
import torch

from bertology.errors import ModelError
from bertology.finetune.model import GlueModel
from bertology.models import untrained_model
from bertology.models.layout import (config_depth, config_heads, config_hidden, drop_top_layers, layer_blocks,
                                     layer_stack)
from bertology.models.tiny import FAMILIES, tiny_encoder

STACKED = [family for family in FAMILIES if family != "albert"]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_config_sizes_of_every_family(family):
    encoder = tiny_encoder(family, layers=3, hidden=32, heads=4)
    config = encoder.config
    assert (config_depth(config), config_heads(config), config_hidden(config)) == (3, 4, 32)


@pytest.mark.parametrize("family", STACKED)
def test_one_block_per_layer_found_under_any_wrapper(family):
    encoder = tiny_encoder(family, layers=3)
    blocks = layer_blocks(encoder.model)
    assert len(blocks) == 3 and list(layer_stack(encoder.model).layers) == [block for _, block in blocks]
    # the same blocks, named from a task head's model and from a fine-tuning classifier
    with_head = untrained_model(encoder.config, 0, attn_implementation=encoder.attention_implementation,
                                head="masked-lm")
    assert len(layer_blocks(with_head)) == 3
    classifier = GlueModel(copy.deepcopy(encoder.model), num_labels=2)
    names = [name for name, _ in layer_blocks(classifier)]
    assert names == ["backbone." + name for name, _ in blocks]


@pytest.mark.parametrize("family", STACKED)
def test_dropping_the_top_layers_keeps_the_bottom_ones_and_the_config_in_step(family):
    encoder = tiny_encoder(family, layers=3)
    model = copy.deepcopy(encoder.model)
    bottom = [copy.deepcopy(block.state_dict()) for block in layer_stack(model).layers[:2]]
    drop_top_layers(model, 1)
    assert config_depth(model.config) == 2 and len(layer_stack(model).layers) == 2
    for kept, before in zip(layer_stack(model).layers, bottom):
        assert all(torch.equal(kept.state_dict()[key], value) for key, value in before.items())
    if isinstance(getattr(model.config, "layer_types", None), list):  # modernbert: one attention type per layer
        assert len(model.config.layer_types) == 2
    batch = encoder.tokenizer(["a small test"], return_tensors="pt")
    inputs = {k: v for k, v in batch.items() if k != "token_type_ids" or encoder._token_types}
    with torch.no_grad():
        states = model.eval()(**inputs, output_hidden_states=True).hidden_states
    assert len(states) == 3  # embeddings and the two layers left


def test_a_shared_layer_is_no_stack():
    albert = tiny_encoder("albert", layers=3)
    assert len(layer_blocks(albert.model)) == 1  # one shared layer, called three times
    with pytest.raises(ModelError, match=r"^albert: no list of 3 transformer layers found .*dropping needs it$"):
        layer_stack(albert.model, "dropping needs it")
