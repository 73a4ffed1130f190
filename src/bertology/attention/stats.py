"""Per-head attention statistics (Clark et al. 2019, "What Does BERT Look At?", section 3).

Input is word-level attention, one array per sentence, shaped ``[n_layers, n_heads, n+2, n+2]``:
index 0 is the leading special token ([CLS] / <s>), 1..n the words, n+1 the trailing special token
([SEP] / </s>). Rows are the attending positions ("queries"), columns the attended-to ones. This is what
``Store.attention(i)`` returns; any iterable of such arrays works, so a whole corpus streams through
without being held in memory.

Every statistic is first averaged over the query rows of one sentence and then over sentences, the
way Clark et al.'s ``General_Analysis.ipynb`` does it (all n+2 rows, the special tokens included,
unless a statistic says otherwise).

Numbering (:mod:`bertology.numbering`): ``layer`` is the hidden_states layer (1..L; its attention is
``attentions[layer - 1]``), ``head`` counts from 0, ``head_label`` is ``L4H5``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from bertology.data import Sentence
from bertology.errors import DataError, SettingError
from bertology.extraction import MAX_ATTENTION_WORDS, extract
from bertology.numbering import head_label
from bertology.progress import track
from bertology.results import Result
from bertology.store import Store

#: Statistic name -> one-line definition (also used as the heatmap title).
STATISTICS: dict[str, str] = {
    "attn_cls": "attention to the leading special token ([CLS])",
    "attn_sep": "attention to the trailing special token ([SEP])",
    "attn_punct": "attention to punctuation words (periods and commas)",
    "attn_self": "attention to the token itself",
    "attn_next": "attention to the next token",
    "attn_prev": "attention to the previous token",
    "entropy": "mean entropy of the attention distributions (nats)",
    "entropy_of_mean": "entropy of the sentence's average attention distribution (nats)",
    "entropy_from_cls": "entropy of the attention from [CLS] (nats)",
    "mean_distance": "expected distance in words to the attended word (word queries, word keys)",
}

#: Clark et al. count a token as punctuation when it is exactly "." or ",".
DEFAULT_PUNCTUATION: tuple[str, ...] = (".", ",")


def _entropy(p: np.ndarray) -> np.ndarray:
    """Entropy (nats) along the last axis; 0 log 0 = 0, so no smoothing is needed."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.where(p > 0, np.log(np.where(p > 0, p, 1.0)), 0.0)
    return -(p * logp).sum(-1)


def check_attention(attention: np.ndarray, n_words: int, where: str) -> np.ndarray:
    """Validate one sentence's word-level attention and return it as float64."""
    attention = np.asarray(attention)
    expected = n_words + 2
    if attention.ndim != 4 or attention.shape[-1] != expected or attention.shape[-2] != expected:
        raise DataError(
            f"{where}: attention has shape {attention.shape}; expected [n_layers, n_heads, {expected}, {expected}] "
            f"for {n_words} words plus the two special tokens"
        )
    if not np.isfinite(attention).all():
        raise DataError(f"{where}: attention contains NaN or infinite values")
    return attention.astype(np.float64, copy=False)


@dataclass
class _Accumulator:
    sums: dict[str, np.ndarray]
    counts: dict[str, np.ndarray]

    @classmethod
    def empty(cls, shape: tuple[int, int]) -> "_Accumulator":
        return cls({k: np.zeros(shape) for k in STATISTICS}, {k: np.zeros(shape) for k in STATISTICS})

    def add(self, name: str, value: np.ndarray, valid: np.ndarray | bool = True) -> None:
        valid = np.broadcast_to(np.asarray(valid, dtype=bool), value.shape)
        self.sums[name] += np.where(valid, value, 0.0)
        self.counts[name] += valid


