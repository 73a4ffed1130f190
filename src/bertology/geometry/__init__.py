"""Geometry of contextual representations: Ethayarajh (2019)'s contextuality and anisotropy per layer."""

from bertology._lazy import lazy_exports

# Imported on first use (bertology._lazy), so `bertology geometry --help` does not load torch.
__getattr__ = lazy_exports(__name__, {
    "contextuality": ("KAWINE_BERT_BASE_CASED", "MEASURES", "ContextualitySample", "LayerMeasures", "contextuality",
                      "measure_layer", "plan_sample", "plot_contextuality", "reference_table",
                      "store_contextuality", "summarize", "twin_beside"),
    "measures": ("MEV_DEFINITIONS", "intra_sentence_similarity", "max_explainable_variance", "mean_pair_cosine",
                 "random_words_explained_variance", "sample_pairs", "self_similarity", "unit_rows"),
    # cache_root: bertology.settings' (the one cache root, which stores uses), kept here for scripts that import it
    "stores": ("cache_root", "cached_store", "load_sentences"),
})

__all__ = [
    "KAWINE_BERT_BASE_CASED", "MEASURES", "MEV_DEFINITIONS", "ContextualitySample", "LayerMeasures", "cache_root", "cached_store",
    "contextuality", "intra_sentence_similarity", "load_sentences", "max_explainable_variance", "measure_layer",
    "mean_pair_cosine", "plan_sample", "plot_contextuality", "random_words_explained_variance", "reference_table",
    "sample_pairs", "self_similarity", "store_contextuality", "summarize", "twin_beside", "unit_rows",
]
