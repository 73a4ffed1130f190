"""Words to subwords: alignment for WordPiece, byte-level BPE and SentencePiece/Unigram fast tokenizers.

A sentence becomes one *encoded sentence*: its content token ids, the word each token belongs to, and
the model inputs ("segments") that cover it. A sentence longer than the model's window is covered by
overlapping windows (see :func:`plan_windows`); every token takes its vector from the window where it
is most central, so it always sees at least ``overlap`` tokens of context on each side when the
sentence allows.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from tokenizers import models, normalizers, pre_tokenizers

from bertology.data.sentence import Sentence
from bertology.errors import DataError, SettingError


@dataclass
class Segment:
    """One model input: ``input_ids`` (specials included) covering content tokens ``[start, stop)``.

    ``owned`` lists, for each content token this segment is responsible for, its index in the segment.
    ``local_positions``/``global_positions`` extend that to every position the segment writes (the
    special tokens too, on the first and last segment): the index in ``input_ids`` and the index in the
    sentence's full sequence [prefix, content, suffix].
    """

    sentence: int
    input_ids: list[int]
    start: int
    stop: int
    owned_tokens: np.ndarray  # global content-token indices this segment writes
    owned_positions: np.ndarray  # their positions inside input_ids
    first: bool
    last: bool
    local_positions: np.ndarray | None = None
    global_positions: np.ndarray | None = None


@dataclass
class EncodedSentence:
    token_ids: list[int]  # content tokens only (no specials)
    word_index: np.ndarray  # [n_tokens] word of each content token
    n_words: int
    n_prefix: int  # special tokens before the content in a single-segment input
    n_suffix: int
    segments: list[Segment]
    unknown_words: int = 0  # words the tokenizer mapped to nothing, encoded as the unknown token instead
    unk_words: int = 0  # words whose every subword is the unknown token (these included)

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)


@dataclass
class WordPieces:
    """What one extraction has tokenized so far, for a corpus encoded a part at a time (:func:`encode_sentences`'s
    ``pieces``): the tokenizer's special-token layout, and a table of each distinct word's subword ids (``words``:
    a word's number in it; ``ids[starts[n]:starts[n] + sizes[n]]`` its pieces; ``empty[n]``: the tokenizer mapped
    it to nothing, so its pieces are the unknown token's). Each distinct word is tokenized once per extraction, not
    once per part (issue 31: the parts of EWT dev share most of their words); a table rather than an array per
    word, so that a corpus's pieces are gathered from it in a few array operations."""

    layout: tuple[list[int], list[int]] | None = None
    words: dict[str, int] = field(default_factory=dict)
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    empty: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def add(self, words: list[str], ids: np.ndarray, sizes: np.ndarray, empty: np.ndarray | None = None) -> None:
        """Append ``words``, whose pieces are ``ids`` cut in ``sizes`` (``empty``: mapped to nothing)."""
        first = len(self.sizes)
        self.words.update(zip(words, range(first, first + len(words))))
        self.starts = np.concatenate([self.starts, len(self.ids) + np.cumsum(sizes) - sizes])
        self.ids = np.concatenate([self.ids, ids])
        self.sizes = np.concatenate([self.sizes, sizes])
        self.empty = np.concatenate([self.empty, np.zeros(len(words), dtype=bool) if empty is None else empty])


class SentenceTooLong(DataError):
    pass


def _special_layout(tokenizer) -> tuple[list[int], list[int]]:
    """Special-token ids the tokenizer puts before and after one sequence (e.g. [CLS] ... [SEP])."""
    probe = tokenizer([["a"]], is_split_into_words=True, add_special_tokens=True)
    ids, word_ids = probe["input_ids"][0], probe.word_ids(0)
    first = word_ids.index(0)
    last = len(word_ids) - 1 - word_ids[::-1].index(0)
    return list(ids[:first]), list(ids[last + 1 :])


def encode_sentences(
    tokenizer,
    sentences: list[Sentence],
    max_length: int,
    long_policy: str = "window",
    overlap: int | None = None,
    first_index: int = 0,
    indices: Sequence[int] | None = None,
    pieces: WordPieces | None = None,
) -> list[EncodedSentence]:
    """Tokenize pre-split words and plan the model inputs of every sentence.

    ``first_index``: the position of ``sentences[0]`` in its corpus (what each segment's ``sentence`` says),
    for a corpus encoded a part at a time; ``indices``: the position of each, for a part that is not a range;
    ``pieces``: what earlier parts tokenized (:class:`WordPieces`, filled as words are tokenized).

    ``long_policy``: ``"window"`` covers long sentences with overlapping windows (default); ``"error"``
    raises :class:`SentenceTooLong` naming the sentence.
    """
    if long_policy not in ("window", "error"):
        raise DataError(f"long_policy {long_policy!r}: expected 'window' or 'error'")
    if pieces is None:
        pieces = WordPieces()
    if pieces.layout is None:
        pieces.layout = _special_layout(tokenizer)
    prefix, suffix = pieces.layout
    capacity = max_length - len(prefix) - len(suffix)
    if capacity < 4:
        raise DataError(f"max_length {max_length} leaves no room for content tokens")
    overlap = capacity // 4 if overlap is None else overlap
    word_lists = [sentence.words for sentence in sentences]
    if any(not word or word.isspace() for word in set().union(*word_lists)):  # each distinct word checked once
        for sentence in sentences:
            position = next((i for i, word in enumerate(sentence.words) if not word or word.isspace()), None)
            if position is not None:
                where = f"line {sentence.source_line}" if sentence.source_line else f"sentence {sentence.id}"
                raise DataError(f"{where}: word {position + 1} is empty; expected a non-empty word")
    unk = tokenizer.unk_token or tokenizer.pad_token
    unk_id = tokenizer.unk_token_id
    positions = range(first_index, first_index + len(sentences)) if indices is None else list(indices)
    encoded = []
    for index, (sentence, (ids, word_index, missing)) in enumerate(zip(sentences, _tokenize_words(tokenizer, word_lists,
                                                                                                  unk, pieces))):
        if len(ids) > capacity and long_policy == "error":
            where = f"line {sentence.source_line}" if sentence.source_line else f"sentence {sentence.id}"
            raise SentenceTooLong(
                f"{where}: {len(ids)} subword tokens exceed the model's {capacity} (max length {max_length} "
                "minus special tokens); use the sliding-window policy or shorten the sentence"
            )
        if len(ids) <= capacity:
            segments = [_whole_segment(positions[index], ids, prefix, suffix)]
        else:
            segments = plan_windows(positions[index], ids, prefix, suffix, capacity, overlap)
        unk_words = 0
        if unk_id is not None and unk_id in ids:
            known = np.bincount(word_index, weights=np.asarray(ids) != unk_id, minlength=len(sentence.words))
            unk_words = int((known == 0).sum())
        encoded.append(
            EncodedSentence(
                token_ids=ids, word_index=word_index, n_words=len(sentence.words),
                n_prefix=len(prefix), n_suffix=len(suffix), segments=segments, unknown_words=missing,
                unk_words=unk_words,
            )
        )
    return encoded


def _tokenize_words(tokenizer, word_lists: list[list[str]], unk: str, pieces: WordPieces | None = None
                    ) -> list[tuple[list[int], np.ndarray, int]]:
    """``(ids, word_index, missing)`` of each pre-split sentence, without special tokens: its subword ids,
    the word of each, and how many of its words the tokenizer mapped to nothing (encoded as ``unk`` instead).

    A fast tokenizer encodes each word of pre-split input on its own (normaliser, pre-tokenizer and model run
    per word, then the pieces are joined), so each distinct word is tokenized once: a fifth of the words of
    a corpus, and most of the time extraction spent outside the model on a small one (issue 31); with
    ``pieces``, once for every part of a corpus encoded a part at a time."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return [_tokenize_slowly(tokenizer, list(words), unk) for words in word_lists]
    # What the tokenizer's own call does before it encodes (transformers sets both on every call).
    if backend.truncation is not None:
        backend.no_truncation()
    if backend.padding is not None:
        backend.no_padding()
    table = pieces if pieces is not None else WordPieces()
    flat = [word for words in word_lists for word in words]
    new = [word for word in dict.fromkeys(flat) if word not in table.words]  # distinct, in order of first use
    whole = _whole_words(backend, new)
    if whole:
        table.add(list(whole), np.fromiter(whole.values(), dtype=np.int64, count=len(whole)),
                  np.ones(len(whole), dtype=np.int64))
        new = [word for word in new if word not in whole]
    if new:
        # Every other distinct word not seen before as one pre-split sequence: one call, each word still encoded
        # on its own (the batch call, which lets go of the GIL while it runs).
        [joined] = backend.encode_batch([new], is_pretokenized=True, add_special_tokens=False)
        new_ids = np.asarray(joined.ids, dtype=np.int64)
        sizes = np.diff(np.searchsorted(np.asarray(joined.word_ids, dtype=np.int64), np.arange(len(new) + 1)))
        empty = sizes == 0
        if empty.any():  # a word that maps to nothing (e.g. a lone control character) becomes the unknown token
            unknown = np.asarray(backend.encode([unk], is_pretokenized=True, add_special_tokens=False).ids,
                                 dtype=np.int64)
            parts = np.split(new_ids, np.cumsum(sizes)[:-1])
            new_ids = np.concatenate([unknown if lost else part for part, lost in zip(parts, empty.tolist())])
            sizes = np.where(empty, len(unknown), sizes)
        table.add(new, new_ids, sizes, empty)
    codes = np.fromiter(map(table.words.__getitem__, flat), dtype=np.int64, count=len(flat))
    # The corpus's subwords, word by word: each word's pieces gathered from the table.
    per_word = table.sizes[codes]
    ends = np.cumsum(per_word)
    ids = table.ids[np.repeat(table.starts[codes] - (ends - per_word), per_word)
                    + np.arange(int(ends[-1]) if len(ends) else 0)]
    word_counts = np.fromiter((len(words) for words in word_lists), dtype=np.int64, count=len(word_lists))
    word_bounds = np.concatenate([[0], np.cumsum(word_counts)])
    token_bounds = np.concatenate([[0], ends])[word_bounds]
    position = np.arange(len(codes), dtype=np.int64) - np.repeat(word_bounds[:-1], word_counts)
    word_index = np.repeat(position, per_word)
    missing = table.empty[codes] if table.empty.any() else None
    if missing is None:
        lost = [0] * len(word_lists)
    else:  # words mapped to nothing, per sentence: differences of their running count at the sentence bounds
        running = np.concatenate([[0], np.cumsum(missing)])
        lost = (running[word_bounds[1:]] - running[word_bounds[:-1]]).tolist()
    ids_list, bounds = ids.tolist(), token_bounds.tolist()  # Python ints: cheaper to slice with, per sentence
    return [(ids_list[t0:t1], word_index[t0:t1], lost[i]) for i, (t0, t1) in enumerate(zip(bounds, bounds[1:]))]


def _whole_words(backend, words: list[str]) -> dict[str, int]:
    """The ``words`` a WordPiece tokenizer with BERT's normaliser and pre-tokenizer turns into one piece, with
    its id, found by a look-up in its vocabulary rather than through the tokenizer (issue 31: 78% of EWT dev's
    distinct words for MiniLM; the Rust call costs about 3.5 µs a word, the look-up a tenth of that).

    Only words of ASCII letters and digits: BERT's normaliser leaves them as they are (lowercased when the
    model is uncased), its pre-tokenizer does not split them, and WordPiece tries the whole word first, so one
    in the vocabulary is one piece. Empty for any other tokenizer, or when an added token could match inside
    such a word (one whose text, as written or normalised, is ASCII letters and digits)."""
    model, normalizer = backend.model, backend.normalizer
    if not (words and isinstance(model, models.WordPiece) and isinstance(normalizer, normalizers.BertNormalizer)
            and isinstance(backend.pre_tokenizer, pre_tokenizers.BertPreTokenizer)
            and isinstance(getattr(normalizer, "lowercase", None), bool)):
        return {}
    added = [token.content for token in backend.get_added_tokens_decoder().values()]
    if any(text.isascii() and text.isalnum() for content in added
           for text in (content, normalizer.normalize_str(content))):
        return {}
    lookup, lower, longest = model.token_to_id, normalizer.lowercase, model.max_input_chars_per_word
    found = {}
    for word in words:
        if word.isascii() and word.isalnum() and len(word) <= longest:
            token = lookup(word.lower() if lower else word)
            if token is not None:
                found[word] = token
    return found


def _tokenize_slowly(tokenizer, words: list[str], unk: str) -> tuple[list[int], np.ndarray, int]:
    """One sentence through the tokenizer's own call (a tokenizer without a fast backend)."""
    batch = tokenizer([words], is_split_into_words=True, add_special_tokens=False)
    ids, word_ids = batch["input_ids"][0], batch.word_ids(0)
    missing = set(range(len(words))) - {w for w in word_ids if w is not None}
    if missing:
        words = [unk if i in missing else w for i, w in enumerate(words)]
        batch = tokenizer([words], is_split_into_words=True, add_special_tokens=False)
        ids, word_ids = batch["input_ids"][0], batch.word_ids(0)
    return list(ids), np.asarray(word_ids, dtype=np.int64), len(missing)


