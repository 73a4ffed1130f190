"""`bertology ablate ...` on a tiny checkpoint in the fine-tuning format, scored on real GLUE RTE dev."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest
import torch
import transformers
from typer.testing import CliRunner

from bertology.data import shared_data_dir

warnings.filterwarnings("ignore", message="Initializing zero-element tensors")

runner = CliRunner()


def _glue_available() -> bool:
    try:
        return (shared_data_dir() / "glue" / "rte" / "dev.tsv").is_file()
    except Exception:
        return False


pytestmark = pytest.mark.skipif(not _glue_available(), reason="shared GLUE data not found")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from bertology.finetune.model import GlueModel, save_checkpoint
    from bertology.models.encoders import resolve_model_source

    try:
        _, source = resolve_model_source("minilm")
    except Exception as error:  # the embedded model package is missing
        pytest.skip(f"minilm tokenizer unavailable: {error}")
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                     vocab_size=tokenizer.vocab_size, max_position_embeddings=128)
    torch.manual_seed(0)
    model = GlueModel(transformers.BertModel(config), num_labels=2).eval()
    out = tmp_path_factory.mktemp("ckpt") / "rte-seed0"
    save_checkpoint(model, tokenizer, out, {"task": "rte", "seed": 0, "base_model": "tiny"})
    return out


def invoke(*args):
    from bertology.cli.intervention import app

    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, (result.output, result.exception)
    return " ".join(result.output.split())  # rich wraps long titles at the terminal width


@pytest.fixture
def evaluation_spy(monkeypatch):
    """Wraps the real TaskEvaluator: before each evaluation, one forward pass over fixed inputs records the
    logits, the hidden states and which heads' context slices are all zero (hooks registered at call
    time run after any mask's hooks, so they see what the model computes under the intervention)."""
    from bertology.finetune.evaluation import TaskEvaluator
    from bertology.intervention import hook_points

    calls = []
    original = TaskEvaluator.__call__

    def spy(self, model):
        from bertology.finetune.batching import collate

        batch = {k: v for k, v in collate(self.data, list(range(min(8, len(self.data))))).items() if k != "labels"}
        zeroed = set()
        handles = []
        for name, module in hook_points(model).items():
            if name.endswith("head_context"):
                layer = int(name.split(".")[1])

                def record(module, args, layer=layer):
                    context = args[0].unflatten(-1, (4, -1))
                    zeroed.update((layer, h) for h in range(4) if torch.count_nonzero(context[..., h, :]) == 0)

                handles.append(module.register_forward_pre_hook(record))
        try:
            with torch.no_grad():
                logits = model(**batch).logits
                hidden = model.backbone(**batch, output_hidden_states=True).hidden_states
        finally:
            for handle in handles:
                handle.remove()
        calls.append({"zeroed": sorted(zeroed), "logits": logits, "hidden": hidden})
        return original(self, model)

    monkeypatch.setattr(TaskEvaluator, "__call__", spy)
    return calls


def test_ablate_heads_and_layers(checkpoint, evaluation_spy, tmp_path):
    """Fails if masking does nothing: the masked heads' context is zero (and only theirs), the output
    changes, and the tables written say what was masked."""
    from bertology.results import Result

    output = invoke("heads", "--model", checkpoint, "--heads", "L2,L1H2", "--max-dev", 40,
                    "--out", tmp_path / "heads")
    assert "rte dev (40 examples), 5 heads masked (L1H2,L2H0,L2H1,L2H2,L2H3)" in output and "accuracy" in output
    before, after = evaluation_spy
    assert before["zeroed"] == []
    assert after["zeroed"] == [(1, 2), (2, 0), (2, 1), (2, 2), (2, 3)]
    assert (before["logits"] - after["logits"]).abs().max() > 1e-4
    assert torch.equal(before["hidden"][0], after["hidden"][0])  # the embeddings have no heads
    assert (before["hidden"][1] - after["hidden"][1]).abs().max() > 1e-4  # L1H2 changes layer 1's output
    saved = Result.load(tmp_path / "heads")
    assert saved["heads"]["head_label"].tolist() == ["L1H2", "L2H0", "L2H1", "L2H2", "L2H3"]
    scores = saved["scores"].iloc[0]
    assert scores["n_masked"] == 5 and 0.0 <= scores["baseline"] <= 1.0
    assert scores["delta"] == pytest.approx(scores["metric"] - scores["baseline"])
    assert saved.meta["task"] == "rte" and saved.meta["n_examples"] == 40

    evaluation_spy.clear()
    output = invoke("layers", "--model", checkpoint, "--layers", "2", "--max-dev", 40, "--out", tmp_path / "layers")
    assert "layer 2 skipped" in output
    before, after = evaluation_spy
    # `--layers 2` removes the layer whose output is hidden_states[2], the one `probe --layers 2` reads
    assert torch.equal(after["hidden"][2], after["hidden"][1])
    assert not torch.equal(before["hidden"][2], before["hidden"][1])
    torch.testing.assert_close(after["hidden"][1], before["hidden"][1])
    assert Result.load(tmp_path / "layers")["layers"]["layer"].tolist() == [2]


