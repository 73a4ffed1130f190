"""`bertology claims` and the report's first section on tiny random models: one command compares a model with its
untrained twin offline and writes the checklist as CSV and HTML; each report opens with "The Primer, checked",
every row linking to its evidence or saying why it cannot tell."""

from __future__ import annotations

import re

import pandas as pd
from typer.testing import CliRunner

from bertology.cli import app
from bertology.claims.registry import CLAIM_IDS


def test_claims_compare_a_model_and_its_twin_writes_csv_and_html(tiny_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("BERTOLOGY_DATA", raising=False)  # as on a fresh clone: only what the package ships
    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "reports"
    result = CliRunner().invoke(app, ["claims", "-m", str(tiny_dir), "--compare", str(tiny_dir), "untrained",
                                      "--max-sentences", "12", "--seeds", "1", "-o", str(out), "--no-progress",
                                      "--sections", "tokenization,probing,attention"])
    assert result.exit_code == 0, result.output
    folders = [p for p in out.iterdir() if p.name.startswith("claims-")]
    assert len(folders) == 1 and "-vs-" in folders[0].name
    table = pd.read_csv(folders[0] / "claims.csv")
    models = [c for c in table.columns if f"{c} number" in table.columns]
    assert len(models) == 2 and "untrained" in models[1]
    assert list(table["claim"]) == list(CLAIM_IDS)
    assert set(table[models[0]]) | set(table[models[1]]) <= {"holds", "does not hold", "cannot tell"}
    page = (folders[0] / "claims.html").read_text(encoding="utf-8")
    assert f"../{models[0]}/index.html#" in page and f"../{models[1]}/index.html#" in page
    # each model's report opens with the checklist, each row linking to an anchor of that report
    for model in models:
        report = (out / model / "index.html").read_text(encoding="utf-8")
        sections = re.findall(r'<section id="([^"]+)"', report)
        assert sections[0] == "claims", sections
        ids = set(re.findall(r"id='([^']+)'", report)) | set(re.findall(r'id="([^"]+)"', report))
        rows = re.findall(r"<tr id='claim-([^']+)'>(.*?)</tr>", report, flags=re.S)
        assert [claim for claim, _ in rows] == list(CLAIM_IDS)
        for claim, row in rows:
            links = re.findall(r"href='#([^']+)'", row)
            assert all(link in ids for link in links), (claim, links)
            if not links:  # no evidence to link: the verdict says why it cannot tell
                assert "cannot tell" in row, claim
        # the arc-length claim links to the probing section's table of the dependency-label probe by arc length
        assert "href='#probing-arcs'" in dict(rows)["syntax-partial"] and "probing-arcs" in ids


def test_untrained_without_a_model_before_it_is_a_one_line_usage_error():
    from bertology.errors import UsageError

    result = CliRunner().invoke(app, ["claims", "--compare", "untrained", "minilm"])
    assert isinstance(result.exception, UsageError) and "name the model first" in str(result.exception)


def test_the_interventions_section_compares_the_model_before_and_after_fine_tuning(tmp_path, monkeypatch):
    """Once fine-tuning learned its task, the section measures CKA per layer (bertology.compare), shows it and hands
    it to the claim that the final layers are the most task-specific."""
    import bertology.report.interventions as section
    from bertology.claims.checks import finetuning_top_layers
    from bertology.data import default_corpus, read_conllu
    from bertology.models.tiny import tiny_encoder
    from bertology.report.cache import ResultCache
    from bertology.report.context import ReportContext

    real = section.learning_check
    monkeypatch.setattr(section, "learning_check", lambda *a, **k: real(*a, **k).assign(learned=True))
    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    encoder = tiny_encoder("bert", layers=2, hidden=32, heads=4)
    dev = read_conllu(default_corpus("ewt-dev"))[:12]
    context = ReportContext(encoder=encoder, model_name="tiny", out_dir=tmp_path, cache=ResultCache(tmp_path / "r"),
                            dev=dev, test=dev, seeds=(0,), max_sentences=12, progress=False)
    built = section.interventions(context)
    cka = context.results["compare"]["cka"]
    tokens = cka[cka["representation"] == "tokens"]
    assert sorted(tokens["layer"].astype(int)) == [0, 1, 2] and tokens["cka"].between(0, 1 + 1e-6).all()
    assert any(getattr(block, "id", "") == "interventions-cka" for block in built.blocks)
    verdict = finetuning_top_layers(context.results)
    assert "not measured" not in verdict.reason and verdict.value == float(tokens[tokens["layer"] == 2]["cka"].iloc[0])
