"""What fine-tuning changes: a model against its fine-tuned version on the same sentences.

:func:`compare_models` returns a :class:`~bertology.results.Result` with five tidy tables. Layers are
numbered as ``hidden_states`` (0 = embeddings, 1..L transformer layers; :mod:`bertology.numbering`),
``layer`` is a nullable integer everywhere, and what is not a layer (the pooler, a classifier) has
``layer`` <NA> and its name in ``component``:

- ``cka``: per layer, linear CKA (Kornblith et al. 2019) between the two models' representations of the
  same tokens (``representation="tokens"``: every non-padding token) and of the same sentences'
  first token (``"cls"``, what the classifier reads); ``cka_cross``: every layer pair, tokens.
- ``attention``: per layer (1..L) and head (from 0, ``head_label`` ``L4H5``), the cosine between the
  flattened attention maps of the two models, averaged over sentences (Kovaleva et al. 2019, "Revealing
  the Dark Secrets of BERT", Fig. 5).
- ``weights``: per layer (or component) and parameter group (``attention.self.query``,
  ``word_embeddings``...), ||W_after - W_before||_F / ||W_before||_F; ``weights_by_layer``: the same
  over all of a layer's (or component's) parameters.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from bertology.compare.cka import cka_matrix
from bertology.errors import DataError, ModelError
from bertology.files import ensure_dir
from bertology.models.layout import model_layout
from bertology.models import as_encoder
from bertology.models.texts import text_batches
from bertology.numbering import head_label
from bertology.plots import finish_figure
from bertology.progress import progress_bar
from bertology.results import Result
from bertology.runtime import resolve_device, seeded_subset

#: ``component`` of the parameters of a layer block that several layers share (ALBERT).
SHARED_LAYERS = "shared layers"


def _texts(sentences) -> tuple[list, bool]:
    items = list(sentences)
    if not items:
        raise DataError("compare: no sentences given; expected at least two")
    if all(isinstance(s, str) for s in items):
        return items, False
    words = []
    for index, sentence in enumerate(items):
        tokens = getattr(sentence, "words", sentence)
        if not isinstance(tokens, (list, tuple)) or not all(isinstance(w, str) for w in tokens):
            raise DataError(f"compare: sentence {index} is {type(sentence).__name__}; expected a string, "
                            "a list of words or a Sentence")
        words.append(list(tokens))
    return words, True


def _parameter_places(model: torch.nn.Module, names: Sequence[str]) -> dict[str, tuple[int | None, str | None, str]]:
    """``{parameter name: (layer, component, parameter group)}``: embeddings are layer 0, a transformer
    block is its layer (found by :func:`~bertology.models.layout.model_layout`, the one place that
    knows which module is which layer); anything else is a component (pooler, classifier) with no layer."""
    try:
        blocks = model_layout(model).block_layers()
    except ModelError:
        blocks = {}  # an architecture the hooks do not know: its blocks are reported as components
    prefix = getattr(model, "base_model_prefix", "") or ""
    places = {}
    for name in names:
        owner, _, _ = name.rpartition(".")
        block = next((b for b in blocks if owner == b or owner.startswith(b + ".")), None)
        if block is not None:
            layers = blocks[block]
            group = owner[len(block) + 1:] or "block"
            places[name] = (layers[0], None, group) if len(layers) == 1 else (None, SHARED_LAYERS, group)
            continue
        parts = owner.split(".")
        if "embeddings" in parts:
            group = ".".join(parts[parts.index("embeddings") + 1:]) or "embeddings"
            places[name] = (0, None, group)
            continue
        if parts and parts[0] == prefix and len(parts) > 1:
            parts = parts[1:]
        places[name] = (None, parts[0] or owner, ".".join(parts[1:]) or parts[0])
    return places


def weight_changes(before: torch.nn.Module, after: torch.nn.Module) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Relative weight change ``||W_after - W_before||_F / ||W_before||_F`` over parameters present in
    both (same name and shape): per (layer or component, parameter group) and per layer or component.

    Columns: ``layer`` (0 = embeddings, 1..L; <NA> for a component), ``component`` (<NA> for a layer;
    ``pooler``, ``classifier``...), [``parameter_group``,] ``rel_change``, ``n_params``.
    """
    before_params = dict(before.named_parameters())
    after_params = dict(after.named_parameters())
    shared = [n for n in before_params if n in after_params and before_params[n].shape == after_params[n].shape]
    if not shared:
        raise ModelError("compare: the two models share no parameter of the same name and shape; "
                         "expected a model and its fine-tuned version")
    places = _parameter_places(before, shared)
    per_group: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    per_layer: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    with torch.no_grad():
        for name in shared:
            w0 = before_params[name].detach().double().cpu()
            w1 = after_params[name].detach().double().cpu()
            diff = float(torch.sum((w1 - w0) ** 2))
            base = float(torch.sum(w0 ** 2))
            layer, component, group = places[name]
            for bucket in (per_group[(layer, component, group)], per_layer[(layer, component)]):
                bucket[0] += diff
                bucket[1] += base
                bucket[2] += w0.numel()

    def rel(diff, base):
        return float(np.sqrt(diff / base)) if base > 0 else float("nan")

    def order(key):  # layers in order, then components by name
        return (0, key[0], "") if key[0] is not None else (1, 0, str(key[1]))

    groups = pd.DataFrame([{"layer": layer, "component": component, "parameter_group": group,
                            "rel_change": rel(d, b), "n_params": int(n)}
                           for (layer, component, group), (d, b, n) in sorted(per_group.items(),
                                                                               key=lambda kv: (order(kv[0]), kv[0][2]))])
    layers = pd.DataFrame([{"layer": layer, "component": component, "rel_change": rel(d, b), "n_params": int(n)}
                           for (layer, component), (d, b, n) in sorted(per_layer.items(), key=lambda kv: order(kv[0]))])
    for frame in (groups, layers):
        frame["layer"] = pd.array(frame["layer"], dtype="Int64")
        frame["component"] = frame["component"].astype("string")
    return groups, layers


