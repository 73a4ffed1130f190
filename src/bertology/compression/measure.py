"""What a compressed model still knows, and how fast it runs, measured the same way for every variant.

* :func:`probe_importance`: Michel et al.'s head importance for an encoder without a task head: the loss is a
  UPOS probe's cross-entropy on the top layer (a linear tagger trained on the frozen top layer first).
* :func:`measure_encoder`: UPOS probe accuracy per layer (a linear probe per layer, L2 chosen on dev),
  structural distance probe UUAS per layer (Hewitt and Manning; the epoch per layer chosen by dev loss), heads
  as parsers (Clark et al.: the best head per relation chosen on dev, scored on test) and anisotropy and
  self-similarity per layer (Ethayarajh), each on the same train/dev/test sentences, with the per-sentence
  hits a paired bootstrap needs.
* :func:`retention`: compressed / original with a paired bootstrap over test sentences (the same resamples for
  both models).
* :func:`throughput`: tokens per second of :func:`bertology.extraction.extract` on the same sentences (the same
  batches) for every model, warm-up excluded, models interleaved round by round.
"""

from __future__ import annotations

import os
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from bertology.compression.spec import UPOS_L2, MeasureSpec  # noqa: F401 (UPOS_L2: public here too)
from bertology.data import Sentence, default_corpus, read_conllu
from bertology.errors import DataError
from bertology.models import Encoder
from bertology.models.texts import text_batches
from bertology.probing.summary import bootstrap_accuracies
from bertology.attention.parsing_heads import (ALL_RELATIONS, DIRECTIONS, head_predictions, heads_as_parsers,
                                               offset_baselines, scoring_positions)
from bertology.extraction import extract
from bertology.geometry.contextuality import plan_sample, store_contextuality
from bertology.intervention.importance import head_importance
from bertology.probing.labels import features_from_store
from bertology.probing.probes import LayerwiseProbe
from bertology.probing.structural_probe import StructuralProbe
from bertology.probing.tree_metrics import linear_chain_distances, sentence_hits, uuas
from bertology.settings import spec_of

#: Relations that heads as parsers leaves out (as Clark et al.'s table).
EXCLUDED_RELATIONS = ("punct", "root")


@dataclass
class EvalSets:
    """The sentences every model is measured on: probes train on ``train``, choose on ``dev``, score on
    ``test``; throughput runs on ``test``."""

    train: list[Sentence]
    dev: list[Sentence]
    test: list[Sentence]

    def describe(self) -> dict:
        return {split: {"sentences": len(s), "words": int(sum(len(x) for x in s))}
                for split, s in (("train", self.train), ("dev", self.dev), ("test", self.test))}


def packaged_sets(max_train: int = 500, max_dev: int = 200, max_test: int = 300, max_words: int = 60) -> EvalSets:
    """The first sentences (of at most ``max_words`` words) of the packaged UD English EWT train, dev and
    test files."""
    def first(name: str, count: int) -> list[Sentence]:
        return [s for s in read_conllu(default_corpus(name)) if 1 < len(s) <= max_words][:count]

    return EvalSets(first("ewt-train", max_train), first("ewt-dev", max_dev), first("ewt-test", max_test))


# ------------------------------------------------------------------------------------------------ importance


def _tag_batches(encoder: Encoder, sentences: Sequence[Sentence], tags: dict[str, int], batch_size: int) -> list[dict]:
    """Tokenized batches whose ``labels`` hold each word's UPOS index on its first subword, -100 elsewhere."""
    batches = []
    words = [list(s.words) for s in sentences]
    for rows, encoded in text_batches(encoder.tokenizer, words, batch_size, words=True, max_length=encoder.max_length):
        chunk = sentences[rows.start:rows.stop]
        labels = torch.full(encoded["input_ids"].shape, -100, dtype=torch.long)
        for row, sentence in enumerate(chunk):
            seen = set()
            for position, word in enumerate(encoded.word_ids(row)):
                if word is not None and word not in seen:
                    seen.add(word)
                    labels[row, position] = tags.get(sentence.upos[word], -100)
        batches.append({"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"],
                        "labels": labels})
    return batches