#: 0, 1, 2, ... read-only: a whole segment's positions are views of it (one slice each rather than three new
#: arrays per sentence, on the thread that makes the batches).
_POSITIONS = np.arange(1 << 16, dtype=np.int64)
_POSITIONS.flags.writeable = False


def _whole_segment(sentence: int, ids: list[int], prefix: list[int], suffix: list[int]) -> Segment:
    """The one segment of a sentence that fits the model: what :func:`plan_windows` gives, made directly."""
    n, n_prefix = len(ids), len(prefix)
    total = n_prefix + n + len(suffix)
    positions = _POSITIONS[:total] if total <= len(_POSITIONS) else np.arange(total, dtype=np.int64)
    return Segment(sentence=sentence, input_ids=prefix + ids + suffix, start=0, stop=n, owned_tokens=positions[:n],
                   owned_positions=positions[n_prefix:n_prefix + n], first=True, last=True,
                   local_positions=positions, global_positions=positions)


def plan_windows(
    sentence: int, ids: list[int], prefix: list[int], suffix: list[int], capacity: int, overlap: int
) -> list[Segment]:
    """Cover ``ids`` with windows of ``capacity`` tokens overlapping by at least ``2 * overlap``.

    Each token is owned by the window in which it is furthest from an edge (ties go to the earlier one).
    """
    n = len(ids)
    if n <= capacity:
        starts = [0]
    else:
        stride = max(1, capacity - 2 * overlap)
        starts = list(range(0, n - capacity, stride)) + [n - capacity]
    segments = []
    bounds = []
    for i, start in enumerate(starts):
        stop = min(start + capacity, n)
        # Ownership boundaries: midpoint of the overlap with the neighbouring windows.
        lo = 0 if i == 0 else (start + min(starts[i - 1] + capacity, n)) // 2
        hi = n if i == len(starts) - 1 else (starts[i + 1] + stop) // 2
        bounds.append((start, stop, lo, hi))
    n_prefix, n_suffix = len(prefix), len(suffix)
    for i, (start, stop, lo, hi) in enumerate(bounds):
        owned = np.arange(lo, hi, dtype=np.int64)
        first, last = i == 0, i == len(starts) - 1
        window = n_prefix + (stop - start) + n_suffix
        local = [np.arange(n_prefix)] if first else []
        local.append(owned - start + n_prefix)
        if last:
            local.append(np.arange(window - n_suffix, window))
        local_positions = np.concatenate(local).astype(np.int64)
        # In the full sequence, content token t sits at n_prefix + t and the suffix after all n tokens.
        global_positions = local_positions + start
        if last:
            global_positions[len(local_positions) - n_suffix :] = np.arange(n_suffix) + n_prefix + n
        segments.append(
            Segment(
                sentence=sentence, input_ids=prefix + ids[start:stop] + suffix, start=start, stop=stop,
                owned_tokens=owned, owned_positions=owned - start + n_prefix, first=first, last=last,
                local_positions=local_positions, global_positions=global_positions,
            )
        )
    return segments


