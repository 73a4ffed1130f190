"""LAMA (Petroni et al. 2019): does a masked LM complete "[X] was born in [MASK] ." with the right object?

For every fact the relation's template is filled with the subject and the mask token (SQuAD's cloze
sentences come with their mask), the masked LM scores the candidates at the mask, and the object's rank
among them gives P@1, P@10 and the reciprocal rank. As in LAMA:

* only objects that are **one token** of the model's vocabulary are scored; the others (split into
  several pieces, or unknown to the tokenizer) are counted per relation and reported, never dropped
  silently;
* candidates are a **common vocabulary**: here the tokenizer's whole-word entries (no special, unused or
  continuation pieces), or a vocabulary file given by the user (LAMA's ``common_vocab_cased.txt``);
* a corpus's score is the **unweighted mean over its relations**.

The data (CC BY-NC 4.0) is never shipped: it is read from ``--data`` or ``$BERTOLOGY_DATA/lama``
or from a path given by the user.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from bertology.data import external_folder, missing_data
from bertology.data.corpus import open_text
from bertology.errors import DataError, SettingError
from bertology.knowledge.mlm import masked_lm
from bertology.knowledge.spec import LamaSpec
from bertology.models.batching import pad_batch, pad_id_of, token_budget_batches
from bertology.models.encoders import Encoder
from bertology.numbering import parse_layers
from bertology.plots import finish_figure
from bertology.progress import progress_bar
from bertology.results import Result
from bertology.runtime import resolve_device
from bertology.settings import spec_of

CORPORA = ("Google-RE", "T-REx", "SQuAD")
_CORPUS_KEYS = {"google-re": "Google-RE", "google_re": "Google-RE", "googlere": "Google-RE", "t-rex": "T-REx",
                "trex": "T-REx", "squad": "SQuAD"}

#: LAMA's manual templates for Google-RE (``scripts/run_experiments.py``, get_GoogleRE_parameters).
GOOGLE_RE_TEMPLATES = {"place_of_birth": "[X] was born in [Y] .", "date_of_birth": "[X] (born [Y]).",
                       "place_of_death": "[X] died in [Y] ."}

#: The 41 T-REx relations of LAMA's paper (Table 1's T-REx rows; the other five of relations.jsonl were not
#: used there).
LAMA_TREX = ("P19", "P20", "P279", "P37", "P413", "P449", "P47", "P138", "P364", "P463", "P101", "P106", "P527",
             "P530", "P176", "P27", "P407", "P30", "P178", "P1376", "P131", "P1412", "P108", "P136", "P17", "P39",
             "P264", "P276", "P937", "P140", "P1303", "P127", "P103", "P190", "P1001", "P31", "P495", "P159", "P36",
             "P740", "P361")

#: Published P@1 of BERT-base (LAMA, Table 2), mean over relations, for comparison when a hub model is at hand.
PUBLISHED_BERT_BASE_P1 = {"Google-RE": 0.098, "T-REx": 0.311, "SQuAD": 0.141}


@dataclass
class Fact:
    subject: str | None
    object: str
    line: int
    sentence: str | None = None  # a cloze sentence with "[MASK]" (SQuAD), instead of a template


@dataclass
class Relation:
    corpus: str
    name: str
    template: str | None
    source: Path
    label: str = ""
    facts: list[Fact] = field(default_factory=list)


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for every non-blank line of a JSONL file (``.gz`` allowed); a line that is not
    a JSON object raises :class:`DataError` naming the file and line."""
    path = Path(path)
    with open_text(path) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataError(f"{path}:{number}: not JSON ({error.msg}); expected one JSON object per line "
                                "(JSONL), not a JSON array or pretty-printed JSON") from None
            if not isinstance(record, dict):
                raise DataError(f"{path}:{number}: a JSON {type(record).__name__}, expected an object per line")
            yield number, record


