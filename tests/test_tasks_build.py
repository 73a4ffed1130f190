"""build_tasks / load_task / list_tasks / CLI on a synthetic treebank, the SentEval samples and UD EWT."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bertology.data import shared_data_dir
from bertology.errors import BertologyError, DataError
from bertology.tasks import (
    SENTEVAL_FILES,
    TABLE2_COLUMNS,
    TASK_NAMES,
    build_tasks,
    list_tasks,
    load_task,
    resolve_task_name,
)
from bertology.tasks.build import _prepare, load_splits
from bertology.tasks.builders import BUILDERS
from bertology.cli.tasks import app

sys.path.insert(0, str(Path(__file__).parent))
from tasks_treebank import write_treebank  # noqa: E402

LENGTHS = (1, 40)  # the synthetic sentences are 8-23 words
UNCHANGED_TEXT_TASKS = ("sentence_length", "word_content", "top_constituents", "past_present", "subj_number",
                        "obj_number")


@pytest.fixture(scope="module")
def treebank(tmp_path_factory) -> Path:
    return write_treebank(tmp_path_factory.mktemp("tb") / "UD_Tiny", sizes=(400, 60, 60))


@pytest.fixture(scope="module")
def built(treebank, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    return build_tasks(treebank, out, seed=0, length_range=LENGTHS), out


def _senteval_dir() -> Path:
    try:
        path = shared_data_dir() / "senteval_probing"
    except DataError:
        pytest.skip("shared data not found")
    if not path.is_dir():
        pytest.skip("senteval_probing samples not found")
    return path


def test_catalog_constants():
    assert TASK_NAMES[0] == "sentence_length" and len(TASK_NAMES) == 10
    assert SENTEVAL_FILES["odd_man_out"] == "odd_man_out.txt"
    assert list(TABLE2_COLUMNS.values()) == ["SentLen", "WC", "TreeDepth", "TopConst", "BShift", "Tense",
                                             "SubjNum", "ObjNum", "SOMO", "CoordInv"]
    assert resolve_task_name("SOMO") == "odd_man_out" and resolve_task_name("tree_depth.txt") == "tree_depth"
    with pytest.raises(DataError, match="unknown probing task 'Foo'"):
        resolve_task_name("Foo")


def test_build_writes_senteval_format_and_manifest(built, treebank):
    report, out = built
    assert {"sentence_length", "bigram_shift", "past_present", "subj_number", "obj_number", "odd_man_out",
            "coordination_inversion"} <= set(report.built)
    manifest = json.loads((out / "manifest.json").read_text())
    for name in report.built:
        lines = (out / SENTEVAL_FILES[name]).read_text(encoding="utf-8").splitlines()
        splits = [line.split("\t")[0] for line in lines]
        assert all(len(line.split("\t")) == 3 for line in lines)
        assert splits == sorted(splits, key=["tr", "va", "te"].index)  # ordered by partition, as SentEval
        entry = manifest["tasks"][name]
        assert entry["seed"] == 0 and entry["treebank"][0]["sha256"]
        assert {f["split"] for f in entry["treebank"]} == {"train", "dev", "test"}
        for split, code in (("train", "tr"), ("dev", "va"), ("test", "te")):  # the file keeps SentEval's codes
            assert sum(entry["counts"][split].values()) == splits.count(code)
        assert entry["deviations"]
    for name, reason in report.skipped.items():
        assert manifest["skipped"][name] == reason
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporary files


def test_a_manifest_of_the_first_format_is_read_with_train_dev_test(built, treebank, tmp_path):
    """Manifests written before the one split vocabulary named splits tr/va/te: loading a task reads them as
    train/dev/test, and adding a task to such a folder rewrites the manifest in the current format."""
    import shutil

    from bertology.tasks.build import MANIFEST_FORMAT, MANIFEST_FORMAT_TR_VA_TE, SENTEVAL_SPLIT

    _, out = built
    old = tmp_path / "old"
    shutil.copytree(out, old)
    manifest = json.loads((old / "manifest.json").read_text())
    codes = SENTEVAL_SPLIT
    for entry in manifest["tasks"].values():
        for key in ("input", "counts", "totals"):
            entry[key] = {codes[split]: value for split, value in entry[key].items()}
        entry["treebank"] = [{**f, "split": codes[f["split"]]} for f in entry["treebank"]]
    manifest["format"] = MANIFEST_FORMAT_TR_VA_TE
    (old / "manifest.json").write_text(json.dumps(manifest))
    current = json.loads((out / "manifest.json").read_text())["tasks"]["bigram_shift"]
    assert load_task(old, "bigram_shift").manifest == current
    kept = [name for name in manifest["tasks"] if name != "bigram_shift"]
    build_tasks(treebank, old, tasks=["bigram_shift"])
    rewritten = json.loads((old / "manifest.json").read_text())
    assert rewritten["format"] == MANIFEST_FORMAT
    for name in kept:  # tasks not rebuilt are carried over with their splits renamed
        assert set(rewritten["tasks"][name]["totals"]) == {"train", "dev", "test"}
    assert {f["split"] for f in rewritten["tasks"]["bigram_shift"]["treebank"]} == {"train", "dev", "test"}

def test_binary_tasks_are_balanced(built):
    report, out = built
    for name in ("bigram_shift", "past_present", "subj_number", "obj_number", "odd_man_out",
                 "coordination_inversion"):
        task = load_task(out, name)
        assert len(task.label_names) == 2
        for split in ("train", "dev", "test"):
            counts = Counter(task.labels[task.indices(split)].tolist())
            assert counts[0] == counts[1] > 0, (name, split, counts)


def test_no_sentence_in_two_splits(built):
    report, out = built
    for name in set(UNCHANGED_TEXT_TASKS) & set(report.built):
        task = load_task(out, name)
        texts = {s: {t.text for t in task.subset(s)[0]} for s in ("train", "dev", "test")}
        assert not texts["train"] & texts["dev"] and not texts["train"] & texts["test"] and not texts["dev"] & texts["test"]


def test_target_forms_do_not_cross_splits(treebank):
    by_split, _, _ = load_splits(treebank)
    ctx, _ = _prepare(by_split, LENGTHS, 0)
    for name in ("past_present", "subj_number", "obj_number", "odd_man_out"):
        out = BUILDERS[name](ctx)
        forms = {s: {i.form for i in out.instances[s] if i.form is not None} for s in ("train", "dev", "test")}
        assert forms["test"], name
        assert not forms["train"] & forms["test"] and not forms["train"] & forms["dev"] and not forms["dev"] & forms["test"]
    # SOMO: no source sentence appears both original and changed.
    out = BUILDERS["odd_man_out"](ctx)
    for split in ("train", "dev", "test"):
        ids = Counter(i.source_id for i in out.instances[split])
        assert max(ids.values()) == 1


def test_pooled_split_gives_forms_to_splits_by_share(treebank):
    from bertology.tasks.build import POOLED_SPLIT
    from bertology.tasks.builders import assign_forms

    by_split, _, _ = load_splits(treebank, split="pooled")
    ctx, _ = _prepare(by_split, LENGTHS, 0, POOLED_SPLIT)
    for name in ("past_present", "subj_number", "obj_number"):
        out = BUILDERS[name](ctx)
        forms = {s: {i.form for i in out.instances[s]} for s in ("train", "dev", "test")}
        assert forms["train"] and forms["test"], name
        assert not forms["train"] & forms["test"] and not forms["train"] & forms["dev"] and not forms["dev"] & forms["test"]
    # Frequent forms are spread so each split gets about its share of the instances (te no longer claims first).
    from bertology.tasks.builders import Instance

    per_split = {"train": [Instance("A", ("w",), str(i), form=f"f{i % 40}") for i in range(1000)], "dev": [], "test": []}
    moved = assign_forms(per_split, POOLED_SPLIT)
    shares = [len(moved[s]) / 1000 for s in ("train", "dev", "test")]
    assert shares == pytest.approx(POOLED_SPLIT, abs=0.03)
    assert sum(len(v) for v in moved.values()) == 1000


def test_somo_replacement_keeps_pos_and_features(treebank):
    by_split, _, _ = load_splits(treebank)
    ctx, _ = _prepare(by_split, LENGTHS, 0)
    sources = {s.id: s for split in ctx.splits.values() for s in split}
    lexicon = {w.lower(): (u, tuple(sorted(f.items()))) for s in sources.values()
               for w, u, f in zip(s.words, s.upos, s.feats)}
    out = BUILDERS["odd_man_out"](ctx)
    changed = [i for i in out.instances["train"] if i.label == "C"]
    assert changed
    for inst in changed:
        source = sources[inst.source_id]
        diff = [j for j, (a, b) in enumerate(zip(inst.words, source.words)) if a != b]
        assert len(diff) == 1
        j = diff[0]
        assert source.upos[j] in ("NOUN", "VERB")
        assert lexicon[inst.words[j].lower()] == (source.upos[j], tuple(sorted(source.feats[j].items())))


def test_seeded_determinism_and_subset_builds(treebank, built, tmp_path):
    report, out = built
    again = build_tasks(treebank, tmp_path / "a", seed=0, length_range=LENGTHS)
    assert again.built == report.built
    for name in report.built:
        assert (tmp_path / "a" / SENTEVAL_FILES[name]).read_bytes() == (out / SENTEVAL_FILES[name]).read_bytes()
    # Building one task alone gives the same file as building all of them.
    build_tasks(treebank, tmp_path / "b", tasks=["BShift"], seed=0, length_range=LENGTHS)
    assert (tmp_path / "b" / "bigram_shift.txt").read_bytes() == (out / "bigram_shift.txt").read_bytes()
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["bigram_shift.txt", "manifest.json"]
    other = build_tasks(treebank, tmp_path / "c", tasks=["BShift"], seed=1, length_range=LENGTHS)
    assert other.built == ["bigram_shift"]
    assert (tmp_path / "c" / "bigram_shift.txt").read_bytes() != (out / "bigram_shift.txt").read_bytes()


def test_missing_features_skip_with_reason(tmp_path):
    bare = write_treebank(tmp_path / "UD_Bare", sizes=(200, 40, 40), feats=False)
    report = build_tasks(bare, tmp_path / "out", length_range=LENGTHS)
    assert {"sentence_length", "bigram_shift", "coordination_inversion"} <= set(report.built)
    assert "Number feature" in report.skipped["subj_number"]
    assert "Number feature" in report.skipped["obj_number"]
    assert "finite verb" in report.skipped["past_present"] or "Tense" in report.skipped["past_present"]
    assert not (tmp_path / "out" / "subj_number.txt").exists()
    result = CliRunner().invoke(app, ["build", "--treebank", str(bare), "--out", str(tmp_path / "cli"),
                                      "--tasks", "SubjNum,BShift"])
    assert result.exit_code == 0, result.output
    assert "skipped subj_number" in result.output and "Number feature" in result.output


def test_pooled_single_file_is_split_randomly(tmp_path, treebank):
    report = build_tasks(treebank / "xx_tiny-ud-train.conllu", tmp_path / "o", tasks=["SentLen", "BShift"],
                         length_range=LENGTHS)
    assert "random 80/10/10" in report.split_source
    totals = report.totals().set_index("task")
    assert totals.loc["bigram_shift", "train"] > 4 * totals.loc["bigram_shift", "test"] > 0


def test_pooled_split_mixes_every_file_and_grows_test(tmp_path, treebank):
    kept, _, _ = load_splits(treebank)
    pooled, files, source = load_splits(treebank, split="pooled")
    assert "random 50/10/40" in source and all(f["split"] is None for f in files)
    ids = {s: {x.id for x in pooled[s]} for s in ("train", "dev", "test")}
    assert sum(map(len, ids.values())) == sum(len(v) for v in kept.values())  # every sentence, once
    assert not ids["train"] & ids["test"] and not ids["dev"] & ids["test"]
    assert len(pooled["test"]) == pytest.approx(0.4 * sum(map(len, ids.values())), abs=1)
    assert ids["test"] & {x.id for x in kept["train"]}, "treebank train sentences reach the pooled test split"
    report = build_tasks(treebank, tmp_path / "p", tasks=["BShift"], length_range=LENGTHS, split="pooled")
    plain = build_tasks(treebank, tmp_path / "t", tasks=["BShift"], length_range=LENGTHS)
    assert report.totals().set_index("task").loc["bigram_shift", "test"] > 3 * plain.totals().set_index("task").loc[
        "bigram_shift", "test"]
    # One folder holds one way of splitting; asking for the other is refused before anything is written.
    with pytest.raises(DataError, match="choose another output folder"):
        build_tasks(treebank, tmp_path / "p", tasks=["SentLen"], length_range=LENGTHS)
    assert not (tmp_path / "p" / "sentence_length.txt").exists()
    with pytest.raises(DataError, match="split 'random'"):
        load_splits(treebank, split="random")
    result = CliRunner().invoke(app, ["build", "--treebank", str(treebank), "--out", str(tmp_path / "cli"),
                                      "--tasks", "BShift", "--split", "pooled"])
    assert result.exit_code == 0 and "50/10/40" in result.output, result.output
    bad = CliRunner().invoke(app, ["build", "--treebank", str(treebank), "--out", str(tmp_path / "bad"),
                                   "--split", "random"])
    assert bad.exit_code != 0 and "--split 'random'" in str(bad.exception), bad.output


def test_bad_inputs(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        build_tasks(tmp_path / "missing", tmp_path / "o")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no .conllu"):
        build_tasks(tmp_path / "empty", tmp_path / "o")
    with pytest.raises(DataError, match="cannot tell the task"):
        (tmp_path / "x.txt").write_text("te\tA\tsome words here\n")
        load_task(tmp_path / "x.txt")
    with pytest.raises(DataError, match="expected 3 tab-separated columns"):
        (tmp_path / "tree_depth.txt").write_text("te\t5\n")
        load_task(tmp_path / "tree_depth.txt")
    assert issubclass(DataError, BertologyError)


def test_load_task_api(built):
    report, out = built
    task = load_task(out, "SentLen")
    assert task.name == "sentence_length" and task.column == "SentLen"
    assert len(task) == len(task.labels) == len(task.splits)
    assert task.label_names == sorted(task.label_names, key=int)
    assert task.manifest is not None and task.manifest["column"] == "SentLen"
    sentences, labels = task.subset("test")
    assert [task.label_names[i] for i in labels] == [s.label for s in sentences]
    same = load_task(out / "sentence_length.txt")
    assert same.labels.tolist() == task.labels.tolist()
    frame = list_tasks(out)
    assert set(frame["task"]) == set(report.built)


def test_read_real_senteval_samples():
    directory = _senteval_dir()
    frame = list_tasks(directory).set_index("task")
    assert list(frame.index) == list(TASK_NAMES)
    assert (frame[["train", "dev"]] == 0).all().all()
    assert frame.loc["tree_depth", "test"] == 248 and frame.loc["word_content", "n_labels"] == 83
    shift = load_task(directory, "BShift")
    assert shift.label_names == ["I", "O"]
    assert Counter(shift.label_names[i] for i in shift.labels) == {"O": 119, "I": 106}
    depth = load_task(directory / "tree_depth.te_tail_sample.txt")
    assert depth.label_names == [str(d) for d in range(5, 12)]
    assert depth.manifest is None


def test_cli_list(built):
    report, out = built
    runner = CliRunner()
    result = runner.invoke(app, ["list", str(out)])
    assert result.exit_code == 0, result.output
    assert "bigram_shift" in result.output and "BShift" in result.output
    catalog = runner.invoke(app, ["list"])
    assert catalog.exit_code == 0 and "coordination_inversion" in catalog.output


@pytest.mark.integration
def test_build_from_ud_english_ewt(tmp_path):
    try:
        ewt = shared_data_dir() / "ud_english_ewt"
    except DataError:
        pytest.skip("shared data not found")
    if not (ewt / "en_ewt-ud-train.conllu.gz").exists():
        pytest.skip("UD English EWT train file not found")
    start = time.perf_counter()
    report = build_tasks(ewt, tmp_path)
    elapsed = time.perf_counter() - start
    assert report.built == list(TASK_NAMES), report.skipped
    assert elapsed < 60
    totals = report.totals().set_index("task")
    assert (totals[["train", "dev", "test"]] > 0).all().all()
    assert totals.loc["bigram_shift", "train"] > 5000 and totals.loc["sentence_length", "test"] > 200
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    hashes = {Path(f["path"]).name: f["sha256"] for f in manifest["tasks"]["tree_depth"]["treebank"]}
    assert hashes["en_ewt-ud-test.conllu.gz"] == "29c151eee8846d3f3ef7806c126ecac9932af2317c008c6d6b076c5e14950dbe"
    task = load_task(tmp_path, "Tense")
    assert set(task.label_names) == {"PAST", "PRES"}


def test_built_files_read_back_as_senteval_and_are_world_readable(built):
    import stat

    from bertology.data import read_corpus

    report, out = built
    corpus = read_corpus(out / SENTEVAL_FILES["bigram_shift"])  # a .txt: detected by its content
    assert corpus.format == "senteval"
    task = load_task(out, "bigram_shift")
    assert [s.words for s in corpus] == [s.words for s in task.sentences]
    assert {s.words[0] for s in corpus}.isdisjoint({"tr", "va", "te"}) and {s.label for s in corpus} == {"I", "O"}
    for name in [SENTEVAL_FILES[n] for n in report.built] + ["manifest.json"]:
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644, name
    assert not list(out.glob(".*.tmp"))


def test_cli_build_shared_options(treebank, tmp_path, monkeypatch):
    from bertology.errors import UsageError

    runner = CliRunner()
    bad = runner.invoke(app, ["build", "--treebank", str(treebank), "--seed", "-1", "--tasks", "SentLen"])
    assert isinstance(bad.exception, UsageError) and "--seed -1" in str(bad.exception)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["build", "--treebank", str(treebank), "--tasks", "SentLen", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "results" / "tasks" / treebank.name / "sentence_length.txt").is_file()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    taken = runner.invoke(app, ["build", "--treebank", str(treebank), "-o", str(blocker), "--tasks", "SentLen"])
    assert isinstance(taken.exception, BertologyError) and "not a folder" in str(taken.exception)


def _main(args, monkeypatch, capsys):
    from bertology.cli import main

    monkeypatch.setattr("sys.argv", ["bertology", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    captured = capsys.readouterr()
    return exit_info.value.code, captured.err + captured.out


def _full_disk_for_the_manifest(monkeypatch):
    """The task files fit; the manifest does not (its temporary file cannot be written)."""
    import errno

    real = Path.write_text

    def write_text(self, *args, **kwargs):
        if self.name.startswith(".manifest.json."):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)


def test_a_full_disk_leaves_no_half_built_task_folder(treebank, tmp_path, monkeypatch, capsys):
    out = tmp_path / "tasks"
    with monkeypatch.context() as patch:
        _full_disk_for_the_manifest(patch)
        code, output = _main(["tasks", "build", "--treebank", str(treebank), "-o", str(out), "--tasks", "SentLen,BShift",
                              "--no-progress"], monkeypatch, capsys)
    message = " ".join(output.split())
    assert code == 1 and "Traceback" not in output and len(output.strip().splitlines()) == 1, output
    assert f"cannot write {out / 'manifest.json'}: no space left on the device; nothing was written" in message
    assert not out.exists() and list(tmp_path.iterdir()) == []
    # An existing task folder is left as it was: no new task file without its manifest entry.
    build_tasks(treebank, out, tasks=["SentLen"], length_range=LENGTHS)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with monkeypatch.context() as patch:
        _full_disk_for_the_manifest(patch)
        code, output = _main(["tasks", "build", "--treebank", str(treebank), "-o", str(out), "--tasks", "BShift",
                              "--no-progress"], monkeypatch, capsys)
    assert code == 1 and f"{out} was left as it was" in " ".join(output.split()), output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # with room, the same command adds the task
    code, output = _main(["tasks", "build", "--treebank", str(treebank), "-o", str(out), "--tasks", "BShift",
                          "--no-progress"], monkeypatch, capsys)
    assert code == 0, output
    assert sorted(p.name for p in out.iterdir()) == ["bigram_shift.txt", "manifest.json", "sentence_length.txt"]
    assert set(json.loads((out / "manifest.json").read_text())["tasks"]) == {"sentence_length", "bigram_shift"}
