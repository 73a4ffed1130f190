"""Geometry of contextual representations: Ethayarajh (2019)'s contextuality and anisotropy per layer."""

from bertology.geometry.contextuality import (
    KAWINE_BERT_BASE_CASED, MEASURES, ContextualitySample, LayerMeasures, contextuality, measure_layer,
    plan_sample, plot_contextuality, reference_table, store_contextuality, summarize,
)
from bertology.geometry.measures import (
    intra_sentence_similarity, max_explainable_variance, mean_pair_cosine, random_words_explained_variance,
    sample_pairs, self_similarity, unit_rows,
)
from bertology.geometry.stores import cache_root, cached_store, load_sentences

__all__ = [
    "KAWINE_BERT_BASE_CASED", "MEASURES", "ContextualitySample", "LayerMeasures", "cache_root", "cached_store",
    "contextuality", "intra_sentence_similarity", "load_sentences", "max_explainable_variance", "measure_layer",
    "mean_pair_cosine", "plan_sample", "plot_contextuality", "random_words_explained_variance", "reference_table",
    "sample_pairs", "self_similarity", "store_contextuality", "summarize", "unit_rows",
]
