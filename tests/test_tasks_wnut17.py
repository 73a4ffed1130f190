"""WNUT-17 reader and entity spans."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertology.data import Sentence, shared_data_dir
from bertology.data.wnut17 import WNUT17_FILES, entity_spans, read_wnut17
from bertology.errors import DataError

TINY = Path(__file__).parent / "data" / "tasks" / "tiny.wnut17.conll"


def test_tiny_file_sentences_tags_and_spans():
    sentences = read_wnut17(TINY)
    assert [len(s) for s in sentences] == [6, 5, 4]  # the TAB-only line also separates sentences
    first = sentences[0]
    assert first.words[2:4] == ("New", "York") and first.source_line == 1
    assert first.extra["ner"][2:4] == ("B-location", "I-location")
    assert entity_spans(first) == [(2, 4, "location"), (5, 6, "person")]
    assert entity_spans(sentences[1]) == [(1, 4, "creative-work")]
    # conlleval: a stray I- opens an entity; two B- of one type are two entities.
    assert entity_spans(sentences[2]) == [(0, 1, "product"), (2, 3, "corporation"), (3, 4, "corporation")]
    assert sentences[2].source_line == 14


@pytest.mark.parametrize(
    "content, message",
    [
        ("word\tO\nbad line\n", "x.conll:2: expected 2 tab-separated columns"),
        ("word\tO\nw\tB_person\n", "x.conll:2: tag 'B_person' is not a BIO tag"),
        ("word\tB-animal\n", "x.conll:1: unknown entity type 'animal'"),
        ("\n\t\n", "x.conll: no sentences found"),
    ],
)
def test_errors_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "x.conll"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=message):
        read_wnut17(path)


def test_any_types_and_missing_tags(tmp_path):
    path = tmp_path / "x.conll"
    path.write_text("Rex\tB-animal\nbarks\tO\n", encoding="utf-8")
    assert entity_spans(read_wnut17(path, types=None)[0]) == [(0, 1, "animal")]
    with pytest.raises(DataError, match="no NER tags"):
        entity_spans(Sentence(words=("a",), id="s"))


@pytest.mark.integration
def test_shared_wnut17_counts_match_provenance():
    try:
        directory = shared_data_dir() / "wnut17"
    except DataError:
        pytest.skip("shared data not found")
    if not directory.is_dir():
        pytest.skip("wnut17 not found")
    expected = {"train": (3394, 62730, 1975), "dev": (1009, 15733, 836), "test": (1287, 23394, 1079)}
    for split, name in WNUT17_FILES.items():
        sentences = read_wnut17(directory / name)
        spans = [span for s in sentences for span in entity_spans(s)]
        assert (len(sentences), sum(len(s) for s in sentences), len(spans)) == expected[split]