def probe_importance(encoder: Encoder, sentences: Sequence[Sentence], seed: int = 0, batch_size: int = 16,
                     steps: int = 300, progress: bool = False) -> np.ndarray:
    """Head importance ``[layers, heads]`` (Michel et al. eq. 2, normalised per layer) of a bare encoder: the
    loss is the cross-entropy of a linear UPOS tagger on the top layer, trained first on the frozen top layer
    of the same ``sentences`` (``steps`` full-batch Adam steps, seeded)."""
    tags = {tag: i for i, tag in enumerate(sorted({t for s in sentences for t in (s.upos or ())}))}
    if not tags:
        raise DataError("importance: the sentences carry no UPOS tags; give a CoNLL-U treebank")
    batches = _tag_batches(encoder, sentences, tags, batch_size)
    features, labels = [], []
    for batch in batches:
        top = encoder.forward({k: v for k, v in batch.items() if k != "labels"}).layer(encoder.num_layers)
        keep = batch["labels"] != -100
        features.append(top[keep].float())
        labels.append(batch["labels"][keep])
    X, y = torch.cat(features), torch.cat(labels)
    generator = torch.Generator().manual_seed(seed)
    tagger = nn.Linear(X.shape[1], len(tags))
    with torch.no_grad():
        tagger.weight.copy_(torch.randn(tagger.weight.shape, generator=generator) * 0.01)
        tagger.bias.zero_()
    optimiser = torch.optim.Adam(tagger.parameters(), lr=1e-2)
    for _ in range(steps):
        optimiser.zero_grad()
        nn.functional.cross_entropy(tagger(X), y).backward()
        optimiser.step()
    tagger.requires_grad_(False)

    def loss(model: nn.Module, batch: dict) -> torch.Tensor:
        inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        top = encoder.forward(inputs, grad=True).layer(encoder.num_layers)
        logits = tagger(top.float())
        per_token = nn.functional.cross_entropy(logits.transpose(1, 2), batch["labels"], ignore_index=-100,
                                                reduction="none")
        return per_token.sum(1) / (batch["labels"] != -100).sum(1).clamp(min=1)

    return head_importance(encoder.model, batches, loss_fn=loss, progress=progress)


# ------------------------------------------------------------------------------------------------ measures


@dataclass
class Measures:
    """One model's measures on an :class:`EvalSets`. Hits are per test sentence (rows), for bootstraps."""

    label: str
    layers: list[int]
    upos_dev: np.ndarray            # [layers] dev accuracy
    upos_hits: np.ndarray           # [sentences, layers] correct words
    words: np.ndarray               # [sentences]
    uuas_dev_loss: np.ndarray       # [layers]
    uuas_hits: np.ndarray           # [sentences, layers] correct gold edges
    edges: np.ndarray               # [sentences]
    parser: pd.DataFrame            # relation, direction, layer, head, head_label, dev_accuracy
    parser_hits: dict[str, np.ndarray] = field(default_factory=dict)    # relation -> [sentences]
    parser_counts: dict[str, np.ndarray] = field(default_factory=dict)  # relation -> [sentences]
    geometry: pd.DataFrame | None = None  # layer, measure, value

    @property
    def upos_best_layer(self) -> int:
        return self.layers[int(np.argmax(self.upos_dev))]

    @property
    def uuas_best_layer(self) -> int:
        return self.layers[int(np.argmin(self.uuas_dev_loss))]

    def upos_test(self) -> np.ndarray:
        return self.upos_hits.sum(0) / self.words.sum()

    def uuas_test(self) -> np.ndarray:
        return self.uuas_hits.sum(0) / max(self.edges.sum(), 1)

    def per_layer(self) -> pd.DataFrame:
        rows = [{"variant": self.label, "layer": layer, "upos": float(u), "uuas": float(v)}
                for layer, u, v in zip(self.layers, self.upos_test(), self.uuas_test())]
        frame = pd.DataFrame(rows)
        if self.geometry is not None and len(self.geometry):
            wide = self.geometry.pivot_table(index="layer", columns="measure", values="value").reset_index()
            frame = frame.merge(wide, on="layer", how="left")
        return frame


