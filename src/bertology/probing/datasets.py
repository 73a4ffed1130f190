"""Probing datasets: which examples, which labels, and how their features are read from a store.

Every task is a list of examples per split (``train``/``dev``/``test``) over a *pool* of sentences that
is extracted once per encoder. An example points into the pool:

* ``token``    (sentence, word)            -> the word's vector (UPOS, XPOS)
* ``edge``     (sentence, dependent, head) -> ``[dep; head; dep * head]`` (dependency label of the arc)
* ``span``     (sentence, start, end)      -> mean of the span's word vectors (WNUT-17 entity type)
* ``sentence`` (sentence,)                 -> mean of the sentence's word vectors (SentEval tasks)

Word vectors come from a ``word-mean`` store, i.e. each word is already the mean of its subwords.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from bertology.data import Sentence, read_conllu, read_senteval
from bertology.data.treebank import base_relation, find_splits
from bertology.data.wnut17 import WNUT17_FILES, entity_spans, read_wnut17
from bertology.errors import DataError
from bertology.probing.controls import (
    ControlTask,
    FirstWordControlTask,
    SentenceControlTask,
    type_key,
)
from bertology.probing.names import LEVELS

SPLITS = ("train", "dev", "test")
UD_TASKS = ("upos", "xpos", "deprel")
NER_TASKS = ("ner",)

class EmptySplitError(DataError):
    """A task has no examples in a split of its corpus: the task cannot be built from it."""


@dataclass
class SplitExamples:
    """Examples of one split: ``refs`` ``[n, k]`` int indices into the pool (see module doc), labels,
    and the lexical key each example's control label is a function of."""

    refs: np.ndarray
    labels: np.ndarray
    control_keys: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, index: np.ndarray) -> "SplitExamples":
        keys = [self.control_keys[i] for i in index] if self.control_keys else []
        return SplitExamples(self.refs[index], self.labels[index], keys)


@dataclass
class ProbingDataset:
    """One task over one sentence pool per split."""

    name: str
    level: str
    source: str  # which sentence pool: "ud", "wnut17" or "senteval"
    pools: dict[str, list[Sentence]]
    splits: dict[str, SplitExamples]
    notes: list[str] = field(default_factory=list)

    def control_labels(self, seed: int, types: str = "lower", sentence_control: str = "bag-of-words") -> dict[str, np.ndarray]:
        """Hewitt-and-Liang control labels for every split (label distribution from train); word types per
        ``types`` (``"lower"`` or ``"exact"``). Sentence tasks: ``sentence_control`` ``"first-word"`` or
        ``"bag-of-words"`` (:mod:`bertology.probing.controls`)."""
        train = self.splits["train"]
        if self.level == "sentence":
            sentences = {s: [self.pools[s][i].words for i in ex.refs[:, 0]] for s, ex in self.splits.items()}
            if sentence_control == "first-word":
                control = FirstWordControlTask(train.labels, seed=seed, types=types)
            elif sentence_control == "bag-of-words":
                control = SentenceControlTask(train.labels, sentences["train"], seed=seed, types=types)
            else:
                raise DataError(f"sentence control {sentence_control!r}; expected first-word or bag-of-words")
            return {s: control.labels(sentences[s]) for s in self.splits}
        control = ControlTask(train.labels, seed=seed)
        return {s: control.labels(self.type_keys(s, types)) for s in self.splits}

    def type_keys(self, split: str, types: str = "lower") -> list:
        """The lexical key of every example of ``split`` under a type definition (exact or lower-cased)."""
        return [type_key(k, types) for k in self.splits[split].control_keys]


# ------------------------------------------------------------------------------------------------
# features from word vectors


def features(level: str, word_vectors: np.ndarray, offsets: np.ndarray, refs: np.ndarray,
             sentence_means: np.ndarray | None = None) -> np.ndarray:
    """Features of ``refs`` from one layer's word vectors ``[total_words, dim]`` (rows of sentence i are
    ``offsets[i]:offsets[i+1]``). Returns ``[n, dim]`` (``[n, 3*dim]`` for edges). ``sentence_means``
    (every sentence's mean vector, shared by several tasks on one store) saves recomputing them."""
    if level == "token":
        return word_vectors[offsets[refs[:, 0]] + refs[:, 1]]
    if level == "edge":
        dep = word_vectors[offsets[refs[:, 0]] + refs[:, 1]]
        head = word_vectors[offsets[refs[:, 0]] + refs[:, 2]]
        return np.concatenate([dep, head, dep * head], axis=1)
    if level == "sentence":
        if sentence_means is None:
            sentence_means = sentence_mean_vectors(word_vectors, offsets)
        return sentence_means[refs[:, 0]]
    # Span means from a running sum: one pass, no Python loop over examples.
    cumulative = np.concatenate([np.zeros((1, word_vectors.shape[1]), np.float64),
                                 np.cumsum(word_vectors, axis=0, dtype=np.float64)])
    if level == "span":
        start = offsets[refs[:, 0]] + refs[:, 1]
        stop = offsets[refs[:, 0]] + refs[:, 2]
    else:
        raise DataError(f"unknown example level {level!r}; expected one of {', '.join(LEVELS)}")
    return ((cumulative[stop] - cumulative[start]) / (stop - start)[:, None]).astype(np.float32)


