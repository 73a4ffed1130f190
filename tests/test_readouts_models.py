"""The readouts: shapes, parameter counts (by formula), what each computes, masking, and learning a toy span
task from a tiny encoder's activations well above chance."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertology.errors import UsageError
from bertology.readouts.adapter import LayerAdapters
from bertology.readouts.catalog import SEED_READOUTS, build_readout, check_readout_name
from bertology.readouts.pooling import LayerAverage, ScalarMix

LAYERS, HIDDEN, TOKENS, BATCH = 3, 8, 5, 2
SPAN = 2 * HIDDEN + 2
ADAPTER_4 = (HIDDEN * 4 + 4) + (4 * HIDDEN + HIDDEN)
ADAPTER_386 = (HIDDEN * 386 + 386) + (386 * HIDDEN + HIDDEN)

EXPECTED_PARAMETERS = {
    "lp": LAYERS + 1 + SPAN,
    "ap": SPAN,
    "last": SPAN,
    "adapter-shared-4": ADAPTER_4 + LAYERS + 1 + SPAN,
    "adapter-shared-4-skip": ADAPTER_4 + LAYERS + 1 + SPAN,
    "adapter-independent-4": LAYERS * ADAPTER_4 + LAYERS + 1 + SPAN,
    "cnn": (LAYERS * 8 * 9 + 8) + (8 * 9 + 1) + SPAN,
    "stack": LAYERS + 1 + ADAPTER_386 + (HIDDEN * 3 + HIDDEN) + (HIDDEN * HIDDEN + HIDDEN) + SPAN,
}


def _inputs(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, LAYERS, TOKENS, HIDDEN, generator=generator)
    mask = torch.ones(BATCH, TOKENS, dtype=torch.bool)
    mask[1, 3:] = False
    x[1, :, 3:] = 0
    return x, mask


@pytest.mark.parametrize("name", sorted(EXPECTED_PARAMETERS))
def test_span_readouts_shapes_and_parameter_counts(name, tiny_bert):
    readout = build_readout(name, LAYERS, HIDDEN, "span", seed=0)
    x, mask = _inputs()
    start, end = readout(x, mask)
    assert start.shape == end.shape == (BATCH, TOKENS)
    assert (start[1, 3:] < -1e3).all() and (end[1, 3:] < -1e3).all()  # padding never wins
    assert readout.num_parameters == EXPECTED_PARAMETERS[name]
    assert readout.parameter_share(tiny_bert.num_parameters) == pytest.approx(
        EXPECTED_PARAMETERS[name] / tiny_bert.num_parameters)


@pytest.mark.parametrize("name", ["lp", "ap", "adapter-shared-4-skip", "cnn", "stack"])
def test_classification_readouts_shapes(name):
    readout = build_readout(name, LAYERS, HIDDEN, "classify", num_labels=3, seed=0).eval()
    x, mask = _inputs()
    assert readout(x, mask).shape == (BATCH, 3)
    # sentence-level features: one row per input
    assert readout(x[:, :, :1], mask[:, :1]).shape == (BATCH, 3)
    assert readout.num_parameters == EXPECTED_PARAMETERS[name] - SPAN + (HIDDEN * 3 + 3)


def test_seed_readouts_all_build():
    for name in SEED_READOUTS:
        build_readout(name, LAYERS, HIDDEN)


def test_unknown_readout_is_one_clear_error():
    with pytest.raises(UsageError, match="--readouts 'adapter-64': unknown readout; expected lp, ap"):
        check_readout_name("adapter-64")


def test_scalar_mix_is_gamma_times_softmax_weighted_sum():
    mix = ScalarMix(LAYERS)
    with torch.no_grad():
        mix.scalars.copy_(torch.tensor([0.0, 1.0, 2.0]))
        mix.gamma.fill_(0.5)
    x, _ = _inputs()
    weights = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0)
    expected = 0.5 * (weights[0] * x[:, 0] + weights[1] * x[:, 1] + weights[2] * x[:, 2])
    assert torch.allclose(mix(x), expected, atol=1e-6)
    assert torch.allclose(mix.layer_weights(), weights)
    assert torch.allclose(LayerAverage()(x), x.mean(1))


def test_adapters_start_as_identity_and_the_skip_adds_the_last_layer():
    x, _ = _inputs()
    plain = LayerAdapters(LAYERS, HIDDEN, size=4, shared=True)
    assert torch.allclose(plain(x), x.mean(1), atol=1e-6)  # up = 0: identity adapters, uniform mix
    skip = LayerAdapters(LAYERS, HIDDEN, size=4, shared=False, skip=True)
    assert torch.allclose(skip(x), x.mean(1) + x[:, -1], atol=1e-6)
    assert len(skip.adapters) == LAYERS and len(plain.adapters) == 1


@pytest.mark.parametrize("name", ["cnn", "stack"])
def test_token_mixing_readouts_ignore_padding(name):
    """Padding appended to an input must not change the logits of its real tokens."""
    readout = build_readout(name, LAYERS, HIDDEN, "span", seed=1).eval()
    with torch.no_grad():  # make the token-mixing parts non-trivial
        for parameter in readout.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    x, _ = _inputs()
    short = x[:1, :, :3]
    padded = torch.cat([short, torch.full((1, LAYERS, 4, HIDDEN), 7.0)], dim=2)
    mask = torch.tensor([[True] * 3 + [False] * 4])
    start_short, _ = readout(short, torch.ones(1, 3, dtype=torch.bool))
    start_padded, _ = readout(padded, mask)
    assert torch.allclose(start_short, start_padded[:, :3], atol=1e-5)


def test_a_readout_learns_a_toy_span_task_well_above_chance(tmp_path, tiny_bert):
    from readouts_toy import toy_squad

    from bertology.data.squad import read_squad, split_by_article
    from bertology.readouts.qa import encode_windows
    from bertology.readouts.squad import SquadReadoutsConfig, score_readout, window_store
    from bertology.readouts.train import ReadoutTrainConfig, train_readout

    questions = read_squad(toy_squad(Path(tmp_path) / "toy.json", articles=8, paragraphs=6))
    train_questions, test_questions = split_by_article(questions)
    config = SquadReadoutsConfig(progress=False)
    train = encode_windows(tiny_bert.tokenizer, train_questions, max_length=96, stride=32)
    test = encode_windows(tiny_bert.tokenizer, test_questions, max_length=96, stride=32)
    train_store = window_store(tiny_bert, train, tmp_path / "train", config)
    test_store = window_store(tiny_bert, test, tmp_path / "test", config)
    readout = build_readout("adapter-shared-64", len(train_store.layers), train_store.dim, "span", seed=0)
    before = score_readout(readout, test_store, test, 30)
    train_readout(readout, train_store, ReadoutTrainConfig(epochs=4, lr=1e-2, batch_size=8, progress=False))
    after = score_readout(readout, test_store, test, 30)
    # chance: one position among ~30 for the answerable half; "always no answer" scores 0.5
    assert after["has_ans_f1"] > 0.8 and after["exact"] > 0.85
    assert after["exact"] > before["exact"] + 0.3
