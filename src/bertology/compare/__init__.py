"""What fine-tuning changes: CKA per layer, attention-map cosine per head, relative weight change."""

from bertology.compare.cka import cka_matrix, linear_cka
from bertology.compare.compare import compare_models, plot_comparison, weight_changes

__all__ = ["cka_matrix", "compare_models", "linear_cka", "plot_comparison", "weight_changes"]
