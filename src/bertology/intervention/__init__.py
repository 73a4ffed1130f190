"""Head and layer interventions: masking, dropping, importance (Michel et al. 2019) and real pruning.

Numbering (:mod:`bertology.numbering`): layers 1..L as in ``hidden_states`` (layer 0, the embeddings, has
no heads and cannot be dropped), heads from 0, labels ``L4H5``. The translation to module indices
(``encoder.layer[l - 1]``) happens only in :mod:`bertology.intervention.hooks`.
"""

from bertology._lazy import lazy_exports

# Imported on first use (bertology._lazy), so `bertology ablate --help` does not load torch.
__getattr__ = lazy_exports(__name__, {
    "ablation": ("ablate_heads", "ablate_layers", "attention_best_heads", "prune_by_importance"),
    "hooks": ("SUPPORTED_MODEL_TYPES", "AttentionSite", "ModelLayout", "drop_layers", "grid_index", "heads_to_scales",
              "head_contexts",
              "hook_points", "mask_heads", "model_layout", "module_index", "scale_heads"),
    "importance": ("delta_matrix", "flagged_heads", "flagged_vs_random", "head_importance", "heads_frame",
                   "importance_frame", "per_example_loss", "plot_pruning_curve", "pruning_curve",
                   "single_head_ablation", "summarize_flagged", "summarize_single_head"),
    "pruning": ("attention_parameters", "count_parameters", "load_pruned", "measure_latency", "prune_heads",
                "save_pruned"),
})

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "AttentionSite",
    "ModelLayout",
    "ablate_heads",
    "ablate_layers",
    "attention_best_heads",
    "attention_parameters",
    "count_parameters",
    "delta_matrix",
    "drop_layers",
    "flagged_heads",
    "flagged_vs_random",
    "grid_index",
    "head_importance",
    "head_contexts",
    "heads_frame",
    "heads_to_scales",
    "hook_points",
    "importance_frame",
    "load_pruned",
    "mask_heads",
    "measure_latency",
    "model_layout",
    "module_index",
    "per_example_loss",
    "plot_pruning_curve",
    "prune_by_importance",
    "prune_heads",
    "pruning_curve",
    "save_pruned",
    "scale_heads",
    "single_head_ablation",
    "summarize_flagged",
    "summarize_single_head",
]
