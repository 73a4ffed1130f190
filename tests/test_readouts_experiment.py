"""The redesigned SQuAD experiment's parts: answerable-only windows, checkpoint 0 (no fine-tuning),
standardised features stored with the readout, early stopping, the no-answer threshold chosen on held-out
articles, and the paired bootstrap."""

from __future__ import annotations


import numpy as np
import pytest
import torch

from bertology.data.squad import read_squad
from bertology.readouts.catalog import build_readout
from bertology.readouts.intervals import PairedBootstrap
from bertology.readouts.qa import choose_null_margin, decode_spans, encode_windows
from bertology.readouts.squad import SquadReadoutsConfig, prepare_windows, run_squad_readouts, window_store
from bertology.readouts.train import ReadoutTrainConfig, feature_stats, train_readout
from bertology.runtime import derive_seed


@pytest.fixture(scope="module")
def toy_file(tmp_path_factory):
    from readouts_toy import toy_squad

    # 40 words of context: with 24-token windows every context is cut into several windows
    return toy_squad(tmp_path_factory.mktemp("toy") / "toy.json", articles=8, paragraphs=3, words=40)


def _config(**kwargs) -> SquadReadoutsConfig:
    defaults = dict(max_length=32, stride=8, progress=False, finetune=None, readouts=("lp",), classify_readouts=())
    return SquadReadoutsConfig(**{**defaults, **kwargs})


def test_answerable_mode_keeps_answered_questions_and_drops_training_windows_without_the_answer(toy_file, tiny_bert):
    windows = prepare_windows(tiny_bert.tokenizer, _config(mode="answerable"), toy_file)
    both = prepare_windows(tiny_bert.tokenizer, _config(mode="squad2"), toy_file)
    for part in ("train", "dev", "test"):
        assert all(q.answers for q in windows[part].questions)
        assert any(not q.answers for q in both[part].questions)
    train = windows["train"]
    assert (train.start_positions > 0).all()  # every training label is a span
    assert train.stats["dropped_windows"] > 0 and len(train) == train.stats["kept_windows"]
    # each kept window still points at "cats" in its own question's context
    for w in range(len(train)):
        question = train.questions[int(train.question_index[w])]
        offsets = train.offsets[w]
        assert question.context[offsets[train.start_positions[w], 0]:offsets[train.end_positions[w], 1]] == "cats"
    # dev and test keep every window (decoding looks at all of them)
    assert (windows["test"].start_positions == 0).any()
    titles = {part: {q.title for q in windows[part].questions} for part in windows}
    assert not titles["train"] & titles["dev"] and not titles["train"] & titles["test"]
    assert not titles["dev"] & titles["test"]


def test_checkpoint_zero_trains_readouts_on_the_untouched_pretrained_encoder(tmp_path, toy_file, tiny_bert):
    before = {k: v.clone() for k, v in tiny_bert.model.state_dict().items()}
    config = _config(mode="answerable",
                     readout=ReadoutTrainConfig(epochs=2, patience=1, standardise=True, batch_size=8))
    result = run_squad_readouts(tiny_bert, tmp_path / "run", config, data=toy_file)
    scores = result["scores"]
    assert set(scores["checkpoint"]) == {0.0} and "fine-tuned" not in set(scores["component"])
    assert not (tmp_path / "run" / "finetune").exists()  # no fine-tuning at all
    after = tiny_bert.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    questions = result["questions"]
    assert len(questions) == scores["n_test"].iloc[0]
    assert np.isclose(questions["f1"].mean(), scores["f1"].iloc[0])
    assert scores["epochs_run"].iloc[0] >= 1 and scores["dev_f1"].notna().all()


def _toy_store(tmp_path, tiny_bert, toy_file, name="train"):
    questions = read_squad(toy_file)[:40]
    windows = encode_windows(tiny_bert.tokenizer, questions, max_length=32, stride=8)
    return window_store(tiny_bert, windows, tmp_path / name, _config()), windows