def _extract(encoder: Encoder, sentences: Sequence[Sentence], folder: Path, attentions: bool):
    if folder.exists():
        shutil.rmtree(folder)  # a fresh store: a masked model shares its fingerprint with the unmasked one
    return extract(encoder, sentences, folder, attentions=attentions, progress=False)


def _upos(stores: dict, sets: EvalSets, seed: int, l2: Sequence[float] = UPOS_L2):
    y = {split: np.asarray([t for s in getattr(sets, split) for t in s.upos]) for split in ("train", "dev", "test")}
    X = {split: features_from_store(stores[split]) for split in ("train", "dev", "test")}
    probe = LayerwiseProbe(kind="linear", l2=tuple(l2), seed=seed, device="cpu").fit(X["train"], y["train"], X["dev"], y["dev"])
    dev = probe.score_layers(X["dev"], y["dev"])
    correct = probe.predict(X["test"]) == y["test"][None]   # [layers, words]
    bounds = np.cumsum([0] + [len(s) for s in sets.test])
    hits = np.stack([correct[:, a:b].sum(1) for a, b in zip(bounds[:-1], bounds[1:])]).astype(np.float64)
    return dev, hits, np.diff(bounds).astype(np.float64), float((y["test"] == pd.Series(y["train"]).mode()[0]).mean())


def _uuas(stores: dict, sets: EvalSets, seed: int, rank: int, epochs: int, lr: float):
    probe = StructuralProbe(kind="distance", rank=rank, epochs=epochs, lr=lr, seed=seed, device="cpu")
    probe.fit(stores["train"], sets.train, stores["dev"], sets.dev)
    hits, totals = sentence_hits("distance", probe.predict(stores["test"], sets.test), sets.test)
    return np.asarray([probe.dev_loss_[layer] for layer in probe.layers_], dtype=np.float64), hits, totals


def _parser(dev_store, test_store, sets: EvalSets, excluded_heads: Sequence[tuple[int, int]], min_count: int):
    dev = heads_as_parsers((dev_store.attention(i) for i in range(len(sets.dev))), sets.dev,
                           layers=dev_store.attention_layers)
    gone = set(excluded_heads)
    keep = [(int(l), int(h)) not in gone for l, h in zip(dev["layer"], dev["head"])]
    dev = dev[keep]
    rows = []
    for relation, group in dev.groupby("relation", sort=True):
        if relation in EXCLUDED_RELATIONS or relation == ALL_RELATIONS or int(group["count"].iloc[0]) < min_count:
            continue
        best = group.sort_values(["accuracy", "direction", "layer", "head"],
                                 ascending=[False, True, True, True]).iloc[0]
        rows.append({"relation": relation, "direction": best["direction"], "layer": int(best["layer"]),
                     "head": int(best["head"]), "head_label": best["head_label"],
                     "dev_accuracy": float(best["accuracy"]), "dev_count": int(best["count"])})
    chosen = pd.DataFrame(rows, columns=["relation", "direction", "layer", "head", "head_label", "dev_accuracy",
                                         "dev_count"])
    # Per test sentence, the chosen head's hits on each relation: what heads_as_parsers counts, kept per sentence.
    hits = {r: np.zeros(len(sets.test)) for r in chosen["relation"]}
    counts = {r: np.zeros(len(sets.test)) for r in chosen["relation"]}
    layer_index = {layer: i for i, layer in enumerate(test_store.attention_layers)}
    picks = [(row.relation, DIRECTIONS.index(row.direction), layer_index[row.layer], row.head)
             for row in chosen.itertuples()]
    for index, sentence in enumerate(sets.test):
        predictions = head_predictions(np.asarray(test_store.attention(index)), len(sentence))
        predictions = predictions[..., scoring_positions(sentence, True)]
        gold, deprels = np.asarray(sentence.heads), np.asarray(sentence.deprels)
        for relation, direction, layer, head in picks:
            mask = deprels == relation
            hits[relation][index] = float((predictions[direction, layer, head][mask] == gold[mask]).sum())
            counts[relation][index] = float(mask.sum())
    return chosen, hits, counts


