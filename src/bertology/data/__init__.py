"""Data loaders, all in one place."""

from bertology.data.corpus import (
    Corpus,
    detect_format,
    numbered_lines,
    open_text,
    read_conllu,
    read_corpus,
    read_senteval,
    read_text,
    sentences_from_strings,
)
from bertology.data.sentence import Sentence
from bertology.data.glue import GLUE_TASKS, GlueExample, GlueTask, glue_path, glue_task, read_glue, read_glue_file
from bertology.data.paths import (EXTERNAL, PACKAGED_CORPORA, default_corpus, external_folder, missing_data,
                                   packaged_treebank, shared_data_dir)
from bertology.data.squad import SquadAnswer, SquadQuestion, read_squad, split_by_article, squad_path
from bertology.data.treebank import Tree, base_relation, find_splits, split_of, tree_depths, tree_distances
from bertology.data.wnut17 import WNUT17_FILES, WNUT17_TYPES, entity_spans, read_wnut17

__all__ = [
    "Corpus",
    "Tree",
    "base_relation",
    "detect_format",
    "find_splits",
    "numbered_lines",
    "split_of",
    "tree_depths",
    "tree_distances",
    "GLUE_TASKS",
    "SquadAnswer",
    "SquadQuestion",
    "read_squad",
    "split_by_article",
    "squad_path",
    "GlueExample",
    "GlueTask",
    "glue_path",
    "glue_task",
    "read_glue",
    "read_glue_file",
    "Sentence",
    "WNUT17_FILES",
    "WNUT17_TYPES",
    "entity_spans",
    "default_corpus",
    "EXTERNAL",
    "PACKAGED_CORPORA",
    "external_folder",
    "missing_data",
    "packaged_treebank",
    "open_text",
    "read_conllu",
    "read_corpus",
    "read_senteval",
    "read_text",
    "read_wnut17",
    "sentences_from_strings",
    "shared_data_dir",
]
