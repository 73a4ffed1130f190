"""The shared foundation: one numbering, atomic outputs, progress in logs, devices, seeds, the result shape,
and the encoder's one forward path."""

from __future__ import annotations

import io
import random
import json
import os

import numpy as np
import pandas as pd
import pytest
import torch

from bertology.errors import DataError, OutputError, SettingError, UsageError
from bertology.files import atomic_path, ensure_dir, write_json, write_table
from bertology.numbering import head_label, heads_text, parse_heads, parse_layers
from bertology.progress import LogProgress, progress_bar
from bertology.results import Result, percent, tidy
from bertology.runtime import derive_seed, resolve_device, seed_list, seeded


# -- numbering ------------------------------------------------------------------------------------------


def test_head_labels_round_trip():
    pairs = [(4, 5), (1, 0), (6, 11)]
    assert head_label(4, 5) == "L4H5"
    assert parse_heads(heads_text(pairs), 6, 12) == sorted(pairs)


def test_whole_layer_expands_with_the_model_and_stays_open_without():
    assert parse_heads("L2", 6, 3) == [(2, 0), (2, 1), (2, 2)]
    assert parse_heads("L2H*", 6, 3) == [(2, 0), (2, 1), (2, 2)]
    assert parse_heads("L2") == [(2, None)]


@pytest.mark.parametrize("spec", ["", " , ", "3-5", "L0H1", "L7H0", "L1H12", "L-1H0", "LxH1"])
def test_bad_heads_are_one_clear_error(spec):
    with pytest.raises(SettingError, match="^heads"):  # the keyword; the command line says --heads
        parse_heads(spec, 6, 12)


def test_layers_accept_what_tables_print():
    assert parse_layers("0,3,6", 6) == [0, 3, 6]
    assert parse_layers("1-3,L5", 6) == [1, 2, 3, 5]
    assert parse_layers("last", 6) == [6]
    assert parse_layers(2, 6) == [2]
    assert parse_layers([3, 1], 6) == [1, 3]
    assert parse_layers(None, 6) is None and parse_layers("all", 6) is None


@pytest.mark.parametrize("spec", ["-1", "3-1", "", "x", "7", "1,,2"])
def test_bad_layers_are_one_clear_error(spec):
    with pytest.raises(SettingError, match="^layers"):
        parse_layers(spec, 6)


def test_layer_zero_is_refused_where_layers_need_heads():
    with pytest.raises(UsageError, match="embeddings"):
        parse_layers("0,1", 6, transformer_only=True)
    assert parse_layers("1", 6, transformer_only=True) == [1]


# -- files ----------------------------------------------------------------------------------------------


def test_atomic_path_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_outputs_are_world_readable(tmp_path):
    path = write_json(tmp_path / "a.json", {"x": np.int64(3)})
    assert json.loads(path.read_text()) == {"x": 3}
    assert os.stat(path).st_mode & 0o044 == 0o044


def test_output_folder_that_is_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match="is a file, not a folder"):
        ensure_dir(blocker)
    with pytest.raises(OutputError, match="file"):
        write_json(blocker / "a.json", {})


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores folder permissions")
def test_read_only_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(OutputError, match="permission denied"):
            write_json(folder / "a.json", {})
    finally:
        folder.chmod(0o755)


def test_disk_full_is_one_line(tmp_path, monkeypatch):
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    with pytest.raises(OutputError, match="no space left"):
        write_table(pd.DataFrame({"a": [1]}), tmp_path / "t", formats=("csv",))
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


# -- progress -------------------------------------------------------------------------------------------


def test_progress_logs_lines_when_not_a_terminal():
    stream = io.StringIO()
    bar = progress_bar(stream=stream, interval=0.0)
    assert isinstance(bar, LogProgress)
    with bar:
        task = bar.add_task("extract tiny", total=4)
        for _ in range(4):
            bar.advance(task)
    lines = stream.getvalue().splitlines()
    assert lines[-1].startswith("extract tiny: 4/4 (100%)")
    assert len(lines) >= 2


def test_progress_disabled_prints_nothing():
    stream = io.StringIO()
    with progress_bar(False, stream=stream, interval=0.0) as bar:
        bar.advance(bar.add_task("x", total=1))
    assert stream.getvalue() == ""


# -- runtime --------------------------------------------------------------------------------------------


def test_devices():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device(None).type in ("cpu", "cuda")
    with pytest.raises(UsageError, match="^device 'gpu7'"):  # the library names the keyword; the CLI --device
        resolve_device("gpu7")
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="no CUDA"):
            resolve_device("cuda")


def test_derived_seeds_are_stable_and_distinct():
    assert derive_seed(0, "control", "upos") == derive_seed(0, "control", "upos")
    seeds = {derive_seed(s, p) for s in range(5) for p in ("control", "twin", "probe")}
    assert len(seeds) == 15
    assert all(0 <= s < 2**31 for s in seeds)


