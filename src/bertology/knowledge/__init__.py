"""What the model knows: static-embedding similarity, the Convexity MLM probe, LAMA and minimal pairs."""

import importlib

from bertology._lazy import lazy_exports

# Imported on first use (bertology._lazy), so `bertology knowledge --help` does not load torch. The functions
# `lama` and `mlm_probe` stay the package's attributes when their same-named modules are imported.
_EXPORTS = {
    "static": ("plan_static", "plot_static", "static_layer", "static_similarity", "u_shape"),
    "mlm_probe": ("LayerwiseMLMPredictor", "evaluate_predictors", "input_dropout", "mlm_probe", "plot_mlm_probe",
                  "train_predictors"),
    "lama": ("lama", "load_lama"),
    "mlm": ("load_masked_lm",),
    "pairs": ("minimal_pairs", "pseudo_log_likelihoods", "read_pairs"),
    "section": ("KnowledgeSection", "knowledge_section"),
}
__all__ = [name for names in _EXPORTS.values() for name in names]
_lazy = lazy_exports(__name__, _EXPORTS)
#: The MLM probe's names before "head" was kept for attention and task heads: they warn (mlm_probe.__getattr__).
_OLD_NAMES = ("LayerwiseMLMHead", "evaluate_heads", "train_heads")


def __getattr__(name: str):
    if name in _OLD_NAMES:
        return getattr(importlib.import_module(f"{__name__}.mlm_probe"), name)
    return _lazy(name)