def test_bad_heads_and_layers_are_one_line_user_errors(checkpoint):
    from bertology.errors import BertologyError
    from bertology.cli.intervention import app

    model = ["--model", str(checkpoint), "--max-dev", "8"]
    cases = [(["heads", "--heads", "L5H0", *model], "layer 5 has no heads"),
             (["heads", "--heads", "", *model], "no heads given"),  # used to ablate nothing and report +0.0
             (["heads", "--heads", "3-5", *model], "is not a head"),  # the old 0-based LAYER-HEAD form
             (["layers", "--layers", "0", *model], "layer 0 is the embeddings"),
             (["layers", "--layers", "3", *model], "layer 3 is out of range"),
             (["heads", "--heads", "L1H0", "--model", str(checkpoint), "--max-dev", "0"], "--max-dev 0")]
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code != 0 and isinstance(result.exception, BertologyError), (args, result.output)
        assert message in str(result.exception), (args, str(result.exception))


def test_results_go_to_the_default_folder(checkpoint, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    invoke("heads", "--model", checkpoint, "--heads", "L1H0", "--max-dev", 8)
    written = list((tmp_path / "results" / "ablate" / "heads").glob("*/scores.parquet"))
    assert len(written) == 1 and "rte" in written[0].parent.name and "L1H0" in written[0].parent.name


def test_table_importance_prune_and_flagged(checkpoint, tmp_path):
    from bertology.finetune import load_finetuned
    from bertology.results import Result

    invoke("table", "--model", checkpoint, "--model", checkpoint, "--max-dev", 24, "--out", tmp_path / "table")
    table = Result.load(tmp_path / "table")
    raw = table["ablation"]
    assert len(raw) == 2 * 2 * 4 and set(raw.columns) >= {"seed", "layer", "head", "head_label", "delta"}
    assert sorted(set(raw["layer"])) == [1, 2]
    assert len(table["summary"]) == 8 and (tmp_path / "table" / "summary.csv").is_file()

    invoke("importance", "--model", checkpoint, "--out", tmp_path / "imp", "--max-train", 16,
           "--seeds", 1, "--max-dev", 24, "--no-recompute")
    importance = Result.load(tmp_path / "imp")
    assert set(importance["curve"]["order"]) == {"importance", "random"}
    assert set(importance["curve"]["seed"].dropna()) == {0}
    assert (tmp_path / "imp" / "pruning_curve.png").is_file() and len(importance["importance"]) == 8

    output = invoke("prune", "--model", checkpoint, "--fraction", 0.5, "--out", tmp_path / "pruned",
                    "--max-train", 16, "--max-dev", 24)
    assert "pruned 4 of 8 heads" in output
    from bertology.intervention import count_parameters, model_layout

    pruned, _, meta = load_finetuned(tmp_path / "pruned")
    original, _, _ = load_finetuned(checkpoint)
    remaining = model_layout(pruned).all_heads()
    assert len(remaining) == 4 and len(meta["pruned_heads"]) == 4
    assert sorted(set(model_layout(original).all_heads()) - set(remaining)) == \
        sorted((int(l[1:].split("H")[0]), int(l.split("H")[1])) for l in meta["pruned_heads"])
    assert count_parameters(original) - count_parameters(pruned) == 4 * (3 * (32 * 8 + 8) + 32 * 8)
    assert Result.load(tmp_path / "pruned" / "prune")["pruned"]["head_label"].tolist() == sorted(meta["pruned_heads"])
    # the pruned checkpoint is a checkpoint like any other
    invoke("heads", "--model", tmp_path / "pruned", "--heads", meta["pruned_heads"][0], "--max-dev", 16,
           "--out", tmp_path / "pruned-heads")

    output = invoke("flagged", "--model", checkpoint, "--heads", "L1H1,L2H3", "--draws", 3, "--max-dev", 24,
                    "--out", tmp_path / "flagged")
    assert "flagged heads: L1H1,L2H3" in output
    assert Result.load(tmp_path / "flagged")["runs"]["condition"].tolist() == ["none", "flagged"] + ["random"] * 3

    attention_table = tmp_path / "best_heads.csv"
    pd.DataFrame({"relation": ["det", "amod"], "layer": [2, 1], "head": [0, 3],
                  "head_label": ["L2H0", "L1H3"]}).to_csv(attention_table, index=False)
    invoke("flagged", "--model", checkpoint, "--table", attention_table, "--draws", 2, "--max-dev", 24,
           "--out", tmp_path / "flagged-table")
    masked = Result.load(tmp_path / "flagged-table")["masked"]
    assert masked[masked["condition"] == "flagged"]["head_label"].tolist() == ["L1H3", "L2H0"]


def test_flagged_heads_from_the_attention_analysis_leave_the_attention_implementation_alone(shared_data):
    """`ablate flagged` used to switch the model to eager in place and then to sdpa, whatever it was."""
    from bertology.intervention import attention_best_heads, flagged_heads
    from bertology.models.tiny import tiny_encoder

    if not (shared_data / "ud_english_ewt").is_dir():
        pytest.skip("UD EWT not in the shared data")

    for implementation in ("sdpa", "eager"):
        encoder = tiny_encoder("bert", attentions=implementation == "eager")
        assert encoder.attention_implementation == implementation
        table = attention_best_heads(encoder, max_sentences=4, min_count=1, progress=False)
        assert encoder.attention_implementation == implementation
        heads = flagged_heads(table)
        assert heads and all(1 <= layer <= encoder.num_layers and 0 <= head < encoder.num_heads
                             for layer, head in heads)