def _geometry(store, sentences: Sequence[Sentence], seed: int) -> pd.DataFrame:
    words = [s.words for s in sentences]
    try:
        sample = plan_sample(words, seed=seed, min_count=5, samples=min(1000, len(sentences)))
    except DataError:  # a handful of sentences: types seen twice still give a self-similarity
        try:
            sample = plan_sample(words, seed=seed, min_count=2, samples=max(2, min(1000, len(sentences))))
        except DataError:
            return pd.DataFrame(columns=["layer", "measure", "value"])
    rows, _ = store_contextuality(store, [sample])
    frame = pd.DataFrame(rows)
    return frame[frame["measure"].isin(["anisotropy", "self_similarity"])][["layer", "measure", "value"]]


def measure_encoder(encoder: Encoder, sets: EvalSets, work: str | Path, spec: MeasureSpec | None = None, *,
                    label: str | None = None, attention_encoder: Encoder | None = None, attention_context=None,
                    excluded_heads: Sequence[tuple[int, int]] = (), **settings) -> Measures:
    """Every retention measure of ``encoder`` on ``sets`` (stores under ``work``, removed afterwards), measured as
    ``spec`` says (:class:`~bertology.compression.spec.MeasureSpec`, or its fields as keywords: ``seed``,
    ``structural_rank``, ``structural_epochs``, ``structural_lr``, ``upos_l2``, ``min_relation_count``).

    Attention maps come from ``attention_encoder`` inside ``attention_context`` when given: a model whose
    heads were removed computes what the original computes with those heads masked, and a store keeps the
    same number of heads in every layer, so head-pruned variants are read through the masked original, with
    ``excluded_heads`` (the removed ones) never chosen as parsers.

    Sized for many models in one run: the UPOS probe searches ``upos_l2`` (two values, not the probing
    command's four) and the structural probe trains ``structural_epochs`` epochs at rank ``structural_rank`` with
    learning rate ``structural_lr`` (10 x the default: few sentences, few epochs)."""
    spec = spec_of(MeasureSpec, spec, settings, "measure")
    seed, upos_l2, min_relation_count = spec.seed, spec.upos_l2, spec.min_relation_count
    structural_rank, structural_epochs, structural_lr = spec.structural_rank, spec.structural_epochs, spec.structural_lr
    work = Path(work)
    try:
        separate = attention_encoder is not None
        stores = {"train": _extract(encoder, sets.train, work / "train", attentions=False)}
        for split in ("dev", "test"):
            stores[split] = _extract(encoder, getattr(sets, split), work / split, attentions=not separate)
        attention_stores = stores
        if separate:
            with attention_context if attention_context is not None else nullcontext():
                attention_stores = {split: _extract(attention_encoder, getattr(sets, split), work / f"{split}-attn",
                                                    attentions=True) for split in ("dev", "test")}
        upos_dev, upos_hits, words, _ = _upos(stores, sets, seed, upos_l2)
        dev_loss, uuas_hits, edges = _uuas(stores, sets, seed, structural_rank, structural_epochs, structural_lr)
        chosen, parser_hits, parser_counts = _parser(attention_stores["dev"], attention_stores["test"], sets,
                                                     excluded_heads, min_relation_count)
        geometry = _geometry(stores["test"], sets.test, seed)
        return Measures(label=label or encoder.name, layers=list(stores["test"].layers), upos_dev=upos_dev,
                        upos_hits=upos_hits, words=words, uuas_dev_loss=dev_loss, uuas_hits=uuas_hits, edges=edges,
                        parser=chosen, parser_hits=parser_hits, parser_counts=parser_counts, geometry=geometry)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def baselines(sets: EvalSets) -> dict[str, float]:
    """What each measure scores without a model: the majority UPOS tag of train, the linear chain's UUAS (each
    word attached to the next) and the best fixed offset per relation (mean over relations, chosen on dev)."""
    train_tags = pd.Series([t for s in sets.train for t in s.upos])
    test_tags = np.asarray([t for s in sets.test for t in s.upos])
    chain = uuas([linear_chain_distances(len(s)) for s in sets.test], sets.test)
    return {"upos_majority": float((test_tags == train_tags.mode()[0]).mean()), "uuas_linear_chain": float(chain)}


