"""What fine-tuning changes: a model against its fine-tuned version on the same sentences.

Three views, each a tidy DataFrame:

- ``cka``: per layer, linear CKA (Kornblith et al. 2019) between the two models' representations of the
  same tokens (``representation="tokens"``: every non-padding token) and of the same sentences'
  first token (``"cls"``, what the classifier reads); ``cka_cross``: every layer pair, tokens.
- ``attention``: per layer and head, the cosine between the flattened attention maps of the two models,
  averaged over sentences (Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Fig. 5).
- ``weights``: per layer (0 = embeddings) and component, ||W_after - W_before||_F / ||W_before||_F;
  ``weights_by_layer``: the same over all of a layer's parameters.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from bertology.compare.cka import cka_matrix
from bertology.errors import DataError, ModelError

_LAYER_RE = re.compile(r"(?:^|\.)(?:layer|layers)\.(\d+)\.(.*)$")


def _as_encoder(model, tokenizer=None, name: str = "model"):
    """An Encoder with eager attention, from an Encoder, an alias/path, or a (model, tokenizer)."""
    from bertology.models import Encoder, load_encoder

    if isinstance(model, Encoder):
        return model.with_attentions()
    if isinstance(model, torch.nn.Module):
        if tokenizer is None:
            raise ModelError(f"{name}: an in-memory model needs its tokenizer")
        backbone = getattr(model, "backbone", model)  # a GlueModel compares by its encoder
        return Encoder.from_model(backbone, tokenizer, name=name).with_attentions()
    return load_encoder(model, attentions=True)


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


def _layer_of(name: str) -> tuple[str, str]:
    """(layer label, component) of a parameter name: embeddings -> '0', encoder layer i -> 'i+1'."""
    match = _LAYER_RE.search(name)
    if match:
        component = match.group(2).rsplit(".", 1)[0]
        return str(int(match.group(1)) + 1), component
    if "embeddings" in name:
        return "0", name.split("embeddings.", 1)[-1].rsplit(".", 1)[0]
    head = name.split(".", 1)[0]
    return head, name.rsplit(".", 1)[0]


def weight_changes(before: torch.nn.Module, after: torch.nn.Module) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Relative weight change per (layer, component) and per layer, over parameters present in both."""
    before_params = dict(before.named_parameters())
    after_params = dict(after.named_parameters())
    shared = [n for n in before_params if n in after_params and before_params[n].shape == after_params[n].shape]
    if not shared:
        raise ModelError("compare: the two models share no parameter of the same name and shape; "
                         "expected a model and its fine-tuned version")
    per_component: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    per_layer: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    with torch.no_grad():
        for name in shared:
            w0 = before_params[name].detach().double().cpu()
            w1 = after_params[name].detach().double().cpu()
            diff = float(torch.sum((w1 - w0) ** 2))
            base = float(torch.sum(w0 ** 2))
            layer, component = _layer_of(name)
            for bucket in (per_component[(layer, component)], per_layer[layer]):
                bucket[0] += diff
                bucket[1] += base
                bucket[2] += w0.numel()

    def rel(diff, base):
        return float(np.sqrt(diff / base)) if base > 0 else float("nan")

    components = pd.DataFrame([{"layer": layer, "component": component, "rel_change": rel(d, b), "n_params": int(n)}
                               for (layer, component), (d, b, n) in per_component.items()])
    layers = pd.DataFrame([{"layer": layer, "rel_change": rel(d, b), "n_params": int(n)}
                           for layer, (d, b, n) in per_layer.items()])
    return components, layers


def _forward_all(encoder, batch: dict, device) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    with torch.inference_mode():
        output = encoder.model(**{k: v.to(device) for k, v in batch.items()}, output_hidden_states=True,
                               output_attentions=True)
    if output.attentions is None or any(a is None for a in output.attentions):
        raise ModelError(f"{encoder.name}: returned no attention weights; load it with attentions=True (eager)")
    return list(output.hidden_states), list(output.attentions)


