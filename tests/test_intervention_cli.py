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
    from bertology.intervention.cli import app

    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, (result.output, result.exception)
    return " ".join(result.output.split())  # rich wraps long titles at the terminal width


def test_ablate_heads_and_layers(checkpoint):
    output = invoke("heads", "--model", checkpoint, "--heads", "1-*,0-2", "--max-examples", 40)
    assert "rte dev (40 examples), 5 heads masked" in output and "accuracy" in output
    output = invoke("layers", "--model", checkpoint, "--layers", "1", "--max-examples", 40)
    assert "layers [1] skipped" in output


def test_bad_head_is_a_user_error(checkpoint):
    from bertology.errors import ModelError
    from bertology.intervention.cli import app

    result = runner.invoke(app, ["heads", "--model", str(checkpoint), "--heads", "5-0", "--max-examples", "8"])
    assert result.exit_code != 0 and isinstance(result.exception, ModelError)
    assert "layer 5 out of range" in str(result.exception)


def test_table_importance_prune_and_flagged(checkpoint, tmp_path):
    out = tmp_path / "table.csv"
    invoke("table", "--model", checkpoint, "--model", checkpoint, "--max-examples", 24, "--out", out)
    raw = pd.read_csv(out)
    assert len(raw) == 2 * 2 * 4 and set(raw.columns) >= {"seed", "layer", "head", "delta"}
    assert len(pd.read_csv(tmp_path / "table_summary.csv")) == 8

    invoke("importance", "--model", checkpoint, "--out", tmp_path / "imp", "--importance-examples", 16,
           "--random-seeds", "0", "--max-examples", 24, "--no-recompute")
    curve = pd.read_csv(tmp_path / "imp" / "pruning_curve.csv")
    assert set(curve["order"]) == {"importance", "random"} and (tmp_path / "imp" / "pruning_curve.png").is_file()
    assert len(pd.read_csv(tmp_path / "imp" / "importance.csv")) == 8

    output = invoke("prune", "--model", checkpoint, "--fraction", 0.5, "--out", tmp_path / "pruned",
                    "--importance-examples", 16, "--max-examples", 24)
    assert "pruned 4 of 8 heads" in output
    from bertology.intervention.cli import load_task_model
    from bertology.intervention import count_parameters, model_layout

    pruned, _, meta = load_task_model(tmp_path / "pruned")
    original, _, _ = load_task_model(checkpoint)
    assert len(model_layout(pruned).all_heads()) == 4 and len(meta["pruned_heads"]) == 4
    assert count_parameters(original) - count_parameters(pruned) == 4 * (3 * (32 * 8 + 8) + 32 * 8)
    # the pruned checkpoint is a checkpoint like any other
    invoke("heads", "--model", tmp_path / "pruned", "--heads", "0-0", "--max-examples", 16)

    output = invoke("flagged", "--model", checkpoint, "--heads", "0-1,1-3", "--draws", 3, "--max-examples", 24,
                    "--out", tmp_path / "flagged.csv")
    assert "flagged heads (0-based): 0-1,1-3" in output
    assert pd.read_csv(tmp_path / "flagged.csv")["condition"].tolist() == ["none", "flagged"] + ["random"] * 3
