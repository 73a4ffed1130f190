"""GLUE fine-tuning with the Convexity report's variants; the shared :func:`evaluate`; a checkpoint's GLUE
metric for the interventions (:class:`TaskEvaluator`)."""

from bertology._lazy import lazy_exports

# Imported on first use (bertology._lazy), so `bertology finetune --help` does not load torch.
__getattr__ = lazy_exports(__name__, {
    "batching": ("EncodedExamples", "encode_examples"),
    "evaluation": ("TaskEvaluator", "importance_batches"),
    "examples": ("read_examples",),
    "metrics": ("glue_metric",),
    "model": ("GlueModel", "build_glue_model", "load_finetuned", "read_checkpoint_meta", "save_checkpoint"),
    "table": ("CONVEXITY_TABLE1", "render_table", "summarize", "variants_result", "variants_table"),
    "train": ("FinetuneConfig", "collect_results", "evaluate", "finetune", "predict"),
    "variants": ("Variant", "apply_variant", "parse_variant"),
})

__all__ = [
    "CONVEXITY_TABLE1",
    "EncodedExamples",
    "FinetuneConfig",
    "GlueModel",
    "TaskEvaluator",
    "Variant",
    "apply_variant",
    "build_glue_model",
    "collect_results",
    "encode_examples",
    "evaluate",
    "finetune",
    "glue_metric",
    "importance_batches",
    "load_finetuned",
    "parse_variant",
    "predict",
    "read_examples",
    "read_checkpoint_meta",
    "render_table",
    "save_checkpoint",
    "summarize",
    "variants_result",
    "variants_table",
]
