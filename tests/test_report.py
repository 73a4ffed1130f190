"""The report: builds on a tiny random model, opens cleanly in a real browser, resumes after interruption."""

from __future__ import annotations

import shutil

import pytest

from bertology.models.tiny import tiny_encoder
from bertology.report import build_report
from bertology.report import run as report_run
from bertology.report import sections as report_sections


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
    assert "Contextuality" in html and "Similarity to static embeddings" in html, "the knowledge and geometry section"
    assert oct(path.stat().st_mode & 0o777) == "0o644", "the report is readable by others"
    for folder in (path.parent / "results").iterdir():
        assert folder.stat().st_mode & 0o755 == 0o755, folder
    # The attention section switched to eager attention only while it ran.
    assert encoder.attention_implementation == "sdpa"


def test_pattern_classifier_figures_come_from_its_evaluation_file(tiny_report):
    import json
    from importlib import resources

    path, _, _ = tiny_report
    evaluation = json.loads((resources.files("bertology") / "resources" / "attention_patterns"
                             / "evaluation.json").read_text("utf-8"))
    shipped = next(row for row in evaluation["test"] if row["classifier"].startswith("CNN (shipped"))
    note = next(n for n in report_run.setup_notes() if n.startswith("Pattern types"))
    assert f"{evaluation['n_maps']} hand-labelled maps" in note
    assert f"{100 * shipped['test_accuracy']:.0f}% accuracy on the {evaluation['split_sizes']['test']} held out" in note
    assert note.replace("'", "&#39;") in path.read_text(encoding="utf-8")


def test_an_unknown_section_is_one_line_naming_the_valid_ones(tmp_path):
    from typer.testing import CliRunner

    from bertology.cli import app
    from bertology.errors import UsageError

    with pytest.raises(UsageError, match="unknown section nonsense; expected one or more of tokenization, "
                                         "probing, attention"):
        build_report(encoder=tiny_encoder("bert", layers=1, hidden=16, heads=2), out=tmp_path,
                     sections=["probing", "nonsense"], progress=False)
    result = CliRunner().invoke(app, ["report", "--section", "nonsense", "--out", str(tmp_path / "cli")])
    assert isinstance(result.exception, UsageError) and "tokenization, probing, attention" in str(result.exception)
    assert not list(tmp_path.iterdir()), "nothing written"


def test_report_modules_do_not_import_each_other_in_a_cycle():
    """sections builds on context (the layer below), never on run, which drives the sections."""
    import ast
    import inspect

    from bertology.report import context as report_context

    for module in (report_sections, report_context):
        tree = ast.parse(inspect.getsource(module))
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        assert "bertology.report.run" not in imported, module.__name__


def test_a_registered_treebank_task_joins_the_report():
    from bertology.probing import register_task, unregister_task

    register_task("first_word", "token", lambda sentences: ([(i, 0) for i in range(len(sentences))],
                                                            ["yes"] * len(sentences)))
    try:
        tasks = report_sections.report_probing_tasks()
        assert {"upos", "xpos", "deprel", "first_word", "structural", "bigram_shift"} <= set(tasks)
        assert "ner" not in tasks, "tasks of other corpora than the treebank stay out"
    finally:
        unregister_task("first_word")


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
    from bertology.report.names import ON_REQUEST

    order = [name for name, _ in report_sections.SECTIONS if name not in ON_REQUEST]
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


# The report on the real MiniLM (30 sentences, one seed) is the README tour's last command; its page is checked
# there (tests/test_readme.py), so the suite builds it once.


def test_the_cache_stores_results_and_recomputes_an_entry_from_before_results(tmp_path):
    """get_or_compute saves and loads a Result (types as saved, list cells as lists, meta kept); a folder an
    older cache wrote (key.json and bare Parquet tables, no meta.json) is computed again, not read."""
    import pandas as pd

    from bertology.report.cache import ResultCache
    from bertology.results import Result

    cache = ResultCache(tmp_path)
    key = {"model": "m", "seeds": [0, 1]}
    made = Result("probing", {"table2": pd.DataFrame({"task": ["upos"], "layer": [2], "mean": [0.912345678901]}),
                              "datasets": pd.DataFrame({"task": ["upos"], "notes": [["a note", "another"]]})},
                  meta={"model": "m"})
    calls = []

    def compute():
        calls.append(1)
        return made

    first = cache.get_or_compute("probing", key, compute)
    again = cache.get_or_compute("probing", key, compute)
    assert calls == [1] and cache.misses == ["probing"] and cache.hits == ["probing"]
    for result in (first, again):
        assert isinstance(result, Result) and result.meta == {"model": "m"}
        pd.testing.assert_frame_equal(result["table2"], made["table2"])
        assert list(result["datasets"]["notes"].iloc[0]) == ["a note", "another"]
    old = cache.path("probing", key)
    (old / "meta.json").unlink()  # what an older cache left: key.json and the tables only
    assert (old / "key.json").is_file()
    assert cache.get_or_compute("probing", key, compute)["table2"]["mean"].iloc[0] == 0.912345678901
    assert calls == [1, 1], "an entry without meta.json is recomputed"
    with pytest.raises(TypeError, match="expected a Result"):
        cache.get_or_compute("other", key, lambda: {"table": made["table2"]})


