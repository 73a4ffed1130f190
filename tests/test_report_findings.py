"""Findings first: every headline number checked against the result tables it comes from; the best-layer rule;
the interventions section; downloads; and the report in a real browser (links, downloads, screenshot)."""

from __future__ import annotations

import base64
from html import escape
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bertology.report.findings import Finding, best_layer, findings, probing_scores
from bertology.results import percent


@pytest.fixture(scope="module")
def report(tiny_report):
    return tiny_report


def _tables(path: Path) -> dict[str, dict[str, pd.DataFrame]]:
    """The cached result tables of each section, read back from disk (not from the report's memory)."""
    results = {}
    for folder in (path.parent / "results").iterdir():
        if (folder / "key.json").is_file():
            section = folder.name.rsplit("-", 1)[0]
            results[section] = {p.stem: pd.read_parquet(p) for p in folder.glob("*.parquet")}
    results["knowledge"]["contextuality"] = pd.read_parquet(path.parent / "knowledge" / "contextuality"
                                                            / "summary.parquet")
    return results


def _mean(results: pd.DataFrame, task: str, baseline: str, split: str, metric: str, layer=None) -> float:
    rows = results[(results["task"] == task) & (results["baseline"] == baseline) & (results["split"] == split)
                   & (results["metric"] == metric)]
    if layer is not None:
        rows = rows[rows["layer"] == layer]
    # The reported number: the point fit on every training example (the row without a seed) where the run made
    # one beside its bootstrap seeds, else the mean over seeds.
    point = rows[rows["seed"].isna()] if "seed" in rows.columns else rows.iloc[:0]
    return float(point["value"].item() if len(point) else rows["value"].mean())


def _independent_interval(results, sizes, task, split, layer, summary=None, metric="accuracy") -> tuple[float, float]:
    """The 95% interval a finding must show: the probing run's own (pooled bootstrap, ``summary``'s
    ``ci_low``/``ci_high``) when it computed one, else recomputed here from the binomial error over the
    split's examples plus the seed spread."""
    if summary is not None and "ci_low" in summary.columns:
        row = summary[(summary["task"] == task) & (summary["baseline"] == "none") & (summary["split"] == split)
                      & (summary["metric"] == metric) & (summary["layer"] == layer)]
        if len(row) and not pd.isna(row["ci_low"].iloc[0]):
            return float(row["ci_low"].iloc[0]), float(row["ci_high"].iloc[0])
    rows = results[(results["task"] == task) & (results["baseline"] == "none") & (results["split"] == split)
                   & (results["metric"] == "accuracy") & (results["layer"] == layer)]
    p = _mean(results, task, "none", split, "accuracy", layer)
    rows = rows[rows["seed"].notna()]["value"] if "seed" in rows.columns else rows["value"]
    k = len(rows)
    n = float(sizes.set_index("task").loc[task, split])
    var = p * (1 - p) / n + (rows.std(ddof=1) ** 2 / k if k > 1 else 0.0)
    return max(0.0, p - 1.96 * math.sqrt(var)), min(1.0, p + 1.96 * math.sqrt(var))


