"""Hewitt and Manning's structural probe (NAACL 2019) as a scikit-learn estimator, one rank-k linear map ``B``
learned per layer:

* **distance probe**: ``||B(h_i - h_j)||^2`` should equal the tree distance ``d(i, j)`` (number of
  edges between words i and j). Loss: L1 over all word pairs, divided by ``n^2`` per sentence, then
  averaged over the sentences of a batch. Scored with UUAS and DSpr. (:mod:`bertology.probing.tree_metrics`).
* **depth probe**: ``||B h_i||^2`` should equal the depth of word i (root = 0). Loss: L1 divided by
  ``n`` per sentence. Scored with root accuracy and NSpr.

All layers train in one pass: the probe holds one ``B`` per layer and the layers are a batch dimension,
so a layer's gradient only ever touches its own ``B`` (identical to separate training), while the
word vectors are gathered once per batch. Early stopping, learning-rate decay and model selection on dev
loss are done per layer, as in the authors' code (Adam 1e-3, batch 20, LR x0.1 on each epoch without
dev improvement, stop after 5 epochs without improvement, keep the best-dev parameters).

Inputs are word vectors per layer, given as a :class:`bertology.store.Store` (``store.layer(l)`` is
``[total_words, dim]``, sentence i is ``store.offsets[i]:store.offsets[i+1]``), or an array
``[n_layers, total_words, dim]`` / a list of ``[total_words, dim]`` arrays with the words of the
sentences concatenated in order (:func:`as_word_vectors`). See docs/structural_probes.md for what differs
from the paper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from bertology.data import Sentence
from bertology.errors import DataError, StoreError
from bertology.probing.names import PRIMARY_METRIC
from bertology.probing.tree_metrics import (
    TASK_NAMES,
    check_probe_kind,
    check_punct_scheme,
    gold_targets,
    structural_metrics,
)
from bertology.runtime import derive_seed, resolve_device


# --------------------------------------------------------------------------------------------------
# Word vectors
# --------------------------------------------------------------------------------------------------

@dataclass
class WordVectors:
    """Word vectors of all layers, ``[n_layers, total_words, dim]``, with sentence offsets."""

    data: torch.Tensor
    offsets: np.ndarray
    layers: list[int]


def as_word_vectors(vectors, sentences: Sequence[Sentence], layers: Sequence[int] | None, device: torch.device,
                    name: str) -> WordVectors:
    """``vectors`` (a word-pooled Store, an array ``[n_layers, total_words, dim]`` or a list of layers) checked
    against ``sentences`` and moved to ``device``; ``layers`` picks layers (default all), ``name`` starts errors."""
    lengths = np.array([len(s) for s in sentences], dtype=np.int64)
    if len(sentences) == 0:
        raise DataError(f"{name}: no sentences")
    if hasattr(vectors, "layer") and hasattr(vectors, "offsets"):
        pool = getattr(vectors, "pool", None)
        if pool is not None and not str(pool).startswith("word-"):
            raise StoreError(
                f"{name}: the store was extracted with pool={pool!r}; structural probes need one vector per word "
                "(extract with pool='word-mean', 'word-first' or 'word-last')"
            )
        offsets = np.asarray(vectors.offsets, dtype=np.int64)
        counts = np.diff(offsets)
        if len(counts) != len(sentences):
            raise StoreError(f"{name}: the store holds {len(counts)} sentences, but {len(sentences)} were given")
        mismatch = np.flatnonzero(counts != lengths)
        if len(mismatch):
            i = int(mismatch[0])
            raise StoreError(
                f"{name}: sentence {i} ({sentences[i].id!r}) has {lengths[i]} words but the store has "
                f"{counts[i]} word vectors for it; was the store extracted from these sentences with a word pool?"
            )
        available = list(vectors.layers)
        chosen = available if layers is None else list(layers)
        missing = [l for l in chosen if l not in available]
        if missing:
            raise StoreError(f"{name}: layers {missing} not in the store (it has {available})")
        slabs = []
        for l in chosen:
            slab = np.asarray(vectors.layer(l))
            if slab.ndim != 2 or slab.shape[0] != offsets[-1]:
                raise StoreError(
                    f"{name}: layer {l} has shape {slab.shape}; expected [total_words={offsets[-1]}, dim] "
                    "(a word-pooled store)"
                )
            # float16 halves the memory of a full treebank; batches are cast back to float32.
            slabs.append(torch.from_numpy(slab.astype(np.float16, copy=False)).to(device))
        return WordVectors(torch.stack(slabs), offsets, chosen)

    if isinstance(vectors, (list, tuple)):
        vectors = np.stack([np.asarray(v) for v in vectors])
    if isinstance(vectors, np.ndarray):
        vectors = torch.from_numpy(vectors)
    if not isinstance(vectors, torch.Tensor) or vectors.ndim != 3:
        raise DataError(
            f"{name}: expected a word-pooled Store or word vectors of shape [n_layers, total_words, dim], "
            f"got {type(vectors).__name__} of shape {tuple(getattr(vectors, 'shape', ()))}"
        )
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    if vectors.shape[1] != offsets[-1]:
        raise DataError(
            f"{name}: {vectors.shape[1]} word vectors for {offsets[-1]} words in {len(sentences)} sentences"
        )
    all_layers = list(range(vectors.shape[0]))
    chosen = all_layers if layers is None else list(layers)
    if any(l not in all_layers for l in chosen):
        raise DataError(f"{name}: layers {chosen} out of range for {len(all_layers)} layers")
    data = vectors[chosen]
    dtype = torch.float32 if data.dtype == torch.float64 else data.dtype
    return WordVectors(data.to(device=device, dtype=dtype), offsets, chosen)


@dataclass
class _Labels:
    kind: str
    gold: list[np.ndarray]
    lengths: np.ndarray


@dataclass
class _Batch:
    """Some sentences' words (``rows`` of the word vectors, sentence after sentence), each word's sentence in the
    batch and position in it, the sentences' lengths and gold targets (``None`` for predictions): depths
    ``[words]``, or distances and their mask ``[sentences, n_max, n_max]``."""

    rows: torch.Tensor
    word_batch: torch.Tensor
    position: torch.Tensor
    lengths: np.ndarray
    n: torch.Tensor
    gold: torch.Tensor | None
    mask: torch.Tensor | None


def _eval_batches(lengths: np.ndarray, size: int, kind: str) -> list[np.ndarray]:
    """Sentence indices in batches of ``size``: for ``kind="distance"`` sentences of similar length together
    (stable order of length), else in order."""
    order = np.argsort(lengths, kind="stable") if kind == "distance" else np.arange(len(lengths))
    return [order[start:start + size] for start in range(0, len(order), size)]


def _labels(sentences: Sequence[Sentence], kind: str) -> _Labels:
    return _Labels(kind, [gold_targets(s, kind).astype(np.float32) for s in sentences],
                   np.array([len(s) for s in sentences], dtype=np.int64))


# --------------------------------------------------------------------------------------------------
# The probe
# --------------------------------------------------------------------------------------------------


class StructuralProbe(BaseEstimator):
    """Hewitt and Manning's distance or depth probe, one rank-``rank`` matrix per layer, all trained together.

    A scikit-learn estimator whose targets are trees: ``fit(X, sentences, X_dev, sentences_dev)`` trains on
    train and selects each layer's parameters by dev loss (early stopping); ``score(X, sentences)`` returns
    one float, the primary metric (UUAS for ``distance``, root accuracy for ``depth``) of the layer with
    the lowest dev loss (``best_layer_``); ``score_layers(X, sentences)`` returns every layer's metrics as
    a tidy DataFrame ``(task, layer, metric, value)``. ``X`` is a word-pooled Store, an array
    ``[n_layers, total_words, dim]`` or a list of ``[total_words, dim]`` arrays.

    ``seed`` sets each layer's initial ``B`` (``derive_seed(seed, "structural-init", layer)``, so a layer's
    probe is the same alone or beside others) and the batch order. ``device``: ``"auto"`` (cuda if
    available), ``"cpu"``, ``"cuda"``.
    """

    def __init__(self, kind: str = "distance", rank: int = 128, epochs: int = 40, lr: float = 1e-3,
                 batch_size: int = 20, patience: int = 4, lr_decay: float = 0.1, seed: int = 0,
                 device: str | torch.device | None = "auto", punct: str = "upos", eval_batch_size: int = 128):
        self.kind = kind
        self.rank = rank
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.patience = patience
        self.lr_decay = lr_decay
        self.seed = seed
        self.device = device
        self.punct = punct
        self.eval_batch_size = eval_batch_size

    # -- forward -----------------------------------------------------------------------------------

    def _batch(self, vectors: WordVectors, labels: _Labels | None, sentence_ids: np.ndarray,
               device: torch.device) -> _Batch:
        """The word rows of some sentences, each word's (sentence, position), and their gold targets."""
        lengths = np.diff(vectors.offsets)[sentence_ids]
        starts = vectors.offsets[sentence_ids]
        word_rows = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths)])
        batch_of_word = np.repeat(np.arange(len(sentence_ids)), lengths)
        position = word_rows - np.repeat(starts, lengths)
        gold = mask = None
        if labels is not None and self.kind == "depth":
            gold = torch.as_tensor(np.concatenate([labels.gold[i] for i in sentence_ids]), device=device)
        elif labels is not None:
            n_max = int(lengths.max())
            gold_np = np.zeros((len(sentence_ids), n_max, n_max), dtype=np.float32)
            mask_np = np.zeros_like(gold_np)
            for b, i in enumerate(sentence_ids):
                n = labels.lengths[i]
                gold_np[b, :n, :n] = labels.gold[i]
                mask_np[b, :n, :n] = 1.0
            gold, mask = torch.as_tensor(gold_np, device=device), torch.as_tensor(mask_np, device=device)
        return _Batch(torch.as_tensor(word_rows, device=device), torch.as_tensor(batch_of_word, device=device),
                      torch.as_tensor(position, device=device), lengths,
                      torch.as_tensor(lengths, device=device, dtype=torch.float32), gold, mask)

    def _project(self, vectors: WordVectors, layer_index: torch.Tensor, rows: torch.Tensor,
                 weights: torch.Tensor) -> torch.Tensor:
        """The words ``rows`` of the layers ``layer_index`` projected by their ``weights``: ``[A, words, rank]``."""
        x = vectors.data[layer_index[:, None], rows[None, :]].to(torch.float32)  # [A, W, dim]
        return torch.bmm(x, weights)

    def _predicted(self, projected: torch.Tensor, batch: _Batch):
        """Predicted depths ``[A, words]`` or squared distances ``[A, sentences, n_max, n_max]`` of a batch
        from its words' projections ``[A, words, rank]``."""
        if self.kind == "depth":
            return (projected * projected).sum(-1)
        # Scatter packed words into a padded [A, B, n_max, rank] block only for the pairwise step, so the
        # projection itself never multiplies padding.
        n_max = int(batch.lengths.max())
        padded = projected.new_zeros(projected.shape[0], len(batch.lengths), n_max, projected.shape[-1])
        padded[:, batch.word_batch, batch.position] = projected
        gram = padded @ padded.transpose(-1, -2)
        sq = torch.diagonal(gram, dim1=-2, dim2=-1)
        # ||u - v||^2 via the Gram matrix avoids materialising [A, B, n, n, rank] differences.
        return (sq[..., :, None] + sq[..., None, :] - 2 * gram).clamp_min(0.0)

    def _loss(self, projected: torch.Tensor, batch: _Batch) -> torch.Tensor:
        """Per-layer loss ``[A]``: L1 per sentence / n (depth) or n^2 (distance), averaged over sentences."""
        predicted = self._predicted(projected, batch)
        if self.kind == "depth":
            error = (predicted - batch.gold).abs()  # [A, W]
            per_sentence = error.new_zeros(error.shape[0], len(batch.lengths))
            per_sentence.index_add_(1, batch.word_batch, error)
            return (per_sentence / batch.n).mean(dim=1)
        per_sentence = ((predicted - batch.gold).abs() * batch.mask).sum(dim=(-1, -2))  # [A, B]
        return (per_sentence / batch.n**2).mean(dim=1)

    # -- training ----------------------------------------------------------------------------------

    def fit(self, X, sentences: Sequence[Sentence], X_dev, sentences_dev: Sequence[Sentence],
            layers: Sequence[int] | None = None, on_epoch: Callable[[int, int], None] | None = None):
        """Train one probe per layer on (X, sentences); pick each layer's epoch by loss on the dev split.

        ``X``: word vectors ``[n_layers, total_words, dim]`` (a word-pooled Store, an array or a list of
        ``[total_words, dim]`` layers; the words of ``sentences`` concatenated in order); ``sentences``: the
        gold trees (CoNLL-U heads). ``X_dev``/``sentences_dev`` the same for the dev split. ``layers``: which
        layers of ``X`` (default all). ``on_epoch(epoch, active_layers)`` is called after every epoch (for
        progress bars). Returns ``self``; ``weights_`` ``[n_layers, dim, rank]``, ``layers_``,
        ``dev_loss_``, ``best_epoch_``, ``best_layer_``, ``history_``.
        """
        check_probe_kind(self.kind)
        check_punct_scheme(self.punct)
        if self.rank < 1 or self.epochs < 1 or self.batch_size < 1:
            raise DataError(
                f"rank, epochs and batch_size must be >= 1 (got {self.rank}, {self.epochs}, {self.batch_size})"
            )
        device = resolve_device(self.device)
        train = X if isinstance(X, WordVectors) else as_word_vectors(X, sentences, layers, device, "train")
        dev = X_dev if isinstance(X_dev, WordVectors) else as_word_vectors(X_dev, sentences_dev, layers, device, "dev")
        if train.layers != dev.layers or train.data.shape[-1] != dev.data.shape[-1]:
            raise DataError(
                f"train and dev word vectors differ: layers {train.layers} vs {dev.layers}, "
                f"dim {train.data.shape[-1]} vs {dev.data.shape[-1]}"
            )
        train_labels, dev_labels = _labels(sentences, self.kind), _labels(sentences_dev, self.kind)
        n_layers, dim = train.data.shape[0], train.data.shape[-1]

        # Uniform(-0.05, 0.05) as in the authors' probe.py, seeded per (seed, layer id) so a layer's probe
        # is the same whether it trains alone or beside other layers.
        params = [
            torch.nn.Parameter(
                torch.empty(dim, self.rank).uniform_(
                    -0.05, 0.05,
                    generator=torch.Generator().manual_seed(derive_seed(self.seed, "structural-init", int(layer)))
                ).to(device)
            )
            for layer in train.layers
        ]
        # One parameter group per layer: each layer gets its own learning-rate decay and its own stop.
        optimizer = torch.optim.Adam([{"params": [p], "lr": self.lr} for p in params])
        best_loss = np.full(n_layers, np.inf)
        plateau_best = np.full(n_layers, np.inf)
        best_epoch = np.full(n_layers, -1)
        best_weights = [p.detach().clone() for p in params]
        active = np.ones(n_layers, dtype=bool)
        rng = np.random.default_rng(self.seed)
        history = []
        # The dev loss is taken after every epoch over the whole dev split (often many times the training
        # sentences): its batches, gold targets included, are made once; the distance probe's of sentences of
        # similar length (its pairwise step pads each sentence to the batch's longest), the depth probe's of
        # consecutive sentences (no padding; their word vectors are read in order).
        dev_batches = [self._batch(dev, dev_labels, ids, device)
                       for ids in _eval_batches(np.diff(dev.offsets), self.eval_batch_size, self.kind)]

        for epoch in range(self.epochs):
            live = np.flatnonzero(active)
            layer_index = torch.as_tensor(live, device=device)
            order = rng.permutation(len(sentences))
            for start in range(0, len(order), self.batch_size):
                batch = order[start:start + self.batch_size]
                optimizer.zero_grad(set_to_none=True)
                weights = torch.stack([params[l] for l in live])
                words = self._batch(train, train_labels, batch, device)
                # Layers are independent, so the summed loss gives each B exactly its own gradient.
                self._loss(self._project(train, layer_index, words.rows, weights), words).sum().backward()
                optimizer.step()  # stopped layers have no gradient and are skipped by Adam
            dev_loss = self._mean_loss(dev, dev_batches, layer_index, [params[l] for l in live])
            for slot, l in enumerate(live):
                loss = dev_loss[slot]
                # ReduceLROnPlateau(mode="min", factor=0.1, patience=0) as in the authors' regimen.py
                if loss < plateau_best[l] * (1 - 1e-4):
                    plateau_best[l] = loss
                else:
                    optimizer.param_groups[l]["lr"] *= self.lr_decay
                if loss < best_loss[l] - 1e-4:
                    best_loss[l], best_epoch[l] = loss, epoch
                    best_weights[l] = params[l].detach().clone()
                elif best_epoch[l] < epoch - self.patience:
                    active[l] = False
                history.append({"epoch": epoch, "layer": train.layers[l], "dev_loss": float(loss)})
            if on_epoch is not None:
                on_epoch(epoch, int(active.sum()))
            if not active.any():
                break

        self.weights_ = torch.stack(best_weights).detach()
        self.layers_ = list(train.layers)
        self.best_epoch_ = {layer: int(e) for layer, e in zip(self.layers_, best_epoch)}
        self.dev_loss_ = {layer: float(v) for layer, v in zip(self.layers_, best_loss)}
        self.history_ = pd.DataFrame(history)
        # Chosen on dev loss, never on a metric of the split being scored.
        self.best_layer_ = self.layers_[int(np.argmin(best_loss))]
        return self

    @torch.no_grad()
    def _mean_loss(self, vectors: WordVectors, batches: Sequence[_Batch], layer_index: torch.Tensor,
                   params: list[torch.Tensor]) -> np.ndarray:
        weights = torch.stack([p.detach() for p in params])
        total = torch.zeros(len(params), device=weights.device)
        for batch in batches:
            total += self._loss(self._project(vectors, layer_index, batch.rows, weights), batch) * len(batch.lengths)
        return (total / sum(len(batch.lengths) for batch in batches)).cpu().numpy()

    # -- inference ---------------------------------------------------------------------------------

    @torch.no_grad()
    def predict(self, X, sentences: Sequence[Sentence]) -> list[np.ndarray]:
        """Predicted squared distances ``[n_layers, n, n]`` or depths ``[n_layers, n]``, one array per sentence."""
        check_is_fitted(self, "weights_")
        weights = self.weights_
        vectors = X if isinstance(X, WordVectors) else as_word_vectors(X, sentences, self.layers_, weights.device, "input")
        if vectors.layers != self.layers_:
            raise DataError(f"word vectors have layers {vectors.layers}; the probe was fitted on {self.layers_}")
        layer_index = torch.arange(len(self.layers_), device=weights.device)
        out: list[np.ndarray] = []
        n_sentences = len(vectors.offsets) - 1
        for start in range(0, n_sentences, self.eval_batch_size):
            batch = self._batch(vectors, None, np.arange(start, min(start + self.eval_batch_size, n_sentences)),
                                weights.device)
            lengths = batch.lengths
            projected = self._project(vectors, layer_index, batch.rows, weights)
            predicted = self._predicted(projected, batch).float().cpu().numpy()
            if self.kind == "depth":
                bounds = np.concatenate([[0], np.cumsum(lengths)])
                out.extend(predicted[:, bounds[b]:bounds[b + 1]] for b in range(len(lengths)))
            else:
                out.extend(predicted[:, b, :n, :n] for b, n in enumerate(lengths))
        return out

    def score_layers(self, X, sentences: Sequence[Sentence]) -> pd.DataFrame:
        """Evaluate every layer: tidy DataFrame with columns ``task, layer, metric, value`` (UUAS and root
        accuracy as fractions, DSpr./NSpr. as Spearman correlations)."""
        return self.score_predictions(self.predict(X, sentences), sentences)

    def score_predictions(self, predictions: Sequence[np.ndarray], sentences: Sequence[Sentence]) -> pd.DataFrame:
        """:meth:`score_layers` of predictions already made (:meth:`predict`): a caller that also wants
        per-sentence hits predicts once."""
        check_is_fitted(self, "weights_")
        metrics = structural_metrics(self.kind, predictions, sentences, self.punct)
        frame = pd.DataFrame(
            [{"task": TASK_NAMES[self.kind], "layer": layer, "metric": metric, "value": float(values[i])}
             for metric, values in metrics.items() for i, layer in enumerate(self.layers_)]
        )
        return frame.astype({"layer": "Int64"})

    def score(self, X, sentences: Sequence[Sentence]) -> float:
        """One float: UUAS (distance) or root accuracy (depth) of ``best_layer_``, the layer chosen on dev."""
        check_is_fitted(self, "weights_")
        if self.best_layer_ not in self.layers_:
            raise DataError(f"best layer {self.best_layer_} not among the fitted layers {self.layers_}")
        index = self.layers_.index(self.best_layer_)
        predictions = [p[index] for p in self.predict(X, sentences)]
        metric = PRIMARY_METRIC[self.kind]
        return float(structural_metrics(self.kind, predictions, sentences, self.punct)[metric])