def require(record: dict, fields: Sequence[str], path: Path, line: int) -> None:
    for name in fields:
        if name not in record:
            raise DataError(f"{path}:{line}: no field {name!r}; expected the fields {', '.join(fields)}")
        if not isinstance(record[name], str) or not record[name].strip():
            raise DataError(f"{path}:{line}: field {name!r} is {record[name]!r}; expected a non-empty string")


def check_template(template: str, where: str) -> str:
    for slot in ("[X]", "[Y]"):
        if template.count(slot) != 1:
            raise DataError(f"{where}: template {template!r} has {template.count(slot)} {slot}; expected exactly "
                            "one [X] (the subject) and one [Y] (the object)")
    return template


def read_relation_templates(path: str | os.PathLike) -> dict[str, tuple[str, str]]:
    """LAMA's ``relations.jsonl``: relation id -> (template, label), each template checked."""
    path = Path(path)
    out = {}
    for line, record in read_jsonl(path):
        require(record, ("relation", "template"), path, line)
        out[record["relation"]] = (check_template(record["template"], f"{path}:{line} ({record['relation']})"),
                                   str(record.get("label", "")))
    if not out:
        raise DataError(f"{path}: no relations; expected one JSON object per line with relation and template")
    return out


def read_facts(path: str | os.PathLike, corpus: str, name: str, template: str | None, label: str = "",
               max_facts: int | None = None) -> Relation:
    """One relation's facts: ``sub_label`` + ``obj_label`` with a template, or ``masked_sentences`` +
    ``obj_label`` without one (SQuAD). An empty file is an error naming it."""
    path = Path(path)
    relation = Relation(corpus, name, check_template(template, f"relation {name}") if template else None, path, label)
    for line, record in read_jsonl(path):
        if template:
            require(record, ("sub_label", "obj_label"), path, line)
            fact = Fact(record["sub_label"].strip(), record["obj_label"].strip(), line)
        else:
            require(record, ("obj_label",), path, line)
            sentences = record.get("masked_sentences")
            if not isinstance(sentences, list) or not sentences or not isinstance(sentences[0], str):
                raise DataError(f"{path}:{line}: no field 'masked_sentences' (a list of sentences with [MASK]); "
                                "a relation without a template needs its own cloze sentences, or give "
                                "template= \"[X] ... [Y] .\" for sub_label/obj_label records")
            if sentences[0].count("[MASK]") != 1:
                raise DataError(f"{path}:{line}: masked sentence {sentences[0]!r} has "
                                f"{sentences[0].count('[MASK]')} [MASK]; expected exactly one")
            fact = Fact(record.get("sub_label"), record["obj_label"].strip(), line, sentence=sentences[0])
        relation.facts.append(fact)
        if max_facts is not None and len(relation.facts) >= max_facts:
            break
    if not relation.facts:
        raise DataError(f"{path}: relation {name} has no facts; expected one JSON object per line")
    return relation


def corpus_names(spec: str | Sequence[str] | None) -> list[str]:
    if spec is None:
        return list(CORPORA)
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    out = []
    for item in items:
        key = item.lower().replace(" ", "")
        if key not in _CORPUS_KEYS:
            raise SettingError("corpora", item, f"unknown corpus; expected some of {', '.join(CORPORA)}")
        out.append(_CORPUS_KEYS[key])
    return out


def _find(folder: Path, stem: str) -> Path | None:
    for suffix in (".jsonl", ".jsonl.gz"):
        if (folder / f"{stem}{suffix}").is_file():
            return folder / f"{stem}{suffix}"
    return None


def check_lama_relations(folder: str | os.PathLike | None = None, corpora=None,
                         relations: Sequence[str] | None = None) -> tuple[Path, list[str], dict, set[str] | None]:
    """The LAMA folder, the chosen corpora, the T-REx templates and the relations asked for (None: all);
    a relation the chosen corpora do not have is refused, listing the ones the folder holds."""
    folder = external_folder("lama", folder)
    if folder is None:
        raise missing_data("lama")
    if not folder.is_dir():
        raise DataError(f"{folder}: not a LAMA data folder; expected relations.jsonl, TREx/, Google_RE/, Squad/")
    wanted = {name.strip() for name in relations if name.strip()} if relations else None
    chosen_corpora = corpus_names(corpora)
    templates = read_relation_templates(folder / "relations.jsonl") if "T-REx" in chosen_corpora else {}
    if wanted:
        _check_relation_names(folder, chosen_corpora, wanted, templates)
    return folder, chosen_corpora, templates, wanted