def test_standardisation_statistics_are_stored_with_the_readout_and_applied_when_scoring(tmp_path, tiny_bert, toy_file):
    store, _ = _toy_store(tmp_path, tiny_bert, toy_file)
    readout = build_readout("ap", len(store.layers), store.dim, "span", seed=0)
    train_readout(readout, store, ReadoutTrainConfig(epochs=1, standardise=True, batch_size=8, progress=False),
                  checkpoint=tmp_path / "head.pt")
    for i, layer in enumerate(store.layers):
        rows = store.layer(layer).astype(np.float64)
        assert np.allclose(readout.scaler.mean[i].numpy(), rows.mean(0), atol=1e-4)
        assert np.allclose(readout.scaler.std[i].numpy(), rows.std(0), rtol=1e-3, atol=1e-5)
    assert np.allclose(feature_stats(store)[0], readout.scaler.mean.numpy())
    # a fresh readout loaded from the checkpoint carries the statistics and scores as the trained one
    fresh = build_readout("ap", len(store.layers), store.dim, "span", seed=1)
    fresh.load_state_dict(torch.load(tmp_path / "head.pt", weights_only=False)["head_state"])
    assert torch.equal(fresh.scaler.mean, readout.scaler.mean)
    x = torch.as_tensor(np.stack([store.layer(l)[:5] for l in store.layers]))[None].float()  # [1, layers, 5, H]
    mask = torch.ones(1, 5, dtype=torch.bool)
    fresh.eval(), readout.eval()
    scaled = (x - readout.scaler.mean[None, :, None]) / readout.scaler.std[None, :, None]
    manual = readout.output(readout.body(scaled, mask), mask)
    assert torch.allclose(fresh(x, mask)[0], manual[0], atol=1e-5)
    unscaled = readout.output(readout.body(x, mask), mask)
    assert not torch.allclose(unscaled[0], manual[0], atol=1e-3)


def test_early_stopping_stops_after_patience_and_keeps_the_best_epoch(tmp_path, tiny_bert, toy_file):
    store, _ = _toy_store(tmp_path, tiny_bert, toy_file)
    scripted = iter([0.1, 0.5, 0.3, 0.2, 0.9, 0.9])
    states = []

    def validate(readout):
        states.append({k: v.clone() for k, v in readout.state_dict().items()})
        return next(scripted)

    readout = build_readout("lp", len(store.layers), store.dim, "span", seed=0)
    config = ReadoutTrainConfig(epochs=6, patience=2, lr=1e-2, batch_size=8, progress=False)
    stats = train_readout(readout, store, config, checkpoint=tmp_path / "head.pt", validate=validate)
    assert stats.epochs_run == 4 and stats.best_epoch == 2  # epochs 3 and 4 did not beat 0.5
    assert [row["score"] for row in stats.history] == [0.1, 0.5, 0.3, 0.2]
    assert all(torch.equal(v, states[1][k]) for k, v in readout.state_dict().items())
    assert not torch.equal(states[1]["output.linear.weight"], states[3]["output.linear.weight"])
    # a finished checkpoint gives back the best readout without training
    again = build_readout("lp", len(store.layers), store.dim, "span", seed=0)
    reused = train_readout(again, store, config, checkpoint=tmp_path / "head.pt", validate=validate)
    assert reused.reused and reused.best_epoch == 2
    assert all(torch.equal(v, states[1][k]) for k, v in again.state_dict().items())


