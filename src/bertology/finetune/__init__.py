"""GLUE fine-tuning with the Convexity report's variants; the shared :func:`evaluate`; a checkpoint's GLUE
metric for the interventions (:class:`TaskEvaluator`)."""

from bertology.finetune.batching import EncodedExamples, encode_examples, seeded_subset
from bertology.finetune.evaluation import TaskEvaluator, importance_batches
from bertology.finetune.metrics import glue_metric
from bertology.finetune.model import (GlueModel, build_glue_model, load_finetuned, read_checkpoint_meta,
                                      save_checkpoint)
from bertology.finetune.table import CONVEXITY_TABLE1, render_table, summarize, variants_result, variants_table
from bertology.finetune.train import FinetuneConfig, collect_results, evaluate, finetune, predict
from bertology.finetune.variants import Variant, apply_variant, layer_list, parse_variant

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
    "layer_list",
    "load_finetuned",
    "parse_variant",
    "predict",
    "read_checkpoint_meta",
    "render_table",
    "save_checkpoint",
    "seeded_subset",
    "summarize",
    "variants_result",
    "variants_table",
]
