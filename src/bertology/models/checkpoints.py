"""Checkpoints whose weights ``AutoModel.from_pretrained`` cannot load as they are: heads really removed (the
per-head projections are smaller than the config says) and int8 linear layers (PyTorch quantized modules).

Both are written by :mod:`bertology.compression` (heads pruned by :mod:`bertology.intervention` too) and read back
here, by :func:`bertology.models.load_encoder`, so every command takes them as ``--model``.

The format is a plain ``save_pretrained`` folder (``config.json``, ``model.safetensors``, the tokenizer):

* Pruned heads: the config records them (``bertology_pruned_heads``, labels such as ``"L1H1"``) and each
  linear layer is stored with its own, smaller shape; :func:`load_checkpoint` builds the model from the config
  and gives every linear layer the shape its stored weight has.
* Int8: ``config.bertology_quantization`` says how (``{"scheme": "dynamic" | "static", "engine": ...,
  "modules": [names]}``); for each quantized linear layer ``NAME`` the file holds ``NAME.weight`` as int8 (the
  integer values), ``NAME.weight_scale`` and ``NAME.weight_zero_point`` (one per output row when quantized per
  channel, else one), ``NAME.bias`` in float32, and for static quantization the activation grids
  ``NAME.input_scale``/``NAME.input_zero_point`` and ``NAME.output_scale``/``NAME.output_zero_point``.
  transformers cannot load this folder by itself (it would read the int8 values as weights): load it with
  ``load_encoder``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn
from torch.ao.nn.quantized import Linear as QuantizedLinear
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

from bertology.errors import ModelError
from bertology.models.auto import build_model
from bertology.models.families import family
from bertology.models.layout import PRUNED_HEADS_KEY  # the config field that lists pruned heads

#: The config field that says a checkpoint's linear layers are int8 (see the module doc).
QUANTIZATION_KEY = "bertology_quantization"
SCHEMES = ("dynamic", "static")


def needs_checkpoint_loader(config) -> bool:
    """Whether ``config`` describes weights that :func:`load_checkpoint` must load (pruned heads or int8)."""
    return bool(getattr(config, PRUNED_HEADS_KEY, None)) or bool(getattr(config, QUANTIZATION_KEY, None))


# ------------------------------------------------------------------------------------------------ int8 modules


class StaticInt8Linear(nn.Module):
    """A linear layer with int8 weights and int8 activations on calibrated grids: the input is quantized to
    ``input_scale``/``input_zero_point`` (quint8), multiplied by the int8 weight in PyTorch's quantized
    kernel, requantized to ``output_scale``/``output_zero_point`` and dequantized, so its neighbours stay
    float32 (eager-mode static quantization of the linear layers only)."""

    def __init__(self, linear: nn.Module, input_scale: float, input_zero_point: int):
        super().__init__()
        self.linear = linear  # torch.ao.nn.quantized.Linear
        self.input_scale = float(input_scale)
        self.input_zero_point = int(input_zero_point)

    @property
    def in_features(self) -> int:
        return self.linear.in_features

    @property
    def out_features(self) -> int:
        return self.linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        quantized = torch.quantize_per_tensor(x.float().contiguous(), self.input_scale, self.input_zero_point,
                                              torch.quint8)
        return self.linear(quantized).dequantize().to(dtype)


def _quantized_weight(values: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor) -> torch.Tensor:
    if scale.numel() == 1:
        return torch._make_per_tensor_quantized_tensor(values, float(scale.reshape(-1)[0]),
                                                       int(zero_point.reshape(-1)[0]))
    return torch._make_per_channel_quantized_tensor(values, scale.double(), zero_point.long(), 0)


def int8_linear(scheme: str, tensors: dict[str, torch.Tensor], name: str) -> nn.Module:
    """The int8 module of linear layer ``name`` from its stored tensors (see the module doc)."""
    try:
        values = tensors[f"{name}.weight"]
        weight = _quantized_weight(values, tensors[f"{name}.weight_scale"], tensors[f"{name}.weight_zero_point"])
    except KeyError as missing:
        raise ModelError(f"int8 layer {name}: the weights file has no {missing.args[0]}") from None
    bias = tensors.get(f"{name}.bias")
    out_features, in_features = values.shape
    if scheme == "dynamic":
        module = DynamicLinear(in_features, out_features, bias_=bias is not None, dtype=torch.qint8)
        module.set_weight_bias(weight, None if bias is None else bias.float())
        return module
    module = QuantizedLinear(in_features, out_features, bias_=bias is not None)
    module.set_weight_bias(weight, None if bias is None else bias.float())
    module.scale = float(tensors[f"{name}.output_scale"])
    module.zero_point = int(tensors[f"{name}.output_zero_point"])
    return StaticInt8Linear(module, float(tensors[f"{name}.input_scale"]), int(tensors[f"{name}.input_zero_point"]))


def int8_tensors(module: nn.Module, name: str) -> dict[str, torch.Tensor]:
    """The stored tensors of an int8 module (dynamic or :class:`StaticInt8Linear`) named ``name``."""
    inner = module.linear if isinstance(module, StaticInt8Linear) else module
    weight, bias = inner._weight_bias()
    if weight.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        scale, zero_point = weight.q_per_channel_scales().float(), weight.q_per_channel_zero_points().long()
    else:
        scale, zero_point = torch.tensor([weight.q_scale()]), torch.tensor([weight.q_zero_point()])
    out = {f"{name}.weight": weight.int_repr().contiguous(), f"{name}.weight_scale": scale.contiguous(),
           f"{name}.weight_zero_point": zero_point.contiguous()}
    if bias is not None:
        out[f"{name}.bias"] = bias.detach().float().contiguous()
    if isinstance(module, StaticInt8Linear):
        out[f"{name}.input_scale"] = torch.tensor(module.input_scale)
        out[f"{name}.input_zero_point"] = torch.tensor(module.input_zero_point)
        out[f"{name}.output_scale"] = torch.tensor(float(inner.scale))
        out[f"{name}.output_zero_point"] = torch.tensor(int(inner.zero_point))
    return out


def is_int8_module(module: nn.Module) -> bool:
    return isinstance(module, (DynamicLinear, QuantizedLinear, StaticInt8Linear))


def checkpoint_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """What the weights file holds for ``model``: its float tensors, and each int8 layer as int8 values and
    their scales (the module doc). Shared tensors are kept once, under their first name."""
    state: dict[str, torch.Tensor] = {}
    inside_int8: list[str] = []
    for name, module in model.named_modules():
        if any(name.startswith(prefix + ".") for prefix in inside_int8):
            continue
        if is_int8_module(module):
            state.update(int8_tensors(module, name))
            inside_int8.append(name)
    seen: set[int] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if not isinstance(tensor, torch.Tensor) or any(name.startswith(p + ".") for p in inside_int8):
            continue
        key = (tensor.data_ptr(), tuple(tensor.shape)) if tensor.numel() else None
        if key is not None and key in seen:
            continue  # a tied weight: from_pretrained ties it again
        if key is not None:
            seen.add(key)
        state[name] = tensor.detach().contiguous()
    return state


def state_fingerprint(state: dict[str, torch.Tensor], config, tokenizer_fingerprint: str | None = None) -> str:
    """A short hash of a checkpoint's stored tensors, config and tokenizer (what
    :func:`~bertology.models.encoders.fingerprint_model` hashes, for models it cannot read: int8 modules
    keep their weights in packed parameters, not tensors). ``tokenizer_fingerprint``:
    :func:`~bertology.models.encoders.fingerprint_tokenizer` of the tokenizer beside it."""
    digest = hashlib.sha256()
    if tokenizer_fingerprint is not None:
        digest.update(tokenizer_fingerprint.encode())
    settings = config.to_dict()
    for volatile in ("_name_or_path", "transformers_version", "attn_implementation", "_attn_implementation",
                     "_attn_implementation_autoset", "torch_dtype", "dtype", "architectures"):
        settings.pop(volatile, None)
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for name, tensor in sorted(state.items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


# ------------------------------------------------------------------------------------------------ loading


def set_submodule(root: nn.Module, name: str, module: nn.Module) -> None:
    """Put ``module`` at dotted path ``name`` inside ``root`` (``encoder.layer.0.attention.self.query``)."""
    parent, _, attr = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, attr, module)


def _resized_linear(linear: nn.Linear, weight_shape: tuple[int, ...]) -> nn.Linear:
    out_features, in_features = weight_shape
    return nn.Linear(in_features, out_features, bias=linear.bias is not None, dtype=linear.weight.dtype)


def _fit_head_counts(model: nn.Module, model_type: str) -> None:
    """After linear layers took their stored shapes: each attention module's head count and size follow its
    query projection (BERT-style modules keep them as attributes; their forward reads the head size)."""
    query_name = family(model_type).attention_names[0]
    for module in model.modules():
        query = getattr(module, query_name, None)
        head_size = getattr(module, "attention_head_size", None)
        if not isinstance(head_size, int) or head_size <= 0 or not hasattr(query, "out_features"):
            continue
        heads = query.out_features // head_size
        if isinstance(getattr(module, "num_attention_heads", None), int):
            module.num_attention_heads = heads
        if isinstance(getattr(module, "all_head_size", None), int):
            module.all_head_size = heads * head_size


def _read_state(folder: Path) -> dict[str, torch.Tensor]:
    index = folder / "model.safetensors.index.json"
    files = (sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file()
             else ["model.safetensors"])
    state: dict[str, torch.Tensor] = {}
    for name in files:
        if not (folder / name).is_file():
            raise ModelError(f"{folder / name}: missing weights file (the checkpoint is incomplete)")
        try:
            state.update(load_file(str(folder / name)))
        except (SafetensorError, OSError) as error:
            reason = (str(error).splitlines() or [type(error).__name__])[0]
            raise ModelError(f"{folder / name}: cannot read these weights ({reason}); the file is damaged or cut "
                             "short: save or copy the checkpoint again") from None
    return state


def _quantization(config) -> tuple[str, list[str], str | None]:
    described = getattr(config, QUANTIZATION_KEY, None) or {}
    if not described:
        return "", [], None
    scheme = described.get("scheme") if isinstance(described, dict) else None
    modules = described.get("modules") if isinstance(described, dict) else None
    if scheme not in SCHEMES or not isinstance(modules, list):
        raise ModelError(f"config {QUANTIZATION_KEY}: {described!r}; expected {{'scheme': one of {SCHEMES}, "
                         "'modules': [names of int8 linear layers], 'engine': ...}")
    return scheme, [str(m) for m in modules], described.get("engine")


def load_checkpoint(source: str | Path, config, attn_implementation: str = "sdpa",
                    tokenizer_fingerprint: str | None = None, head: str | None = None) -> tuple[nn.Module, str | None]:
    """The model (with ``head``: see :data:`bertology.models.auto.AUTO_CLASSES`) of a folder whose config records
    pruned heads or int8 layers (the module doc), and, for int8, its fingerprint over the stored tensors, the
    config and the tokenizer's fingerprint (``None`` otherwise:
    :func:`~bertology.models.encoders.fingerprint_model` reads the model itself)."""
    folder = Path(source)
    if not (folder / "config.json").is_file():
        raise ModelError(f"{folder}: pruned or int8 checkpoints load from a local folder; no config.json there")
    scheme, int8_modules, engine = _quantization(config)
    state = _read_state(folder)
    fingerprint_state = dict(state)
    config._attn_implementation = attn_implementation
    model = build_model(config, head, attn_implementation)
    linears = {name: module for name, module in model.named_modules() if isinstance(module, nn.Linear)}
    for name, linear in linears.items():
        stored = state.get(f"{name}.weight")
        if name not in int8_modules and stored is not None and tuple(stored.shape) != tuple(linear.weight.shape):
            set_submodule(model, name, _resized_linear(linear, tuple(stored.shape)))
    _fit_head_counts(model, config.model_type)
    int8_state: dict[str, torch.Tensor] = {}
    for name in int8_modules:
        if name not in linears:
            raise ModelError(f"{folder}: config {QUANTIZATION_KEY} names {name!r}, which is not a linear layer "
                             f"of a {config.model_type} model")
        for key in [key for key in state if key.startswith(f"{name}.")]:
            int8_state[key] = state.pop(key)
    if state and not scheme and model.dtype != next(iter(state.values())).dtype:
        model.to(next(iter(state.values())).dtype)  # fp16/bf16 weights stay half precision, as from_pretrained
    missing, unexpected = model.load_state_dict(state, strict=False)
    int8_prefixes = tuple(f"{name}." for name in int8_modules)
    missing = [key for key in missing if not key.startswith(int8_prefixes)]
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    if unexpected or set(missing) - tied:
        raise ModelError(f"{folder}: the weights do not fit the model its config describes (missing "
                         f"{sorted(set(missing) - tied)[:5]}, unexpected {sorted(unexpected)[:5]})")
    if missing:
        model.tie_weights()
    if scheme:
        if engine and engine not in torch.backends.quantized.supported_engines:
            raise ModelError(f"{folder}: its int8 layers were made for the {engine} quantization engine, which this "
                             f"machine lacks (it has {', '.join(torch.backends.quantized.supported_engines)})")
        if engine:
            torch.backends.quantized.engine = engine
        for name in int8_modules:
            set_submodule(model, name, int8_linear(scheme, int8_state, name))
    if not scheme:
        return model.eval(), None  # plain tensors: Encoder.fingerprint hashes the model as for any other
    return model.eval(), state_fingerprint(fingerprint_state, config, tokenizer_fingerprint)
