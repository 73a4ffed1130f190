"""The report: builds on a tiny random model, opens cleanly in a real browser, resumes after interruption."""

from __future__ import annotations

import shutil

import pytest

from bertology.models.tiny import tiny_encoder
from bertology.report import build_report
from bertology.report import run as report_run
from bertology.report import sections as report_sections


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    encoder = tiny_encoder("bert", layers=2, hidden=32, heads=4, attentions=False)
    path = build_report(encoder=encoder, out=out, max_sentences=40, seeds=(0, 1), progress=False)
    return path, encoder, out


def test_report_is_written_with_every_section(tiny_report):
    path, encoder, _ = tiny_report
    html = path.read_text(encoding="utf-8")
    assert path.name == "index.html" and path.parent.name == "tiny-bert"
    for section_id, _ in report_sections.SECTIONS:
        assert f'id="{section_id}"' in html
    assert encoder.fingerprint in html
    assert "CC BY-SA 4.0" in html
    assert "https://" not in html.split("<body>")[0], "no external resources in the head"
    assert "<script src=" not in html and 'rel="stylesheet"' not in html
    assert html.count("data:image/png;base64,") >= 3
    assert list((path.parent / "results").glob("*/key.json")), "tidy result files sit beside the report"
    assert (path.parent / "attention_view.html").is_file()


def test_rerun_reuses_finished_parts(tiny_report, monkeypatch):
    path, encoder, out = tiny_report
    calls = []
    original = report_run.ResultCache.get_or_compute

    def spy(self, name, key, compute):
        result = original(self, name, key, compute)
        calls.append((name, list(self.hits), list(self.misses)))
        return result

    monkeypatch.setattr(report_run.ResultCache, "get_or_compute", spy)
    build_report(encoder=encoder, out=out, max_sentences=40, seeds=(0, 1), progress=False)
    assert calls and all(not misses for _, _, misses in calls), calls


def test_interrupted_run_resumes_without_recomputing(tmp_path, monkeypatch):
    encoder = tiny_encoder("bert", layers=2, hidden=32, heads=4, attentions=False)
    order = [name for name, _ in report_sections.SECTIONS]
    assert len(order) >= 2
    last = order[-1]
    original_sections = list(report_sections.SECTIONS)

    def interrupted(context):
        raise KeyboardInterrupt

    monkeypatch.setattr(report_sections, "SECTIONS",
                        [(n, interrupted if n == last else b) for n, b in original_sections])
    with pytest.raises(KeyboardInterrupt):
        build_report(encoder=encoder, out=tmp_path, max_sentences=30, seeds=(0,), progress=False)
    assert not (tmp_path / "tiny-bert" / "index.html").exists()
    monkeypatch.setattr(report_sections, "SECTIONS", original_sections)
    computed = []
    original = report_run.ResultCache.get_or_compute

    def spy(self, name, key, compute):
        def counted():
            computed.append(name)
            return compute()
        return original(self, name, key, counted)

    monkeypatch.setattr(report_run.ResultCache, "get_or_compute", spy)
    path = build_report(encoder=encoder, out=tmp_path, max_sentences=30, seeds=(0,), progress=False)
    assert path.is_file()
    assert last in computed and not set(order[:-1]) & set(computed), computed


@pytest.mark.browser
def test_report_in_headless_chromium(tiny_report, browser, tmp_path):
    path, _, _ = tiny_report
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    assert errors == []
    images = page.query_selector_all("figure.plot img")
    assert len(images) >= 3
    for image in images:
        box = image.bounding_box()
        assert box and box["width"] > 50 and box["height"] > 50
        assert page.evaluate("(img) => img.complete && img.naturalWidth > 0", image)
    tables = page.query_selector_all("table")
    assert tables
    for table in tables:
        assert len(table.query_selector_all("tbody tr")) > 0
    screenshot = tmp_path / "report.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000
    artifacts = path.parents[2] / "artifacts"
    artifacts.mkdir(exist_ok=True)
    shutil.copy(screenshot, artifacts / "report-tiny.png")
    page.close()


def test_compare_two_models_side_by_side(tiny_report):
    from bertology.report.run import build_comparison

    _, encoder, out = tiny_report
    path = build_comparison(encoder_a=encoder, model_b="untrained", out=out, max_sentences=40, seeds=(0, 1),
                            progress=False, sections=["tokenization", "probing"])
    html = path.read_text(encoding="utf-8")
    twin = encoder.untrained(0)
    assert path.parent.name.startswith("compare-tiny-bert-vs-")
    assert encoder.fingerprint in html and twin.fingerprint in html
    assert html.count("class='column'") >= 4, "each section shows both models"
    assert 'id="differences"' in html and "A - B" in html
    assert "Linear CKA" in html, "same tokenizer: the weight/representation comparison is included"


@pytest.mark.integration
def test_report_on_minilm(minilm, tmp_path):
    path = build_report(encoder=minilm, out=tmp_path, max_sentences=30, seeds=(0,), progress=False)
    html = path.read_text(encoding="utf-8")
    assert path.parent.name == "minilm"
    assert "6 layers, 12 heads, hidden size 384" in html
    for heading in ("Tokenization", "Probing", "Attention"):
        assert f"<h2>{heading}</h2>" in html
    assert "SentLen" in html and "BShift" in html and "upos" in html
    assert "attention-only probe" in html
