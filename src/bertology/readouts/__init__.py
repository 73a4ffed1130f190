"""Frozen-feature readouts (BERT Vision): small models on every layer's activations, SQuAD 2.0 and GLUE.

Input convention of every readout: ``x`` ``[batch, layers, tokens, hidden]`` (layer index 0 = embeddings,
L = last transformer layer, as :mod:`bertology.numbering`) and ``mask`` ``[batch, tokens]``. The pipelines
(:mod:`bertology.readouts.squad`, :mod:`bertology.readouts.glue`) are imported from their modules, not here,
to keep this package light.
"""

from bertology._lazy import lazy_exports

# Imported on first use (bertology._lazy), so `bertology readouts --help` does not load torch.
__getattr__ = lazy_exports(__name__, {
    "catalog": ("SEED_READOUTS", "ReadoutModel", "build_readout", "check_readout_name"),
    "qa": ("QAWindows", "decode_spans", "encode_windows"),
    "squad_eval": ("evaluate_squad", "normalize_answer", "score_predictions"),
    "streaming": ("StreamingReader",),
    "train": ("ReadoutTrainConfig", "predict_readout", "train_readout"),
})

__all__ = ["SEED_READOUTS", "QAWindows", "ReadoutModel", "ReadoutTrainConfig", "StreamingReader", "build_readout",
           "check_readout_name", "decode_spans", "encode_windows", "evaluate_squad", "normalize_answer",
           "predict_readout", "score_predictions", "train_readout"]