def check_probing_finding(finding: Finding, results: pd.DataFrame, sizes: pd.DataFrame,
                          summary: pd.DataFrame | None = None) -> None:
    task, layer = finding.details["task"], finding.details["layer"]
    metric = finding.details["metric"]
    assert finding.value == pytest.approx(_mean(results, task, "none", "test", metric, layer))
    assert finding.details["untrained"] == pytest.approx(_mean(results, task, "untrained", "test", metric, layer))
    dev_layers = results[(results["task"] == task) & (results["split"] == "dev") & results["layer"].notna()]["layer"]
    dev = pd.Series({int(l): _mean(results, task, "none", "dev", metric, l) for l in sorted(set(dev_layers))})
    assert layer == int(dev.idxmax()), "the best layer is the one chosen on dev"
    assert percent(finding.value) + "%" in finding.text
    assert f"untrained twin {percent(finding.details['untrained'])}%" in finding.text
    if metric != "accuracy":  # structural: baseline is the linear chain
        assert finding.baseline == pytest.approx(_mean(results, task, "linear-chain", "test", metric))
        if summary is not None and "ci_low" in summary.columns:
            # The probing run's bootstrap over test sentences, not the seed spread.
            low, high = _independent_interval(results, sizes, task, "test", layer, summary, metric)
            assert (finding.ci_low, finding.ci_high) == (pytest.approx(low), pytest.approx(high))
            assert finding.interval == "95% CI" and f"95% CI {percent(low)}–{percent(high)}" in finding.text
        return
    majority = _mean(results, task, "majority", "test", "accuracy")
    assert finding.baseline == pytest.approx(majority) and f"majority {percent(majority)}%" in finding.text
    low, high = _independent_interval(results, sizes, task, "test", layer, summary)
    assert (finding.ci_low, finding.ci_high) == (pytest.approx(low), pytest.approx(high))
    expected = "95% CI" if summary is not None and "ci_low" in summary.columns else "95% CI (normal approx.)"
    assert finding.interval == expected and f"{expected} {percent(low)}–{percent(high)}" in finding.text
    if finding.details["marked"]:
        assert "peaks at layer" in finding.text
        assert all("underpowered" in f for f in finding.flags), finding.flags
        assert low > majority, "a marked best layer is above the majority baseline"
        for other in dev.index:
            if other != layer:
                _, other_high = _independent_interval(results, sizes, task, "dev", other, summary)
                assert dev[layer] > other_high, "a marked best layer lies outside every other layer's interval"
    else:
        assert "peaks" not in finding.text
        assert any("indistinguishable" in f or "majority" in f for f in finding.flags), finding


def test_every_headline_number_matches_the_result_tables(report):
    path, _, _ = report
    tables = _tables(path)
    items = findings(tables)
    html = path.read_text(encoding="utf-8")
    topics = {f.topic for f in items}
    # (the untrained-twin shares need a task above chance: the synthetic test below checks them)
    assert {"surface", "syntactic", "semantic", "parsers", "patterns", "contextuality"} <= topics, topics
    assert ("masking" in topics) == ("flagged_summary" in tables["interventions"]) or "curve" in tables["interventions"]
    results, sizes = tables["probing"]["results"], tables["probing"]["datasets"]
    best = tables["attention"]["best_heads"].set_index("relation")
    overall = tables["attention"]["pattern_overall"]
    for finding in items:
        assert f'id="{finding.anchor}"' in html or f"id='{finding.anchor}'" in html, finding.anchor
        assert f"href='#{finding.anchor}'" in html
        if finding.source == "probing.results" and finding.topic != "untrained":
            check_probing_finding(finding, results, sizes, tables["probing"].get("summary"))
        elif finding.source == "attention.best_heads" and "relation" in finding.details:
            row = best.loc[finding.details["relation"]]
            assert finding.value == pytest.approx(row["held_out_accuracy"])
            assert finding.baseline == pytest.approx(row["held_out_baseline_accuracy"])
            assert finding.ci_low > finding.baseline, "only heads beyond the offset baseline are named"
        elif finding.source == "attention.pattern_overall":
            share = overall[(overall["model"] == overall["model"].iloc[0]) & (overall["type"] == finding.details["type"])]
            assert finding.value == pytest.approx(share["proportion"].iloc[0])
            assert f"{percent(finding.value)}%" in finding.text
        elif finding.source == "interventions.flagged_runs":
            summary = tables["interventions"]["flagged_summary"].iloc[0]
            runs = tables["interventions"]["flagged_runs"]
            random = runs[runs["condition"] == "random"]["delta"].to_numpy()
            assert finding.value == pytest.approx(summary["flagged_delta"])
            assert finding.baseline == pytest.approx(random.mean())
            p = (np.sum(random <= summary["flagged_delta"]) + 1) / (len(random) + 1)
            assert finding.details["p"] == pytest.approx(p) and f"p = {p:.3f}" in finding.text
        elif finding.source == "knowledge.contextuality":
            ctx = tables["knowledge"]["contextuality"]
            rows = ctx[(ctx["measure"] == "self_similarity") & (ctx["weights"] == "trained")].sort_values("layer")
            assert finding.value == pytest.approx(rows["adjusted"].iloc[-1])
            assert f"{rows['adjusted'].iloc[0]:.3f}" in finding.text
        assert escape(finding.text)[:60] in html


