"""Minimal pairs (BLiMP, Warstadt et al. 2020) scored by pseudo-log-likelihood (Salazar et al. 2020).

A sentence's PLL is the sum over its tokens of ``log p(token | the sentence with that token masked)``;
with ``whole_word=True`` all tokens of a word are masked together and each is scored in that copy (the
word's pieces cannot give each other away). A pair counts as correct when the good sentence's PLL is
strictly higher than the bad one's (a tie is wrong; chance is 0.5).

Every masked copy of a sentence goes through the model in the same forward pass, several sentences per
pass up to a token budget; the MLM head is applied only at the masked positions (for heads exposed as
``cls`` or ``lm_head``), so the vocabulary-sized logits are computed for the scored tokens alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from bertology.data.paths import EXTERNAL, external_folder, load_hub_split
from bertology.errors import DataError, SettingError
from bertology.knowledge.lama import model_vs_twin_bars, read_jsonl, require
from bertology.knowledge.mlm import masked_lm
from bertology.models.batching import pad_batch, pad_id_of, token_budget_batches
from bertology.models.encoders import Encoder
from bertology.numbering import parse_layers
from bertology.progress import progress_bar
from bertology.results import Result
from bertology.runtime import resolve_device

PAIR_FIELDS = ("sentence_good", "sentence_bad")

#: Paradigms read from the Hugging Face copy (``nyu-mll/blimp``, one config per paradigm) when no file is
#: given: agreement, argument structure, filler-gap, islands and NPIs, a spread over BLiMP's phenomena.
BLIMP_HUB_PARADIGMS = (
    "anaphor_gender_agreement", "anaphor_number_agreement", "determiner_noun_agreement_1",
    "determiner_noun_agreement_2", "regular_plural_subject_verb_agreement_1",
    "irregular_plural_subject_verb_agreement_1", "distractor_agreement_relational_noun", "passive_1",
    "wh_questions_object_gap", "adjunct_island", "sentential_negation_npi_licensor_present", "existential_there_quantifiers_1",
)


def default_pairs(max_pairs: int | None = None, paradigms: Sequence[str] = BLIMP_HUB_PARADIGMS) -> pd.DataFrame:
    """BLiMP without a path: ``$BERTOLOGY_DATA/blimp`` (a folder of JSONL files), else ``paradigms`` from the
    Hugging Face copy through ``datasets`` (cache, or hub when online), else
    :class:`~bertology.errors.MissingData`."""
    folder = external_folder("blimp")
    if folder is not None:
        return read_pairs(folder, max_pairs)
    rows = []
    for paradigm in paradigms:
        for i, record in enumerate(load_hub_split("blimp", paradigm, "train", f"paradigm {paradigm}")):
            rows.append({"file": f"{EXTERNAL['blimp'].hub_id}/{paradigm}", "line": i + 1,
                         "paradigm": str(record.get("UID") or paradigm),
                         "phenomenon": str(record.get("linguistics_term") or ""),
                         "sentence_good": record["sentence_good"].strip(), "sentence_bad": record["sentence_bad"].strip()})
            if max_pairs is not None and i + 1 >= max_pairs:
                break
    return pd.DataFrame(rows)


def read_pairs(path: str | os.PathLike, max_pairs: int | None = None) -> pd.DataFrame:
    """BLiMP-format JSONL: ``sentence_good`` and ``sentence_bad`` per line (BLiMP's own field names); the
    paradigm is ``UID`` (else the file name), the phenomenon ``linguistics_term`` when present."""
    path = Path(path)
    if path.is_dir():
        files = sorted(list(path.glob("*.jsonl")) + list(path.glob("*.jsonl.gz")))
        if not files:
            raise DataError(f"{path}: a folder without .jsonl files; expected BLiMP-format JSONL")
        return pd.concat([read_pairs(f, max_pairs) for f in files], ignore_index=True)
    rows = []
    for line, record in read_jsonl(path):
        require(record, PAIR_FIELDS, path, line)
        rows.append({"file": path.name, "line": line, "paradigm": str(record.get("UID") or path.name.split(".")[0]),
                     "phenomenon": str(record.get("linguistics_term") or ""),
                     "sentence_good": record["sentence_good"].strip(), "sentence_bad": record["sentence_bad"].strip()})
        if max_pairs is not None and len(rows) >= max_pairs:
            break
    if not rows:
        raise DataError(f"{path}: no pairs; expected one JSON object per line with sentence_good and sentence_bad")
    return pd.DataFrame(rows)


@dataclass
class MaskedCopies:
    """One sentence's model input and its masked copies: ``groups[k]`` are the positions masked together in
    copy ``k``; every position of a group is scored in that copy."""

    input_ids: list[int]
    groups: list[list[int]]


def masked_copies(tokenizer, sentence: str, whole_word: bool = False, max_length: int | None = None) -> MaskedCopies:
    encoding = tokenizer(sentence, add_special_tokens=True)
    ids = list(encoding["input_ids"])
    if max_length is not None and len(ids) > max_length:
        raise DataError(f"sentence {sentence[:60]!r}{'...' if len(sentence) > 60 else ''} has {len(ids)} tokens; "
                        f"the model takes at most {max_length}; shorten it or leave it out")
    words = encoding.word_ids()
    groups: list[list[int]] = []
    for position in range(len(ids)):
        if words[position] is None:  # [CLS], [SEP]: added by the tokenizer, not scored (an [UNK] word is)
            continue
        if whole_word and groups and words[groups[-1][0]] == words[position]:
            groups[-1].append(position)
        else:
            groups.append([position])
    if not groups:
        raise DataError(f"sentence {sentence!r} has no tokens to score")
    return MaskedCopies(ids, groups)


@torch.no_grad()
def pseudo_log_likelihoods(model: Encoder, sentences: Sequence[str], *, whole_word: bool = False,
                           layers: Sequence[int] | None = None, batch_tokens: int = 8192,
                           progress: bool = False) -> np.ndarray | dict[int, np.ndarray]:
    """PLL (natural log) of each sentence under the masked LM ``model`` (its handle); with ``layers``,
    ``{layer: PLLs}`` through the model's own MLM head applied to ``hidden_states[layer]`` (a logit lens; the
    last layer equals the model's output). All masked copies of a sentence share a forward pass, several
    sentences a pass in the order given, padded size (copies x longest) within ``batch_tokens``."""
    tokenizer = model.tokenizer
    mask_id, pad_id = tokenizer.mask_token_id, pad_id_of(tokenizer)
    head = model.head_module
    if layers is not None and head is None:
        raise SettingError("layers", layers, f"per-layer scores apply the model's MLM head to each layer, and this "
                           f"{type(model.model).__name__} exposes no 'cls' or 'lm_head' module; leave layers= out",
                           shown="")
    plans = [masked_copies(tokenizer, s, whole_word, model.max_length) for s in sentences]
    keys = list(layers) if layers is not None else [None]
    totals = {key: np.zeros(len(plans)) for key in keys}
    lengths = [len(plan.input_ids) for plan in plans]
    copies = [len(plan.groups) for plan in plans]
    with progress_bar(progress) as bar:
        task = bar.add_task("pseudo-log-likelihood", total=len(plans))
        for batch in token_budget_batches(lengths, batch_tokens, rows=copies, sort=False, max_padding=None):
            batch = batch.tolist()
            inputs = pad_batch([plans[i].input_ids for i in batch for _ in plans[i].groups], pad_id)
            owners, rows, columns = [], [], []
            row = 0
            for index in batch:
                for group in plans[index].groups:
                    for position in group:
                        rows.append(row)
                        columns.append(position)
                        owners.append(index)
                    row += 1
            rows_t, columns_t = torch.as_tensor(rows), torch.as_tensor(columns)
            inputs["input_ids"][rows_t, columns_t] = mask_id
            targets = torch.as_tensor([plans[o].input_ids[c] for o, c in zip(owners, columns)], device=model.device)
            if head is None:
                logits = {None: model.forward(inputs, hidden_states=False, logits=True).logits[rows_t, columns_t]}
            else:
                states = model.forward(inputs, body=True).hidden_states
                chosen = [len(states) - 1] if layers is None else layers
                logits = {key: model.head_logits(states[layer][rows_t, columns_t])
                          for key, layer in zip(keys, chosen)}
            owner_index = np.asarray(owners)
            for key, values in logits.items():
                scores = torch.log_softmax(values.float(), dim=-1).gather(1, targets[:, None])[:, 0].cpu().numpy()
                np.add.at(totals[key], owner_index, scores)
            bar.advance(task, len(batch))
    return totals[None] if layers is None else totals


def score_pairs(model: Encoder, pairs: pd.DataFrame, *, whole_word: bool = False, layers=None,
                batch_tokens: int = 8192, weights: str = "trained", seed: int | None = None,
                progress: bool = False) -> pd.DataFrame:
    """One row per pair (and layer): both PLLs and whether the good sentence scored higher."""
    sentences = list(pairs["sentence_good"]) + list(pairs["sentence_bad"])
    scores = pseudo_log_likelihoods(model, sentences, whole_word=whole_word, layers=layers,
                                    batch_tokens=batch_tokens, progress=progress)
    per_layer = {None: scores} if layers is None else scores
    frames = []
    n = len(pairs)
    for layer, values in per_layer.items():
        frame = pairs[["file", "line", "paradigm", "phenomenon"]].copy()
        frame.insert(0, "seed", seed)
        frame.insert(0, "weights", weights)
        frame["layer"] = layer
        frame["pll_good"], frame["pll_bad"] = values[:n], values[n:]
        frame["correct"] = frame["pll_good"] > frame["pll_bad"]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def summarize(scored: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Accuracy per paradigm and overall (over pairs, and the unweighted mean over paradigms), chance 0.5."""
    keys = ["weights", "seed", "layer"]
    paradigms = (scored.groupby(keys + ["paradigm", "phenomenon"], dropna=False, sort=True)
                 .agg(pairs=("correct", "size"), accuracy=("correct", "mean")).reset_index())
    overall = (scored.groupby(keys, dropna=False, sort=True)
               .agg(pairs=("correct", "size"), accuracy=("correct", "mean")).reset_index())
    means = paradigms.groupby(keys, dropna=False, sort=True)["accuracy"].mean().rename("paradigm_mean").reset_index()
    overall = overall.merge(means, on=keys, how="left")
    overall["paradigms"] = paradigms.groupby(keys, dropna=False, sort=True).size().to_numpy()
    overall["chance"] = 0.5
    return paradigms, overall


def minimal_pairs(model: str | os.PathLike = "minilm", data: str | os.PathLike | None = None, *,
                  whole_word: bool = False, layers=None, max_pairs: int | None = None, seeds: Sequence[int] = (0,),
                  untrained: bool = True, batch_tokens: int = 8192, device: str | None = "auto",
                  progress: bool = False, loaded=None) -> Result:
    """Score BLiMP-format pairs (a JSONL file or a folder of them; without one, :func:`default_pairs`) with a
    masked LM (hub id, folder, or ``loaded``: its :class:`~bertology.models.Encoder` or a ``(model,
    tokenizer)`` pair built in code) and its untrained twins.

    Tables: ``pairs`` (both PLLs per pair), ``paradigms`` (accuracy per paradigm) and ``summary``.
    """
    pairs = read_pairs(data, max_pairs) if data is not None else default_pairs(max_pairs)
    run_device = resolve_device(device)
    network = masked_lm(model, loaded, run_device)
    name, num_layers = network.name, network.num_layers
    layer_list = None
    if layers not in (None, "last"):
        layer_list = parse_layers(layers, num_layers) or list(range(num_layers + 1))
    frames = [score_pairs(network, pairs, whole_word=whole_word, layers=layer_list,
                          batch_tokens=batch_tokens, progress=progress)]
    if untrained:
        for seed in seeds:
            twin = network.untrained(seed)
            frames.append(score_pairs(twin, pairs, whole_word=whole_word, layers=layer_list,
                                      batch_tokens=batch_tokens, weights="untrained", seed=seed, progress=progress))
            del twin
    scored = pd.concat(frames, ignore_index=True)
    if layer_list is None:
        scored["layer"] = num_layers
    paradigms, overall = summarize(scored)
    meta = {"model": name, "data": str(data), "pairs": len(pairs), "whole_word": whole_word,
            "seeds": list(seeds) if untrained else [], "num_layers": num_layers,
            "scoring": "pseudo-log-likelihood (Salazar et al. 2020), natural log, summed over tokens; "
                       + ("whole words masked together" if whole_word else "one token masked at a time"),
            "correct": "PLL(good) > PLL(bad); a tie is wrong; chance 0.5",
            "numbering": "layer l = hidden_states[l]; the model's output is layer L"}
    return Result("minimal-pairs", tables={"pairs": scored, "paradigms": paradigms, "summary": overall}, meta=meta)


def plot_pairs(paradigms: pd.DataFrame, path: str | os.PathLike, title: str = "") -> Path:
    """Accuracy (percent) per paradigm at the model's output layer, model vs untrained twin, chance 50%."""
    last = paradigms[paradigms["layer"] == paradigms["layer"].max()]
    model = last[last["weights"] == "trained"].set_index("paradigm")["accuracy"].sort_index()
    twin = last[last["weights"] == "untrained"].groupby("paradigm")["accuracy"].mean()
    return model_vs_twin_bars(model, twin, list(model.index), "accuracy (%)", 0.5, path, title, full_scale=True)
