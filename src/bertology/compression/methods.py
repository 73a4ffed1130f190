"""Compressing an encoder: each method returns a new :class:`Variant` (the original is left untouched) that
:func:`save_checkpoint` writes as a folder :func:`bertology.models.load_encoder` reloads.

* Quantization uses PyTorch's own eager-mode API (``torch.ao.quantization``): ``quantize_dynamic`` for dynamic
  int8 and ``prepare``/``convert`` with the engine's default qconfig for static int8 (each linear layer between
  a quant and a dequant stub, activations calibrated on real sentences). The engine
  (``torch.backends.quantized.engine``: ``x86``/``fbgemm`` on Intel/AMD, ``qnnpack`` on ARM) is recorded.
* Head pruning removes the heads' rows and columns (:func:`bertology.intervention.prune_heads`), so the
  checkpoint is smaller and faster; at least one head is kept in every layer.
* Dropping the top ``K`` layers removes them from the model and the config (no fine-tuning afterwards).
* Magnitude pruning zeroes weights; the checkpoint keeps the dense shapes (PyTorch runs them dense), so the file
  is not smaller: the tables report the share of zeros and what a sparse format would hold.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn
from safetensors.torch import save_file
from torch.ao.quantization import (DeQuantStub, QuantStub, convert, get_default_qconfig, per_channel_dynamic_qconfig,
                                   prepare, quantize_dynamic)

from bertology.compression.names import Method
from bertology.errors import ModelError, SettingError, UsageError
from bertology.files import atomic_dir
from bertology.models import Encoder
from bertology.models.checkpoints import (QUANTIZATION_KEY, StaticInt8Linear, checkpoint_state, is_int8_module,
                                          set_submodule, state_fingerprint)
from bertology.models.encoders import fingerprint_tokenizer
from bertology.models.layout import drop_top_layers, layer_stack
from bertology.numbering import head_label
from bertology.models.pruning import prune_heads


@dataclass
class Variant:
    """A compressed (or reference) model: its encoder, the method that made it and what the method did."""

    label: str
    encoder: Encoder
    method: Method | None = None
    details: dict = field(default_factory=dict)
    #: heads removed, ``[(layer, head)]``: for measures that read attention maps (see measure.py)
    pruned_heads: list[tuple[int, int]] = field(default_factory=list)


def _copy(encoder: Encoder) -> nn.Module:
    return copy.deepcopy(encoder.model).eval()


def _wrap(encoder: Encoder, model: nn.Module, method: Method, **details) -> Variant:
    new = Encoder(model=model.eval(), tokenizer=encoder.tokenizer, name=f"{encoder.name} ({method.label})",
                  source=None)
    if any(is_int8_module(m) for m in model.modules()):
        # Int8 modules keep their weights packed, out of the state dict: hash what the checkpoint stores.
        new._fingerprint = state_fingerprint(checkpoint_state(model), model.config,
                                             fingerprint_tokenizer(encoder.tokenizer))
    return Variant(label=method.label, encoder=new, method=method, details=details)


# --------------------------------------------------------------------------------------------- quantization


def _linear_names(model: nn.Module) -> list[str]:
    return [name for name, module in model.named_modules() if type(module) is nn.Linear]


def check_quantizable(model: nn.Module, what: str = "int8") -> list[str]:
    """The names of the ``torch.nn.Linear`` layers int8 quantization replaces; a :class:`ModelError` when there
    are none, or when the model is not float32 (PyTorch quantizes float32 weights)."""
    names = _linear_names(model)
    if not names:
        kinds = sorted({type(m).__name__ for m in model.modules() if hasattr(m, "weight")
                        and getattr(m, "weight") is not None and getattr(m.weight, "dim", lambda: 0)() == 2})
        raise ModelError(f"{what}: {type(model).__name__} has no torch.nn.Linear layers to quantize (its 2-D weights "
                         f"live in {', '.join(kinds) or 'no module'}); int8 quantization of linear layers does not apply")
    dtype = next(model.parameters()).dtype
    if dtype != torch.float32:
        raise ModelError(f"{what}: the model's weights are {str(dtype).removeprefix('torch.')}; int8 quantization "
                         "starts from float32 weights (load the original checkpoint)")
    return names


def quantization_engine(engine: str | None = None) -> str:
    """The quantized engine to use (``engine`` or the machine's default), checked against what this build of
    PyTorch supports on this CPU."""
    supported = [e for e in torch.backends.quantized.supported_engines if e != "none"]
    chosen = engine or torch.backends.quantized.engine
    if chosen not in supported or chosen == "none":
        raise ModelError(f"int8: quantization engine {chosen!r} is not supported here (supported: "
                         f"{', '.join(supported) or 'none'})")
    torch.backends.quantized.engine = chosen
    return chosen


def _quiet():
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("ignore")  # torch.ao's deprecation notice in favour of torchao, per call
    return ctx


def int8_dynamic(encoder: Encoder, method: Method, engine: str | None = None) -> Variant:
    """Dynamic int8: every ``nn.Linear`` gets int8 weights (per output channel) and int8 activations
    quantized per batch on the fly; everything else stays float32."""
    names = check_quantizable(encoder.model)
    engine = quantization_engine(engine)
    ctx = _quiet()
    try:
        model = quantize_dynamic(_copy(encoder), {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
    finally:
        ctx.__exit__(None, None, None)
    model.config.update({QUANTIZATION_KEY: {"scheme": "dynamic", "engine": engine, "modules": names}})
    return _wrap(encoder, model, method, engine=engine, scheme="dynamic int8 (weights per channel)",
                 quantized_layers=len(names))


class _Stubbed(nn.Sequential):
    """QuantStub -> Linear -> DeQuantStub: what eager-mode static quantization converts one linear layer in."""


def int8_static(encoder: Encoder, method: Method, calibration: Sequence[dict], engine: str | None = None) -> Variant:
    """Static int8: each ``nn.Linear`` quantized with the engine's default qconfig (histogram observer on
    activations, per-channel weights), its input and output grids calibrated on ``calibration`` (tokenized
    batches: ``input_ids``, ``attention_mask``)."""
    names = check_quantizable(encoder.model)
    if not calibration:
        raise SettingError("calibration", calibration, "int8-static needs calibration batches; give calibration= "
                           "sentences", shown="(none)")
    engine = quantization_engine(engine)
    model = _copy(encoder)
    qconfig = get_default_qconfig(engine)
    for name in names:
        linear = model.get_submodule(name)
        stubbed = _Stubbed(QuantStub(), linear, DeQuantStub())
        stubbed.qconfig = qconfig
        set_submodule(model, name, stubbed)
    ctx = _quiet()
    try:
        prepare(model, inplace=True)
        observed = Encoder.of(model)
        for batch in calibration:
            observed.forward({k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")},
                             hidden_states=False)
        convert(model, inplace=True)
    finally:
        ctx.__exit__(None, None, None)
    for name in names:
        quantize, linear, _ = model.get_submodule(name)
        set_submodule(model, name, StaticInt8Linear(linear, float(quantize.scale), int(quantize.zero_point)))
    model.config.update({QUANTIZATION_KEY: {"scheme": "static", "engine": engine, "modules": names}})
    return _wrap(encoder, model, method, engine=engine, quantized_layers=len(names),
                 scheme="static int8 (weights per channel, activations per tensor, calibrated)",
                 calibration_batches=len(calibration))


def half(encoder: Encoder, method: Method) -> Variant:
    """float16 (``fp16``) or bfloat16 (``bf16``) weights."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[method.name]
    model = _copy(encoder).to(dtype)
    return _wrap(encoder, model, method, dtype=str(dtype).removeprefix("torch."))


