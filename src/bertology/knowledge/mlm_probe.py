"""The Convexity report's MLM probe: a BERT-style token predictor trained on every layer at once.

The report's final method (slides "BERT MLM Probing Method"): an MLM head, *not* the pre-trained one,
trained on each layer's representations, *without* ``[MASK]`` and *not* on clean inputs, but on
"highly dropouted embeddings". Our reading (docs/knowledge.md): the frozen model runs on its own text
with heavy element-wise dropout on the **word-embedding lookup** (``get_input_embeddings()``'s output,
inverted dropout at rate ``dropout``, before position/segment embeddings and LayerNorm), so a token's
own identity reaches its position only through a random ``1 - dropout`` share of its embedding's
coordinates; a predictor on layer ``l`` must recover the token from that degraded trace plus what layer ``l``
gathered from the context. A clean input would make the task trivial (the token is its own answer); a
``[MASK]`` would change the input distribution the layers were trained on. By default only the predicted
token is dropped out (``corrupt="target"``: one copy of the sentence per token, the context clean, as the
report's crossed-out ``[MASK]`` and "without masking" both keep it); ``corrupt="all"`` drops out every
token's embedding, the context included.

Per layer the predictor is BERT's ``BertLMPredictionHead``: dense (d x d) + GELU + LayerNorm + a decoder
over the model's whole vocabulary (untied, with a bias). It is called a predictor, not a head: "head" is kept
for attention heads and a model's own task heads (docs/ARCHITECTURE.md's glossary). All layers' predictors are
one module whose weights are stacked ``[layers, ...]``; one pass over a ``tokens`` store trains them all with
batched matrix products, each predictor on its own layer's rows and with its own loss, so the result equals
training the predictors one by one (same initialisation per layer, same batches);
``benchmarks/perf/bench_knowledge.py`` compares the two. The old names (``LayerwiseMLMHead``,
``train_heads``, ``evaluate_heads``, ``head_seeds``) still work with a :class:`DeprecationWarning`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from bertology.data import default_corpus
from bertology.errors import DataError, SettingError
from bertology.training import Optimisation, Optimiser, train_steps
from bertology.geometry.stores import cached_store, load_sentences
from bertology.models.encoders import as_encoder
from bertology.knowledge.mlm_settings import CORRUPT, DEFAULTS
from bertology.knowledge.spec import MLMProbeSpec
from bertology.knowledge.static import store_token_ids
from bertology.models import Encoder
from bertology.models.encoders import ForwardOutput
from bertology.numbering import parse_layers
from bertology.plots import finish_layer_figure
from bertology.results import Result
from bertology.runtime import derive_seed, resolve_device
from bertology.settings import spec_of

TOP_K = 10
#: Padded tokens per forward pass of the target mode's copies.
TARGET_COPY_TOKENS = 4096


@contextlib.contextmanager
def input_dropout(encoder: Encoder, rate: float, seed: int, corrupt: str = "target"):
    """Inverted dropout at ``rate`` on the output of ``encoder``'s word-embedding lookup, drawn from a
    generator seeded with ``seed``, for the duration of the block (the model itself stays in eval mode).

    ``corrupt="target"`` (the default): only the predicted token is corrupted, as ``[MASK]`` would be. For
    the block, :meth:`Encoder.forward` runs each input once clean and then once per content token (not a
    special token, not padding) in a copy where only that token's embedding is dropped out; each content
    position's hidden states (every layer) come from its own copy, every other position's from the clean
    pass. Only hidden states can be asked for. A direct call of the embedding lookup stays clean.
    ``corrupt="all"``: every position of every input (the context too) in one ordinary pass; a direct
    call of the lookup is dropped out as well.
    """
    if not 0.0 <= rate < 1.0:
        raise SettingError("dropout", rate, "expected a rate in [0, 1)", shown=str(rate))
    if corrupt not in CORRUPT:
        raise SettingError("corrupt", corrupt, f"expected one of {', '.join(CORRUPT)}")
    if rate == 0.0:
        yield
        return
    generators: dict[str, torch.Generator] = {}
    where: list[torch.Tensor | None] = [None]  # target mode: [copies, tokens] bool, the positions to corrupt

    def hook(module, inputs, output):
        if corrupt == "target" and where[0] is None:
            return None
        key = str(output.device)
        if key not in generators:
            generators[key] = torch.Generator(device=output.device).manual_seed(derive_seed(seed, "input-dropout"))
        keep = torch.rand(output.shape, generator=generators[key], device=output.device) >= rate
        dropped = output * keep.to(output.dtype) / (1.0 - rate)
        if corrupt == "all":
            return dropped
        return torch.where(where[0].to(output.device)[..., None], dropped, output)

    handle = encoder.model.get_input_embeddings().register_forward_hook(hook)
    patched = False
    if corrupt == "target":
        encoder.forward = _target_forward(encoder, encoder.forward, where)
        patched = True
    try:
        yield
    finally:
        handle.remove()
        if patched:
            del encoder.forward  # the class's method again


def _target_forward(encoder: Encoder, original, where: list):
    """:meth:`Encoder.forward` with one copy per content token in which only that token is corrupted."""
    specials = torch.tensor(sorted(set(encoder.tokenizer.all_special_ids)), dtype=torch.long)

    def forward(inputs, *, hidden_states: bool = True, attentions: bool = False, logits: bool = False,
                grad: bool = False, model=None):
        if attentions or logits or grad or not hidden_states:
            raise ValueError("target-token input dropout gives hidden states only")
        ids = inputs["input_ids"]
        mask = inputs.get("attention_mask")
        mask = torch.ones_like(ids) if mask is None else mask
        content = mask.bool() & ~torch.isin(ids, specials.to(ids.device))
        clean = original(inputs, hidden_states=True, model=model).hidden_states
        rows, cols = content.nonzero(as_tuple=True)
        width = ids.shape[1]
        per_call = max(1, TARGET_COPY_TOKENS // width)
        with torch.inference_mode():
            merged = [h.clone() for h in clean]
            for start in range(0, len(rows), per_call):
                r, c = rows[start:start + per_call], cols[start:start + per_call]
                chosen = torch.zeros(len(r), width, dtype=torch.bool, device=ids.device)
                chosen[torch.arange(len(r), device=ids.device), c] = True
                copies = {key: value[r] if torch.is_tensor(value) and value.shape[:1] == ids.shape[:1] else value
                          for key, value in inputs.items()}
                where[0] = chosen
                try:
                    states = original(copies, hidden_states=True, model=model).hidden_states
                finally:
                    where[0] = None
                index = torch.arange(len(r), device=states[0].device)
                for layer, state in enumerate(states):
                    merged[layer][r.to(state.device), c.to(state.device)] = state[index, c.to(state.device)]
        return ForwardOutput(hidden_states=tuple(merged))

    return forward


def dropout_store(encoder: Encoder, sentences, rate: float, seed: int, *, corrupt: str = "target", cache_dir=None,
                  input_path=None, device=None, progress: bool = False):
    """A ``tokens`` store of ``encoder`` run with input-embedding dropout (cached per rate, mode and seed)."""
    prefix = "target-dropout" if corrupt == "target" else "input-dropout"
    tag = f"{prefix}{rate:g}-seed{seed}" if rate > 0 else ""
    hook = (lambda: input_dropout(encoder, rate, seed, corrupt)) if rate > 0 else None
    return cached_store(encoder, sentences, pool="tokens", cache_dir=cache_dir, input_path=input_path, tag=tag,
                        device=device, progress=progress, hook=hook)


@dataclass
class TokenRows:
    """A ``tokens`` store with a target vocabulary id per row (-1: not a target), streamed shard by shard
    with every requested layer: ``[layers, rows, dim]`` float32 and the rows' targets."""

    store: object
    targets: np.ndarray

    @property
    def n_targets(self) -> int:
        return int((self.targets >= 0).sum())

    def chunks(self, layers: Sequence[int]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        offsets = self.store.offsets
        for parts in zip(*(self.store.iter_layer(layer) for layer in layers)):
            shard = parts[0][0]
            targets = self.targets[offsets[shard.start]:offsets[shard.stop]]
            keep = targets >= 0
            if keep.any():
                yield np.stack([rows[keep] for _, rows in parts]), targets[keep]


def token_rows(store, tokenizer, sentence_mask: np.ndarray | None = None) -> TokenRows:
    """Every content token of ``store`` as a target, except the unknown token and, when given, the tokens of
    sentences where ``sentence_mask`` is False."""
    targets = store_token_ids(store, tokenizer).copy()
    if tokenizer.unk_token_id is not None:
        targets[targets == tokenizer.unk_token_id] = -1
    if sentence_mask is not None:
        row_mask = np.repeat(np.asarray(sentence_mask, dtype=bool), np.diff(store.offsets))
        targets[~row_mask] = -1
    return TokenRows(store, targets)


class LayerwiseMLMPredictor(nn.Module):
    """One token predictor (BERT's MLM prediction head) per layer, weights stacked ``[layers, ...]``: ``x [layers, batch, dim]`` ->
    logits ``[layers, batch, vocab]``.

    Per layer: dense ``dim x dim`` + GELU + LayerNorm, then the decoder: with ``tied_embeddings`` (a
    ``[vocab, dim]`` matrix, BERT's own arrangement) the model's frozen input embeddings shared by every
    layer, plus a trained bias per layer; without, a trained ``dim x vocab`` matrix and bias per layer.
    Predictor ``k`` is initialised from ``seeds[k]`` alone (BERT's init: normal(0, 0.02) weights, zero biases,
    unit LayerNorm), so a one-layer predictor built with the same seed is the same predictor.
    """

    def __init__(self, dim: int, vocab_size: int, seeds: Sequence[int], tied_embeddings: torch.Tensor | None = None,
                 layer_norm_eps: float = 1e-12):
        super().__init__()
        n = len(seeds)
        self.dim, self.vocab_size, self.layer_norm_eps = dim, vocab_size, layer_norm_eps
        self.dense_weight = nn.Parameter(torch.empty(n, dim, dim))
        self.dense_bias = nn.Parameter(torch.zeros(n, dim))
        self.norm_weight = nn.Parameter(torch.ones(n, dim))
        self.norm_bias = nn.Parameter(torch.zeros(n, dim))
        self.decoder_bias = nn.Parameter(torch.zeros(n, vocab_size))
        if tied_embeddings is not None:
            if tuple(tied_embeddings.shape) != (vocab_size, dim):
                raise ValueError(f"tied embeddings of shape {tuple(tied_embeddings.shape)}, "
                                 f"expected ({vocab_size}, {dim})")
            self.register_buffer("tied_embeddings", tied_embeddings.detach().float().clone())
            self.decoder_weight = None
        else:
            self.tied_embeddings = None
            self.decoder_weight = nn.Parameter(torch.empty(n, dim, vocab_size))
        with torch.no_grad():
            for k, seed in enumerate(seeds):
                generator = torch.Generator().manual_seed(int(seed))
                self.dense_weight[k].normal_(0.0, 0.02, generator=generator)
                if self.decoder_weight is not None:
                    self.decoder_weight[k].normal_(0.0, 0.02, generator=generator)

    @property
    def tied(self) -> bool:
        return self.tied_embeddings is not None

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.baddbmm(self.dense_bias[:, None, :], x, self.dense_weight)
        h = F.gelu(h)
        h = F.layer_norm(h, (self.dim,), eps=self.layer_norm_eps)
        return h * self.norm_weight[:, None, :] + self.norm_bias[:, None, :]

    def decode(self, h: torch.Tensor, k: int) -> torch.Tensor:
        """Logits ``[batch, vocab]`` of predictor ``k`` from its transformed vectors ``h [batch, dim]``."""
        weight = self.tied_embeddings.T if self.tied else self.decoder_weight[k]
        return torch.addmm(self.decoder_bias[k], h, weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.transform(x)
        return torch.stack([self.decode(h[k], k) for k in range(h.shape[0])])

    def losses(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Each predictor's mean cross-entropy ``[layers]`` on ``x [layers, batch, dim]``. The transforms run as
        one batched product; the vocabulary-sized decoder and softmax run layer by layer, whose
        ``batch x vocab`` blocks stay in cache (10% faster than one ``layers*batch x vocab`` block on CPU)."""
        h = self.transform(x)
        return torch.stack([F.cross_entropy(self.decode(h[k], k).float(), targets) for k in range(h.shape[0])])


def predictor_seeds(seed: int, layers: Sequence[int]) -> list[int]:
    # "mlm-head": the seed name of the first runs, so the predictors start as they did
    return [derive_seed(seed, "mlm-head", layer) for layer in layers]


def unigram_log_prior(targets: np.ndarray, vocab_size: int) -> torch.Tensor:
    """Add-one smoothed log frequencies of the training targets: the decoder bias starts here, so every
    predictor begins at the unigram model's loss instead of log(vocab)."""
    counts = np.bincount(targets[targets >= 0], minlength=vocab_size).astype(np.float64) + 1.0
    return torch.as_tensor(np.log(counts / counts.sum()), dtype=torch.float32)


@dataclass
class TrainingLog:
    epochs: list[np.ndarray]  # mean training loss per layer, one array per epoch
    seconds: float
    steps: int


#: The MLM probe's optimisation: AdamW, fused (the decoders hold ``layers x dim x vocab`` weights, 82M for
#: MiniLM, and the fused step is 10x faster than the per-tensor one on CPU: 0.09 s vs 1.25 s), no warm-up,
#: linear decay to 0, no clipping. Weight decay reaches every parameter: the predictors are stacked
#: ``[layers, ...]``, so their biases and LayerNorm weights are matrices too. ``precision="bf16"`` is the
#: probe's ``autocast``.
MLM_OPTIMISATION = Optimisation(lr=DEFAULTS["lr"], batch_size=DEFAULTS["batch_size"], warmup_ratio=0.0,
                                weight_decay=0.01, max_grad_norm=None, device="cpu", precision="fp32", fused=True)


def mlm_optimisation(*, autocast: bool = False, **fields) -> Optimisation:
    """:data:`MLM_OPTIMISATION` with ``fields`` (``seed=``, ``lr=``, ``batch_size=``, ``device=`` ...) replaced;
    ``autocast=True`` is bf16 autocast on any device."""
    if "device" in fields:
        fields["device"] = str(fields["device"])
    return dataclasses.replace(MLM_OPTIMISATION, precision="bf16" if autocast else "fp32", **fields)


def train_predictors(rows: TokenRows, layers: Sequence[int], vocab_size: int,
                     optimisation: Optimisation | None = None, *, epochs: int = 3,
                     tied_embeddings: torch.Tensor | None = None, progress: bool = False,
                     description: str = "MLM predictors", **fields) -> tuple[LayerwiseMLMPredictor, TrainingLog]:
    """Train one predictor per layer in one pass per epoch over ``rows`` with ``optimisation`` (default
    :func:`mlm_optimisation` of ``fields``: ``seed=``, ``lr=``, ``batch_size=``, ``weight_decay=``,
    ``device=``, ``autocast=``), in the package's one step loop (:func:`bertology.training.train_steps`).

    The loss is the sum over layers of each predictor's mean cross-entropy, so each one gets exactly the
    gradient it would get alone. Batches: every shard's rows shuffled with ``(seed, epoch)``.
    """
    if optimisation is None:
        optimisation = mlm_optimisation(**fields)
    elif fields:
        raise TypeError(f"train_predictors: give the optimisation or its fields ({', '.join(fields)}), not both")
    seed, batch_size = optimisation.seed, optimisation.batch_size
    device = torch.device(optimisation.device)
    layers = list(layers)
    if rows.n_targets == 0:
        raise DataError("no training tokens; give more text (data=, max_sentences=)")
    predictor = LayerwiseMLMPredictor(rows.store.dim, vocab_size, predictor_seeds(seed, layers),
                                      tied_embeddings).to(device)
    with torch.no_grad():
        predictor.decoder_bias.copy_(unigram_log_prior(rows.targets, vocab_size)[None, :]
                                     .expand_as(predictor.decoder_bias))
    steps_per_epoch = sum(math.ceil(len(t) / batch_size) for _, t in _chunk_sizes(rows, layers))
    total_steps = optimisation.steps(epochs * steps_per_epoch)
    optimiser = Optimiser(predictor, optimisation, total_steps, device)
    history: list[np.ndarray] = []
    loss_sum = torch.zeros(len(layers), device=device)

    def epoch_batches(epoch: int, first: int):
        rng = np.random.default_rng(derive_seed(seed, "mlm-probe-order", epoch))
        loss_sum.zero_()
        for chunk, targets in rows.chunks(layers):
            order = rng.permutation(len(targets))
            chunk_t = torch.from_numpy(chunk)
            for start in range(0, len(order), batch_size):
                index = torch.from_numpy(order[start:start + batch_size])
                yield (chunk_t[:, index].to(device, non_blocking=True),
                       torch.from_numpy(targets[index.numpy()]).to(device))

    def batch_loss(batch) -> torch.Tensor:
        x, y = batch
        per_layer = predictor.losses(x, y)
        loss_sum.add_(per_layer.detach() * len(y))
        return per_layer.sum()

    def end_of_epoch(epoch: int, step: int, losses: list[float]) -> None:
        seen = sum(len(targets) for _, targets in _chunk_sizes(rows, layers))
        history.append((loss_sum / max(seen, 1)).cpu().numpy())

    log = train_steps(optimiser, batch_loss, epoch_batches, steps_per_epoch, total_steps, on_epoch_end=end_of_epoch,
                      examples=lambda batch: len(batch[1]), description=description, progress=progress)
    return predictor, TrainingLog(history, log.seconds, log.steps)


def _chunk_sizes(rows: TokenRows, layers: Sequence[int]):
    """(shard, targets) without reading any vectors: the batch plan's sizes."""
    offsets = rows.store.offsets
    for shard in rows.store.shards:
        targets = rows.targets[offsets[shard.start]:offsets[shard.stop]]
        yield shard, targets[targets >= 0]


@torch.no_grad()
def evaluate_predictors(predictor: LayerwiseMLMPredictor, rows: TokenRows, layers: Sequence[int], *, batch_size: int = 512,
                   device: str | torch.device = "cpu", autocast: bool = False) -> pd.DataFrame:
    """Per layer on ``rows``: tokens, top-1 and top-10 accuracy (fractions), mean cross-entropy (nats) and
    perplexity ``exp(cross-entropy)``."""
    device = torch.device(device)
    n = len(layers)
    top1, top10, nll, count = np.zeros(n), np.zeros(n), np.zeros(n), 0
    precision = torch.autocast(device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    predictor.eval()
    for chunk, targets in rows.chunks(layers):
        for start in range(0, len(targets), batch_size):
            x = torch.from_numpy(chunk[:, start:start + batch_size]).to(device)
            y = torch.from_numpy(targets[start:start + batch_size]).to(device)
            with precision:
                logits = predictor(x)
            logits = logits.float()
            nll += F.cross_entropy(logits.reshape(-1, predictor.vocab_size), y.repeat(n), reduction="none") \
                .view(n, -1).sum(dim=1).cpu().numpy()
            best = logits.topk(TOP_K, dim=-1).indices  # [n, batch, k]
            hits = best == y[None, :, None]
            top1 += hits[:, :, 0].sum(dim=1).cpu().numpy()
            top10 += hits.any(dim=-1).sum(dim=1).cpu().numpy()
            count += len(y)
    predictor.train()
    if count == 0:
        raise DataError("no held-out tokens; give more text or eval_data=")
    cross_entropy = nll / count
    return pd.DataFrame({"layer": list(layers), "tokens": count, "top1": top1 / count, "top10": top10 / count,
                         "cross_entropy": cross_entropy, "perplexity": np.exp(cross_entropy)})


def unigram_baseline(train: TokenRows, heldout: TokenRows, vocab_size: int) -> dict:
    """Chance for the probe: the add-one smoothed unigram distribution of the training targets."""
    log_prior = unigram_log_prior(train.targets, vocab_size).numpy()
    targets = heldout.targets[heldout.targets >= 0]
    ranking = np.argsort(-log_prior, kind="stable")
    cross_entropy = float(-log_prior[targets].mean())
    return {"component": "unigram", "tokens": int(len(targets)),
            "top1": float(np.mean(targets == ranking[0])), "top10": float(np.isin(targets, ranking[:TOP_K]).mean()),
            "cross_entropy": cross_entropy, "perplexity": float(np.exp(cross_entropy))}


def heldout_split(n_sentences: int, every: int = 5) -> np.ndarray:
    """True for held-out sentences: every ``every``-th sentence (4, 9, 14, ...), so both parts span the
    whole corpus and the split needs no seed."""
    return (np.arange(n_sentences) % every) == every - 1


def mlm_probe(model: str | os.PathLike | Encoder = "minilm", data: str | os.PathLike | None = None,
              eval_data: str | os.PathLike | None = None, spec: MLMProbeSpec | None = None, *,
              device: str | None = "auto", cache_dir: str | os.PathLike | None = None, progress: bool = False,
              **settings) -> Result:
    """Train and evaluate the per-layer MLM predictors of ``model`` (and of its untrained twin) over ``seeds``.

    ``data``: training text (default the packaged UD English EWT train); ``eval_data``: held-out text
    (default the packaged EWT dev). With ``data`` given and no ``eval_data``, every fifth sentence of
    ``data`` is held out. Each seed draws its own input-embedding dropout, predictor initialisation and batch
    order, and initialises its own twin. ``corrupt``: ``"target"`` (default) drops out only the predicted
    token's embedding, in a copy of the sentence per token with the context clean; ``"all"`` drops out every
    token's embedding, context included (see :func:`input_dropout`).

    Tables: ``layers`` (weights, seed, layer, tokens, top1, top10, cross_entropy, perplexity, train_loss),
    ``summary`` (mean and std over seeds), ``baselines`` (the unigram model) and ``training`` (loss per
    epoch and layer).

    The settings are ``spec`` (:class:`~bertology.knowledge.spec.MLMProbeSpec`: seeds, layers, untrained, dropout,
    corrupt, epochs, batch_size, lr, decoder, max_sentences, max_test, autocast), or its fields as
    keywords, checked once; a bad one is one :class:`~bertology.errors.SettingError` naming its setting
    (``epochs 0: ...``; the command line names the option).
    """
    if "max_eval_sentences" in settings:  # the old name (the glossary's subset sizes: max_test is the test split)
        warnings.warn("mlm_probe(max_eval_sentences=...) is deprecated; use max_test=", DeprecationWarning,
                      stacklevel=2)
        settings["max_test"] = settings.pop("max_eval_sentences")
    spec = spec_of(MLMProbeSpec, spec, settings, "MLM probe")
    seeds, layers, untrained, dropout, corrupt = spec.seeds, spec.layers, spec.untrained, spec.dropout, spec.corrupt
    epochs, batch_size, lr, decoder, autocast = spec.epochs, spec.batch_size, spec.lr, spec.decoder, spec.autocast
    max_sentences, max_test = spec.max_sentences, spec.max_test
    if data is None and eval_data is None:
        data, eval_data = default_corpus("ewt-train"), default_corpus("ewt-dev")
    train_sentences, train_path = load_sentences(data, max_sentences)
    if eval_data is not None:
        eval_sentences, eval_path = load_sentences(eval_data, max_test)
        held = None
    else:
        held = heldout_split(len(train_sentences))
        eval_sentences, eval_path = None, train_path
        if held.sum() == 0 or (~held).sum() == 0:
            raise DataError(f"{train_path}: {len(train_sentences)} sentence(s) cannot be split into training "
                            "and held-out text (every fifth sentence is held out); give more text or eval_data=")
    run_device = resolve_device(device)
    encoder = as_encoder(model, device=str(run_device))
    chosen = parse_layers(layers, encoder.num_layers) or list(range(encoder.num_layers + 1))
    vocab_size = int(encoder.model.get_input_embeddings().weight.shape[0])
    rows, curves, baselines = [], [], []
    kinds = [("trained", lambda seed: encoder)]
    if untrained:
        kinds.append(("untrained", lambda seed: _twin(encoder, seed, run_device)))
    settings = {"dropout": dropout, "corrupt": corrupt, "epochs": epochs, "batch_size": batch_size, "lr": lr, "decoder": decoder,
                "autocast": autocast}
    for seed in seeds:
        for kind, make in kinds:
            current = make(seed)
            train_store = dropout_store(current, train_sentences, dropout, seed, corrupt=corrupt, cache_dir=cache_dir,
                                        input_path=train_path, device=str(run_device), progress=progress)
            if held is None:
                eval_store = dropout_store(current, eval_sentences, dropout, seed, corrupt=corrupt, cache_dir=cache_dir,
                                           input_path=eval_path, device=str(run_device), progress=progress)
                train_rows = token_rows(train_store, encoder.tokenizer)
                eval_rows = token_rows(eval_store, encoder.tokenizer)
            else:
                train_rows = token_rows(train_store, encoder.tokenizer, ~held)
                eval_rows = token_rows(train_store, encoder.tokenizer, held)
            predictor, log = train_predictors(
                train_rows, chosen, vocab_size,
                mlm_optimisation(seed=seed, lr=lr, batch_size=batch_size, device=run_device, autocast=autocast),
                epochs=epochs, progress=progress,
                tied_embeddings=_input_embeddings(current) if decoder == "tied" else None,
                description=f"MLM predictors, {kind}, seed {seed}")
            scores = evaluate_predictors(predictor, eval_rows, chosen, device=run_device, autocast=autocast)
            scores.insert(0, "seed", seed)
            scores.insert(0, "weights", kind)
            scores["train_loss"] = log.epochs[-1]
            scores["train_tokens"] = train_rows.n_targets
            scores["train_seconds"] = log.seconds
            rows.append(scores)
            for epoch, losses in enumerate(log.epochs, start=1):
                curves.append(pd.DataFrame({"weights": kind, "seed": seed, "epoch": epoch, "layer": chosen,
                                            "train_loss": losses}))
            if kind == "trained" and seed == seeds[0]:
                baselines.append(unigram_baseline(train_rows, eval_rows, vocab_size))
            del predictor
    table = pd.concat(rows, ignore_index=True)
    summary = summarize(table)
    meta = {
        "model": encoder.describe(),
        "data": str(train_path), "eval_data": str(eval_path) if eval_data is not None else None,
        "heldout": "every fifth sentence of data" if held is not None else "eval_data",
        "train_sentences": int(len(train_sentences) - (held.sum() if held is not None else 0)),
        "eval_sentences": int(held.sum()) if held is not None else len(eval_sentences),
        "seeds": list(seeds), "layers": chosen, "vocab_size": vocab_size, "settings": settings,
        "reading": ("inverted element-wise dropout on the word-embedding lookup of the frozen model, "
                    + ("of the predicted token only (one copy of the sentence per token, the context clean)"
                       if corrupt == "target" else "of every token, the context included")
                    + "; no [MASK]; a fresh token predictor per layer, BERT's MLM prediction head "
                      "(dense+GELU+LayerNorm+decoder over the vocabulary)"),
        "numbering": "layer l = hidden_states[l]; 0 = embeddings",
    }
    return Result("mlm-probe", tables={"layers": table, "summary": summary, "baselines": pd.DataFrame(baselines),
                                       "training": pd.concat(curves, ignore_index=True)}, meta=meta)


def _input_embeddings(encoder: Encoder) -> torch.Tensor:
    return encoder.model.get_input_embeddings().weight.detach()


def _twin(encoder: Encoder, seed: int, device) -> Encoder:
    return encoder.untrained(seed).to(device)


def summarize(layers: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over seeds per encoder and layer."""
    metrics = ["top1", "top10", "cross_entropy", "perplexity"]
    grouped = layers.groupby(["weights", "layer"], sort=True)
    out = grouped[metrics].mean()
    spread = grouped[metrics].std().add_suffix("_std")
    out = out.join(spread)
    out["seeds"] = grouped["seed"].nunique()
    return out.reset_index()


def plot_mlm_probe(summary: pd.DataFrame, baselines: pd.DataFrame, path: str | os.PathLike, title: str = "") -> Path:
    """Top-1 and top-10 accuracy (percent) and perplexity per layer, model vs untrained twin, with the
    unigram baseline; error bars = std over seeds."""
    matplotlib.use("Agg")  # on a machine with a display too: the figure goes to a file
    figure, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    panels = [("top1", "top-1 accuracy (%)", 100.0), ("top10", "top-10 accuracy (%)", 100.0),
              ("perplexity", "perplexity (log scale)", 1.0)]
    for axis, (metric, label, scale) in zip(axes, panels):
        for kind, style in (("trained", "-o"), ("untrained", "--s")):
            part = summary[summary["weights"] == kind].sort_values("layer")
            if part.empty:
                continue
            axis.errorbar(part["layer"].astype(int), part[metric] * scale, yerr=part[f"{metric}_std"].fillna(0) * scale,
                          fmt=style, ms=4, capsize=2, label="model" if kind == "trained" else "untrained twin")
        if len(baselines):
            axis.axhline(float(baselines[metric].iloc[0]) * scale, color="grey", linestyle=":", label="unigram")
        if metric == "perplexity":
            axis.set_yscale("log")
        axis.set_title(label, fontsize=9)
    return finish_layer_figure(figure, axes, path, title, legend_size=8)


#: The names before the glossary kept "head" for attention heads and task heads: still importable, with a warning.
_OLD_NAMES = {"LayerwiseMLMHead": "LayerwiseMLMPredictor", "train_heads": "train_predictors",
              "evaluate_heads": "evaluate_predictors", "head_seeds": "predictor_seeds"}


def __getattr__(name: str):
    if name in _OLD_NAMES:
        new = _OLD_NAMES[name]
        warnings.warn(f"bertology.knowledge.mlm_probe.{name} is deprecated (it goes in the next release); use {new}",
                      DeprecationWarning, stacklevel=2)
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