def offset_baseline(sets: EvalSets, relations: Sequence[str]) -> float:
    """Mean over ``relations`` of the test accuracy of the best fixed offset (chosen on dev)."""
    dev, test = offset_baselines(sets.dev), offset_baselines(sets.test)
    values = []
    for relation in relations:
        choice = dev[dev["relation"] == relation].sort_values(["accuracy", "offset"], ascending=[False, True])
        if choice.empty:
            continue
        match = test[(test["relation"] == relation) & (test["offset"] == int(choice["offset"].iloc[0]))]
        if len(match):
            values.append(float(match["accuracy"].iloc[0]))
    return float(np.mean(values)) if values else float("nan")


# ------------------------------------------------------------------------------------------------ retention


def _score_boot(hits: Sequence[Sequence[np.ndarray]], totals: Sequence[np.ndarray], n_boot: int,
                seed: int) -> np.ndarray:
    """Bootstrap of the mean over relations of sum(hits)/sum(totals): ``hits[r]`` holds each model's hits per
    sentence for relation ``r``; returns ``[models, n_boot]``. Every model and relation shares the same
    resamples of sentences (the same seed and size draw the same multinomial counts)."""
    boots = [bootstrap_accuracies(np.stack(pair), n_boot=n_boot, seed=seed, totals=column_totals)
             for pair, column_totals in zip(hits, totals)]
    return np.mean(boots, axis=0)