def _synthetic_results() -> tuple[dict[str, pd.DataFrame], dict]:
    """Probing results with a clear peak (SentLen at layer 2), a plateau (BShift 1-3) and a task at chance."""
    rows = []
    means = {"sentence_length": [0.40, 0.60, 0.85, 0.70], "bigram_shift": [0.50, 0.70, 0.71, 0.70],
             "subj_number": [0.50, 0.52, 0.51, 0.50]}
    majority = {"sentence_length": 0.20, "bigram_shift": 0.50, "subj_number": 0.52}
    for task, curve in means.items():
        for split in ("dev", "test"):
            for layer, value in enumerate(curve):
                for seed, jitter in enumerate((-0.002, 0.0, 0.002)):
                    rows.append((task, "linear", layer, seed, "accuracy", value + jitter, "none", split))
                    rows.append((task, "linear", layer, seed, "accuracy", 0.3 + jitter, "untrained", split))
                rows.append((task, "majority", layer, 0, "accuracy", majority[task], "majority", split))
    results = pd.DataFrame(rows, columns=["task", "probe", "layer", "seed", "metric", "value", "baseline", "split"])
    results["model"], results["component"] = "m", None
    results["layer"] = results["layer"].astype("Int64")
    sizes = pd.DataFrame({"task": list(means), "level": "sentence", "train": 5000, "dev": 2000, "test": 2000})
    return {"results": results, "datasets": sizes}, majority


def test_best_layer_is_marked_only_outside_the_runner_up_and_above_majority():
    tables, majority = _synthetic_results()
    scores = probing_scores(tables)
    peak = best_layer(scores, "sentence_length")
    assert peak == {"layer": 2, "marked": True, "indistinguishable": [2], "runner_up": 3, "at_chance": False}
    plateau = best_layer(scores, "bigram_shift")
    assert plateau["layer"] == 2 and not plateau["marked"] and plateau["indistinguishable"] == [1, 2, 3]
    chance = best_layer(scores, "subj_number")
    assert chance["at_chance"] and not chance["marked"]
    by_task = {f.details["task"]: f for f in findings({"probing": tables}) if "task" in f.details}
    for task, finding in by_task.items():
        check_probing_finding(finding, tables["results"], tables["datasets"])
    assert "SentLen peaks at layer 2: 85.0%" in by_task["sentence_length"].text
    assert "layers 1–3 are indistinguishable on test" in by_task["bigram_shift"].flags
    assert "not above the majority baseline" in by_task["subj_number"].flags
    untrained = [f for f in findings({"probing": tables}) if f.topic == "untrained"]
    surface = next(f for f in untrained if f.details["group"] == "surface")
    assert surface.value == pytest.approx((0.3 - 0.2) / (0.85 - 0.2))


def test_table2_bolds_only_a_best_layer_that_may_be_marked():
    from bertology.report.document import table_html
    from bertology.report.sections import _marked_table2

    from bertology.probing.report import table2_frame

    tables, _ = _synthetic_results()
    table = _marked_table2(table2_frame(tables), probing_scores(tables), "caption", "probing-senteval")
    html = table_html(table, "probing-senteval")
    assert html.count("<strong class='best'>") == 1 and "<strong class='best'>85.0 (+55.0)</strong>" in html
    assert "1–3 (indistinguishable)" in html and "(at chance)" in html
    assert "text/csv" in html and "ci_low" in base64.b64decode(
        re.search(r"data:text/csv;base64,([^']+)", html).group(1)).decode()


def test_report_shows_percent_readable_headers_and_downloads(report):
    path, _, _ = report
    html = path.read_text(encoding="utf-8")
    assert html.index('id="findings"') < html.index('id="tokenization"'), "findings first"
    for header in re.findall(r"<th>(.*?)</th>", html):
        assert "_" not in header, f"raw snake_case header {header!r}"
    figures = html.count("<figure class='plot'")
    assert figures >= 8
    assert html.count("download='") >= figures * 2 and html.count("data:image/svg+xml;base64,") >= 6
    assert html.count("data:application/pdf;base64,") >= 6
    assert "mean over tokens" not in html and ">attn cls<" not in html
    parsers = re.search(r"id='attention-parsers'.*?</table>", html, re.S).group(0)
    assert "test accuracy (%)" in parsers
    cells = re.findall(r"<td>(\d+\.\d+)</td>", parsers)
    assert cells and all(re.fullmatch(r"\d{1,3}\.\d", c) for c in cells), "accuracies in percent, one decimal"


