"""Compression (issue 22) on tiny random models: each method's checkpoint reloads through load_encoder and gives
the outputs it should, sizes are the ones counted by hand, bad input is one clear line, and one small run of the
whole measurement gives the tables it promises."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModel

from bertology.compression import choose_heads, compress, file_bytes, parse_methods, save_checkpoint, stored_bytes
from bertology.compression.names import Method, parse_method
from bertology.errors import ModelError, UsageError
from bertology.models import load_encoder
from bertology.models.tiny import tiny_encoder

SENTENCES = ["The quick brown fox jumps over the lazy dog .", "Dogs chase cats ; cats chase mice ."]


@pytest.fixture(scope="module")
def tiny():
    return tiny_encoder("bert", layers=2, hidden=32, heads=4, attentions=False)


@pytest.fixture(scope="module")
def batch(tiny):
    return dict(tiny.tokenizer(SENTENCES, return_tensors="pt", padding=True))


def _top(encoder, batch) -> torch.Tensor:
    out = encoder.forward(batch).layer(encoder.num_layers).float()
    return out[batch["attention_mask"].bool()]


def _round_trip(variant, folder):
    save_checkpoint(variant, folder)
    return load_encoder(folder)


@pytest.mark.parametrize("spec, tolerance", [("int8-dynamic", 0.02), ("int8-static", 0.05), ("fp16", 0.01),
                                             ("bf16", 0.06)])
def test_quantized_and_half_checkpoints_reload_within_a_stated_tolerance(tiny, batch, tmp_path, spec, tolerance):
    variant = compress(tiny, parse_method(spec), calibration=[batch])
    reloaded = _round_trip(variant, tmp_path / spec)
    reference = _top(tiny, batch)
    # the checkpoint computes exactly what the compressed model did, and that is close to float32
    assert torch.equal(_top(reloaded, batch), _top(variant.encoder, batch))
    scale = reference.abs().max()
    assert (_top(reloaded, batch) - reference).abs().max() <= tolerance * scale
    assert not torch.equal(_top(reloaded, batch), reference)  # it did change something
    assert reloaded.fingerprint == variant.encoder.fingerprint != tiny.fingerprint
    if spec.startswith("int8"):
        from bertology.models.checkpoints import is_int8_module

        linears = [name for name, m in tiny.model.named_modules() if type(m) is torch.nn.Linear]
        assert reloaded.config.bertology_quantization["modules"] == linears
        assert all(is_int8_module(reloaded.model.get_submodule(name)) for name in linears)


def test_sizes_are_the_ones_counted_by_hand(tiny, tmp_path):
    # tiny BERT: hidden 32, 2 layers, intermediate 64, vocab V, 128 positions, 2 token types, pooler 32x32
    h, i, layers, v = 32, 64, 2, tiny.config.vocab_size
    embeddings = v * h + 128 * h + 2 * h + 2 * h
    per_layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h
    pooler = h * h + h
    floats = embeddings + layers * per_layer + pooler
    position_ids = 128 * 8  # the int64 buffer save_pretrained keeps is not stored: checked below
    assert stored_bytes(tiny.model) in (4 * floats, 4 * floats + position_ids)
    fp16 = compress(tiny, Method("fp16"))
    assert stored_bytes(fp16.encoder.model) == stored_bytes(tiny.model) - 2 * floats
    # int8: each linear weight 1 byte per value + a float32 scale and an int64 zero point per output row
    linear_weights = layers * (4 * h * h + 2 * h * i) + h * h
    rows = layers * (4 * h + i + h) + h
    int8 = compress(tiny, Method("int8-dynamic"))
    assert stored_bytes(int8.encoder.model) == stored_bytes(tiny.model) - 4 * linear_weights + linear_weights + rows * 12
    dropped = compress(tiny, Method("drop-top", 1))
    assert stored_bytes(dropped.encoder.model) == stored_bytes(tiny.model) - 4 * per_layer
    pruned = compress(tiny, Method("heads-random", 0.25), seed=3)  # 2 of 8 heads, 8 dims each
    assert stored_bytes(pruned.encoder.model) == stored_bytes(tiny.model) - 4 * 2 * (3 * (h * 8 + 8) + 8 * h)
    folder = save_checkpoint(pruned, tmp_path / "pruned")
    assert abs(file_bytes(folder) - stored_bytes(pruned.encoder.model)) < 8192  # the safetensors header


def test_pruned_heads_are_gone_from_the_weights_and_the_checkpoint(tiny, batch, tmp_path):
    importance = np.array([[0.9, 0.1, 0.5, 0.7], [0.2, 0.8, 0.6, 0.05]])
    variant = compress(tiny, Method("heads-importance", 0.25), importance=importance)
    assert variant.pruned_heads == [(1, 1), (2, 3)]  # the two least important
    reloaded = _round_trip(variant, tmp_path / "heads")
    for layer in reloaded.model.encoder.layer:
        assert layer.attention.self.query.weight.shape == (24, 32)  # 3 heads of 8 left
        assert layer.attention.output.dense.weight.shape == (32, 24)
    from bertology.intervention.hooks import mask_heads

    with mask_heads(tiny.model, variant.pruned_heads):
        masked = _top(tiny, batch)
    assert torch.allclose(_top(reloaded, batch), masked, atol=1e-5)  # removal computes what masking does
    with pytest.raises(Exception):
        AutoModel.from_pretrained(tmp_path / "heads")  # transformers alone cannot rebuild the smaller shapes


def test_dropped_layers_are_gone(tiny, batch, tmp_path):
    variant = compress(tiny, Method("drop-top", 1))
    reloaded = _round_trip(variant, tmp_path / "drop")
    assert reloaded.num_layers == 1 and len(reloaded.model.encoder.layer) == 1
    assert len(reloaded.forward(batch).hidden_states) == 2
    assert torch.allclose(reloaded.forward(batch).layer(1), tiny.forward(batch).layer(1), atol=1e-6)
    AutoModel.from_pretrained(tmp_path / "drop")  # a plain checkpoint transformers loads by itself


@pytest.mark.parametrize("name", ["magnitude", "magnitude-layer"])
def test_magnitude_pruning_reaches_the_sparsity(tiny, tmp_path, name):
    from bertology.compression.methods import prunable_weights

    variant = compress(tiny, Method(name, 0.5))
    reloaded = _round_trip(variant, tmp_path / name)
    weights = prunable_weights(reloaded.model)
    zeros = sum(int((w == 0).sum()) for w in weights.values())
    assert zeros / sum(w.numel() for w in weights.values()) == pytest.approx(0.5, abs=0.01)
    if name == "magnitude-layer":
        for weight in weights.values():
            assert float((weight == 0).float().mean()) == pytest.approx(0.5, abs=0.02)
    kept = [w[w != 0].abs().min() for w in weights.values()]
    original = prunable_weights(tiny.model)
    if name == "magnitude":  # one threshold: every weight kept is larger than every weight removed
        removed = max(o[w == 0].abs().max() for o, w in zip(original.values(), weights.values()))
        assert min(kept) >= removed
    assert variant.details["sparsity_achieved"] == pytest.approx(0.5, abs=0.01)


def test_choose_heads_keeps_a_head_in_every_layer_and_random_is_seeded():
    importance = np.array([[0.0, 0.1, 0.2, 0.3], [0.9, 0.8, 0.7, 0.6]])
    chosen = choose_heads(2, 4, 0.5, "importance", importance)
    assert chosen == [(1, 0), (1, 1), (1, 2), (2, 3)]  # layer 1's last head stays, the next least important goes
    assert choose_heads(2, 4, 0.5, "random", seed=1) == choose_heads(2, 4, 0.5, "random", seed=1)
    assert choose_heads(2, 4, 0.5, "random", seed=1) != choose_heads(2, 4, 0.5, "random", seed=2)


@pytest.mark.parametrize("spec, message", [
    ("magnitude:1", "sparsity 1 is outside [0, 1)"),
    ("magnitude:-0.1", "outside [0, 1)"),
    ("magnitude-layer", "needs a sparsity"),
    ("quantum", "unknown method 'quantum'"),
    ("fp16:2", "takes no value"),
    ("heads-random:1.5", "outside (0, 1)"),
    ("drop-top:1.5", "whole number"),
])
def test_bad_methods_are_one_line(spec, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")) as error:
        parse_methods(spec)
    assert "\n" not in str(error.value) and str(error.value).startswith("methods: ")


def test_pruning_every_head_of_a_layer_is_refused(tiny):
    with pytest.raises(UsageError, match="would remove every head of a layer") as error:
        compress(tiny, Method("heads-random", 0.9))
    assert "\n" not in str(error.value)
    with pytest.raises(UsageError, match="drop between 1 and 1"):
        compress(tiny, Method("drop-top", 2))


def test_a_model_whose_linear_layers_cannot_be_quantized_is_one_line(tiny):
    from bertology.compression.methods import check_quantizable

    half = compress(tiny, Method("fp16"))
    with pytest.raises(ModelError, match="float16.*starts from float32") as error:
        compress(half.encoder, Method("int8-dynamic"))
    assert "\n" not in str(error.value)

    class Conv1DOnly(torch.nn.Module):  # GPT-2 style projections: 2-D weights, but no torch.nn.Linear
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Module()
            self.proj.weight = torch.nn.Parameter(torch.zeros(4, 4))

    with pytest.raises(ModelError, match="no torch.nn.Linear layers to quantize"):
        check_quantizable(Conv1DOnly())


def test_an_int8_checkpoint_for_another_engine_or_with_missing_tensors_is_one_line(tiny, tmp_path):
    import json

    folder = save_checkpoint(compress(tiny, Method("int8-dynamic")), tmp_path / "int8")
    config = json.loads((folder / "config.json").read_text())
    config["bertology_quantization"]["engine"] = "not-an-engine"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="not-an-engine quantization engine"):
        load_encoder(folder)
    config["bertology_quantization"] = {"scheme": "dynamic", "modules": ["encoder.nope"]}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="not a linear layer"):
        load_encoder(folder)


def test_a_small_run_gives_the_primer_table(tiny, tmp_path):
    from bertology.compression import EvalSets, run_compression
    from bertology.data import default_corpus, read_conllu
    from bertology.results import Result

    dev = [s for s in read_conllu(default_corpus("ewt-dev")) if 1 < len(s) <= 20]
    sets = EvalSets(dev[:24], dev[24:36], dev[36:48])  # EWT dev only: reading train would cost more than the run
    result = run_compression(tiny, "fp16,heads-random:0.25,drop-top:1", tmp_path / "run", sets=sets, rounds=1,
                             structural_epochs=1, min_relation_count=3, n_boot=100, progress=False,
                             calibration_sentences=8)
    summary = result["summary"].set_index("variant")
    assert list(summary.index) == ["original", "fp16", "heads-random-0.25", "drop-top-1"]
    assert summary.loc["fp16", "compression"] == pytest.approx(
        summary.loc["original", "parameter_bytes"] / summary.loc["fp16", "parameter_bytes"])
    assert summary.loc["original", "speedup"] == 1.0 and summary.loc["fp16", "speedup"] > 0
    for measure in ("upos", "uuas", "parser_heads"):
        row = summary.loc["drop-top-1"]
        assert row[f"{measure}_ci_low"] <= row[f"{measure}_retention"] <= row[f"{measure}_ci_high"]
    layers = result["layers"]
    assert sorted(layers[layers["variant"] == "drop-top-1"]["layer"]) == [0, 1]
    assert sorted(layers[layers["variant"] == "original"]["layer"]) == [0, 1, 2]
    parser = result["parser_heads"]
    pruned = set(result.meta["details"]["heads-random-0.25"]["pruned"])
    assert len(pruned) == 2
    assert not set(parser[parser["variant"] == "heads-random-0.25"]["head_label"]) & pruned
    assert (tmp_path / "run" / "layers.png").is_file()
    assert set(Result.load(tmp_path / "run").tables) >= {"summary", "layers", "retention", "throughput"}
    reloaded = load_encoder(tmp_path / "run" / "checkpoints" / "heads-random-0.25")
    assert reloaded.model.encoder.layer[0].attention.self.query.weight.shape[0] < 32 or \
        reloaded.model.encoder.layer[1].attention.self.query.weight.shape[0] < 32


def test_a_student_is_measured_against_its_teacher(tiny):
    from bertology.compression import EvalSets, run_compression, stored_bytes
    from bertology.data import default_corpus, read_conllu

    dev = [s for s in read_conllu(default_corpus("ewt-dev")) if 1 < len(s) <= 15]
    student = tiny_encoder("bert", layers=1, hidden=32, heads=4, attentions=False, seed=1)
    result = run_compression(student, [], None, teacher=tiny, sets=EvalSets(dev[:16], dev[16:24], dev[24:32]),
                             rounds=1, structural_epochs=1, min_relation_count=2, n_boot=50, progress=False)
    summary = result["summary"].set_index("variant")
    assert list(summary.index) == ["original", "student"] and result.meta["teacher"]
    assert summary.loc["student", "compression"] == pytest.approx(stored_bytes(tiny.model) / stored_bytes(student.model))
    assert sorted(result["layers"].query("variant == 'student'")["layer"]) == [0, 1]
