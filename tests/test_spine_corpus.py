"""Corpus reading: blank lines, formats by content, the right line for bad bytes, broken trees."""

import gzip

import pytest

from bertology.data import Corpus, detect_format, read_conllu, read_corpus, read_text
from bertology.errors import DataError

ROW = "{id}\t{form}\t_\tNOUN\tNN\t_\t{head}\t{rel}\t_\t_\n"


def conllu(*sentences):
    text = ""
    for heads in sentences:
        text += "# sent_id = s\n" + "".join(
            ROW.format(id=i + 1, form=f"w{i}", head=h, rel="root" if h == 0 else "dep") for i, h in enumerate(heads))
        text += "\n"
    return text


def test_blank_lines_in_text_are_skipped_and_counted(tmp_path):
    path = tmp_path / "para.txt"
    path.write_text("First paragraph .\n\nSecond one here .\n\n\nThird .\n\n")
    corpus = read_corpus(path)
    assert [s.words[0] for s in corpus] == ["First", "Second", "Third"]
    assert corpus.blank_lines_skipped == 4 and corpus.format == "text"
    assert [s.source_line for s in corpus] == [1, 3, 6]  # ids and lines still point into the file
    assert corpus.notes() == [f"{path}: skipped 4 blank line(s)"]
    plain = tmp_path / "plain.txt"
    plain.write_text("one\ntwo\n")
    assert read_text(plain).blank_lines_skipped == 0 and read_text(plain).notes() == []
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n")
    with pytest.raises(DataError, match="no sentences found \\(2 blank line"):
        read_corpus(blank)


def test_senteval_txt_is_read_as_senteval(tmp_path):
    path = tmp_path / "bigram_shift.txt"
    path.write_text("te\tO\tThe dog barked .\ntr\tI\tdog The barked .\n\n")
    corpus = read_corpus(path)
    assert detect_format(path) == "senteval" and corpus.format == "senteval"
    assert corpus[0].words == ("The", "dog", "barked", ".") and corpus[0].label == "O" and corpus[1].split == "train"  # tr
    # a bad line later on is named, not read as a plain sentence
    path.write_text("te\tO\tThe dog barked .\nThe cat sat .\n")
    with pytest.raises(DataError, match="bigram_shift.txt:2: expected 3 tab-separated columns"):
        read_corpus(path)


def test_conllu_content_in_a_txt_and_plain_text_with_tabs(tmp_path):
    path = tmp_path / "tree.txt"
    path.write_text(conllu((2, 0)))
    assert detect_format(path) == "conllu" and read_corpus(path)[0].heads == (2, 0)
    tabs = tmp_path / "tabs.txt"
    tabs.write_text("label\tsome sentence\n")
    assert detect_format(tabs) == "text"
    hashtags = tmp_path / "tweets.txt"
    hashtags.write_text("#bertology is fun\nplain words\n")
    assert detect_format(hashtags) == "text" and len(read_corpus(hashtags)) == 2
    gz = tmp_path / "s.txt.gz"
    with gzip.open(gz, "wt") as handle:
        handle.write("va\tPAST\tHe walked .\n")
    assert read_corpus(gz)[0].split == "dev"


def test_non_utf8_names_its_own_line(tmp_path):
    path = tmp_path / "late.txt"
    # far past the first block a decoder reads, so a block-wise reader names the wrong line
    path.write_bytes(b"fine words here\n" * 3000 + "na\u00efve\n".encode("latin-1") + b"more\n")
    with pytest.raises(DataError, match=r"late.txt:3001: not valid UTF-8 \(byte b'\\xef' at byte 3"):
        read_corpus(path)
    conll = tmp_path / "late.conllu"
    conll.write_bytes(conllu((0,)).encode() * 500 + "1\tna\u00efve\t_\t_\t_\t_\t0\troot\t_\t_\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"late.conllu:1501: not valid UTF-8"):
        read_conllu(conll)


def test_bom_is_not_part_of_the_first_word(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffHello world\n".encode("utf-8"))
    assert read_corpus(path)[0].words == ("Hello", "world")


@pytest.mark.parametrize("heads, line, message", [
    ((0, 3, 2), 4, "HEAD values contain a cycle \\(2 -> 3 -> 2\\)"),
    ((0, 1, 0), 5, "expected exactly one word with HEAD 0 .*found 2 \\(words 1, 3\\)"),
    ((2, 2), 4, "word 2 is its own head"),
])
def test_broken_trees_are_errors_naming_file_and_line(tmp_path, heads, line, message):
    path = tmp_path / "broken.conllu"
    path.write_text(conllu((2, 0)) + conllu(heads))  # the broken sentence starts at line 5 (its comment)
    with pytest.raises(DataError, match=f"broken.conllu:{line + 3}: {message}"):
        read_corpus(path)


def test_sentences_without_heads_are_still_read(tmp_path):
    path = tmp_path / "plain.conllu"
    path.write_text("1\tHi\t_\tINTJ\t_\t_\t_\t_\t_\t_\n\n")
    assert read_conllu(path)[0].heads is None


def test_corpus_is_a_list():
    corpus = Corpus([], format="text")
    assert isinstance(corpus, list) and corpus.notes() == []


def test_a_conllu_file_read_again_unchanged_is_parsed_once(tmp_path, monkeypatch):
    """The report reads UD EWT's files in several sections: an unchanged file is parsed once (issue 31); a
    changed one is read again, and each caller gets its own list."""
    import bertology.data.corpus as corpus

    parsed = []
    parse = corpus._read_conllu
    monkeypatch.setattr(corpus, "_read_conllu", lambda path: parsed.append(path) or parse(path))
    path = tmp_path / "a.conllu"
    path.write_text("1\tHi\t_\tINTJ\t_\t_\t0\troot\t_\t_\n\n")
    first, again = read_conllu(path), read_conllu(str(path))
    assert len(parsed) == 1 and first == again and first is not again and again.format == "conllu"
    again.clear()
    assert read_conllu(path)[0].words == ("Hi",)
    path.write_text("1\tHello\t_\tINTJ\t_\t_\t0\troot\t_\t_\n\n")
    assert read_conllu(path)[0].words == ("Hello",) and len(parsed) == 2