# --------------------------------------------------------------------------------------------- pruning


#: What a refusal of a model without a layer stack (ALBERT) says the stack is needed for.
_STACK_NEED = "dropping layers or pruning per layer needs one module per layer"


def prunable_weights(model: nn.Module) -> dict[str, nn.Parameter]:
    """The weight matrices magnitude pruning works on: every linear layer inside the transformer layers
    (embeddings, LayerNorms, biases and the pooler are left alone, as Gordon et al. 2020 left embeddings)."""
    layers = layer_stack(model, _STACK_NEED).layers
    return {f"layer{index}.{name}": module.weight for index, block in enumerate(layers)
            for name, module in block.named_modules() if isinstance(module, nn.Linear)}


def magnitude(encoder: Encoder, method: Method) -> Variant:
    """Zero the smallest weights by absolute value: ``magnitude`` one threshold over all the matrices of
    :func:`prunable_weights` (global), ``magnitude-layer`` each matrix to the sparsity alone."""
    sparsity = float(method.value)
    if not 0.0 <= sparsity < 1.0:
        raise UsageError(f"magnitude pruning: sparsity {sparsity:g} is outside [0, 1)")
    model = _copy(encoder)
    weights = prunable_weights(model)
    with torch.no_grad():
        if method.name == "magnitude":
            values = torch.cat([w.detach().abs().flatten().float() for w in weights.values()])
            k = int(round(sparsity * values.numel()))
            threshold = values.kthvalue(k).values if k > 0 else values.new_tensor(-1.0)
            for weight in weights.values():
                weight.masked_fill_(weight.abs().float() <= threshold, 0.0)
        else:
            for weight in weights.values():
                k = int(round(sparsity * weight.numel()))
                if k > 0:
                    threshold = weight.detach().abs().flatten().float().kthvalue(k).values
                    weight.masked_fill_(weight.abs().float() <= threshold, 0.0)
    zeros = sum(int((w == 0).sum()) for w in weights.values())
    total = sum(w.numel() for w in weights.values())
    return _wrap(encoder, model, method, scope="global" if method.name == "magnitude" else "per matrix",
                 sparsity_achieved=zeros / total, pruned_weights=total)