def _check_relation_names(folder: Path, corpora: list[str], wanted: set[str], templates: dict) -> None:
    """Refuse relation names the chosen corpora do not have, listing the ones the data folder holds."""
    known = {"T-REx": set(LAMA_TREX) | set(templates), "Google-RE": set(GOOGLE_RE_TEMPLATES), "SQuAD": {"squad"}}
    names = set().union(*(known[corpus] for corpus in corpora))
    if "SQuAD" in corpora:
        names |= {name for name in wanted if name.lower() == "squad"}
    unknown = sorted(name for name in wanted if name not in names)
    if not unknown:
        return
    held = {"T-REx": sorted((name for name in templates if _find(folder / "TREx", name)), key=_relation_order),
            "Google-RE": [name for name in GOOGLE_RE_TEMPLATES if _find(folder / "Google_RE", f"{name}_test")],
            "SQuAD": ["squad"] if _find(folder / "Squad", "test") else []}
    listing = "; ".join(f"{corpus}: {', '.join(held[corpus]) or 'none'}" for corpus in corpora)
    raise SettingError("relations", unknown, f"no such relation in {folder} for corpora {', '.join(corpora)}; it "
                       f"holds {listing}", shown=",".join(unknown))


def _relation_order(name: str):
    """P19 before P101 (Wikidata ids by number), other names after them."""
    return (0, int(name[1:]), "") if name[:1] == "P" and name[1:].isdigit() else (1, 0, name)


def load_lama(folder: str | os.PathLike | None = None, corpora=None, relations: Sequence[str] | None = None,
              max_facts: int | None = None) -> tuple[list[Relation], pd.DataFrame]:
    """The relations of a LAMA data folder (``relations.jsonl``, ``Google_RE/``, ``TREx/``, ``Squad/``) and a
    table of the ones it lacks (T-REx relations of the paper without a data file)."""
    folder, chosen_corpora, templates, wanted = check_lama_relations(folder, corpora, relations)
    out, missing = [], []
    for corpus in chosen_corpora:
        if corpus == "T-REx":
            # the paper's 41, and any other relation of relations.jsonl asked for by name
            extra = tuple(sorted(name for name in wanted or () if name in templates and name not in LAMA_TREX))
            for name in LAMA_TREX + extra:
                if wanted and name not in wanted:
                    continue
                path = _find(folder / "TREx", name)
                template, label = templates.get(name, (None, ""))
                if path is None or template is None:
                    missing.append({"corpus": corpus, "relation": name, "label": label,
                                    "reason": "no data file" if path is None else "no template in relations.jsonl"})
                    continue
                out.append(read_facts(path, corpus, name, template, label, max_facts))
        elif corpus == "Google-RE":
            for name, template in GOOGLE_RE_TEMPLATES.items():
                if wanted and name not in wanted:
                    continue
                path = _find(folder / "Google_RE", f"{name}_test")
                if path is None:
                    missing.append({"corpus": corpus, "relation": name, "label": name.replace("_", " "),
                                    "reason": "no data file"})
                    continue
                out.append(read_facts(path, corpus, name, template, name.replace("_", " "), max_facts))
        else:
            if wanted and "squad" not in {w.lower() for w in wanted}:
                continue
            path = _find(folder / "Squad", "test")
            if path is None:
                missing.append({"corpus": corpus, "relation": "squad", "label": "SQuAD cloze",
                                "reason": "no data file"})
                continue
            out.append(read_facts(path, corpus, "squad", None, "SQuAD cloze", max_facts))
    if not out:
        raise DataError(f"{folder}: no relation found for corpora {corpus_names(corpora)}"
                        + (f" and relations {sorted(wanted)}" if wanted else ""))
    return out, pd.DataFrame(missing, columns=["corpus", "relation", "label", "reason"])