#: What pools a model without a [CLS] token (a decoder such as GPT-2) supports.
NO_CLS_POOLS = "mean (one vector per sentence), word-mean, word-first, word-last or tokens"


def check_pool(tokenizer, pool: str, name: str = "the model") -> None:
    """Refuse ``cls`` pooling for a tokenizer without a [CLS] token (a decoder such as GPT-2): position 0
    would be the first word's first subword, not a sentence summary. Call before computing anything."""
    if pool == "cls" and getattr(tokenizer, "cls_token", None) is None:
        raise SettingError("pool", pool, f"{name} has no [CLS] token (its tokenizer defines none; a decoder such as "
                           f"GPT-2), so there is no sentence vector to take; use {NO_CLS_POOLS}", shown="cls")


def pool_rows(encoded: EncodedSentence, pool: str) -> np.ndarray:
    """The stored row each position of the full sequence [prefix, content, suffix] is pooled into.

    -1 marks positions no row takes. Every pool is then one sum per row divided by its count: the mean
    of a word's subwords (``word-mean``), its first or last subword, ``[CLS]`` (or the first content
    token of a model without one), the mean of all content tokens, or every content token.
    """
    n_prefix, n_tokens = encoded.n_prefix, encoded.n_tokens
    rows = np.full(n_prefix + n_tokens + encoded.n_suffix, -1, dtype=np.int64)
    content = slice(n_prefix, n_prefix + n_tokens)
    index = encoded.word_index
    if pool == "word-mean":
        rows[content] = index
    elif pool in ("word-first", "word-last"):
        edge = np.ones(n_tokens, dtype=bool)
        if pool == "word-first":
            edge[1:] = index[1:] != index[:-1]
        else:
            edge[:-1] = index[:-1] != index[1:]
        rows[content] = np.where(edge, index, -1)
    elif pool == "cls":
        rows[0] = 0
    elif pool == "mean":
        rows[content] = 0
    elif pool == "tokens":
        rows[content] = np.arange(n_tokens)
    else:
        raise DataError(f"unknown pooling {pool!r}")
    return rows