def choose_heads(num_layers: int, num_heads: int, fraction: float, order: str,
                 importance: np.ndarray | None = None, seed: int = 0) -> list[tuple[int, int]]:
    """``round(fraction x heads)`` heads to prune, least important first (``order="importance"``, ``importance``
    ``[layers, heads]``) or drawn at random (``"random"``, seeded), keeping at least one head in every layer.
    Layers 1..L, heads from 0."""
    total = num_layers * num_heads
    wanted = int(round(fraction * total))
    if wanted > total - num_layers:
        raise UsageError(f"pruning {fraction:g} of {total} heads ({wanted}) would remove every head of a layer; at "
                         f"most {total - num_layers} ({(total - num_layers) / total:.3g}) can go while each of the "
                         f"{num_layers} layers keeps one")
    if order == "importance":
        if importance is None or importance.shape != (num_layers, num_heads):
            raise ModelError(f"heads-importance: importance of shape {None if importance is None else importance.shape}"
                             f"; expected {(num_layers, num_heads)}")
        candidates = sorted(((layer, head) for layer in range(1, num_layers + 1) for head in range(num_heads)),
                            key=lambda lh: (float(importance[lh[0] - 1, lh[1]]), lh))
    elif order == "random":
        rng = np.random.default_rng(seed)
        flat = rng.permutation(total)
        candidates = [(int(i) // num_heads + 1, int(i) % num_heads) for i in flat]
    else:
        raise UsageError(f"head order {order!r}; expected 'importance' or 'random'")
    chosen: list[tuple[int, int]] = []
    left = {layer: num_heads for layer in range(1, num_layers + 1)}
    for layer, head in candidates:
        if len(chosen) == wanted:
            break
        if left[layer] > 1:  # the last head of a layer stays (a layer without heads is refused)
            chosen.append((layer, head))
            left[layer] -= 1
    return sorted(chosen)


def heads(encoder: Encoder, method: Method, importance: np.ndarray | None = None, seed: int = 0) -> Variant:
    """Remove a fraction of heads (by importance or at random) with :func:`bertology.intervention.prune_heads`."""
    order = "importance" if method.name == "heads-importance" else "random"
    chosen = choose_heads(encoder.num_layers, encoder.num_heads, float(method.value), order, importance, seed)
    model = _copy(encoder)
    prune_heads(model, chosen)
    variant = _wrap(encoder, model, method, order=order, pruned=[head_label(l, h) for l, h in chosen],
                    n_pruned=len(chosen), n_heads=encoder.num_layers * encoder.num_heads,
                    seed=seed if order == "random" else None)
    variant.pruned_heads = chosen
    return variant


def drop_top(encoder: Encoder, method: Method) -> Variant:
    """Remove the top ``K`` transformer layers (the Convexity report's "dropping the last layers", with no
    fine-tuning afterwards); hidden states then run 0..L-K."""
    k = int(method.value)
    layers = encoder.num_layers
    if not 1 <= k < layers:
        raise UsageError(f"drop-top:{k}: the model has {layers} transformer layers; drop between 1 and {layers - 1}")
    model = _copy(encoder)
    drop_top_layers(model, k, _STACK_NEED)
    return _wrap(encoder, model, method, layers_kept=layers - k, layers_dropped=list(range(layers - k + 1, layers + 1)))


def compress(encoder: Encoder, method: Method, *, calibration: Sequence[dict] = (), importance: np.ndarray | None = None,
             seed: int = 0, engine: str | None = None) -> Variant:
    """``encoder`` compressed by ``method`` (a :class:`~bertology.compression.names.Method`)."""
    if method.name == "int8-dynamic":
        return int8_dynamic(encoder, method, engine)
    if method.name == "int8-static":
        return int8_static(encoder, method, calibration, engine)
    if method.name in ("fp16", "bf16"):
        return half(encoder, method)
    if method.name in ("magnitude", "magnitude-layer"):
        return magnitude(encoder, method)
    if method.name in ("heads-importance", "heads-random"):
        return heads(encoder, method, importance, seed)
    if method.name == "drop-top":
        return drop_top(encoder, method)
    raise UsageError(f"unknown method {method.name!r}")


# --------------------------------------------------------------------------------------------- checkpoints


def stored_bytes(model: nn.Module) -> int:
    """Bytes of the tensors a checkpoint of ``model`` stores (int8 layers as int8 values and their scales)."""
    return sum(t.numel() * t.element_size() for t in checkpoint_state(model).values())


def nonzero_parameters(model: nn.Module) -> tuple[int, int]:
    """(nonzero values, all values) over the stored tensors."""
    state = checkpoint_state(model)
    return sum(int(t.count_nonzero()) for t in state.values()), sum(t.numel() for t in state.values())


def save_checkpoint(variant: Variant, out: str | Path) -> Path:
    """Write ``variant`` as a model folder (``config.json``, ``model.safetensors``, the tokenizer) that
    :func:`bertology.models.load_encoder` reloads; float variants load with ``transformers`` too (int8 and
    pruned-head ones only through ``load_encoder``: :mod:`bertology.models.checkpoints`)."""
    model, tokenizer = variant.encoder.model, variant.encoder.tokenizer
    out = Path(out)
    with atomic_dir(out) as tmp:
        if any(is_int8_module(m) for m in model.modules()):
            save_file(checkpoint_state(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})
            model.config.save_pretrained(tmp)
        else:
            model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return out


def file_bytes(folder: str | Path) -> int:
    """Bytes of the weights files of a model folder."""
    return sum(path.stat().st_size for path in Path(folder).glob("*.safetensors"))
