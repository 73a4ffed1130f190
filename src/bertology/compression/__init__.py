"""Compression (issue 22): quantize, prune and drop layers of any encoder, write each variant as a checkpoint
``load_encoder`` reloads, and measure what it costs the Primer's way (Rogers et al. 2020, Table 1): x smaller,
x faster, and how much of the original's probing scores the variant keeps."""

from bertology._lazy import lazy_exports

# Imported on first use (bertology._lazy), so `bertology compress --help` does not load torch.
__getattr__ = lazy_exports(__name__, {
    "names": ("DEFAULT_METHODS", "METHODS", "Method", "parse_method", "parse_methods"),
    "methods": ("Variant", "choose_heads", "compress", "file_bytes", "nonzero_parameters", "save_checkpoint",
                "stored_bytes"),
    "measure": ("EvalSets", "Measures", "measure_encoder", "packaged_sets", "probe_importance", "retention",
                "speedups", "throughput"),
    "run": ("plot_layers", "run_compression"),
    "finetuned": ("task_retention",),
})

__all__ = ["DEFAULT_METHODS", "METHODS", "EvalSets", "Measures", "Method", "Variant", "choose_heads", "compress",
           "file_bytes", "measure_encoder", "nonzero_parameters", "packaged_sets", "parse_method", "parse_methods",
           "plot_layers", "probe_importance", "retention", "run_compression", "save_checkpoint", "speedups",
           "stored_bytes", "task_retention", "throughput"]
