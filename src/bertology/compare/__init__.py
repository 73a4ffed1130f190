"""What fine-tuning changes: CKA per layer, attention-map cosine per head, relative weight change."""

from bertology._lazy import lazy_exports

# Imported on first use (bertology._lazy), so `bertology compare --help` does not load torch.
__getattr__ = lazy_exports(__name__, {
    "cka": ("cka_matrix", "linear_cka"),
    "compare": ("compare_models", "plot_comparison", "weight_changes"),
})

__all__ = ["cka_matrix", "compare_models", "linear_cka", "plot_comparison", "weight_changes"]
