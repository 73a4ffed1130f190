"""Languages: what a (multilingual) encoder knows about which language it reads, and how well its English
knowledge transfers (language identity, centroids, parallel sentence retrieval, zero-shot probe transfer,
the tokenizer per language). docs/languages.md."""

from bertology._lazy import lazy_exports

# Imported on first use (bertology._lazy), so `bertology languages --help` does not load torch.
__getattr__ = lazy_exports(__name__, {
    "experiment": ("TRANSFER_TASKS", "best_layer", "run_languages", "senteval_tasks"),
    "figures": ("plot_identity", "plot_projection", "plot_retrieval", "plot_retrieval_matrix", "plot_tokenizer",
                "plot_transfer", "retrieval_matrix", "save_figures"),
    "measures": ("center", "centroid_distances", "centroids", "project_2d", "retrieval_hits"),
    "tables": ("console_tables", "display_tables"),
    "tokenization": ("tokenizer_row",),
    "treebanks": ("UNIVERSAL_RELATIONS", "UNIVERSAL_UPOS", "LanguageTreebank", "check_alignment", "language_code",
                  "read_treebanks", "shared_ids", "split_ids", "tag_problem", "treebank_files"),
})

__all__ = [
    "TRANSFER_TASKS", "UNIVERSAL_RELATIONS", "UNIVERSAL_UPOS", "LanguageTreebank", "best_layer", "center",
    "centroid_distances", "centroids", "check_alignment", "console_tables", "display_tables", "language_code",
    "plot_identity", "plot_projection", "plot_retrieval", "plot_retrieval_matrix", "plot_tokenizer", "plot_transfer",
    "project_2d", "read_treebanks", "retrieval_hits", "retrieval_matrix", "run_languages", "save_figures",
    "senteval_tasks", "shared_ids", "split_ids", "tag_problem", "tokenizer_row", "treebank_files",
]
