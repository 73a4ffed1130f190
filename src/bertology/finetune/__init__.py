"""GLUE fine-tuning with the Convexity report's variants; the shared :func:`evaluate`."""

from bertology.finetune.batching import EncodedExamples, encode_examples
from bertology.finetune.metrics import glue_metric
from bertology.finetune.model import GlueModel, build_glue_model, load_finetuned, read_checkpoint_meta
from bertology.finetune.table import CONVEXITY_TABLE1, render_table, summarize, variants_table, write_tables
from bertology.finetune.train import (FinetuneConfig, FinetuneResult, SeedRun, collect_results, evaluate, finetune,
                                      predict, resolve_device)
from bertology.finetune.variants import Variant, apply_variant, layer_list, parse_variant

__all__ = [
    "CONVEXITY_TABLE1",
    "EncodedExamples",
    "FinetuneConfig",
    "FinetuneResult",
    "GlueModel",
    "SeedRun",
    "Variant",
    "apply_variant",
    "build_glue_model",
    "collect_results",
    "encode_examples",
    "evaluate",
    "finetune",
    "glue_metric",
    "layer_list",
    "load_finetuned",
    "parse_variant",
    "predict",
    "read_checkpoint_meta",
    "render_table",
    "resolve_device",
    "summarize",
    "variants_table",
    "write_tables",
]
