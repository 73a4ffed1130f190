"""The report on a machine with nothing beside it: every section runs from what the package ships; a section
that cannot run is a box (skipped by design or failed) and the others still run; nothing is read from a
fine-tuned model at chance."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from bertology.data import missing_data
from bertology.report.names import SECTION_TITLES


def test_the_report_needs_nothing_beside_the_package(tiny_report):
    path, _, _ = tiny_report  # built with $BERTOLOGY_DATA unset and the network off (conftest)
    html = path.read_text(encoding="utf-8")
    for section_id, title in SECTION_TITLES.items():
        assert f"id=\"{section_id}\"" in html or f"id='{section_id}'" in html, section_id
    assert "did not run" not in html, "every section computed"


def test_the_interventions_section_says_whether_the_model_learned(tiny_report):
    from bertology.report.findings import learning_text

    path, _, _ = tiny_report
    check = next(path.parent.glob("results/interventions-*/check.parquet"))
    row = pd.read_parquet(check).iloc[0]
    assert row["task"] == "bshift", "the packaged task: no GLUE data on a fresh machine"
    html = path.read_text(encoding="utf-8")
    assert learning_text(row).split(":")[0] in html
    assert ("interventions-pruning" in html) == bool(row["learned"]), "a pruning curve only for a model that learned"


class _Constant(torch.nn.Module):
    """A 'fine-tuned' classifier that learned nothing: class 0 for every input."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.tensor([1.0, 0.0]))

    def forward(self, input_ids=None, attention_mask=None, **_):
        return self.bias.expand(input_ids.shape[0], 2)


def test_a_model_at_chance_gets_no_findings_beyond_saying_so(tiny_bert, tmp_path, monkeypatch):
    from bertology.finetune import TaskEvaluator
    from bertology.report.findings import intervention_findings
    from bertology.report.interventions import learning_check

    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path))
    evaluator = TaskEvaluator("bshift", tiny_bert.tokenizer, max_examples=200, seed=0)
    check = learning_check(_Constant(), evaluator)
    row = check.iloc[0]
    labels = pd.Series(evaluator.data.labels)
    assert row["value"] == pytest.approx((labels == 0).mean())
    assert row["baseline"] == pytest.approx(labels.value_counts(normalize=True).max())
    assert not row["learned"]
    curve = pd.DataFrame({"fraction": [0.0, 0.5, 0.5], "order": ["importance", "importance", "random"],
                          "metric": [0.5, 0.5, 0.5]})
    flagged = pd.DataFrame([{"n_masked": 2, "flagged_delta": 0.0, "random_delta_mean": 0.0, "baseline": 0.5,
                             "p_random_as_harmful": 1.0, "n_draws": 20, "task": "bshift"}])
    runs = pd.DataFrame({"condition": ["random"] * 3, "delta": [0.0, 0.0, 0.0]})
    items = intervention_findings({"check": check, "curve": curve, "flagged_summary": flagged, "flagged_runs": runs})
    assert [f.topic for f in items] == ["finetuning"], "no masking or pruning finding from a model at chance"
    text = items[0].text
    assert text.startswith("Fine-tuning did not learn BShift")
    assert f"{100 * row['value']:.1f}% vs majority class {100 * row['baseline']:.1f}%" in text
    assert "no head importance ranking, pruning curve or masking test is interpreted" in text
    assert items[0].flags == ["at chance"]


def test_a_section_that_cannot_run_is_a_box_and_the_others_still_run(tiny_bert, tmp_path, monkeypatch):
    from bertology.report import run_report
    from bertology.report import sections as report_sections

    def out_of_memory(context):
        raise MemoryError("CPU out of memory (test)")

    def needs_glue(context):
        raise missing_data("glue", "sst2 train")

    monkeypatch.setattr(report_sections, "SECTIONS", [("tokenization", report_sections.tokenization),
                                                      ("probing", out_of_memory), ("knowledge", needs_glue)])
    outcome = run_report(encoder=tiny_bert, out=tmp_path, max_sentences=10, progress=False)
    assert outcome.failed == {"probing": "MemoryError: CPU out of memory (test)"}
    assert list(outcome.skipped) == ["knowledge"] and "GLUE sst2 train not found" in outcome.skipped["knowledge"]
    assert not outcome.ok
    # every section that was tried is timed, the failed and skipped ones too, in reading order
    assert list(outcome.timings) == ["tokenization", "probing", "knowledge"]
    assert all(seconds >= 0 for seconds in outcome.timings.values())
    html = outcome.path.read_text(encoding="utf-8")
    assert "Corpus-level tokenization statistics" in html, "the section before still ran"
    assert "This section did not run (failed).</strong> MemoryError: CPU out of memory (test)" in html
    assert "This section did not run (skipped).</strong> GLUE sst2 train not found" in html
    assert "--sections probing</code>" in html and "--sections knowledge</code>" in html
    assert (tmp_path / "model").is_dir() or outcome.path.parent.is_dir()


def test_the_report_command_exits_1_only_when_a_section_failed(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import bertology.report as report_package
    from bertology.cli import app
    from bertology.report.run import ReportOutcome

    index = tmp_path / "index.html"
    for failed, code in (({}, 0), ({"probing": "MemoryError: out of memory"}, 1)):
        outcome = ReportOutcome(index, failed=failed, skipped={"knowledge": "LAMA not found: pass --data PATH"})
        monkeypatch.setattr(report_package, "run_report", lambda *a, _o=outcome, **k: _o, raising=False)
        result = CliRunner().invoke(app, ["report", "-m", "minilm", "-o", str(tmp_path)])
        output = " ".join(result.output.split())  # rich wraps long lines
        assert result.exit_code == code, output
        assert f"report written to {index}" in output
        assert "skipped section knowledge: LAMA not found" in output
        assert ("failed section probing: MemoryError" in output) == bool(failed)
