"""The one per-head hook point (``hook_z``) gives exactly what head masking gave before it.

Written before the hook point replaced the old mechanism (which found each layer's separate query/key/value
projections and hooked the output projection next to them), and kept as the guard that every stored
intervention number still holds: ``legacy_scale_heads`` below is that old code path, reduced to what a
non-shared model needs. Masking, scaling by arbitrary gates and the gate gradient (Michel et al.'s head
importance) must agree with it on BERT, RoBERTa, DeBERTa-v2 and DistilBERT (and the other separate-q/k/v
families) to 1e-6: in fact they agree bit for bit, since the same multiplication happens at the same place.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from bertology.intervention import mask_heads, scale_heads
from bertology.models.tiny import tiny_encoder

#: The old mechanism's (query, key, value) namings and output projections, as hooks.py had them.
_LEGACY_QKV = (("query", "key", "value"), ("query_proj", "key_proj", "value_proj"), ("q_lin", "k_lin", "v_lin"),
               ("q", "k", "v"))
_LEGACY_FUSED_OUTPUT = ("dense", "out_lin", "o", "out_proj")


def _legacy_sites(model: nn.Module) -> list[nn.Linear]:
    """Each layer's attention output projection, found the old way: a module holding q/k/v projections,
    and the output projection inside it or as ``output.dense`` beside it."""
    outputs = []
    for name, module in model.named_modules():
        for names in _LEGACY_QKV:
            q, k, v = (getattr(module, n, None) for n in names)
            if not all(isinstance(x, nn.Linear) for x in (q, k, v)):
                continue
            width = v.out_features
            found = [getattr(module, c) for c in _LEGACY_FUSED_OUTPUT
                     if isinstance(getattr(module, c, None), nn.Linear) and getattr(module, c).in_features == width]
            if not found:
                parent = model.get_submodule(name.rpartition(".")[0])
                found = [parent.output.dense]
            outputs.append(found[0])
            break
    return outputs


@contextlib.contextmanager
def legacy_scale_heads(model: nn.Module, scales: torch.Tensor):
    """The old ``scale_heads`` for a model whose layers each have their own attention module."""
    outputs = _legacy_sites(model)
    assert len(outputs) == scales.shape[0]
    handles = []
    for index, output in enumerate(outputs):

        def pre_hook(module, args, kwargs, index=index):
            context = args[0] if args else kwargs["input"]
            factor = scales[index].to(dtype=context.dtype, device=context.device)
            heads = factor.shape[-1]
            shaped = context.unflatten(-1, (heads, context.shape[-1] // heads)) * factor[:, None]
            new = shaped.flatten(-2)
            return ((new,) + tuple(args[1:]), kwargs) if args else (args, {**kwargs, "input": new})

        handles.append(output.register_forward_pre_hook(pre_hook, with_kwargs=True))
    try:
        yield scales
    finally:
        for handle in handles:
            handle.remove()


LAYERS, HEADS = 3, 4
FAMILIES = ["bert", "roberta", "deberta-v2", "distilbert", "electra", "xlm-roberta", "mpnet"]


def _model(family: str) -> nn.Module:
    return tiny_encoder(family, layers=LAYERS, heads=HEADS).model


def _batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 120, (2, 10), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _run(model, **kwargs) -> torch.Tensor:
    return model(**_batch(), output_hidden_states=True, **kwargs).hidden_states


def _gates(seed: int) -> torch.Tensor:
    return torch.rand(LAYERS, HEADS, generator=torch.Generator().manual_seed(seed)) * 2 - 0.5


@pytest.mark.parametrize("family", FAMILIES)
def test_masking_and_scaling_heads_equal_the_old_mechanism(family):
    model = _model(family)
    masked = torch.ones(LAYERS, HEADS)
    masked[0, 1] = masked[1, 3] = masked[2, 0] = 0
    with torch.no_grad():
        plain = _run(model)
        for grid in (masked, _gates(1)):
            with legacy_scale_heads(model, grid):
                old = _run(model)
            with scale_heads(model, grid):
                new = _run(model)
            for before, after in zip(old, new):
                assert (before - after).abs().max() <= 1e-6
            assert (old[-1] - plain[-1]).abs().max() > 1e-4  # the grid does change the model
        with legacy_scale_heads(model, masked):
            old = _run(model)
        with mask_heads(model, "L1H1,L2H3,L3H0"):
            new = _run(model)
        assert max((a - b).abs().max().item() for a, b in zip(old, new)) <= 1e-6


@pytest.mark.parametrize("family", ["bert", "roberta", "deberta-v2", "distilbert"])
def test_gate_gradients_equal_the_old_mechanism(family):
    """Head importance is the gradient of a loss with respect to the gates: the same through both."""
    model = _model(family)
    grads = []
    for mechanism in (legacy_scale_heads, scale_heads):
        gates = torch.ones(LAYERS, HEADS, requires_grad=True)
        with mechanism(model, gates):
            loss = _run(model)[-1].pow(2).mean()
        loss.backward()
        grads.append(gates.grad.clone())
    assert grads[0].abs().max() > 0
    assert (grads[0] - grads[1]).abs().max() <= 1e-6
