"""The one batcher: token-budgeted, length-sorted batches and right padding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertology.errors import UsageError
from bertology.models.batching import GPU_PADDING_FLOOR, pad_batch, pad_id_of, padding_floor, token_budget_batches


def _lengths(n=200, seed=0):
    return np.random.default_rng(seed).integers(1, 60, size=n)


def test_every_input_once_sorted_and_within_the_budget():
    lengths = _lengths()
    batches = token_budget_batches(lengths, 256, max_padding=None)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(lengths)))
    assert np.all(np.diff(lengths[flat]) >= 0)  # shortest first
    for batch in batches:
        assert lengths[batch].max() * len(batch) <= 256
    # greedy: the next batch's first input would not have fitted
    for batch, following in zip(batches, batches[1:]):
        assert max(lengths[batch].max(), lengths[following[0]]) * (len(batch) + 1) > 256


def test_stable_order_for_equal_lengths_and_an_oversized_input_alone():
    batches = token_budget_batches([5, 3, 5, 3, 100], 12, max_padding=None)
    assert [b.tolist() for b in batches] == [[1, 3], [0, 2], [4]]


def test_max_batch_and_no_budget():
    lengths = _lengths(50)
    batches = token_budget_batches(lengths, None, 8, sort=False, max_padding=None)
    assert [b.tolist() for b in batches] == [list(range(i, min(i + 8, 50))) for i in range(0, 50, 8)]
    assert all(len(b) <= 5 for b in token_budget_batches(lengths, 10_000, 5))


def test_max_padding_closes_wasteful_batches_once_they_are_big_enough():
    lengths = [10] * 8 + [20] * 8
    loose = token_budget_batches(lengths, 10_000, max_padding=None)
    assert [len(b) for b in loose] == [16]
    tight = token_budget_batches(lengths, 10_000, max_padding=0.1, min_batch=8)
    assert [len(b) for b in tight] == [8, 8]
    small = token_budget_batches(lengths, 10_000, max_padding=0.1, min_batch=9)
    assert len(small[0]) > 8  # below min_batch rows a batch is never closed for padding


def test_below_the_padding_floor_a_batch_is_not_closed_for_its_padding():
    # Length-sorted, every new length adds a tenth or more of padding: cut at each step on a CPU (no floor);
    # with a floor of 200 padded tokens the batch fills to it first, then closes at the next wasteful step.
    lengths = [10] * 8 + [12] * 8 + [14] * 8 + [16] * 8
    assert [len(b) for b in token_budget_batches(lengths, 10_000, min_tokens=0)] == [8, 8, 8, 8]
    floored = token_budget_batches(lengths, 10_000, min_tokens=200)
    assert [len(b) for b in floored] == [16, 16]
    assert all(len(b) * max(lengths[i] for i in b) <= 10_000 for b in floored)  # the budget still holds
    assert padding_floor("cpu", 65_536) == 0  # a CPU's time follows its padded tokens: no floor
    assert padding_floor("cuda", 65_536) == 65_536 // GPU_PADDING_FLOOR > 0


def test_rows_count_against_the_budget_in_the_given_order():
    lengths, rows = [4, 4, 4, 4], [3, 1, 2, 2]
    batches = token_budget_batches(lengths, 16, rows=rows, sort=False, max_padding=None)
    assert [b.tolist() for b in batches] == [[0, 1], [2, 3]]


def test_bad_settings_are_one_line():
    with pytest.raises(UsageError, match="batch_tokens 0"):
        token_budget_batches([3], 0)
    with pytest.raises(UsageError, match="rows: 1 values for 2 inputs"):
        token_budget_batches([3, 4], 10, rows=[1])
    with pytest.raises(UsageError, match="both None"):
        token_budget_batches([3], None)


def test_pad_batch_right_pads_with_mask_and_types():
    batch = pad_batch([[5, 6, 7], [8]], pad_id=0, token_type_ids=[[0, 1, 1], [0]])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["token_type_ids"].tolist() == [[0, 1, 1], [0, 0, 0]]
    assert all(t.dtype == torch.long for t in batch.values())
    wide = pad_batch([[1, 2]], pad_id=9, width=4)
    assert wide["input_ids"].tolist() == [[1, 2, 9, 9]] and "token_type_ids" not in wide
    with pytest.raises(UsageError, match="width 1"):
        pad_batch([[1, 2]], pad_id=0, width=1)


def test_padding_does_not_change_a_real_models_states(tiny_bert):
    short, long = [101, 7, 8, 102], [101, 7, 8, 9, 10, 11, 102]
    batch = pad_batch([short, long], pad_id_of(tiny_bert.tokenizer))
    padded = tiny_bert.forward(batch).layer(tiny_bert.num_layers)
    alone = tiny_bert.forward(pad_batch([short], 0)).layer(tiny_bert.num_layers)
    assert torch.allclose(padded[0, :4], alone[0], atol=1e-5)