def test_null_margin_is_the_best_f1_cut_on_the_questions_given(tmp_path, tiny_bert):
    from test_readouts_squad_data import _qa, _squad, _write

    context = "the cats sat on the mat near dogs"
    start = context.index("cats")
    payload = _squad([_qa("a", [("cats", start)]), _qa("b", [("cats", start)]), _qa("c"), _qa("d")], context=context)
    questions = read_squad(_write(tmp_path / "four.json", payload))
    windows = encode_windows(tiny_bert.tokenizer, questions, max_length=48, stride=8)
    starts, ends = [], []
    # every window: span "cats" scores 2 (start) + 2 (end) = 4; the no-answer score varies by question
    position = int(windows.start_positions[0])
    for w, null in enumerate([1.0, 3.0, 4.5, 6.0]):
        s = np.zeros(len(windows.input_ids[w]))
        s[position] = 2.0
        s[0] = null / 2
        starts.append(s), ends.append(s.copy())
    # gaps (null - span): a -3, b -1, c 0.5, d 2: answering a and b (cut at -1) gives F1 4/4
    margin = choose_null_margin(windows, starts, ends)
    assert margin == pytest.approx(-1.0)
    answers = decode_spans(windows, starts, ends, null_margin=margin).answers
    assert answers == {"a": "cats", "b": "cats", "c": "", "d": ""}


def test_squad2_threshold_is_chosen_on_dev_articles_never_on_test(tmp_path, toy_file, tiny_bert, monkeypatch):
    import bertology.readouts.squad as squad_module

    seen = []
    original = squad_module.choose_null_margin

    def recording(windows, *args, **kwargs):
        seen.append({q.id for q in windows.questions})
        return original(windows, *args, **kwargs)

    monkeypatch.setattr(squad_module, "choose_null_margin", recording)
    config = _config(mode="squad2", readout=ReadoutTrainConfig(epochs=1, batch_size=8))
    result = run_squad_readouts(tiny_bert, tmp_path / "run", config, data=toy_file)
    windows = prepare_windows(tiny_bert.tokenizer, config, toy_file)
    dev = {q.id for q in windows["dev"].questions}
    test = {q.id for q in windows["test"].questions}
    assert seen and all(ids == dev for ids in seen) and not dev & test
    assert result["scores"]["null_margin"].notna().all()


def test_paired_bootstrap_matches_a_hand_computation():
    a = np.array([1.0, 0.0, 0.5, 1.0])
    b = np.array([0.0, 0.0, 0.5, 1.0])
    boot = PairedBootstrap({"a": a, "b": b}, n_boot=50, seed=3)
    counts = np.random.default_rng(3).multinomial(4, np.full(4, 0.25), size=50)  # the same draws, by hand
    means_a, means_b = counts @ a / 4, counts @ b / 4
    row = boot.system("a")
    assert row["mean"] == pytest.approx(0.625)
    assert (row["low"], row["high"]) == pytest.approx((np.quantile(means_a, 0.025), np.quantile(means_a, 0.975)))
    difference = boot.difference("a", "b")
    hand = means_a - means_b
    assert difference["difference"] == pytest.approx(0.25)
    assert (difference["low"], difference["high"]) == pytest.approx((np.quantile(hand, 0.025),
                                                                     np.quantile(hand, 0.975)))
    # a better on one question only: some resamples miss it, so the difference reaches 0 - not established
    assert difference["low"] == 0 and not difference["established"]
    better = PairedBootstrap({"a": a + 0.1, "b": a}, n_boot=50, seed=3).difference("a", "b")
    assert better["established"] and better["low"] == pytest.approx(0.1)


def test_training_runs_every_epoch_when_epochs_differ_in_length(tmp_path, tiny_bert):
    from test_readouts_streaming import _store

    from bertology.readouts.streaming import StreamingReader

    store, _ = _store(tmp_path, tiny_bert, shard_bytes=6000)
    reader = StreamingReader(store, 3, seed=derive_seed(0, "heads", "lp"), buffer_shards=3)
    sizes = [sum(len(group.batches) for group in reader.plan(epoch)) for epoch in range(5)]
    assert sizes[1] < sizes[0]  # shard groups differ by epoch, and so do their partial last batches
    readout = build_readout("lp", len(store.layers), store.dim, "span", seed=0)
    stats = train_readout(readout, store, ReadoutTrainConfig(epochs=5, batch_size=3, buffer_shards=3, progress=False),
                          validate=lambda trained: 0.0)
    assert stats.steps == sum(sizes) and [row["epoch"] for row in stats.history] == [1, 2, 3, 4, 5]