def test_interventions_use_a_given_checkpoint_and_test_flagged_heads(report, tmp_path):
    from bertology.report.context import ReportContext
    from bertology.report.interventions import InterventionSettings, compute_interventions, is_finetuned
    from bertology.report.cache import ResultCache

    path, encoder, _ = report
    checkpoints = [p.parent for p in (path.parent / "finetune").rglob("finetune.json")]
    assert len(checkpoints) == 1 and is_finetuned(checkpoints[0]), "the report fine-tuned once"
    context = ReportContext(encoder=encoder, model_name="tiny", out_dir=tmp_path, cache=ResultCache(tmp_path),
                            dev=[], test=[], seeds=(0,), max_sentences=10, progress=False,
                            finetuned=checkpoints[0])
    tables = compute_interventions(context, InterventionSettings.quick(), [(1, 0), (2, 3)])
    assert not (tmp_path / "finetune").exists(), "the given checkpoint is used, nothing fine-tuned"
    summary, runs = tables["flagged_summary"].iloc[0], tables["flagged_runs"]
    assert summary["n_masked"] == 2 and summary["n_draws"] == InterventionSettings.quick().draws
    random = runs[runs["condition"] == "random"]["delta"].to_numpy()
    assert summary["p_random_as_harmful"] == pytest.approx((np.sum(random <= summary["flagged_delta"]) + 1)
                                                           / (len(random) + 1))
    curve = tables["curve"]
    assert set(curve["order"]) == {"importance", "random"}
    assert curve[(curve["fraction"] == 0)]["metric"].nunique() == 1, "nothing masked: one metric for every order"
    assert "fine-tuned checkpoint" in tables["setup"]["model"].iloc[0]


@pytest.mark.browser
def test_report_in_chromium_links_downloads_and_screenshot(report, browser, tmp_path):
    path, _, _ = report
    page = browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    links = page.eval_on_selector_all("a[href^='#']", "as => as.map(a => a.getAttribute('href'))")
    assert len(links) >= 10
    for href in dict.fromkeys(links):
        page.click(f"a[href='{href}'] >> nth=0")
        assert page.evaluate("location.hash") == href
        assert page.evaluate(f"document.getElementById({href[1:]!r}) !== null"), href
        top = page.evaluate(f"document.getElementById({href[1:]!r}).getBoundingClientRect().top")
        assert -5 <= top < 900, f"{href} scrolled into view"
    with page.expect_download() as svg:
        page.click("a.download[download$='.svg'] >> nth=0")
    svg_file = tmp_path / svg.value.suggested_filename
    svg.value.save_as(svg_file)
    assert svg_file.suffix == ".svg" and "<svg" in svg_file.read_text(encoding="utf-8")[:2000]
    with page.expect_download() as csv:
        page.click("a.download[download$='.csv'] >> nth=0")
    csv_file = tmp_path / csv.value.suggested_filename
    csv.value.save_as(csv_file)
    assert len(pd.read_csv(csv_file)) > 0
    screenshot = tmp_path / "report-full.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 50_000
    artifacts = path.parents[2] / "artifacts"
    artifacts.mkdir(exist_ok=True)
    shutil.copy(screenshot, artifacts / "report-findings-tiny.png")
    assert errors == []
    page.close()


def test_an_underpowered_flag_says_how_many_test_examples_it_rests_on():
    from bertology.report.findings import _power_flag

    assert _power_flag(0.70, 0.74, 1290.0) == ["underpowered: ±2.0 points with 1,290 test examples"]
    assert _power_flag(0.70, 0.72, 1290.0) == []  # ±1.0: powered
    assert _power_flag(0.70, 0.74, np.nan) == ["underpowered: ±2.0 points"]
    # With the accuracy, the flag says what the test split's sampling alone allows: SentLen-like (1,572 test
    # sentences at 74%) cannot reach ±1.5 whatever the training; a large split can, and the rest is training spread.
    assert _power_flag(0.71, 0.77, 1572.0, 0.74) == [
        "underpowered: ±3.0 points with 1,572 test examples (their sampling alone: ±2.2)"]
    assert _power_flag(0.66, 0.70, 4408.0, 0.68) == [
        "underpowered: ±2.0 points with 4,408 test examples (their sampling alone: ±1.4)"]