def compare_models(before, after, sentences: Sequence, *, tokenizer=None, batch_size: int = 16,
                   max_length: int = 128, max_sentences: int | None = None, seed: int = 0,
                   device: str | None = "auto", progress: bool = False) -> Result:
    """Compare ``before`` and ``after`` (Encoders, aliases/paths, or in-memory models with ``tokenizer``)
    on ``sentences`` (strings, word lists or :class:`~bertology.data.Sentence`).

    ``max_sentences`` keeps a subset drawn by ``seed`` (in corpus order). Both models run through
    :meth:`Encoder.forward <bertology.models.Encoder.forward>` on ``device`` (``auto``: cuda if there is
    one) and are put back where they were, in the mode they were in, with their attention implementation.

    Returns a :class:`Result` with tables ``cka``, ``cka_cross``, ``attention``, ``weights`` and
    ``weights_by_layer`` (see the module doc). Layers are compared by number up to the shallower model's
    depth; parameters by name.
    """
    before_enc = as_encoder(before, tokenizer=tokenizer, name="before")
    after_enc = as_encoder(after, tokenizer=tokenizer, name="after")
    texts, split = _texts(sentences)
    texts = seeded_subset(texts, max_sentences, seed)
    if len(texts) < 2:
        raise DataError("compare: CKA needs at least two sentences")
    tok_b, tok_a = before_enc.tokenizer, after_enc.tokenizer
    if tok_b.get_vocab() != tok_a.get_vocab():
        raise ModelError(f"compare: {before_enc.name!r} and {after_enc.name!r} have different vocabularies; "
                         "expected a model and its fine-tuned version")
    target = resolve_device(device)
    encoders = (before_enc, after_enc)
    places = [(enc.device, enc.model.training) for enc in encoders]

    token_reps: list[list[list[np.ndarray]]] = [[], []]  # [model][layer] -> list of [n_tokens, d]
    cls_reps: list[list[list[np.ndarray]]] = [[], []]
    cosine_sum: np.ndarray | None = None
    n_attention = 0
    try:
        for enc in encoders:
            enc.to(target).model.eval()
        with before_enc.eager_attention(), after_enc.eager_attention(), progress_bar(progress, transient=True) as bar:
            job = bar.add_task("comparing", total=len(texts))
            for rows, batch in text_batches(tok_b, texts, batch_size, words=split, max_length=max_length):
                mask = batch["attention_mask"].bool()
                outputs = [enc.forward(batch, hidden_states=True, attentions=True) for enc in encoders]
                for side, output in enumerate(outputs):
                    hidden = output.hidden_states
                    if not token_reps[side]:
                        token_reps[side] = [[] for _ in hidden]
                        cls_reps[side] = [[] for _ in hidden]
                    for layer, h in enumerate(hidden):  # hidden_states[layer] is layer `layer`
                        h = h.float().cpu()
                        token_reps[side][layer].append(h[mask].numpy())
                        cls_reps[side][layer].append(h[:, 0].numpy())
                n_layers = min(len(outputs[0].attentions), len(outputs[1].attentions))
                n_heads = outputs[0].attention(1).shape[1]
                if outputs[1].attention(1).shape[1] != n_heads:
                    raise ModelError("compare: the models have different numbers of heads")
                batch_cos = np.zeros((n_layers, n_heads))
                pair_mask = (mask[:, None, :, None] & mask[:, None, None, :]).float()
                for row, layer in enumerate(range(1, n_layers + 1)):
                    a0 = outputs[0].attention(layer).float().cpu() * pair_mask
                    a1 = outputs[1].attention(layer).float().cpu() * pair_mask
                    dot = (a0 * a1).sum((-1, -2))
                    norms = a0.pow(2).sum((-1, -2)).sqrt() * a1.pow(2).sum((-1, -2)).sqrt()
                    batch_cos[row] = (dot / norms.clamp_min(1e-12)).sum(0).numpy()
                cosine_sum = batch_cos if cosine_sum is None else cosine_sum + batch_cos
                n_attention += int(mask.shape[0])
                bar.advance(job, len(rows))
    finally:
        for enc, (where, training) in zip(encoders, places):
            enc.to(where).model.train(training)

    n_common = min(len(token_reps[0]), len(token_reps[1]))
    tokens = [[np.concatenate(layer) for layer in side] for side in token_reps]
    cls = [[np.concatenate(layer) for layer in side] for side in cls_reps]
    cross = cka_matrix(tokens[0], tokens[1])
    cls_cross = cka_matrix(cls[0][:n_common], cls[1][:n_common])
    cka_rows = []
    for layer in range(n_common):
        cka_rows.append({"layer": layer, "representation": "tokens", "cka": float(cross[layer, layer]),
                         "n": int(tokens[0][layer].shape[0])})
        cka_rows.append({"layer": layer, "representation": "cls", "cka": float(cls_cross[layer, layer]),
                         "n": int(cls[0][layer].shape[0])})
    cross_rows = [{"layer_before": i, "layer_after": j, "cka": float(cross[i, j])}
                  for i in range(cross.shape[0]) for j in range(cross.shape[1])]
    attention_rows = [{"layer": row + 1, "head": head, "head_label": head_label(row + 1, head),
                       "cosine": float(cosine_sum[row, head] / n_attention), "n_sentences": n_attention}
                      for row in range(cosine_sum.shape[0]) for head in range(cosine_sum.shape[1])]
    weights, weights_by_layer = weight_changes(before_enc.model, after_enc.model)
    return Result("compare", tables={
        "cka": pd.DataFrame(cka_rows),
        "cka_cross": pd.DataFrame(cross_rows),
        "attention": pd.DataFrame(attention_rows),
        "weights": weights,
        "weights_by_layer": weights_by_layer,
    }, meta={"before": before_enc.name, "after": after_enc.name, "before_fingerprint": before_enc.fingerprint,
             "after_fingerprint": after_enc.fingerprint, "n_sentences": len(texts), "max_length": max_length,
             "max_sentences": max_sentences, "subset_seed": seed, "device": str(target)})


