"""The report's sections, in the order a reader thinks: tokenization, probing, attention, interventions."""

from __future__ import annotations

from collections import Counter

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bertology.extraction import encode_sentences
from bertology.report.document import Figure, Section, Table, Text
from bertology.report.run import ReportContext


def tokenization(context: ReportContext) -> Section:
    """Fertility: subwords per word, overall and by part of speech; the most split words."""

    def compute() -> dict[str, pd.DataFrame]:
        sentences = context.dev + context.test
        encoded = encode_sentences(context.encoder.tokenizer, sentences, context.encoder.max_length)
        rows = []
        for sentence, enc in zip(sentences, encoded):
            counts = np.bincount(enc.word_index, minlength=enc.n_words)
            for word, upos, pieces in zip(sentence.words, sentence.upos or [None] * len(counts), counts):
                rows.append((word, upos, int(pieces)))
        words = pd.DataFrame(rows, columns=["word", "upos", "subwords"])
        by_upos = (words.groupby("upos")["subwords"].agg(["mean", "count"])
                   .rename(columns={"mean": "subwords per word", "count": "words"})
                   .sort_values("subwords per word", ascending=False).reset_index())
        split = (words.groupby("word")["subwords"].agg(["max", "size"])
                 .rename(columns={"max": "subwords", "size": "occurrences"})
                 .sort_values(["subwords", "occurrences"], ascending=False).head(25).reset_index())
        histogram = words["subwords"].clip(upper=8).value_counts().sort_index().rename_axis("subwords")
        summary = pd.DataFrame({
            "statistic": ["words", "subword tokens", "fertility (subwords per word)", "share of words split",
                          "sentences over the max length (windowed)"],
            "value": [f"{len(words):,}", f"{int(words['subwords'].sum()):,}", f"{words['subwords'].mean():.3f}",
                      f"{(words['subwords'] > 1).mean():.1%}", f"{sum(len(e.segments) > 1 for e in encoded):,}"],
        })
        return {"summary": summary, "by_upos": by_upos, "most_split": split,
                "histogram": histogram.reset_index(name="words")}

    tables = context.cache.get_or_compute("tokenization", context.model_key, compute)
    section = Section("tokenization", "Tokenization",
                      note="How the model's tokenizer cuts the corpus into subwords. Word vectors elsewhere in "
                           "this report average a word's subwords.")
    section.add(Table(tables["summary"], "Corpus-level tokenization statistics."))
    fig, ax = plt.subplots(figsize=(6, 3))
    hist = tables["histogram"]
    ax.bar(hist["subwords"].astype(str).str.replace("8", "8+"), hist["words"], color="#2a5db0")
    ax.set_xlabel("subword tokens per word")
    ax.set_ylabel("words in corpus")
    ax.set_title("Fertility")
    section.add(Figure(fig, "Distribution of subword tokens per word (8 = 8 or more)."))
    section.add(Table(tables["by_upos"], "Fertility by universal part of speech (gold UPOS)."))
    section.add(Table(tables["most_split"], "The most split words.", max_rows=25))
    return section


SECTIONS = [
    ("tokenization", tokenization),
]
