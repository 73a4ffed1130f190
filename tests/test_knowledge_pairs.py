"""Minimal pairs by pseudo-log-likelihood: parity with minicons on a tiny random MLM saved to a folder,
whole-word masking by hand, accuracy per paradigm, bad BLiMP input in one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bertology.errors import DataError
from bertology.knowledge.mlm import load_masked_lm
from bertology.knowledge.pairs import masked_copies, minimal_pairs, pseudo_log_likelihoods, read_pairs

sys.path.insert(0, str(Path(__file__).parent))
from knowledge_models import save_tiny_mlm, train_fact_mlm  # noqa: E402

SENTENCES = [
    "The quick brown fox jumps over the lazy dog .",
    "Dogs chase cats ; cats chase mice ; mice eat cheese .",
    "She said that the committee would meet on Tuesday at 10:30 .",
    "A cat sleeps on the mat .",
    "Quizzical zebras juxtapose xylophones .",
    "I don't think we're ready yet , but they've started already .",
    "Researchers probed semantic layers .",
    "Email me at someone@example.com !",
    "Mice eat .",
    "The lazy dog jumps over the quick brown fox .",
    "A café in Zürich served naïve tourists .",
    "Antidisestablishmentarianism is a remarkably long word , isn't it ?",
]


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory):
    return save_tiny_mlm(tmp_path_factory.mktemp("mlm") / "tiny-mlm")


def test_pll_equals_minicons_masked_lm_scorer(tiny_mlm):
    scorer = pytest.importorskip("minicons.scorer")
    from transformers import AutoTokenizer

    model = load_masked_lm(tiny_mlm)
    ours = pseudo_log_likelihoods(model, SENTENCES, batch_tokens=600)  # several passes
    their_tokenizer = AutoTokenizer.from_pretrained(tiny_mlm)
    # minicons 0.3.39 calls batch_encode_plus, which transformers 5 removed; the call is the same thing
    their_tokenizer.batch_encode_plus = their_tokenizer.__call__
    theirs = scorer.MaskedLMScorer(str(tiny_mlm), "cpu", tokenizer=their_tokenizer).sequence_score(
        SENTENCES, reduction=lambda x: x.sum(0).item())
    assert np.allclose(ours, theirs, atol=1e-4, rtol=0)


def test_pll_and_whole_word_masking_by_hand(tiny_mlm):
    model = load_masked_lm(tiny_mlm)
    tokenizer = model.tokenizer
    sentence = "Quizzical zebras juxtapose xylophones ."
    token_level = masked_copies(tokenizer, sentence)
    whole = masked_copies(tokenizer, sentence, whole_word=True)
    assert len(whole.groups) == 5 < len(token_level.groups)  # four split words and the full stop
    for plan, flag in ((token_level, False), (whole, True)):
        hand = 0.0
        with torch.no_grad():
            for group in plan.groups:
                ids = torch.tensor([plan.input_ids])
                ids[0, group] = tokenizer.mask_token_id
                log_probs = torch.log_softmax(model.forward({"input_ids": ids}, logits=True).logits[0], dim=-1)
                hand += sum(float(log_probs[p, plan.input_ids[p]]) for p in group)
        ours = pseudo_log_likelihoods(model, [sentence, "Mice eat ."], whole_word=flag)[0]
        assert ours == pytest.approx(hand, abs=1e-4)


def test_per_layer_scores_end_at_the_models_output(tiny_mlm):
    model = load_masked_lm(tiny_mlm)
    per_layer = pseudo_log_likelihoods(model, SENTENCES[:3], layers=[0, 1, 2])
    assert np.allclose(per_layer[2], pseudo_log_likelihoods(model, SENTENCES[:3]), atol=1e-4)
    assert not np.allclose(per_layer[0], per_layer[2])


def _write_pairs(path: Path, rows) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_accuracy_per_paradigm_with_a_trained_model(tmp_path):
    model, tokenizer = train_fact_mlm(steps=150)
    pairs = [{"sentence_good": f"{c} is the capital of {k} .", "sentence_bad": f"{c} is the capital of {w} .",
              "UID": "capitals", "linguistics_term": "facts"}
             for (c, k), (_, w) in zip([("paris", "france"), ("rome", "italy"), ("oslo", "norway")],
                                       [("x", "egypt"), ("x", "spain"), ("x", "greece")])]
    same = "paris is the capital of france ."
    pairs.append({"sentence_good": same, "sentence_bad": same, "UID": "ties"})
    data = _write_pairs(tmp_path / "toy.jsonl", pairs)
    result = minimal_pairs(data=data, loaded=(model, tokenizer), seeds=(0, 1), device="cpu")
    scored = result["pairs"]
    trained = scored[scored["weights"] == "trained"]
    assert (trained["correct"] == (trained["pll_good"] > trained["pll_bad"])).all()
    paradigms = result["paradigms"].set_index(["weights", "paradigm"])
    assert paradigms.loc[("trained", "capitals"), "accuracy"] == pytest.approx(trained["correct"][:3].mean())
    assert paradigms.loc[("trained", "ties"), "accuracy"] == 0.0  # a tie is not a preference
    assert paradigms.loc[("trained", "capitals"), "accuracy"] >= 2 / 3
    summary = result["summary"]
    assert set(summary["weights"]) == {"trained", "untrained"} and set(summary["seed"].dropna()) == {0, 1}
    assert str(summary["layer"].dtype) == "Int64" and int(summary["layer"].iloc[0]) == 2
    row = summary[summary["weights"] == "trained"].iloc[0]
    assert row["pairs"] == 4 and row["paradigms"] == 2 and row["chance"] == 0.5
    assert row["paradigm_mean"] == pytest.approx((paradigms.loc[("trained", "capitals"), "accuracy"] + 0.0) / 2)


def test_command_end_to_end(tiny_mlm, tmp_path):
    from bertology.cli import app
    from bertology.results import Result

    data = _write_pairs(tmp_path / "p.jsonl",
                        [{"sentence_good": "Dogs chase cats .", "sentence_bad": "Dogs chases cats ."},
                         {"sentence_good": "Mice eat cheese .", "sentence_bad": "Mice eats cheese ."}])
    out = tmp_path / "out"
    run = CliRunner().invoke(app, ["knowledge", "pairs", "-m", str(tiny_mlm), "-d", str(data), "-o", str(out),
                                   "--whole-word", "--device", "cpu", "--no-progress"])
    assert run.exit_code == 0, run.output
    result = Result.load(out)
    assert len(result["pairs"]) == 4 and result.meta["whole_word"] is True
    assert set(result["paradigms"]["paradigm"]) == {"p"}
    assert (out / "pairs.png").stat().st_size > 0 and (out / "pairs.svg").is_file() and (out / "pairs.pdf").is_file()


def test_bad_blimp_input_is_one_clear_line(tmp_path):
    not_jsonl = tmp_path / "array.jsonl"
    not_jsonl.write_text(json.dumps([{"sentence_good": "a", "sentence_bad": "b"}], indent=1), encoding="utf-8")
    with pytest.raises(DataError, match=r"array.jsonl:1: not JSON .*JSONL"):
        read_pairs(not_jsonl)
    missing = _write_pairs(tmp_path / "missing.jsonl", [{"sentence_good": "a b", "sentence_bad": "b a"},
                                                        {"sentence_good": "a b", "bad": "b a"}])
    with pytest.raises(DataError, match=r"missing.jsonl:2: no field 'sentence_bad'"):
        read_pairs(missing)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="no pairs"):
        read_pairs(empty)