def word_groups(encoded: EncodedSentence) -> np.ndarray:
    """Group of each position of the full token sequence [prefix, content, suffix] for word-level maps.

    Group 0 holds the leading special tokens, groups 1..n the words, group n+1 the trailing specials.
    """
    return np.concatenate(
        [
            np.zeros(encoded.n_prefix, dtype=np.int64),
            encoded.word_index + 1,
            np.full(encoded.n_suffix, encoded.n_words + 1, dtype=np.int64),
        ]
    )


def word_level_attention(token_attention, groups: np.ndarray):
    """Clark et al. (2019): attention *to* a word sums over its subwords, *from* a word averages them.

    ``token_attention``: a torch tensor [..., T, T]; ``groups``: the group of each of the T positions
    (see :func:`word_groups`). Returns [..., G, G] whose rows still sum to 1.
    """
    groups = torch.as_tensor(groups)
    n_groups = int(groups.max()) + 1
    membership = torch.zeros(len(groups), n_groups, dtype=token_attention.dtype)
    membership[torch.arange(len(groups)), groups] = 1.0
    counts = membership.sum(0).clamp(min=1)
    return (membership.T @ (token_attention @ membership)) / counts[:, None]


def warn_unknown(encoded: list[EncodedSentence]) -> int:
    count = sum(e.unknown_words for e in encoded)
    if count:
        warnings.warn(f"{count} word(s) produced no subword tokens and were encoded as the unknown token",
                      stacklevel=2)
    return count