def test_token_probes_have_a_training_spread_and_intervals_that_include_it(tiny_report):
    """The report's seeds draw bootstrap training resamples, and the spread it shows is the spread of the
    per-seed accuracies (not 0.0 by construction); the pooled interval contains the mean.

    Whether two resamples give different accuracies here depends on the host's arithmetic: the tiny random
    model's probes learn next to nothing from 40 sentences, so both seeds can predict one class on one host
    and not on another. That the bootstrap itself gives a spread is checked on planted data, where it must:
    test_probe_exact.py::test_bootstrap_seeds_give_the_trained_probe_a_spread_and_wider_intervals."""
    from bertology.results import Result

    path, _, _ = tiny_report
    result = Result.load(next(f for f in (path.parent / "results").iterdir()
                              if f.name.startswith("probing-") and (f / "meta.json").is_file()))
    assert result.meta["train_sampling"] == "bootstrap"
    summary = result["summary"]
    tokens = summary[summary["task"].isin(["upos", "xpos", "deprel"]) & (summary["baseline"] == "none")
                     & (summary["split"] == "test") & (summary["metric"] == "accuracy")]
    assert not tokens.empty and (tokens["n_seeds"] == 2).all()
    per_seed = result["results"]
    per_seed = per_seed[(per_seed["baseline"] == "none") & (per_seed["split"] == "test")
                        & (per_seed["metric"] == "accuracy")]
    for row in tokens.itertuples():
        cell = per_seed[(per_seed["task"] == row.task) & (per_seed["layer"] == row.layer)]
        values = cell[cell["seed"].notna()]["value"]
        assert len(values) == 2
        assert row.std == pytest.approx(values.std(ddof=1), abs=1e-12)
        # The number is the point fit on every training example (the row without a seed), not the seeds' mean.
        assert row.mean == cell[cell["seed"].isna()]["value"].item()
    assert ((tokens["ci_low"] <= tokens["mean"]) & (tokens["mean"] <= tokens["ci_high"])).all()


def test_the_comparison_reads_each_models_reported_number_not_a_mean_over_every_row(tmp_path):
    """The difference table compares what each report shows: the point fit where the run made one (a row
    without a seed), not the mean over it and its bootstrap seeds."""
    from types import SimpleNamespace

    import pandas as pd

    from bertology.report.run import _probing_means

    rows = [{"model": "m", "task": "upos", "probe": "linear", "component": None, "layer": 1, "seed": seed,
             "metric": "accuracy", "value": value, "baseline": "none", "split": "test"}
            for seed, value in ((0, 0.70), (1, 0.72), (None, 0.80))]
    folder = tmp_path / "probing-abc"
    folder.mkdir()
    pd.DataFrame(rows).astype({"seed": "Int64", "layer": "Int64"}).to_parquet(folder / "results.parquet")
    means = _probing_means(SimpleNamespace(cache=SimpleNamespace(root=tmp_path)))
    assert means.to_dict("records") == [{"task": "upos", "layer": 1, "accuracy": pytest.approx(80.0)}]


def test_the_default_report_probes_every_dev_and_test_example_and_a_quick_run_the_quick_sizes(tmp_path):
    """Full power by default (issue 31): every dev and test example, training capped per level; --max-sentences
    takes the quick sizes, capped further."""
    from bertology.probing.inputs import build_datasets
    from bertology.report.context import REPORT_MAX_TRAIN

    encoder = tiny_encoder()
    tasks = ["upos", "bigram_shift"]
    full = report_run.make_context(encoder, "tiny", tmp_path, False, (0,), None, False, "cpu")
    spec = report_sections.report_probing_spec(full, tasks, full.probe_caps)
    assert not spec.quick and spec.max_eval is None and spec.max_train == REPORT_MAX_TRAIN
    quick = report_run.make_context(encoder, "tiny", tmp_path, False, (0,), 30, False, "cpu")
    small = report_sections.report_probing_spec(quick, tasks, quick.probe_caps)
    assert small.quick and small.max_train == 30 and small.max_eval == 20
    datasets, _ = build_datasets(spec.tasks, spec.treebank, max_train=spec.max_train, max_eval=spec.max_eval,
                                 cache_dir=tmp_path / "cache")
    upos = next(d for d in datasets if d.name == "upos")
    from bertology.data import default_corpus, read_conllu

    words = {split: sum(len(s.words) for s in read_conllu(default_corpus(f"ewt-{split}"))) for split in ("dev", "test")}
    assert len(upos.splits["dev"].labels) == words["dev"] and len(upos.splits["test"].labels) == words["test"]
    assert REPORT_MAX_TRAIN["token"] <= len(upos.splits["train"].labels) < REPORT_MAX_TRAIN["token"] + 200