def ratio_interval(original: np.ndarray, compressed: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    ratio = compressed / np.where(original == 0, np.nan, original)
    tail = (1 - level) / 2
    return float(np.nanquantile(ratio, tail)), float(np.nanquantile(ratio, 1 - tail))


def retention(original: Measures, compressed: Measures, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Compressed / original for UPOS and UUAS at each model's best layer (chosen on dev) and for the parser
    heads (mean over relations of the best head's test accuracy, heads chosen on dev), with a 95% paired
    bootstrap interval over test sentences. Rows: ``measure, original, compressed, retention, ci_low, ci_high,
    original_layer, compressed_layer``."""
    rows = []
    for measure, layer_of, hits_of, totals_of in (
            ("upos", lambda m: m.upos_best_layer, lambda m, l: m.upos_hits[:, m.layers.index(l)], lambda m: m.words),
            ("uuas", lambda m: m.uuas_best_layer, lambda m, l: m.uuas_hits[:, m.layers.index(l)], lambda m: m.edges)):
        a_layer, b_layer = layer_of(original), layer_of(compressed)
        a, b = hits_of(original, a_layer), hits_of(compressed, b_layer)
        totals = totals_of(original)
        boot = bootstrap_accuracies(np.stack([a, b]), n_boot=n_boot, seed=seed, totals=totals)
        value_a, value_b = a.sum() / totals.sum(), b.sum() / totals.sum()
        low, high = ratio_interval(boot[0], boot[1])
        rows.append({"measure": measure, "original": value_a, "compressed": value_b, "retention": value_b / value_a,
                     "ci_low": low, "ci_high": high, "original_layer": a_layer, "compressed_layer": b_layer})
    relations = [r for r in original.parser_hits if r in compressed.parser_hits
                 and original.parser_counts[r].sum() > 0]
    if relations:
        hits = [[original.parser_hits[r], compressed.parser_hits[r]] for r in relations]
        totals = [original.parser_counts[r] for r in relations]
        boot = _score_boot(hits, totals, n_boot, seed)
        value_a = float(np.mean([original.parser_hits[r].sum() / original.parser_counts[r].sum() for r in relations]))
        value_b = float(np.mean([compressed.parser_hits[r].sum() / original.parser_counts[r].sum() for r in relations]))
        low, high = ratio_interval(boot[0], boot[1])
        rows.append({"measure": "parser_heads", "original": value_a, "compressed": value_b,
                     "retention": value_b / value_a, "ci_low": low, "ci_high": high,
                     "original_layer": pd.NA, "compressed_layer": pd.NA})
    frame = pd.DataFrame(rows)
    for column in ("original_layer", "compressed_layer"):
        frame[column] = frame[column].astype("Int64")
    return frame


# ------------------------------------------------------------------------------------------------ throughput


def throughput(encoders: Mapping[str, Encoder], sentences: Sequence[Sentence], work: str | Path, rounds: int = 3,
               batch_tokens: int = 4096) -> pd.DataFrame:
    """Tokens per second of :func:`~bertology.extraction.extract` (every layer, word-mean pooled, float16
    store) on ``sentences`` for each encoder: one warm-up run each (not counted), then ``rounds`` rounds that
    run every encoder once in turn, so a change in the machine's load falls on all of them; each round starts one
    encoder later than the one before (round ``r`` runs them rotated by ``r``), so none always runs first. Rows:
    ``variant, round, position, tokens, seconds, tokens_per_second`` (extract's own clock: the batches, not the
    planning)."""
    if rounds < 1:
        raise DataError(f"rounds {rounds}: expected at least 1")
    work = Path(work)
    rows = []
    try:
        labels = list(encoders)
        for round_index in range(-1, rounds):  # -1: the warm-up
            shift = max(round_index, 0) % len(labels)
            for position, label in enumerate(labels[shift:] + labels[:shift]):
                encoder = encoders[label]
                folder = work / label
                if folder.exists():
                    shutil.rmtree(folder)
                store = extract(encoder, sentences, folder, batch_tokens=batch_tokens, progress=False)
                stats = store.index.get("stats") or {}
                if round_index >= 0:
                    rows.append({"variant": label, "round": round_index, "position": position,
                                 "tokens": int(stats["tokens"]),
                                 "seconds": float(stats["seconds"]),
                                 "tokens_per_second": float(stats["tokens"]) / float(stats["seconds"])})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return pd.DataFrame(rows)


def speedups(table: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Per variant: median tokens/s and the speed-up over ``reference``: the ratio within each round (median,
    min and max over rounds) and the ratio of the best rounds (``speedup_best``: each model's fastest round, the
    one least slowed by other work on a shared machine)."""
    base = table[table["variant"] == reference].set_index("round")["tokens_per_second"]
    rows = []
    for label, group in table.groupby("variant", sort=False):
        ratios = group.set_index("round")["tokens_per_second"] / base
        rows.append({"variant": label, "tokens_per_second": float(group["tokens_per_second"].median()),
                     "speedup": float(ratios.median()), "speedup_min": float(ratios.min()),
                     "speedup_max": float(ratios.max()),
                     "speedup_best": float(group["tokens_per_second"].max() / base.max()), "rounds": int(len(group))})
    return pd.DataFrame(rows)


def machine_load() -> dict:
    """The load averages (1, 5, 15 min) and the threads torch uses: the machine may be shared."""
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    return {"load_average": [round(x, 2) for x in load], "torch_threads": torch.get_num_threads(),
            "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
