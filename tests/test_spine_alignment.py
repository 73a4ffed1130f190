import unicodedata

import numpy as np
import pytest

from bertology.data import Sentence, sentences_from_strings
from bertology.errors import DataError
from bertology.extraction.alignment import SentenceTooLong, encode_sentences, plan_windows, word_groups
from bertology.models.tiny import tiny_tokenizer

TRICKY = ["Floccinaucinihilipilification", "café", "naïve", "Zürich", "3.14", "1,000", "isn't", "!", "...",
          "someone@example.com", "+1-555-0100", "(", "xyzzyqwv"]


def _normalise(word: str, lowercase: bool, strip_accents: bool) -> str:
    if lowercase:
        word = word.lower()
    if strip_accents:
        word = "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")
    return word


@pytest.mark.parametrize("family,lowercase,accents", [("bert", True, True), ("roberta", False, False),
                                                      ("albert", True, False)])
def test_every_word_gets_its_own_subwords(family, lowercase, accents):
    tokenizer = tiny_tokenizer(family)
    sentence = Sentence(words=tuple(TRICKY), id="tricky")
    [encoded] = encode_sentences(tokenizer, [sentence], max_length=128)
    assert encoded.n_words == len(TRICKY)
    assert sorted(set(encoded.word_index.tolist())) == list(range(len(TRICKY)))
    assert np.all(np.diff(encoded.word_index) >= 0), "subwords of a word must be contiguous and in order"
    tokens = tokenizer.convert_ids_to_tokens(encoded.token_ids)
    for w, word in enumerate(TRICKY):
        pieces = [t for t, i in zip(tokens, encoded.word_index) if i == w]
        text = tokenizer.convert_tokens_to_string(pieces).strip().replace(" ", "")
        expected = _normalise(word, lowercase, accents)
        if "<unk>" in pieces or "[UNK]" in pieces:
            continue
        assert text == expected, (word, pieces)
    assert (encoded.word_index == 0).sum() > 3, "the long word must split into many pieces"


@pytest.mark.integration
def test_minilm_wordpiece_alignment(minilm):
    [encoded] = encode_sentences(minilm.tokenizer, [Sentence(words=tuple(TRICKY), id="t")], minilm.max_length)
    tokens = minilm.tokenizer.convert_ids_to_tokens(encoded.token_ids)
    first_word = [t for t, i in zip(tokens, encoded.word_index) if i == 0]
    assert len(first_word) > 3 and first_word[1].startswith("##")
    assert word_groups(encoded)[0] == 0 and word_groups(encoded)[-1] == len(TRICKY) + 1


def test_empty_word_rejected_with_position():
    sentence = Sentence(words=("a", "", "b"), id="s", source_line=7)
    with pytest.raises(DataError, match="line 7: word 2 is empty"):
        encode_sentences(tiny_tokenizer("bert"), [sentence], 128)


def test_empty_sentence_rejected():
    with pytest.raises(DataError, match="empty sentence"):
        sentences_from_strings(["ok", "   "])


def test_long_sentence_policy_error_names_the_line():
    sentence = Sentence(words=tuple(["word"] * 300), id="long", source_line=12)
    with pytest.raises(SentenceTooLong, match="line 12: .*exceed"):
        encode_sentences(tiny_tokenizer("bert"), [sentence], 64, long_policy="error")


@pytest.mark.parametrize("n", [5, 61, 62, 63, 200, 1000])
def test_windows_own_every_token_exactly_once_with_context(n):
    capacity, overlap = 62, 15
    segments = plan_windows(0, list(range(n)), [101], [102], capacity, overlap)
    owned = np.concatenate([s.owned_tokens for s in segments])
    assert sorted(owned.tolist()) == list(range(n))
    for s in segments:
        assert len(s.input_ids) <= capacity + 2
        assert s.input_ids[0] == 101 and s.input_ids[-1] == 102
        # each owned token keeps context on both sides unless it is near the sentence's own edge
        for token in s.owned_tokens:
            left, right = token - s.start, s.stop - 1 - token
            assert left >= min(overlap, token) and right >= min(overlap, n - 1 - token)
    assert segments[0].first and segments[-1].last


@pytest.mark.parametrize("family", ["bert", "roberta", "albert"])
def test_encoded_sentences_match_the_tokenizers_own_call_sentence_by_sentence(family):
    """encode_sentences builds a corpus's inputs from flat arrays (issue 31); each sentence is still what the
    tokenizer's own call on it gives: its ids, the word of each, its input ids with the specials, its windows,
    the words mapped to nothing or wholly to the unknown token, and a part encoded after another alike."""
    from bertology.extraction.alignment import WordPieces, _special_layout, _tokenize_slowly

    tokenizer = tiny_tokenizer(family)
    unk = tokenizer.unk_token or tokenizer.pad_token
    words = [tuple(TRICKY), ("a",), ("a", "\x07", "b"), ("\x07",), ("xyzzyqwv", "qqqq"),
             tuple(["word", "zz"] * 40), tuple(TRICKY[i % len(TRICKY)] for i in range(90))]
    sentences = [Sentence(words=w, id=f"s{i}") for i, w in enumerate(words)]
    prefix, suffix = _special_layout(tokenizer)
    pieces = WordPieces()
    encoded = (encode_sentences(tokenizer, sentences[:3], 48, pieces=pieces)
               + encode_sentences(tokenizer, sentences[3:], 48, first_index=3, pieces=pieces))
    capacity = 48 - len(prefix) - len(suffix)
    assert any(len(e.segments) > 1 for e in encoded), "a sentence longer than the model must be windowed"
    for i, (sentence, got) in enumerate(zip(sentences, encoded)):
        ids, index, lost = _tokenize_slowly(tokenizer, list(sentence.words), unk)
        assert got.token_ids == ids and got.unknown_words == lost and got.n_words == len(sentence.words)
        np.testing.assert_array_equal(got.word_index, index)
        known = np.bincount(index, weights=np.asarray(ids) != tokenizer.unk_token_id, minlength=len(sentence.words))
        assert got.unk_words == int((known == 0).sum())
        want = plan_windows(i, ids, prefix, suffix, capacity, capacity // 4)
        assert [s.input_ids for s in got.segments] == [s.input_ids for s in want]
        for segment, other in zip(got.segments, want):
            assert (segment.sentence, segment.start, segment.stop, segment.first, segment.last) == \
                (other.sentence, other.start, other.stop, other.first, other.last)
            for name in ("owned_tokens", "owned_positions", "local_positions", "global_positions"):
                np.testing.assert_array_equal(getattr(segment, name), getattr(other, name))
    if family == "bert":  # WordPiece maps a lone control character to nothing, so to its unknown token
        assert sum(e.unk_words for e in encoded) > 0