def compare_models(before, after, sentences: Sequence, *, tokenizer=None, batch_size: int = 16,
                   max_length: int = 128, device: str | None = None, progress: bool = False) -> dict[str, pd.DataFrame]:
    """Compare ``before`` and ``after`` (Encoders, aliases/paths, or in-memory models with ``tokenizer``)
    on ``sentences`` (strings, word lists or :class:`~bertology.data.Sentence`).

    Returns ``{"cka", "cka_cross", "attention", "weights", "weights_by_layer"}`` DataFrames (see module doc).
    Layers are compared by index up to the shallower model's depth; parameters by name.
    """
    before_enc = _as_encoder(before, tokenizer, "before")
    after_enc = _as_encoder(after, tokenizer, "after")
    texts, split = _texts(sentences)
    if len(texts) < 2:
        raise DataError("compare: CKA needs at least two sentences")
    tok_b, tok_a = before_enc.tokenizer, after_enc.tokenizer
    if tok_b.get_vocab() != tok_a.get_vocab():
        raise ModelError(f"compare: {before_enc.name!r} and {after_enc.name!r} have different vocabularies; "
                         "expected a model and its fine-tuned version")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    models = [before_enc.model, after_enc.model]
    states = [before_enc.model.training, after_enc.model.training]
    for model in models:
        model.eval().to(device)

    token_reps: list[list[list[np.ndarray]]] = [[], []]  # [model][layer] -> list of [n_tokens, d]
    cls_reps: list[list[list[np.ndarray]]] = [[], []]
    cosine_sum: np.ndarray | None = None
    n_attention = 0
    from rich.progress import Progress

    with Progress(disable=not progress, transient=True) as bar:
        job = bar.add_task("comparing", total=len(texts))
        for start in range(0, len(texts), batch_size):
            chunk = texts[start:start + batch_size]
            batch = tok_b(chunk, is_split_into_words=split, truncation=True, max_length=max_length,
                          padding=True, return_tensors="pt")
            mask = batch["attention_mask"].bool()
            outputs = [_forward_all(enc, batch, device) for enc in (before_enc, after_enc)]
            for side, (hidden, _) in enumerate(outputs):
                if not token_reps[side]:
                    token_reps[side] = [[] for _ in hidden]
                    cls_reps[side] = [[] for _ in hidden]
                for layer, h in enumerate(hidden):
                    h = h.float().cpu()
                    token_reps[side][layer].append(h[mask].numpy())
                    cls_reps[side][layer].append(h[:, 0].numpy())
            attn_b, attn_a = outputs[0][1], outputs[1][1]
            n_layers = min(len(attn_b), len(attn_a))
            if attn_b[0].shape[1] != attn_a[0].shape[1]:
                raise ModelError("compare: the models have different numbers of heads")
            lengths = mask.sum(1)
            batch_cos = np.zeros((n_layers, attn_b[0].shape[1]))
            for layer in range(n_layers):
                a0, a1 = attn_b[layer].float().cpu(), attn_a[layer].float().cpu()
                pair_mask = (mask[:, None, :, None] & mask[:, None, None, :]).float()
                a0, a1 = a0 * pair_mask, a1 * pair_mask
                dot = (a0 * a1).sum((-1, -2))
                norms = a0.pow(2).sum((-1, -2)).sqrt() * a1.pow(2).sum((-1, -2)).sqrt()
                batch_cos[layer] = (dot / norms.clamp_min(1e-12)).sum(0).numpy()
            cosine_sum = batch_cos if cosine_sum is None else cosine_sum[:n_layers] + batch_cos
            n_attention += int(lengths.numel())
            bar.advance(job, len(chunk))

    for model, state in zip(models, states):
        model.train(state)
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
    attention_rows = [{"layer": layer + 1, "head": head, "cosine": float(cosine_sum[layer, head] / n_attention),
                       "n_sentences": n_attention}
                      for layer in range(cosine_sum.shape[0]) for head in range(cosine_sum.shape[1])]
    weights, weights_by_layer = weight_changes(before_enc.model, after_enc.model)
    return {
        "cka": pd.DataFrame(cka_rows),
        "cka_cross": pd.DataFrame(cross_rows),
        "attention": pd.DataFrame(attention_rows),
        "weights": weights,
        "weights_by_layer": weights_by_layer,
    }


def _layer_sort_key(label: str):
    return (0, int(label)) if str(label).isdigit() else (1, str(label))


def plot_comparison(results: dict[str, pd.DataFrame], out_dir, title: str = "") -> list:
    """Three PNGs under ``out_dir``: CKA per layer, weight change per layer, attention cosine per head."""
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for representation, frame in results["cka"].groupby("representation"):
        ax.plot(frame["layer"], frame["cka"], marker="o", label=representation)
    ax.set(xlabel="layer (0 = embeddings)", ylabel="linear CKA before vs after", ylim=(0, 1.02), title=title or "CKA")
    ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "cka.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    frame = results["weights_by_layer"].copy()
    frame = frame.iloc[sorted(range(len(frame)), key=lambda i: _layer_sort_key(frame["layer"].iloc[i]))]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar([str(x) for x in frame["layer"]], frame["rel_change"])
    ax.set(xlabel="layer (0 = embeddings)", ylabel="||W_after - W_before|| / ||W_before||",
           title=title or "relative weight change")
    fig.tight_layout()
    paths.append(out_dir / "weights.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    grid = results["attention"].pivot(index="layer", columns="head", values="cosine")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    image = ax.imshow(grid.values, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set(xlabel="head", ylabel="layer", title=title or "attention cosine before vs after",
           yticks=range(len(grid.index)), yticklabels=grid.index)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    paths.append(out_dir / "attention.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def write_comparison(results: dict[str, pd.DataFrame], out_dir) -> list:
    """Each frame as CSV and Parquet under ``out_dir`` (temp file, then rename)."""
    from pathlib import Path

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, frame in results.items():
        for suffix in ("csv", "parquet"):
            path = out_dir / f"{name}.{suffix}"
            tmp = path.with_name(f".{path.name}.tmp")
            frame = frame.astype({"layer": str}) if "layer" in frame and frame["layer"].dtype == object else frame
            frame.to_csv(tmp, index=False) if suffix == "csv" else frame.to_parquet(tmp, index=False)
            tmp.replace(path)
            written.append(path)
    return written
