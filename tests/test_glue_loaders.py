"""GLUE loaders: the real files (counts from each folder's PROVENANCE.md) and clear errors on bad input."""

from __future__ import annotations

import gzip
from collections import Counter

import pytest

from bertology.data.glue import GLUE_TASKS, glue_task, read_glue, read_glue_file
from bertology.errors import DataError


def _glue_root():
    from bertology.data import shared_data_dir

    try:
        root = shared_data_dir() / "glue"
    except DataError:
        pytest.skip("shared data not found")
    if not root.is_dir():
        pytest.skip("shared/data/glue not found")
    return root


# (task, split): (examples, label counts) as listed in shared/data/glue/<task>/PROVENANCE.md
EXPECTED = {
    ("cola", "train"): (8551, {1: 6023, 0: 2528}),
    ("cola", "dev"): (1043, {1: 721, 0: 322}),
    ("sst2", "train"): (67349, {1: 37569, 0: 29780}),
    ("sst2", "dev"): (872, {1: 444, 0: 428}),
    ("mrpc", "train"): (3668, {1: 2474, 0: 1194}),
    ("mrpc", "dev"): (408, {1: 279, 0: 129}),
    ("stsb", "train"): (5749, None),
    ("stsb", "dev"): (1500, None),
    ("rte", "train"): (2490, {0: 1249, 1: 1241}),  # 0 = entailment
    ("rte", "dev"): (277, {0: 146, 1: 131}),
}


@pytest.mark.integration
@pytest.mark.parametrize("task,split", sorted(EXPECTED))
def test_real_glue_files_match_provenance_counts(task, split):
    examples = read_glue(task, split, _glue_root())
    count, labels = EXPECTED[(task, split)]
    assert len(examples) == count
    if labels is not None:
        assert dict(Counter(e.label for e in examples)) == labels
    else:
        assert all(0.0 <= e.label <= 5.0 for e in examples)
    assert (examples[0].text_b is not None) == GLUE_TASKS[task].is_pair
    assert all(e.text_a for e in examples)


@pytest.mark.integration
def test_real_mrpc_keeps_unbalanced_quotes_and_strips_bom():
    dev = read_glue("mrpc", "dev", _glue_root())
    assert dev[0].text_b.startswith('"The foodservice pie business')
    assert dev[0].id == "1355540-1355592" and dev[0].label == 1


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_cola_without_header_and_errors_name_file_and_line(tmp_path):
    good = _write(tmp_path / "cola" / "dev.tsv", "gj04\t1\t\tThe cat sat.\ngj04\t0\t*\tCat the sat.\n")
    examples = read_glue_file(good, "cola")
    assert [(e.text_a, e.label) for e in examples] == [("The cat sat.", 1), ("Cat the sat.", 0)]
    bad = _write(tmp_path / "bad.tsv", "gj04\t1\t\tFine.\ngj04\t1\tOnly three\n")
    with pytest.raises(DataError, match=r"bad\.tsv:2: 3 tab-separated fields; expected 4"):
        read_glue_file(bad, "cola")
    bad_label = _write(tmp_path / "bad2.tsv", "gj04\tyes\t\tFine.\n")
    with pytest.raises(DataError, match=r"bad2\.tsv:1: label is 'yes'"):
        read_glue_file(bad_label, "cola")


def test_header_mismatch_bad_label_and_bad_score(tmp_path):
    mrpc = _write(tmp_path / "m.tsv", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\n1\t1\t2\ta\n")
    with pytest.raises(DataError, match=r"m\.tsv:1: header"):
        read_glue_file(mrpc, "mrpc")
    rte = _write(tmp_path / "r.tsv", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tcontradiction\n")
    with pytest.raises(DataError, match=r"r\.tsv:2: label is 'contradiction'; expected entailment or not_entailment"):
        read_glue_file(rte, "rte")
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    sts = _write(tmp_path / "s.tsv", header + "0\tg\tf\ty\t0\tn\tn\tA.\tB.\t7.5\n")
    with pytest.raises(DataError, match=r"s\.tsv:2: score is '7.5'; expected a number from 0 to 5"):
        read_glue_file(sts, "stsb")


def test_gzip_sst2_and_empty_file_and_unknown_task(tmp_path):
    path = tmp_path / "sst2" / "train.tsv.gz"
    path.parent.mkdir()
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("sentence\tlabel\ngood film \t1\n")
    assert read_glue("sst2", "train", tmp_path)[0].text_a == "good film"
    empty = _write(tmp_path / "e.tsv", "sentence\tlabel\n")
    with pytest.raises(DataError, match="no examples"):
        read_glue_file(empty, "sst2")
    with pytest.raises(DataError, match="unknown GLUE task 'mnli'"):
        glue_task("mnli")
    with pytest.raises(DataError, match="file not found"):
        read_glue("rte", "dev", tmp_path)