def sentence_head_statistics(
    attention: np.ndarray, words: Sequence[str], punctuation: Iterable[str] = DEFAULT_PUNCTUATION
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The statistics of one sentence: name -> (value [L, H], valid [L, H] bool).

    ``valid`` is False where a statistic is undefined for this sentence (e.g. mean distance when a
    head puts no attention on words at all); such sentences are left out of that head's average.
    """
    n = len(words)
    a = check_attention(attention, n, "sentence")
    # The word-level conversion and float16 storage leave rows summing to 1 only approximately.
    row_mass = a.sum(-1, keepdims=True)
    a = np.divide(a, row_mass, out=np.zeros_like(a), where=row_mass > 0)
    size = n + 2
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    ones = np.ones(a.shape[:2], dtype=bool)

    out["attn_cls"] = (a[..., :, 0].mean(-1), ones)
    out["attn_sep"] = (a[..., :, size - 1].mean(-1), ones)
    punct = {p for p in punctuation}
    punct_cols = [j + 1 for j, w in enumerate(words) if w in punct]
    out["attn_punct"] = (a[..., :, punct_cols].sum(-1).mean(-1) if punct_cols else np.zeros(a.shape[:2]), ones)
    diag = np.arange(size)
    out["attn_self"] = (a[..., diag, diag].mean(-1), ones)
    # Clark divides by the number of tokens, so the last row (no next token) counts as zero.
    out["attn_next"] = (a[..., diag[:-1], diag[1:]].sum(-1) / size, ones)
    out["attn_prev"] = (a[..., diag[1:], diag[:-1]].sum(-1) / size, ones)
    out["entropy"] = (_entropy(a).mean(-1), ones)
    out["entropy_of_mean"] = (_entropy(a.mean(-2)), ones)
    out["entropy_from_cls"] = (_entropy(a[..., 0, :]), ones)

    # Distance is about words: the attention of word queries over word keys, renormalised.
    words_block = a[..., 1 : n + 1, 1 : n + 1]
    mass = words_block.sum(-1)  # [L, H, n]
    positions = np.arange(n)
    distance = np.abs(positions[:, None] - positions[None, :])
    expected = np.divide((words_block * distance).sum(-1), mass, out=np.zeros_like(mass), where=mass > 1e-6)
    has_mass = mass > 1e-6
    n_rows = has_mass.sum(-1)
    mean_distance = np.divide(
        np.where(has_mass, expected, 0.0).sum(-1), n_rows, out=np.zeros(a.shape[:2]), where=n_rows > 0
    )
    out["mean_distance"] = (mean_distance, n_rows > 0)
    return out


def head_statistics(
    attentions,
    sentences: Iterable[Sentence] | None = None,
    punctuation: Iterable[str] = DEFAULT_PUNCTUATION,
    progress: bool = False,
    total: int | None = None,
    layers: Sequence[int] | None = None,
) -> Result:
    """Clark et al.'s per-head statistics, averaged over a corpus.

    ``attentions`` is a :class:`~bertology.store.Store` extracted with ``attentions=True`` (then
    ``sentences`` and ``layers`` default to the store's), or any iterable of word-level arrays
    ``[n_layers, n_heads, n+2, n+2]``, one per sentence in the order of ``sentences``.
    ``layers`` names the layers the arrays hold (default 1..L; a store passes its ``attention_layers``).

    Returns a :class:`~bertology.results.Result` named ``head_statistics`` with one table,
    ``statistics``: ``layer, head, head_label, statistic, value, n_sentences`` (``n_sentences``: how
    many sentences the head's value averages; fewer than all where a statistic is undefined).
    ``meta["uniform_entropy"]`` is the entropy of uniform attention (nats) averaged over the same
    sentences, the reference line for "broad" heads.
    """
    attentions, sentences, layers, total = _from_store(attentions, sentences, layers, total)
    punctuation = tuple(punctuation)
    acc: _Accumulator | None = None
    uniform_entropy = 0.0
    n_sentences = 0
    shape: tuple[int, int] | None = None
    pairs = _zip_checked(attentions, sentences)
    for index, (attention, sentence) in enumerate(track(pairs, "head statistics", total=total, enabled=progress)):
        attention = np.asarray(attention)
        if shape is None:
            shape = attention.shape[:2]
            acc = _Accumulator.empty(shape)
        elif attention.shape[:2] != shape:
            raise DataError(
                f"sentence {index} ({sentence.id}): attention has {attention.shape[:2]} layers x heads; "
                f"expected {shape} like the sentences before it"
            )
        try:
            stats = sentence_head_statistics(attention, sentence.words, punctuation)
        except DataError as exc:
            raise DataError(f"sentence {index} ({sentence.id}): {exc}") from None
        for name, (value, valid) in stats.items():
            acc.add(name, value, valid)
        uniform_entropy += np.log(len(sentence) + 2)
        n_sentences += 1
    if acc is None:
        raise DataError("no sentences given; expected at least one attention array")
    layer_numbers = _layer_numbers(layers, shape[0])
    rows = []
    for name in STATISTICS:
        mean = np.divide(acc.sums[name], acc.counts[name], out=np.full(shape, np.nan), where=acc.counts[name] > 0)
        for position, layer in enumerate(layer_numbers):
            for head in range(shape[1]):
                rows.append((layer, head, head_label(layer, head), name, float(mean[position, head]),
                             int(acc.counts[name][position, head])))
    table = pd.DataFrame(rows, columns=["layer", "head", "head_label", "statistic", "value", "n_sentences"])
    return Result("head_statistics", {"statistics": table},
                  meta={"uniform_entropy": uniform_entropy / n_sentences, "n_sentences": n_sentences,
                        "layers": layer_numbers, "punctuation": list(punctuation)})


def _from_store(attentions, sentences, layers, total):
    """A store stands for its attention maps, its sentences (words only) and its attention layers."""
    if not isinstance(attentions, Store):
        if sentences is None:
            raise DataError("no sentences given; pass the sentences that match the attention arrays")
        return attentions, sentences, layers, total
    store = attentions
    if sentences is None:
        sentences = [Sentence(words=store.words(i), id=sentence_id) for i, sentence_id in enumerate(store.sentence_ids)]
    return (store.iter_attentions(), sentences, store.attention_layers if layers is None else layers,
            store.n_sentences if total is None else total)


def statistic_matrix(stats: pd.DataFrame | Result, statistic: str) -> pd.DataFrame:
    """One statistic as a layers x heads frame: index ``layer`` (the layers the table holds, e.g. 3 and 6),
    columns ``head``, float values. ``.to_numpy()`` gives the ``[n_layers, n_heads]`` array;
    :func:`bertology.attention.figures.plot_heatmap` labels its axes from the index and columns."""
    df = stats["statistics"] if isinstance(stats, Result) else stats
    sub = df[df["statistic"] == statistic]
    if sub.empty:
        raise DataError(f"statistic {statistic!r} not in the table; expected one of {sorted(df['statistic'].unique())}")
    table = sub.pivot(index="layer", columns="head", values="value").sort_index().sort_index(axis=1)
    table.index = pd.Index([int(v) for v in table.index], name="layer")
    table.columns = pd.Index([int(v) for v in table.columns], name="head")
    return table.astype(float)


def _layer_numbers(layers: Sequence[int] | None, n_layers: int) -> list[int]:
    if layers is None:
        return list(range(1, n_layers + 1))
    layers = [int(layer) for layer in layers]
    if len(layers) != n_layers:
        raise DataError(f"layers={layers} names {len(layers)} layers; the attention arrays hold {n_layers}")
    return layers


def _zip_checked(attentions: Iterable[np.ndarray], sentences: Iterable[Sentence]):
    """zip() that fails loudly when the two streams have different lengths."""
    sentinel = object()
    att_iter, sent_iter = iter(attentions), iter(sentences)
    index = 0
    while True:
        attention = next(att_iter, sentinel)
        sentence = next(sent_iter, sentinel)
        if attention is sentinel and sentence is sentinel:
            return
        if attention is sentinel or sentence is sentinel:
            more = "sentences" if attention is sentinel else "attention arrays"
            raise DataError(f"after {index} sentences: more {more} than the other; expected one attention array per sentence")
        yield attention, sentence
        index += 1


def encoder_head_statistics(
    encoder,
    sentences: Sequence[Sentence],
    layers: Sequence[int] | None = None,
    punctuation: Iterable[str] = DEFAULT_PUNCTUATION,
    progress: bool = False,
    work_dir=None,
    max_words: int | None = None,
    source: str | None = None,
) -> Result:
    """:func:`head_statistics` of ``encoder`` on ``sentences``: the word-level maps are extracted into a
    temporary store (in ``work_dir``, default the system's temporary folder) and removed afterwards.

    ``layers`` are transformer layers (1..L, default all). The ``statistics`` table gets a ``model``
    column; ``meta`` adds the model's name and fingerprint. A sentence of more than
    :data:`~bertology.extraction.MAX_ATTENTION_WORDS` words is refused (its maps grow with the square of its
    length) unless ``max_words`` is given: then sentences of more than ``max_words`` words are skipped and
    counted (``meta["skipped_sentences"]``). ``source`` (the corpus path) names where a refused one is.
    """
    sentences = list(sentences)
    limit = MAX_ATTENTION_WORDS if max_words is None else int(max_words)
    longer = [sentence for sentence in sentences if len(sentence) > limit]
    if longer and max_words is None:
        first, longest = longer[0], max(len(sentence) for sentence in longer)
        where = (f"{source + ':' if source else 'line '}{first.source_line}" if first.source_line
                 else f"sentence {first.id!r}")
        raise DataError(f"{where}: a sentence of {len(first):,} words ({len(longer)} over {limit:,} words); attention "
                        f"stats keeps word-level maps of at most {limit:,} words a sentence by default: give "
                        f"max_words= {limit} to skip the longer ones, or max_words= {longest} to keep them (4 x "
                        f"{encoder.num_heads} heads x layers x (words+2)^2 bytes of maps each)")
    if longer:
        sentences = [sentence for sentence in sentences if len(sentence) <= limit]
        if not sentences:
            raise SettingError("max_words", limit, "every sentence has more words; nothing left to analyse",
                               shown=str(limit))
    with tempfile.TemporaryDirectory(dir=work_dir, prefix="bertology-attention-") as tmp:
        store = extract(encoder, sentences, Path(tmp) / "statistics.store", attentions=True,
                        layers=None if layers is None else sorted({int(layer) for layer in layers}),
                        progress=progress, max_attention_words=limit)
        result = head_statistics(store, sentences, punctuation=punctuation, progress=progress)
    result.meta.update(max_words=limit, skipped_sentences=len(longer))
    table = result["statistics"]
    table.insert(0, "model", encoder.name)
    result.meta.update(model=encoder.name, fingerprint=encoder.fingerprint, untrained_seed=encoder.untrained_seed)
    return result