# -- vocabulary -------------------------------------------------------------------------------------------

_UNUSED = re.compile(r"^\[unused\d+\]$|^<0x[0-9A-Fa-f]{2}>$")


def common_vocabulary(tokenizer, vocab_file: str | os.PathLike | None = None) -> tuple[np.ndarray, dict]:
    """Candidate token ids for the mask and how they were chosen.

    Without ``vocab_file``: every whole-word entry of the tokenizer (a token that can begin a word: not a
    ``##`` continuation, not a special, ``[unusedN]`` or byte-fallback token). With it (one token a line,
    like LAMA's ``common_vocab_cased.txt``): those of its entries that are one token here.
    """
    specials = set(tokenizer.all_special_ids)
    vocab = tokenizer.get_vocab()
    if vocab_file is not None:
        path = Path(vocab_file)
        words = [line.strip() for line in open_text(path) if line.strip()]
        if not words:
            raise DataError(f"{path}: empty vocabulary file; expected one token per line")
        ids, dropped = [], 0
        for word in words:
            pieces = object_ids(tokenizer, word)
            if len(pieces) == 1 and pieces[0] not in specials:
                ids.append(pieces[0])
            else:
                dropped += 1
        chosen = np.unique(np.asarray(ids, dtype=np.int64))
        return chosen, {"source": str(path), "entries": len(words), "kept": int(len(chosen)), "not_one_token": dropped}
    continuation = _continuation_marker(tokenizer)
    ids = []
    for token, index in vocab.items():
        if index in specials or _UNUSED.match(token):
            continue
        if continuation == "##" and token.startswith("##"):
            continue
        if continuation in ("Ġ", "▁") and not token.startswith(continuation):
            continue  # byte-level BPE / SentencePiece: a word-initial token carries the space marker
        ids.append(index)
    chosen = np.unique(np.asarray(ids, dtype=np.int64))
    return chosen, {"source": "tokenizer whole-word entries", "entries": len(vocab), "kept": int(len(chosen)),
                    "marker": continuation}


def _continuation_marker(tokenizer) -> str:
    pieces = tokenizer.tokenize(" unbelievability")
    if any(p.startswith("##") for p in pieces):
        return "##"
    if pieces and pieces[0].startswith("Ġ"):
        return "Ġ"
    if pieces and pieces[0].startswith("▁"):
        return "▁"
    return "##"


def object_ids(tokenizer, word: str) -> list[int]:
    """The token ids of ``word`` as it would appear after a space in a sentence."""
    return tokenizer(" " + word, add_special_tokens=False)["input_ids"]


# -- scoring ----------------------------------------------------------------------------------------------


def fill(fact: Fact, template: str | None, mask_token: str) -> str:
    if template is None:
        return fact.sentence.replace("[MASK]", mask_token)
    return template.replace("[X]", fact.subject).replace("[Y]", mask_token)