#: Rows of word vectors summed at once by :func:`sentence_mean_vectors`: their float64 copy stays in the cache.
MEAN_BLOCK_ROWS = 16384


def sentence_mean_vectors(word_vectors: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The mean word vector of every sentence, ``[n_sentences, dim]`` float32 (summed in float64).

    Whole sentences about ``MEAN_BLOCK_ROWS`` words at a time: each sentence's sum is the same as from one
    float64 copy of every row, without making that copy (twice as fast on a treebank's layer)."""
    offsets = np.asarray(offsets)
    counts = np.diff(offsets)
    n = len(counts)
    if n and not counts.all():  # an empty sentence has no mean: as before, numpy's reduceat decides
        sums = np.add.reduceat(word_vectors.astype(np.float64, copy=False), offsets[:-1], axis=0)
        return (sums / counts[:, None]).astype(np.float32)
    out = np.empty((n, word_vectors.shape[1]), dtype=np.float32)
    start = 0
    while start < n:
        stop = int(np.searchsorted(offsets, offsets[start] + MEAN_BLOCK_ROWS, side="right")) - 1
        stop = min(n, max(stop, start + 1))
        block = word_vectors[offsets[start]:offsets[stop]].astype(np.float64)
        sums = np.add.reduceat(block, offsets[start:stop] - offsets[start], axis=0)
        out[start:stop] = (sums / counts[start:stop, None]).astype(np.float32)
        start = stop
    return out


# ------------------------------------------------------------------------------------------------
# selection and caps


def shuffled(sentences: Sequence[Sentence], data_seed: int = 0) -> list[Sentence]:
    """A fixed shuffle (independent of the probe seeds, so every seed shares one extracted store)."""
    order = np.random.default_rng(data_seed).permutation(len(sentences))
    return [sentences[i] for i in order]


def cap_sentences(sentences: list[Sentence], per_sentence: Sequence[int], max_examples: int | None) -> list[Sentence]:
    """The shortest prefix of ``sentences`` holding at least ``max_examples`` examples."""
    if max_examples is None:
        return sentences
    total = np.cumsum(per_sentence)
    cut = int(np.searchsorted(total, max_examples)) + 1
    return sentences[:cut]


def _cap_examples(examples: SplitExamples, max_examples: int | None) -> SplitExamples:
    if max_examples is None or len(examples) <= max_examples:
        return examples
    return examples.take(np.arange(max_examples))


# ------------------------------------------------------------------------------------------------
# UD: UPOS, XPOS, dependency labels


def _tag_examples(sentences: Sequence[Sentence], column: str) -> tuple[list, list]:
    refs, labels = [], []
    for i, sentence in enumerate(sentences):
        tags = getattr(sentence, column)
        if tags is None:
            raise DataError(f"sentence {sentence.id!r} (line {sentence.source_line}) has no {column.upper()} column")
        for j, tag in enumerate(tags):
            if tag in ("_", ""):
                continue
            refs.append((i, j))
            labels.append(tag)
    return refs, labels


def upos_examples(sentences: Sequence[Sentence]) -> tuple[list, list]:
    """Token task: every word with its universal part of speech."""
    return _tag_examples(sentences, "upos")


def xpos_examples(sentences: Sequence[Sentence]) -> tuple[list, list]:
    """Token task: every word with its language-specific part of speech."""
    return _tag_examples(sentences, "xpos")


#: The position task's last class: words at this position or later are one class (``"16+"``), so the tails of
#: long sentences do not make classes of a few words each.
POSITION_CAP = 16


def position_examples(sentences: Sequence[Sentence]) -> tuple[list, list]:
    """Token task (Lin et al. 2019's linear position): every word with its position in the sentence as a label,
    ``"0"`` for the first word up to ``"15"``, and ``"16+"`` for every later word."""
    refs, labels = [], []
    for i, sentence in enumerate(sentences):
        for j in range(len(sentence.words)):
            refs.append((i, j))
            labels.append(str(j) if j < POSITION_CAP else f"{POSITION_CAP}+")
    return refs, labels


def deprel_examples(sentences: Sequence[Sentence]) -> tuple[list, list]:
    """Edge task: every arc dependent -> head with its universal relation (root arcs left out)."""
    refs, labels = [], []
    for i, sentence in enumerate(sentences):
        if sentence.heads is None:
            continue
        for j, (head, rel) in enumerate(zip(sentence.heads, sentence.deprels)):
            # The root arc has no head word; an edge probe needs two words, so it is left out.
            if head == 0:
                continue
            refs.append((i, j, head - 1))
            labels.append(base_relation(rel))
    return refs, labels


def entity_examples(sentences: Sequence[Sentence]) -> tuple[list, list]:
    """Span task: every gold entity span (WNUT-17 BIO tags) with its type."""
    refs, labels = [], []
    for i, sentence in enumerate(sentences):
        for start, end, label in entity_spans(sentence):
            refs.append((i, start, end))
            labels.append(label)
    return refs, labels


def control_keys(level: str, refs: np.ndarray, sentences: Sequence[Sentence]) -> list:
    """The lexical item each example's control label is a function of (Hewitt and Liang): the word
    (token), the dependent (edge), the tuple of the span's words (span); none for sentences. Forms are
    kept as written; the type definition (exact or lower-cased) is applied when labels are drawn."""
    if level == "token" or level == "edge":
        return [sentences[i].words[j] for i, j in refs[:, :2].tolist()]
    if level == "span":
        return [tuple(sentences[i].words[a:b]) for i, a, b in refs[:, :3].tolist()]
    return []


#: How many columns each level's ``refs`` has (see the module doc).
REF_WIDTH = {"token": 2, "edge": 3, "span": 3, "sentence": 1}


def as_examples(built, level: str, sentences: Sequence[Sentence], task: str, split: str) -> SplitExamples:
    """A builder's output (``(refs, labels)`` or :class:`SplitExamples`) checked against the pool, with
    control keys derived from the level when the builder gave none."""
    if isinstance(built, SplitExamples):
        refs, labels, keys = built.refs, built.labels, built.control_keys
    else:
        try:
            refs, labels = built
        except (TypeError, ValueError):
            raise DataError(f"task {task!r}: its builder returned {type(built).__name__}; expected "
                            "(refs, labels) or SplitExamples") from None
        keys = []
    width = REF_WIDTH[level]
    refs = np.asarray(refs, dtype=np.int64).reshape(-1, width) if len(refs) else np.zeros((0, width), np.int64)
    labels = np.asarray(labels, dtype=object)
    if len(labels) != len(refs):
        raise DataError(f"task {task!r} ({split}): {len(refs)} examples but {len(labels)} labels")
    if len(refs):
        lengths = np.asarray([len(s) for s in sentences])
        if refs[:, 0].min() < 0 or refs[:, 0].max() >= len(sentences):
            raise DataError(f"task {task!r} ({split}): a sentence index outside 0..{len(sentences) - 1}")
        words = refs[:, 1:] if level != "span" else np.stack([refs[:, 1], refs[:, 2] - 1], axis=1)
        if words.size and ((words < 0).any() or (words >= lengths[refs[:, 0], None]).any()):
            raise DataError(f"task {task!r} ({split}): a word index outside its sentence")
        if level == "span" and (refs[:, 2] <= refs[:, 1]).any():
            raise DataError(f"task {task!r} ({split}): an empty span (end <= start)")
    if not keys:
        keys = control_keys(level, refs, sentences)
    return SplitExamples(refs, labels, list(keys))


def build_dataset(task: str, level: str, source: str, builder, pools: dict[str, list[Sentence]],
                  max_train: int | None, max_eval: int | None, notes: Sequence[str] = ()) -> ProbingDataset:
    """Run a task's ``builder`` on every split of its sentence pool and cap the examples (first N)."""
    if level not in LEVELS:
        raise DataError(f"task {task!r}: level {level!r}; expected one of {', '.join(LEVELS)}")
    splits = {}
    for split in SPLITS:
        examples = as_examples(builder(pools[split]), level, pools[split], task, split)
        if len(examples) == 0:
            raise EmptySplitError(f"{task}: no {split} examples in the {source} {split} sentences")
        splits[split] = _cap_examples(examples, max_train if split == "train" else max_eval)
    return ProbingDataset(task, level, source, pools, splits, list(notes))


def load_ud_pools(treebank: str | Path, max_sentences: int | None = None) -> dict[str, list[Sentence]]:
    """The sentences of a UD treebank's train/dev/test files, shuffled (fixed seed), at most
    ``max_sentences`` per split."""
    pools = {}
    for split, path in find_splits(treebank, required=SPLITS).items():
        sentences = shuffled(read_conllu(path))
        pools[split] = sentences[:max_sentences] if max_sentences is not None else sentences
    return pools


def load_wnut_pools(folder: str | Path, max_sentences: int | None = None) -> dict[str, list[Sentence]]:
    """WNUT-17's train/dev/test sentences (with their BIO tags), shuffled, at most ``max_sentences`` each."""
    folder = Path(folder)
    pools = {}
    for split, name in WNUT17_FILES.items():
        sentences = shuffled(read_wnut17(folder / name))
        pools[split] = sentences[:max_sentences] if max_sentences is not None else sentences
    return pools


def prefix_by_words(sentences: list[Sentence], max_words: int | None) -> SplitExamples:
    """The shortest prefix of ``sentences`` holding ``max_words`` words, as sentence examples (no labels):
    the sentences a structural probe trains on."""
    kept = cap_sentences(sentences, [len(s) for s in sentences], max_words)
    return SplitExamples(np.arange(len(kept), dtype=np.int64)[:, None], np.zeros(len(kept), dtype=object))


def keep_referenced(datasets: Sequence[ProbingDataset]) -> None:
    """Shrink each pool to the sentences some example refers to (in pool order) and renumber the refs,
    so extraction encodes only sentences that are used."""
    for split in SPLITS:
        used = np.unique(np.concatenate([d.splits[split].refs[:, 0] for d in datasets]))
        pool = datasets[0].pools[split]
        new_index = np.full(len(pool), -1, dtype=np.int64)
        new_index[used] = np.arange(len(used))
        trimmed = [pool[i] for i in used]
        for dataset in datasets:
            examples = dataset.splits[split]
            refs = examples.refs.copy()
            refs[:, 0] = new_index[refs[:, 0]]
            dataset.splits[split] = SplitExamples(refs, examples.labels, examples.control_keys)
            dataset.pools = {**dataset.pools, split: trimmed}


# ------------------------------------------------------------------------------------------------
# SentEval-style sentence tasks


def senteval_dataset(task: str, sentences: Sequence[Sentence], max_train: int | None, max_eval: int | None,
                     resplit: bool = False, notes: Sequence[str] = ()) -> ProbingDataset:
    """A sentence-level task from SentEval-format sentences (``label``, and ``split`` in train/dev/test).

    ``resplit=True`` (for the shipped test-only samples) re-splits them 60/20/20 with a fixed seed."""
    by_split: dict[str, list[Sentence]] = {s: [] for s in SPLITS}
    if resplit:
        order = shuffled(list(sentences), data_seed=0)
        n = len(order)
        a, b = int(0.6 * n), int(0.8 * n)
        by_split = {"train": order[:a], "dev": order[a:b], "test": order[b:]}
    else:
        for sentence in sentences:
            by_split[sentence.split].append(sentence)
        by_split = {s: shuffled(v) for s, v in by_split.items()}
    pools, splits = {}, {}
    for split in SPLITS:
        cap = max_train if split == "train" else max_eval
        chosen = by_split[split][:cap] if cap is not None else by_split[split]
        if not chosen:
            raise DataError(f"{task}: no {split} sentences; expected train/dev/test splits")
        pools[split] = chosen
        splits[split] = SplitExamples(np.arange(len(chosen), dtype=np.int64)[:, None],
                                      np.asarray([s.label for s in chosen], dtype=object))
    return ProbingDataset(task, "sentence", "senteval", pools, splits, list(notes))


def senteval_sample_dataset(task: str, folder: str | Path, max_train: int | None,
                            max_eval: int | None) -> ProbingDataset:
    """The shipped SentEval test-split samples, re-split 60/20/20 (only when asked for explicitly:
    ``run_probing(senteval_samples=...)``; never as a silent substitute for a task a treebank lacks)."""
    folder = Path(folder)
    found = sorted(folder.glob(f"{task}*.txt"))
    if not found:
        raise DataError(f"{folder}: no SentEval file for task {task!r} ({task}*.txt)")
    return senteval_dataset(task, read_senteval(found[0]), max_train, max_eval, resplit=True,
                            notes=["SentEval test-split sample (about 200 sentences) re-split 60/20/20: a smoke test only"])
