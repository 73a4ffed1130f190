"""The Convexity variants: each builds a model of the expected depth and takes a training step."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertModel

from bertology.errors import ModelError
from bertology.finetune import GlueModel, build_glue_model, parse_variant
from bertology.models.layout import layer_stack


LAYERS = 4


def tiny_backbone(layers: int = LAYERS, seed: int = 0) -> BertModel:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    return BertModel(config)


def batch(n: int = 6, length: int = 9):
    generator = torch.Generator().manual_seed(1)
    return {"input_ids": torch.randint(5, 100, (n, length), generator=generator),
            "attention_mask": torch.ones(n, length, dtype=torch.long)}


@pytest.mark.parametrize("spec,depth,classified_on", [
    ("baseline", 4, [4]),
    ("drop-last:2", 2, [2]),
    ("copy-last:2", 6, [6]),
    ("extra-layer", 5, [5]),
    ("multi-objective:3", 4, [2, 3, 4]),
    ("multi-objective:2+extra-layer", 5, [4, 5]),
])
def test_variant_depth_classifiers_and_one_training_step(spec, depth, classified_on):
    backbone = tiny_backbone()
    model = build_glue_model(backbone, num_labels=3, variant=spec, seed=0)
    assert len(layer_stack(model.backbone).layers) == depth
    assert model.backbone.config.num_hidden_layers == depth
    assert model.objective_layers == classified_on and len(model.classifiers) == len(classified_on)
    inputs = batch()
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    output = model(**inputs, labels=labels)
    assert output.logits.shape == (6, 3)
    output.loss.backward()
    top = layer_stack(model.backbone).layers[-1]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in top.parameters())
    torch.optim.SGD(model.parameters(), lr=0.1).step()


def test_copy_last_duplicates_weights_and_extra_layer_is_new():
    model = build_glue_model(tiny_backbone(), 2, "copy-last:1+extra-layer", seed=0)
    layers = layer_stack(model.backbone).layers
    assert torch.equal(layers[3].attention.self.query.weight, layers[4].attention.self.query.weight)
    assert layers[3].attention.self.query.weight.data_ptr() != layers[4].attention.self.query.weight.data_ptr()
    assert not torch.equal(layers[4].attention.self.query.weight, layers[5].attention.self.query.weight)
    assert layers[5].output.LayerNorm.weight.eq(1).all()


def test_multi_objective_loss_is_mean_of_classifier_losses():
    model = build_glue_model(tiny_backbone(), 2, "multi-objective:2", seed=0).eval()
    inputs, labels = batch(), torch.tensor([0, 1, 0, 1, 0, 1])
    out = model(**inputs, labels=labels)
    hidden = model.backbone(**inputs, output_hidden_states=True).hidden_states
    losses = [torch.nn.functional.cross_entropy(classifier(hidden[layer][:, 0]), labels)
              for classifier, layer in zip(model.classifiers, model.objective_layers)]
    assert out.loss.item() == pytest.approx(torch.stack(losses).mean().item(), rel=1e-5)
    assert torch.allclose(out.logits, model.classifiers[-1](hidden[4][:, 0]))


def test_regression_head_and_bad_variants():
    model = build_glue_model(tiny_backbone(), 1, "baseline")
    out = model(**batch(), labels=torch.rand(6) * 5)
    assert out.logits.shape == (6, 1) and out.loss.ndim == 0
    with pytest.raises(ModelError, match="cannot drop 4 layers of a model with 4"):
        build_glue_model(tiny_backbone(), 2, "drop-last:4")
    with pytest.raises(ModelError, match="cannot copy the last 3 layers of a model with 2"):
        build_glue_model(tiny_backbone(), 2, "drop-last:2+copy-last:3")
    with pytest.raises(ModelError, match="multi-objective over 6 layers, but the model has 4"):
        build_glue_model(tiny_backbone(), 2, "multi-objective:6")
    with pytest.raises(ModelError, match="unknown variant part 'shuffle'"):
        parse_variant("shuffle:2")
    with pytest.raises(ModelError, match="not a whole number"):
        parse_variant("drop-last:two")
    assert parse_variant("extra_layer+multi-objective:3").name == "extra-layer+multi-objective:3"
    assert isinstance(GlueModel(tiny_backbone(), 2), GlueModel)


def test_the_classifiers_old_name_file_and_state_keys_still_work(tmp_path):
    """``GlueModel.heads`` (heads are attention heads) is ``classifiers`` now: the old attribute warns, a
    checkpoint written with ``heads.safetensors`` loads, and a resume state with ``heads.*`` keys loads."""
    from bertology.finetune.model import CLASSIFIERS_FILE, OLD_CLASSIFIERS_FILE, load_finetuned, save_checkpoint
    from bertology.models.tiny import tiny_tokenizer

    tokenizer = tiny_tokenizer("bert")
    model = build_glue_model(tiny_backbone(), 2, "multi-objective:2", seed=0).eval()
    with pytest.warns(DeprecationWarning, match=r"GlueModel.heads is deprecated .*; use GlueModel.classifiers"):
        assert model.heads is model.classifiers
    old_state = {key.replace("classifiers.", "heads.", 1): value for key, value in model.state_dict().items()}
    assert any(key.startswith("heads.") for key in old_state)
    fresh = build_glue_model(tiny_backbone(), 2, "multi-objective:2", seed=1)
    fresh.load_state_dict(old_state)  # strict: every old key found its new name
    assert all(torch.equal(a, b) for a, b in zip(fresh.classifiers.parameters(), model.classifiers.parameters()))

    folder = save_checkpoint(model, tokenizer, tmp_path / "ckpt", {"task": "rte", "seed": 0, "base_model": "tiny"})
    assert (folder / CLASSIFIERS_FILE).is_file() and not (folder / OLD_CLASSIFIERS_FILE).exists()
    (folder / CLASSIFIERS_FILE).rename(folder / OLD_CLASSIFIERS_FILE)  # a checkpoint written before the rename
    loaded, _, _ = load_finetuned(folder)
    assert all(torch.equal(a, b) for a, b in zip(loaded.classifiers.parameters(), model.classifiers.parameters()))