@torch.no_grad()
def mask_scores(model: Encoder, sentences: Sequence[str], candidates: torch.Tensor, layers: Sequence[int] | None,
                batch_size: int = 32) -> dict[int | None, torch.Tensor]:
    """Scores of the ``candidates`` at the single mask of each sentence: ``{None: [n, C]}`` from the masked LM's
    logits, or with ``layers`` ``{l: [n, C]}`` from its own MLM head applied to ``hidden_states[l]`` (a logit
    lens, for heads the model exposes as ``cls`` or ``lm_head``). ``batch_size`` sentences a pass, in order."""
    tokenizer = model.tokenizer
    if layers is not None and model.head_module is None:
        raise SettingError("layers", layers, f"per-layer LAMA applies the model's MLM head to each layer, and this "
                           f"{type(model.model).__name__} exposes no 'cls' or 'lm_head' module; leave layers= out",
                           shown="")
    encoded = tokenizer(list(sentences), truncation=True)
    ids, types = encoded["input_ids"], encoded.get("token_type_ids")
    out: dict = {}
    for batch in token_budget_batches([len(x) for x in ids], None, batch_size, sort=False, max_padding=None):
        inputs = pad_batch([ids[i] for i in batch], pad_id_of(tokenizer),
                           None if types is None else [types[i] for i in batch])
        masks = inputs["input_ids"] == tokenizer.mask_token_id
        counts = masks.sum(dim=1)
        if (counts != 1).any():
            bad = int(torch.nonzero(counts != 1)[0, 0])
            raise DataError(f"sentence {sentences[int(batch[bad])]!r} has {int(counts[bad])} mask tokens after "
                            "tokenization; expected exactly one")
        rows, columns = torch.nonzero(masks, as_tuple=True)
        if layers is None:
            logits = model.forward(inputs, hidden_states=False, logits=True).logits[rows, columns]
            out.setdefault(None, []).append(logits[:, candidates].float().cpu())
        else:
            states = model.forward(inputs, body=True).hidden_states
            for layer in layers:
                logits = model.head_logits(states[layer][rows, columns])
                out.setdefault(layer, []).append(logits[:, candidates].float().cpu())
    return {key: torch.cat(parts) for key, parts in out.items()}


