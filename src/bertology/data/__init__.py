"""Data loaders, all in one place."""

from bertology.data.corpus import (
    Sentence,
    open_text,
    read_conllu,
    read_corpus,
    read_senteval,
    read_text,
    sentences_from_strings,
)
from bertology.data.paths import default_corpus, shared_data_dir

__all__ = [
    "Sentence",
    "default_corpus",
    "open_text",
    "read_conllu",
    "read_corpus",
    "read_senteval",
    "read_text",
    "sentences_from_strings",
    "shared_data_dir",
]
