"""The Convexity MLM probe on a tiny model: the input-embedding dropout, the stacked predictors, training all
layers in one pass equals training them one by one, the metrics by hand, the command end to end."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from bertology.data import read_corpus
from bertology.errors import DataError, SettingError
from bertology.geometry.stores import cached_store
from bertology.knowledge.mlm_probe import (
    LayerwiseMLMPredictor, TokenRows, evaluate_predictors, predictor_seeds, heldout_split, input_dropout, mlm_probe,
    token_rows, train_predictors, unigram_baseline,
)

sys.path.insert(0, str(Path(__file__).parent))
from knowledge_models import save_tiny_encoder, write_toy_corpus  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from bertology.models.tiny import tiny_encoder

    return tiny_encoder("bert", seed=1, attentions=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_toy_corpus(tmp_path_factory.mktemp("corpus") / "toy.txt")


@pytest.fixture(scope="module")
def store(tiny, corpus, tmp_path_factory):
    return cached_store(tiny, read_corpus(corpus), pool="tokens", cache_dir=tmp_path_factory.mktemp("cache"))


def test_input_dropout_drops_the_word_embeddings_only_inside_the_block(tiny):
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    lookup = tiny.model.get_input_embeddings()
    clean = lookup(ids)
    with input_dropout(tiny, 0.75, seed=4, corrupt="all"):
        noisy = lookup(ids)
        noisy_again = lookup(ids)
    kept = noisy != 0
    assert 0.1 < kept.float().mean() < 0.45  # about 1 - 0.75 kept
    assert torch.allclose(noisy[kept], clean[kept] / 0.25)  # inverted dropout
    assert not torch.equal(noisy, noisy_again)  # a fresh mask per call
    with input_dropout(tiny, 0.75, seed=4, corrupt="all"):
        assert torch.equal(lookup(ids), noisy)  # the same seed gives the same masks
    assert torch.equal(lookup(ids), clean)  # the hook is gone after the block
    with input_dropout(tiny, 0.75, seed=4):  # target mode: a direct lookup (outside Encoder.forward) stays clean
        assert torch.equal(lookup(ids), clean)
    with input_dropout(tiny, 0.0, seed=4):
        assert torch.equal(lookup(ids), clean)
    with pytest.raises(SettingError, match="^dropout 1.0"):
        with input_dropout(tiny, 1.0, seed=0):
            pass


@pytest.mark.parametrize("tied", [True, False])
def test_stacked_predictors_equal_one_predictor_per_layer(tied):
    dim, vocab = 8, 20
    embeddings = torch.randn(vocab, dim) if tied else None
    both = LayerwiseMLMPredictor(dim, vocab, [11, 22], embeddings)
    first = LayerwiseMLMPredictor(dim, vocab, [11], embeddings)
    second = LayerwiseMLMPredictor(dim, vocab, [22], embeddings)
    x = torch.randn(2, 5, dim)
    with torch.no_grad():
        out = both(x)
        assert torch.allclose(out[0], first(x[:1])[0], atol=1e-6)
        assert torch.allclose(out[1], second(x[1:])[0], atol=1e-6)
    # BERT's MLM prediction head by hand: LayerNorm(GELU(x W + b)) then the decoder
    h = F.layer_norm(F.gelu(x[0] @ both.dense_weight[0] + both.dense_bias[0]), (dim,), eps=1e-12)
    decoder = embeddings.T if tied else both.decoder_weight[0]
    assert torch.allclose(out[0], h @ decoder + both.decoder_bias[0], atol=1e-5)
    if tied:
        assert not any(p.data_ptr() == embeddings.data_ptr() for p in both.parameters())
        assert all(p is not both.tied_embeddings for p in both.parameters())


@pytest.mark.parametrize("tied", [True, False])
def test_training_all_layers_in_one_pass_equals_training_each_alone(tiny, store, tied):
    rows = token_rows(store, tiny.tokenizer)
    vocab = len(tiny.tokenizer)
    embeddings = tiny.model.get_input_embeddings().weight.detach() if tied else None
    layers = [0, 1, 2]
    together, _ = train_predictors(rows, layers, vocab, seed=3, epochs=2, batch_size=32, lr=3e-3,
                              tied_embeddings=embeddings)
    joint = evaluate_predictors(together, rows, layers)
    for layer in layers:
        alone, _ = train_predictors(rows, [layer], vocab, seed=3, epochs=2, batch_size=32, lr=3e-3,
                               tied_embeddings=embeddings)
        single = evaluate_predictors(alone, rows, [layer])
        assert single["top1"].iloc[0] == pytest.approx(joint["top1"].iloc[layer], abs=1e-9)
        assert single["cross_entropy"].iloc[0] == pytest.approx(joint["cross_entropy"].iloc[layer], rel=1e-4)
    assert predictor_seeds(3, [0, 1]) == [predictor_seeds(3, [0])[0], predictor_seeds(3, [1])[0]]


def test_metrics_by_hand(tiny, store):
    rows = token_rows(store, tiny.tokenizer)
    predictor = LayerwiseMLMPredictor(store.dim, len(tiny.tokenizer), [5])
    table = evaluate_predictors(predictor, rows, [1], batch_size=7)
    x = torch.from_numpy(store.layer(1))
    y = torch.from_numpy(rows.targets)
    keep = y >= 0
    with torch.no_grad():
        logits = predictor(x[keep][None])[0]
    ranks = (logits > logits.gather(1, y[keep][:, None])).sum(dim=1)  # how many scores beat the target
    assert table["tokens"].iloc[0] == int(keep.sum())
    assert table["top1"].iloc[0] == pytest.approx(float((ranks == 0).float().mean()))
    assert table["top10"].iloc[0] == pytest.approx(float((ranks < 10).float().mean()))
    loss = float(F.cross_entropy(logits, y[keep]))
    assert table["cross_entropy"].iloc[0] == pytest.approx(loss, rel=1e-5)
    assert table["perplexity"].iloc[0] == pytest.approx(np.exp(loss), rel=1e-5)


def test_unigram_baseline_by_hand():
    class Fake:
        offsets = np.array([0, 6])

    train = TokenRows(Fake(), np.array([4, 4, 4, 2, 2, -1]))
    heldout = TokenRows(Fake(), np.array([4, 2, 1, -1]))
    base = unigram_baseline(train, heldout, vocab_size=5)
    # add-one counts over 5 types: [1, 1, 3, 1, 4] / 10
    assert base["top1"] == pytest.approx(1 / 3) and base["top10"] == 1.0
    assert base["cross_entropy"] == pytest.approx(-(np.log(0.4) + np.log(0.3) + np.log(0.1)) / 3)


def test_heldout_split_every_fifth_sentence():
    assert list(np.flatnonzero(heldout_split(12))) == [4, 9]


def test_clean_input_makes_the_task_trivial_and_dropout_does_not(tiny, corpus, tmp_path):
    """Why the report dropped out the embeddings: without it a predictor just reads the token off its vector."""
    common = dict(seeds=(0,), untrained=False, epochs=30, batch_size=32, lr=3e-3, decoder="untied",
                  device="cpu", cache_dir=tmp_path, layers="0")
    clean = mlm_probe(tiny, corpus, **common, dropout=0.0)["layers"]
    noisy = mlm_probe(tiny, corpus, **common, dropout=0.9)["layers"]
    assert clean["top1"].iloc[0] > 0.95
    assert noisy["top1"].iloc[0] < clean["top1"].iloc[0] - 0.2


def test_command_end_to_end_quick(tmp_path, corpus, monkeypatch):
    from bertology.cli import app
    from bertology.results import Result

    folder = save_tiny_encoder(tmp_path / "tiny-bert", seed=1)
    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    run = CliRunner().invoke(app, ["knowledge", "mlm-probe", "-m", str(folder), "-d", str(corpus), "-o", str(out),
                                   "--quick", "--device", "cpu", "--no-progress"])
    assert run.exit_code == 0, run.output
    result = Result.load(out)
    layers = result["layers"]
    assert str(layers["layer"].dtype) == "Int64" and sorted(set(layers["layer"])) == [0, 1, 2]
    assert set(layers["weights"]) == {"trained", "untrained"} and set(layers["seed"]) == {0}
    assert layers[["top1", "top10"]].stack().between(0, 1).all()
    assert (layers["top10"] >= layers["top1"]).all()
    assert result.meta["settings"]["epochs"] == 1 and result.meta["heldout"] == "every fifth sentence of data"
    assert result["baselines"]["component"].tolist() == ["unigram"]
    assert (out / "mlm_probe.png").stat().st_size > 0


def test_bad_values_are_one_clear_line(tiny, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("one sentence only .\nand another .\n", encoding="utf-8")
    with pytest.raises(DataError, match="cannot be split"):
        mlm_probe(tiny, short, seeds=(0,), untrained=False, device="cpu", cache_dir=tmp_path)
    # a library call names the setting (the command line names the option: test_cli_spellings.py)
    with pytest.raises(SettingError, match="^decoder 'pretrained'"):
        mlm_probe(tiny, short, decoder="pretrained", device="cpu", cache_dir=tmp_path)
    with pytest.raises(SettingError, match="^dropout 1.0"):
        mlm_probe(tiny, short, dropout=1.0, device="cpu", cache_dir=tmp_path)
    with pytest.raises(SettingError, match="^epochs 0"):
        mlm_probe(tiny, short, epochs=0, device="cpu", cache_dir=tmp_path)


def _embedding_calls(tiny, ids, mask, corrupt):
    """What the word-embedding lookup returned on every call of one ``Encoder.forward`` under the dropout."""
    seen = []
    lookup = tiny.model.get_input_embeddings()
    with input_dropout(tiny, 0.9, seed=3, corrupt=corrupt):
        handle = lookup.register_forward_hook(lambda module, inputs, output: seen.append((inputs[0], output)))
        try:
            out = tiny.forward({"input_ids": ids, "attention_mask": mask})
        finally:
            handle.remove()
    return seen, out


@torch.inference_mode()  # the lookups compared with are made as Encoder.forward makes them
def test_target_dropout_corrupts_only_the_predicted_token_and_all_corrupts_every_token(tiny):
    ids = torch.tensor([[2, 10, 11, 12, 3], [2, 13, 14, 3, 0]])
    mask = (ids != 0).long()
    lookup = tiny.model.get_input_embeddings()
    clean_forward = tiny.forward({"input_ids": ids, "attention_mask": mask})
    content = [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2)]

    # default: a clean pass, then copies in which exactly one content position differs from the clean lookup
    seen, out = _embedding_calls(tiny, ids, mask, corrupt="target")
    assert torch.equal(seen[0][1], lookup(seen[0][0]))  # the clean pass
    corrupted = []
    for copy_ids, embedded in seen[1:]:
        changed = (embedded != lookup(copy_ids)).any(-1)  # [copies, tokens]
        assert (changed.sum(-1) == 1).all()  # one token per copy; its context is untouched
        for k, position in changed.nonzero().tolist():
            row = next(b for b in range(len(ids)) if torch.equal(copy_ids[k], ids[b]))  # the copy's sentence
            corrupted.append((row, position))
    assert sorted(corrupted) == content  # each content token once; [CLS], [SEP] and padding never
    for layer in range(len(out.hidden_states)):  # special positions keep the clean pass's vectors
        assert torch.equal(out.hidden_states[layer][:, 0], clean_forward.hidden_states[layer][:, 0])
        assert not torch.equal(out.hidden_states[layer][0, 1], clean_forward.hidden_states[layer][0, 1])
    assert "forward" not in vars(tiny)  # Encoder.forward is the class's own again after the block

    # the option: one pass, every position's embedding dropped out, context included
    seen, _ = _embedding_calls(tiny, ids, mask, corrupt="all")
    assert len(seen) == 1
    assert (seen[0][1] != lookup(ids)).any(-1)[mask.bool()].all()  # [CLS] and [SEP] too (padding's row is 0)

    with pytest.raises(SettingError, match="^corrupt 'context'"):
        with input_dropout(tiny, 0.9, seed=0, corrupt="context"):
            pass


def test_target_dropout_store_differs_from_all_and_is_cached_apart(tiny, corpus, tmp_path):
    from bertology.knowledge.mlm_probe import dropout_store

    sentences = read_corpus(corpus)[:6]
    target = dropout_store(tiny, sentences, 0.9, 0, cache_dir=tmp_path)
    every = dropout_store(tiny, sentences, 0.9, 0, corrupt="all", cache_dir=tmp_path)
    assert target.path != every.path
    assert not np.allclose(target.layer(2), every.layer(2))
    result = mlm_probe(tiny, corpus, seeds=(0,), untrained=False, epochs=1, device="cpu", cache_dir=tmp_path,
                       max_sentences=20, layers="0")
    assert result.meta["settings"]["corrupt"] == "target" and "predicted token only" in result.meta["reading"]
    with pytest.raises(SettingError, match="^corrupt 'none'"):
        mlm_probe(tiny, corpus, corrupt="none", device="cpu", cache_dir=tmp_path)


def test_command_corrupt_option_is_checked_in_one_line(tmp_path, corpus):
    from bertology.cli import app

    run = CliRunner().invoke(app, ["knowledge", "mlm-probe", "-m", "tiny", "-d", str(corpus), "-o", str(tmp_path / "o"),
                                   "--corrupt", "context", "--no-progress"])
    assert run.exit_code == 1 and "--corrupt 'context': expected one of target, all" in str(run.exception)


@pytest.mark.parametrize("old, new", [("LayerwiseMLMHead", "LayerwiseMLMPredictor"), ("train_heads", "train_predictors"),
                                      ("evaluate_heads", "evaluate_predictors"), ("head_seeds", "predictor_seeds")])
def test_the_old_names_of_the_predictors_still_import_with_a_warning(old, new):
    """"Head" is kept for attention heads and task heads; the MLM probe's per-layer predictors had it."""
    import importlib

    import bertology.knowledge as knowledge

    module = importlib.import_module("bertology.knowledge.mlm_probe")  # the package's mlm_probe is the function

    with pytest.warns(DeprecationWarning, match=f"mlm_probe.{old} is deprecated .*; use {new}"):
        assert getattr(module, old) is getattr(module, new)
    if old != "head_seeds":
        with pytest.warns(DeprecationWarning, match=f"{old} is deprecated"):
            assert getattr(knowledge, old) is getattr(module, new)
        assert old not in knowledge.__all__ and new in knowledge.__all__
    with pytest.raises(AttributeError):
        module.no_such_name