def ranks_of(scores: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """0-based rank of each target column: how many candidates score strictly higher."""
    target_scores = scores.gather(1, targets[:, None])
    return (scores > target_scores).sum(dim=1).numpy()


def prepare_relation(relation: Relation, tokenizer, candidate_index: dict[int, int]) -> dict:
    """Which facts are scored (object = one candidate token) and why the others are not."""
    keep, targets, split, unknown, outside = [], [], 0, 0, 0
    unk = tokenizer.unk_token_id
    for k, fact in enumerate(relation.facts):
        pieces = object_ids(tokenizer, fact.object)
        if len(pieces) != 1:
            split += 1
        elif pieces[0] == unk:
            unknown += 1
        elif pieces[0] not in candidate_index:
            outside += 1
        else:
            keep.append(k)
            targets.append(candidate_index[pieces[0]])
    return {"keep": keep, "targets": np.asarray(targets, dtype=np.int64), "split_objects": split,
            "unknown_objects": unknown, "outside_vocabulary": outside}


def score_relations(model: Encoder, relations: Sequence[Relation], candidates: np.ndarray,
                    layers: Sequence[int] | None = None, batch_size: int = 32, progress: bool = False,
                    weights: str = "trained", seed: int | None = None) -> tuple[list[dict], list[pd.DataFrame]]:
    """Per relation (and layer): facts scored, objects left out and why, P@1, P@10, MRR; and per fact.
    ``model``: the masked LM's handle; ``weights``: ``trained`` (the model) or ``untrained`` (its twin), the column that says whose scores these are."""
    tokenizer = model.tokenizer
    candidate_index = {int(c): k for k, c in enumerate(candidates)}
    candidate_tensor = torch.as_tensor(candidates, device=model.device)
    rows, facts = [], []
    with progress_bar(progress) as bar:
        task = bar.add_task(f"LAMA ({weights})", total=len(relations))
        for relation in relations:
            plan = prepare_relation(relation, tokenizer, candidate_index)
            base = {"weights": weights, "seed": seed, "corpus": relation.corpus, "relation": relation.name,
                    "label": relation.label, "facts_total": len(relation.facts), "facts": len(plan["keep"]),
                    "split_objects": plan["split_objects"], "unknown_objects": plan["unknown_objects"],
                    "outside_vocabulary": plan["outside_vocabulary"], "candidates": len(candidates)}
            if not plan["keep"]:
                for layer in (layers or [None]):
                    rows.append({**base, "layer": layer, "p_at_1": np.nan, "p_at_10": np.nan, "mrr": np.nan})
                bar.advance(task)
                continue
            sentences = [fill(relation.facts[k], relation.template, tokenizer.mask_token) for k in plan["keep"]]
            scores = mask_scores(model, sentences, candidate_tensor, layers, batch_size)
            targets = torch.as_tensor(plan["targets"])
            for layer, table in scores.items():
                ranks = ranks_of(table, targets)
                rows.append({**base, "layer": layer, "p_at_1": float(np.mean(ranks == 0)),
                             "p_at_10": float(np.mean(ranks < 10)), "mrr": float(np.mean(1.0 / (ranks + 1)))})
                if weights == "trained":
                    best = candidates[table.argmax(dim=1).numpy()]
                    facts.append(pd.DataFrame({
                        "corpus": relation.corpus, "relation": relation.name, "layer": layer,
                        "line": [relation.facts[k].line for k in plan["keep"]],
                        "subject": [relation.facts[k].subject for k in plan["keep"]],
                        "object": [relation.facts[k].object for k in plan["keep"]],
                        "prediction": tokenizer.convert_ids_to_tokens(best.tolist()), "rank": ranks}))
            bar.advance(task)
    return rows, facts


def summarize(relations: pd.DataFrame) -> pd.DataFrame:
    """Per weights (trained/untrained), seed, layer and corpus: the unweighted mean over relations that have scored facts (as
    LAMA reports it), the facts behind it and the chance level ``1 / candidates``."""
    scored = relations[relations["facts"] > 0].copy()
    scored["layer_key"] = scored["layer"].astype("Int64").astype(str)
    grouped = scored.groupby(["weights", "seed", "layer_key", "corpus"], dropna=False, sort=True)
    out = grouped.agg(relations=("relation", "nunique"), facts=("facts", "sum"),
                      split_objects=("split_objects", "sum"), p_at_1=("p_at_1", "mean"),
                      p_at_10=("p_at_10", "mean"), mrr=("mrr", "mean"), candidates=("candidates", "first"),
                      layer=("layer", "first")).reset_index().drop(columns="layer_key")
    out["chance_p_at_1"] = 1.0 / out["candidates"]
    return out


def lama(model: str | os.PathLike = "minilm", data: str | os.PathLike | None = None, spec: LamaSpec | None = None, *,
         vocab: str | os.PathLike | None = None, device: str | None = "auto", progress: bool = False, loaded=None,
         **settings) -> Result:
    """LAMA for a masked LM (hub id, folder, or ``loaded``: its :class:`~bertology.models.Encoder` or a
    ``(model, tokenizer)`` pair built in code), with its untrained twins.

    ``data``: a LAMA folder (default ``$BERTOLOGY_DATA/lama``) or one relation's JSONL file (then ``template``
    with [X] and [Y], unless the records carry ``masked_sentences``). ``layers``: per-layer scores through the
    model's own MLM head (a logit lens); default only the model's output. Tables: ``relations``, ``corpora``
    (unweighted means over relations), ``facts`` (the model's prediction and rank per fact) and ``missing``.
    The settings are ``spec`` (:class:`~bertology.knowledge.spec.LamaSpec`: corpora, relations, template,
    max_facts, layers, seeds, untrained, batch_size), or its fields as keywords, checked once.
    """
    spec = spec_of(LamaSpec, spec, settings, "LAMA")
    corpora, relations, template, max_facts = spec.corpora, spec.relations, spec.template, spec.max_facts
    layers, seeds, untrained, batch_size = spec.layers, spec.seeds, spec.untrained, spec.batch_size
    run_device = resolve_device(device)
    single = data is not None and Path(data).is_file()
    if single and relations:
        raise SettingError("relations", relations, f"applies to a LAMA folder; data= {data} is one relation's "
                           "file", shown=",".join(relations))
    if not single and template is not None:
        raise SettingError("template", template, "applies to a single relation file given as data=, not to a "
                           "LAMA folder", shown="")
    if not single and relations:
        check_lama_relations(data, corpora, relations)  # the names, before the model loads
    network = masked_lm(model, loaded, run_device)
    tokenizer, name = network.tokenizer, network.name
    if single:
        relation = read_facts(data, "custom", Path(data).name.split(".")[0], template, "", max_facts)
        chosen, missing = [relation], pd.DataFrame(columns=["corpus", "relation", "label", "reason"])
    else:
        chosen, missing = load_lama(data, corpora, relations, max_facts)
    candidates, vocabulary = common_vocabulary(tokenizer, vocab)
    num_layers = network.num_layers
    layer_list = parse_layers(layers, num_layers) if layers not in (None, "last") else None
    if layers not in (None, "last") and layer_list is None:
        layer_list = list(range(num_layers + 1))
    rows, facts = score_relations(network, chosen, candidates, layer_list, batch_size, progress)
    if untrained:
        for seed in seeds:
            twin = network.untrained(seed)
            twin_rows, _ = score_relations(twin, chosen, candidates, layer_list, batch_size, progress,
                                           weights="untrained", seed=seed)
            rows += twin_rows
            del twin
    table = pd.DataFrame(rows)
    if layer_list is None:
        table["layer"] = num_layers  # the model's output is its last layer
        for frame in facts:
            frame["layer"] = num_layers
    meta = {
        "model": name, "num_layers": num_layers, "data": str(data) if data else str(external_folder("lama")),
        "vocabulary": vocabulary, "seeds": list(seeds) if untrained else [],
        "per_layer": "the model's own MLM head applied to hidden_states[l] (a logit lens)" if layer_list else None,
        "published_bert_base_p_at_1": PUBLISHED_BERT_BASE_P1,
        "notes": "objects that are not one token are counted (split_objects, unknown_objects, outside_vocabulary), "
                 "not scored; other valid objects of N-M relations are not removed from the ranking",
        "numbering": "layer l = hidden_states[l]; the model's output is layer L",
    }
    return Result("lama", tables={"relations": table, "corpora": summarize(table),
                                  "facts": pd.concat(facts, ignore_index=True) if facts else pd.DataFrame(),
                                  "missing": missing}, meta=meta)


def plot_lama(relations: pd.DataFrame, path: str | os.PathLike, title: str = "") -> Path:
    """P@1 (percent) per relation at the model's output layer, model vs untrained twin (mean over seeds),
    grouped by corpus, with the chance level."""
    last = relations[relations["layer"] == relations["layer"].max()]
    scored = last[last["facts"] > 0]
    model = scored[scored["weights"] == "trained"].set_index(["corpus", "relation"])["p_at_1"].sort_index()
    twin = scored[scored["weights"] == "untrained"].groupby(["corpus", "relation"])["p_at_1"].mean()
    chance = 1 / float(scored["candidates"].iloc[0]) if len(scored) else None
    return model_vs_twin_bars(model, twin, [r for _, r in model.index], "P@1 (%)", chance, path, title)


def model_vs_twin_bars(model: pd.Series, twin: pd.Series, labels: Sequence[str], ylabel: str,
                       chance: float | None, path: str | os.PathLike, title: str = "",
                       full_scale: bool = False) -> Path:
    """One pair of bars per item (``model``'s index, in order): the model and its untrained twin (fractions,
    shown in percent), a dotted chance line; ``full_scale`` fixes the axis at 0-100."""
    matplotlib.use("Agg")  # on a machine with a display too: the figure goes to a file
    figure, axis = plt.subplots(figsize=(max(5, 0.32 * len(model) + 2), 3.6))
    x = np.arange(len(model))
    axis.bar(x - 0.2, model * 100, width=0.4, label="model")
    axis.bar(x + 0.2, twin.reindex(model.index).fillna(0) * 100, width=0.4, label="untrained twin")
    if chance is not None:
        axis.axhline(100 * chance, color="grey", linestyle=":", label="chance")
    axis.set_xticks(x, list(labels), rotation=90, fontsize=7)
    axis.set_ylabel(ylabel)
    if full_scale:
        axis.set_ylim(0, 100)
    axis.grid(True, axis="y", linewidth=0.3)
    axis.legend(fontsize=8)
    if title:
        axis.set_title(title, fontsize=10)
    return finish_figure(figure, path)