def test_seeded_block_draws_from_the_seed_and_restores_the_callers_generators():
    torch.manual_seed(123)
    np.random.seed(5)
    random.seed(5)
    expected_after = (torch.rand(3), np.random.rand(), random.random())
    torch.manual_seed(123)
    np.random.seed(5)
    random.seed(5)
    with seeded(7, numpy=True, python=True):
        inside = (torch.rand(3), np.random.rand(), random.random())
    after = (torch.rand(3), np.random.rand(), random.random())
    torch.manual_seed(7)
    np.random.seed(7)
    random.seed(7)
    assert torch.equal(inside[0], torch.rand(3)) and inside[1:] == (np.random.rand(), random.random())
    assert torch.equal(after[0], expected_after[0]) and after[1:] == expected_after[1:]
    torch.manual_seed(1)
    before = torch.random.get_rng_state()
    with pytest.raises(RuntimeError), seeded(None):
        torch.rand(2)
        raise RuntimeError("restored on error too")
    assert torch.equal(torch.random.get_rng_state(), before)


def test_seed_list_is_a_count():
    assert seed_list(3) == (0, 1, 2)
    assert seed_list(2, first=5) == (5, 6)
    with pytest.raises(SettingError, match="^seeds 0"):
        seed_list(0)
    with pytest.raises(SettingError, match="^seed -1"):
        seed_list(1, first=-1)


# -- results --------------------------------------------------------------------------------------------


def test_result_round_trip_keeps_nullable_integers(tmp_path):
    frame = pd.DataFrame({"layer": [0, 1, None], "head": [None, 3, None], "seed": [0, 0, None],
                          "value": [0.5, 0.75, 0.6]})
    frame.attrs["lost"] = True
    result = Result("demo", {"layers": frame}, meta={"model": "tiny"})
    assert str(result["layers"]["layer"].dtype) == "Int64"
    assert result["layers"].attrs == {}
    result.save(tmp_path)
    again = Result.load(tmp_path)
    assert again.meta == {"model": "tiny"}
    pd.testing.assert_frame_equal(again["layers"], result["layers"])
    assert (tmp_path / "layers.csv").is_file()


def test_layer_column_refuses_names():
    with pytest.raises(DataError, match="component"):
        tidy(pd.DataFrame({"layer": [1, "pooler"]}))


def test_percent_display():
    assert percent(0.8312) == "83.1"
    assert percent(float("nan")) == "–"


def test_one_missing_number_display():
    """``number`` and ``percent`` show every kind of missing number as the one dash, anything else as asked."""
    import numpy as np
    import pandas as pd

    from bertology.results import MISSING, is_missing, number

    for missing in (None, float("nan"), np.nan, pd.NA, np.float32("nan")):
        assert is_missing(missing) and number(missing) == MISSING == percent(missing) == "–", missing
    for present in (0, 0.0, "", "x", [float("nan")], np.float32(1.5)):
        assert not is_missing(present), present
    assert number(0.83125) == "0.831" and number(np.float64(12.3456), 1) == "12.3"
    assert number(1234.4, 0, " s", thousands=True) == "1,234 s" and number(3, 2) == "3.00"


# -- the encoder's one forward path ---------------------------------------------------------------------


@pytest.fixture
def sdpa_tiny_bert(tiny_bert):
    """The shared tiny model switched to sdpa for one test, and back after it."""
    before = tiny_bert.attention_implementation
    tiny_bert.model.set_attn_implementation("sdpa")
    yield tiny_bert
    tiny_bert.model.set_attn_implementation(before)


def test_forward_returns_what_was_asked_and_restores_attention(sdpa_tiny_bert):
    tiny_bert = sdpa_tiny_bert
    batch = tiny_bert.tokenizer(["the quick brown fox", "dogs chase cats"], padding=True, return_tensors="pt")
    out = tiny_bert.forward(batch, attentions=True)
    assert len(out.hidden_states) == tiny_bert.num_layers + 1
    assert len(out.attentions) == tiny_bert.num_layers
    assert out.attention(1).shape[1] == tiny_bert.num_heads
    assert out.logits is None
    assert tiny_bert.attention_implementation == "sdpa"
    plain = tiny_bert.forward(batch)
    assert plain.attentions is None
    torch.testing.assert_close(plain.layer(2), out.layer(2), atol=1e-5, rtol=1e-4)


def test_eager_attention_restores_even_on_error(sdpa_tiny_bert):
    tiny_bert = sdpa_tiny_bert
    with pytest.raises(RuntimeError):
        with tiny_bert.eager_attention():
            assert tiny_bert.attention_implementation == "eager"
            raise RuntimeError
    assert tiny_bert.attention_implementation == "sdpa"


def test_fingerprint_includes_the_tokenizer(tiny_bert):
    from bertology.models import Encoder
    from bertology.models.tiny import tiny_encoder

    other = tiny_encoder("roberta")
    swapped = Encoder.from_model(tiny_bert.model, other.tokenizer, name="swapped")
    assert swapped.fingerprint != tiny_bert.fingerprint
