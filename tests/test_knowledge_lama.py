"""LAMA on a tiny BERT MLM trained in code on toy capitals: P@1 well above chance and equal to a hand
count; objects the tokenizer splits are counted; bad data and a model without an MLM head get one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bertology.errors import DataError, ModelError
from bertology.knowledge.lama import common_vocabulary, lama, read_facts, read_relation_templates

sys.path.insert(0, str(Path(__file__).parent))
from knowledge_models import CAPITALS, TEMPLATE, train_fact_mlm  # noqa: E402


@pytest.fixture(scope="module")
def fact_model():
    return train_fact_mlm(steps=150)


@pytest.fixture(scope="module")
def lama_folder(tmp_path_factory):
    """A LAMA-layout folder: relations.jsonl and TREx/P1376.jsonl (LAMA's "[X] is the capital of [Y] .")."""
    folder = tmp_path_factory.mktemp("lama")
    (folder / "relations.jsonl").write_text(json.dumps({"relation": "P1376", "template": TEMPLATE,
                                                        "label": "capital of"}) + "\n", encoding="utf-8")
    (folder / "TREx").mkdir()
    facts = [{"sub_label": city, "obj_label": country} for city, country in CAPITALS]
    facts += [{"sub_label": "reykjavik", "obj_label": "iceland"},  # two word pieces: counted, not scored
              {"sub_label": "paris", "obj_label": "atlantis"}]  # the unknown token: counted, not scored
    (folder / "TREx" / "P1376.jsonl").write_text("\n".join(json.dumps(f) for f in facts) + "\n", encoding="utf-8")
    return folder


def test_p_at_1_is_well_above_chance_and_equals_a_hand_count(fact_model, lama_folder):
    model, tokenizer = fact_model
    result = lama(loaded=(model, tokenizer), data=lama_folder, corpora="trex", untrained=True, seeds=(0,),
                  device="cpu")
    relations = result["relations"]
    ours = relations[(relations["relation"] == "P1376") & (relations["weights"] == "trained")].iloc[0]
    assert ours["facts"] == 12 and ours["facts_total"] == 14
    assert ours["split_objects"] == 1 and ours["unknown_objects"] == 1
    candidates, _ = common_vocabulary(tokenizer)
    # by hand: one sentence at a time, the best whole-word candidate at the mask
    hits = 0
    with torch.no_grad():
        for city, country in CAPITALS:
            batch = tokenizer(TEMPLATE.replace("[X]", city).replace("[Y]", "[MASK]"), return_tensors="pt")
            position = int((batch["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0, 0])
            logits = model(**batch).logits[0, position]
            best = candidates[int(torch.argmax(logits[torch.as_tensor(candidates)]))]
            hits += int(best == tokenizer.convert_tokens_to_ids(country))
    assert ours["p_at_1"] == pytest.approx(hits / 12)
    chance = 1 / len(candidates)
    assert ours["p_at_1"] >= 0.5 > 5 * chance
    assert ours["p_at_10"] >= ours["p_at_1"] and ours["mrr"] >= ours["p_at_1"]
    twin = relations[relations["weights"] == "untrained"].iloc[0]
    assert twin["p_at_1"] < ours["p_at_1"] and twin["seed"] == 0
    corpora = result["corpora"]
    trex = corpora[(corpora["corpus"] == "T-REx") & (corpora["weights"] == "trained")].iloc[0]
    assert trex["p_at_1"] == pytest.approx(ours["p_at_1"]) and trex["relations"] == 1
    assert trex["chance_p_at_1"] == pytest.approx(chance)
    assert int(relations["layer"].iloc[0]) == 2  # the model's output is its last layer
    assert "P19" in set(result["missing"]["relation"])  # relations of the paper without data are listed
    facts = result["facts"]
    assert len(facts) == 12 and set(facts.columns) >= {"subject", "object", "prediction", "rank"}
    assert (facts["rank"] == 0).sum() == hits


def test_per_layer_lama_applies_the_head_to_each_layer(fact_model, lama_folder):
    model, tokenizer = fact_model
    result = lama(loaded=(model, tokenizer), data=lama_folder, corpora="trex", untrained=False, layers="all",
                  device="cpu")
    relations = result["relations"]
    assert sorted(relations["layer"]) == [0, 1, 2]
    default = lama(loaded=(model, tokenizer), data=lama_folder, corpora="trex", untrained=False, device="cpu")
    last = relations[relations["layer"] == 2].iloc[0]
    assert last["p_at_1"] == pytest.approx(default["relations"]["p_at_1"].iloc[0])
    assert last["mrr"] == pytest.approx(default["relations"]["mrr"].iloc[0])


def test_a_model_without_an_mlm_head_gets_one_sentence(tmp_path):
    from bertology.cli import app

    run = CliRunner().invoke(app, ["knowledge", "lama", "-m", "minilm", "-o", str(tmp_path / "out")])
    assert run.exit_code == 1
    assert isinstance(run.exception, ModelError)
    message = str(run.exception)
    assert "no masked-LM head" in message and "pass a masked LM" in message and "\n" not in message


def test_bad_lama_data_is_one_clear_line(tmp_path):
    pretty = tmp_path / "pretty.jsonl"
    pretty.write_text('[\n {"sub_label": "paris", "obj_label": "france"}\n]\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"pretty.jsonl:1: not JSON"):
        read_facts(pretty, "custom", "x", TEMPLATE)
    missing = tmp_path / "missing.jsonl"
    missing.write_text('{"sub_label": "paris", "obj_label": "france"}\n{"sub_label": "rome"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"missing.jsonl:2: no field 'obj_label'"):
        read_facts(missing, "custom", "x", TEMPLATE)
    with pytest.raises(DataError, match=r"has 0 \[Y\]"):
        read_facts(missing, "custom", "x", "[X] is the capital .")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match="relation x has no facts"):
        read_facts(empty, "custom", "x", TEMPLATE)
    relations = tmp_path / "relations.jsonl"
    relations.write_text(json.dumps({"relation": "P1", "template": "[Y] of [Y]"}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"relations.jsonl:1 \(P1\): template .* has 0 \[X\]"):
        read_relation_templates(relations)
    no_template = tmp_path / "facts.jsonl"
    no_template.write_text('{"sub_label": "paris", "obj_label": "france"}\n', encoding="utf-8")
    with pytest.raises(DataError, match="template="):
        read_facts(no_template, "custom", "x", None)


def test_the_shared_lama_files_read_cleanly(shared_data):
    from bertology.knowledge.lama import load_lama

    relations, missing = load_lama(shared_data / "lama", max_facts=3)
    names = {(r.corpus, r.name) for r in relations}
    assert ("Google-RE", "date_of_birth") in names and ("SQuAD", "squad") in names and ("T-REx", "P19") in names
    assert len([r for r in relations if r.corpus == "T-REx"]) == 28
    assert set(missing["relation"]) == {"P1001", "P131", "P1376", "P17", "P190", "P276", "P279", "P30", "P36",
                                        "P361", "P37", "P47", "P530"}
    assert all(len(r.facts) == 3 for r in relations)
    assert np.all([r.template is None for r in relations if r.corpus == "SQuAD"])


def test_command_end_to_end(fact_model, lama_folder, tmp_path):
    from bertology.cli import app
    from bertology.results import Result

    model, tokenizer = fact_model
    folder = tmp_path / "fact-mlm"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    out = tmp_path / "out"
    run = CliRunner().invoke(app, ["knowledge", "lama", "-m", str(folder), "-d", str(lama_folder), "--corpora", "trex",
                                   "-o", str(out), "--device", "cpu", "--no-progress"])
    assert run.exit_code == 0, run.output
    result = Result.load(out)
    assert str(result["relations"]["layer"].dtype) == "Int64"
    assert result["corpora"].query("weights == 'trained'")["p_at_1"].iloc[0] >= 0.5
    assert (out / "lama.png").stat().st_size > 0 and (out / "lama.svg").is_file() and (out / "lama.pdf").is_file()
    assert "splits into several tokens" in " ".join(run.output.split())  # rich wraps lines