def _tables(results: Result | Mapping[str, pd.DataFrame]) -> Mapping[str, pd.DataFrame]:
    return results.tables if isinstance(results, Result) else results


def _layer_label(layer, component) -> str:
    return str(component) if pd.isna(layer) else str(int(layer))


def plot_comparison(results: Result | Mapping[str, pd.DataFrame], out_dir, title: str = "") -> list[Path]:
    """Three PNGs under ``out_dir``: CKA per layer, weight change per layer (and component), attention
    cosine per head. ``results`` is :func:`compare_models`'s result or its tables."""
    matplotlib.use("Agg")  # on a machine with a display too: the figure goes to a file
    tables = _tables(results)
    out_dir = ensure_dir(out_dir)
    paths = []

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for representation, frame in tables["cka"].groupby("representation"):
        ax.plot(frame["layer"].astype(float), frame["cka"], marker="o", label=representation)
    ax.set(xlabel="layer (0 = embeddings)", ylabel="linear CKA before vs after", ylim=(0, 1.02), title=title or "CKA")
    ax.legend()
    paths.append(finish_figure(fig, out_dir / "cka.png"))

    frame = tables["weights_by_layer"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar([_layer_label(layer, component) for layer, component in zip(frame["layer"], frame["component"])],
           frame["rel_change"])
    ax.set(xlabel="layer (0 = embeddings) or component", ylabel="||W_after - W_before|| / ||W_before||",
           title=title or "relative weight change")
    paths.append(finish_figure(fig, out_dir / "weights.png"))

    grid = tables["attention"].pivot(index="layer", columns="head", values="cosine")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    image = ax.imshow(grid.values.astype(float), vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set(xlabel="head", ylabel="layer", title=title or "attention cosine before vs after",
           yticks=range(len(grid.index)), yticklabels=[str(int(v)) for v in grid.index])
    fig.colorbar(image, ax=ax)
    paths.append(finish_figure(fig, out_dir / "attention.png"))
    return paths
