"""Clark et al.'s attention analysis end to end (2019, sections 3-5): :func:`run_attention_analysis` extracts the
attention of a model (and of its untrained twin) on a UD treebank, runs the head statistics, the single heads
and offsets as parsers (:mod:`bertology.attention.parsing_heads`) and the attention-only probe
(:mod:`bertology.attention.parsing_probe`), and returns one :class:`~bertology.results.Result`.

The analysis' and the probe's public names stay importable from here (``from bertology.attention.parsing import
heads_as_parsers, AttentionOnlyProbe``), as they were before the module was split; new code imports them from
the module that defines them.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
import tempfile
import warnings

import pandas as pd

from bertology.attention.parsing_heads import (  # noqa: F401 (the analysis' names, importable from here too)
    ALL_RELATIONS, CLARK_TABLE1, DEFAULT_OFFSETS, DIRECTIONS, POSSESSIVE_MARKERS, POSSESSIVE_RELATIONS,
    STANFORD_TO_UD, attachment_score, best_heads_table, compare_with_clark, head_predictions, heads_as_parsers,
    offset_baselines, offset_predictions, scoring_positions)
from bertology.attention.parsing_probe import (  # noqa: F401 (the probe's names, importable from here too)
    AttentionOnlyProbe, ProbeBatches, probe_batches, probe_features)
from bertology.attention.spec import AttentionParseSpec
from bertology.attention.stats import head_statistics
from bertology.data import packaged_treebank, read_conllu
from bertology.data.treebank import find_splits
from bertology.numbering import head_label
from bertology.results import Result, tidy
from bertology.extraction import extract
from bertology.models import as_encoder
from bertology.runtime import resolve_device
from bertology.settings import spec_of


def _extract_split(encoder, sentences, work_dir: Path, name: str, layers, progress: bool):
    return extract(encoder, sentences, work_dir / f"{name}.store", layers=layers, attentions=True, progress=progress)


def _head_uas(parse: pd.DataFrame, direction: str, layer: int, head: int, ignore_punct: bool) -> float:
    rows = parse[(parse["direction"] == direction) & (parse["layer"] == layer) & (parse["head"] == head)]
    everything = rows[rows["relation"] == ALL_RELATIONS].iloc[0]
    correct, count = int(everything["correct"]), int(everything["count"])
    if ignore_punct:
        punct = rows[rows["relation"] == "punct"]
        if not punct.empty:
            correct -= int(punct["correct"].iloc[0])
            count -= int(punct["count"].iloc[0])
    return correct / count


def _offset_uas(baselines: pd.DataFrame, offset: int, ignore_punct: bool) -> float:
    rows = baselines[baselines["offset"] == offset].set_index("relation")
    correct, count = int(rows.loc[ALL_RELATIONS, "correct"]), int(rows.loc[ALL_RELATIONS, "count"])
    if ignore_punct and "punct" in rows.index:
        correct -= int(rows.loc["punct", "correct"])
        count -= int(rows.loc["punct", "count"])
    return correct / count


def run_attention_analysis(
    model="minilm",
    treebank: str | Path | None = None,
    spec: AttentionParseSpec | None = None,
    *,
    work_dir: str | Path | None = None,
    progress: bool = True,
    device: str | None = None,
    **settings,
) -> Result:
    """Clark et al.'s attention analysis of ``model`` on a UD treebank, end to end.

    ``model`` is an alias/path/hub id (loaded on ``device``, see :func:`bertology.runtime.resolve_device`)
    or an :class:`~bertology.models.Encoder`, used as it is (its attention implementation is left as it
    was). ``treebank`` is a UD folder (default: the packaged UD English EWT). Heads and offsets
    are selected on dev and also scored on test (held out); the attention-only probe is trained on train
    (capped at ``max_train`` sentences; dev when the folder has no train file) and scored on test, once
    per seed in ``probe_seeds``, beside the best single head and the best offset (both selected on the
    training split). ``max_eval`` caps dev and test (each, in sentences). ``layers`` (transformer layers, default all)
    limits the heads looked at. ``untrained=True`` repeats everything on the untrained twin (``untrained_seed``).

    Returns a :class:`~bertology.results.Result` named ``attention_parse`` with tables (each with a
    ``model`` column; accuracies and UAS are fractions):

    * ``statistics``: head statistics on dev (see :func:`~bertology.attention.stats.head_statistics`);
    * ``heads``: every relation x direction x head, dev and test (``split``);
    * ``baselines``: fixed offsets, dev and test;
    * ``best_heads``: Table 1 (selected on dev, ``held_out_*`` scored on test);
    * ``clark``: beside Clark's published Table 1 (:func:`compare_with_clark`);
    * ``probe``: one row per method and seed: ``method, seed`` (``<NA>`` for the baselines), the chosen
      ``layer, head, head_label, direction`` (best single head), ``offset`` (best fixed offset),
      ``epochs`` (probe), ``uas, uas_no_punct, train_split, n_train, test_split, n_test``;
    * ``probe_summary``: :func:`probe_summary` of ``probe``.

    ``meta`` holds the models (name, fingerprint, untrained seed), the treebank files, the settings and
    ``uniform_entropy`` (of the dev sentences).

    The settings are ``spec`` (:class:`~bertology.attention.spec.AttentionParseSpec`: the sizes, the probe's seeds
    and epochs, statistics, untrained, min_count, layers, untrained_seed), or its fields as keywords, checked once
    (``control``/``control_seed``, the twin's former names, and ``max_sentences``/``max_train_sentences``, the
    sizes' former names, still work with a deprecation warning).
    """
    for old, new in (("control", "untrained"), ("control_seed", "untrained_seed"), ("max_sentences", "max_eval"),
                     ("max_train_sentences", "max_train")):
        # the twin's former names (control means control tasks everywhere else); the sizes' former names
        # (max_sentences is the corpus read before it is split, everywhere else)
        if old in settings:
            warnings.warn(f"run_attention_analysis({old}=...) is deprecated; use {new}=", DeprecationWarning,
                          stacklevel=2)
            settings[new] = settings.pop(old)
    spec = spec_of(AttentionParseSpec, spec, settings, "attention analysis")
    max_eval, max_train, layers = spec.max_eval, spec.max_train, spec.layers
    probe_seeds, probe_epochs, min_count = spec.probe_seeds, spec.probe_epochs, spec.min_count
    statistics, untrained, untrained_seed = spec.statistics, spec.untrained, spec.untrained_seed
    encoder = as_encoder(model, device=resolve_device(device))
    splits = find_splits(treebank if treebank is not None else packaged_treebank(),
                         required=("dev", "test"))
    data = {split: read_conllu(path) for split, path in splits.items()}
    for split in ("dev", "test"):
        if max_eval is not None:
            data[split] = data[split][:max_eval]
    train_split = "train" if "train" in data else "dev"
    train = data[train_split]
    if train_split == "train" and max_train is not None:
        train = train[:max_train]
    extract_layers = None if layers is None else sorted({int(layer) for layer in layers})
    encoders = [encoder] + ([encoder.untrained(untrained_seed)] if untrained else [])

    results: dict[str, list[pd.DataFrame]] = defaultdict(list)
    uniform_entropy = None
    with tempfile.TemporaryDirectory(dir=work_dir, prefix="bertology-attention-") as tmp:
        for k, enc in enumerate(encoders):
            label = enc.name
            stores = {
                "dev": _extract_split(enc, data["dev"], Path(tmp), f"{k}-dev", extract_layers, progress),
                "test": _extract_split(enc, data["test"], Path(tmp), f"{k}-test", extract_layers, progress),
            }
            stores["train"] = (stores["dev"] if train_split == "dev"
                               else _extract_split(enc, train, Path(tmp), f"{k}-train", extract_layers, progress))
            sentences = {"dev": data["dev"], "test": data["test"], "train": train}

            if statistics:
                stats = head_statistics(stores["dev"].iter_attentions(), sentences["dev"], progress=progress,
                                        total=len(sentences["dev"]), layers=stores["dev"].attention_layers)
                uniform_entropy = stats.meta["uniform_entropy"]
                results["statistics"].append(stats["statistics"].assign(model=label))

            parse, base = {}, {}
            for split in ("train", "dev", "test"):
                if split == "train" and train_split == "dev":
                    continue
                parse[split] = heads_as_parsers(stores[split].iter_attentions(), sentences[split],
                                                progress=progress, total=len(sentences[split]),
                                                layers=stores[split].attention_layers)
                base[split] = offset_baselines(sentences[split])
            if train_split == "dev":
                parse["train"], base["train"] = parse["dev"], base["dev"]
            for split in ("dev", "test"):
                results["heads"].append(parse[split].assign(model=label, split=split))
                results["baselines"].append(base[split].assign(model=label, split=split))
            best = best_heads_table(parse["dev"], base["dev"], min_count=min_count,
                                    held_out_parse=parse["test"], held_out_baselines=base["test"])
            results["best_heads"].append(best.assign(model=label, selected_on="dev", held_out="test"))
            # Clark's rarer relations may fall under min_count on a small slice; compare them anyway.
            every_relation = best_heads_table(parse["dev"], base["dev"], min_count=0,
                                              held_out_parse=parse["test"], held_out_baselines=base["test"])
            results["clark"].append(compare_with_clark(every_relation).assign(model=label))
            results["probe"].append(_probe_rows(parse, base, stores, sentences, probe_seeds, probe_epochs).assign(
                model=label, train_split=train_split, n_train=len(train), test_split="test",
                n_test=len(sentences["test"])))
    tables = {name: _model_first(pd.concat(frames, ignore_index=True)) for name, frames in results.items()}
    tables["probe_summary"] = probe_summary(tables["probe"])
    meta = {
        "models": [{"name": enc.name, "fingerprint": enc.fingerprint, "untrained_seed": enc.untrained_seed}
                   for enc in encoders],
        "treebank": {split: str(path) for split, path in splits.items()},
        "n_sentences": {"dev": len(data["dev"]), "test": len(data["test"]), "train": len(train)},
        "train_split": train_split, "layers": extract_layers, "probe_seeds": list(probe_seeds),
        "probe_epochs": probe_epochs, "min_count": min_count, "uniform_entropy": uniform_entropy,
    }
    return Result("attention_parse", tables, meta=meta)


def _model_first(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[["model"] + [c for c in frame.columns if c != "model"]]


#: Columns of the probe table, in order; a method fills the ones that describe it and leaves the rest empty.
PROBE_COLUMNS = ["method", "seed", "layer", "head", "head_label", "direction", "offset", "epochs", "uas",
                 "uas_no_punct"]


def _probe_rows(parse, base, stores, sentences, probe_seeds, probe_epochs) -> pd.DataFrame:
    """The attention-only probe per seed beside its two baselines, all selected on train, scored on test."""
    head_row = best_heads_table(parse["train"], base["train"], min_count=0)
    head_row = head_row[head_row["relation"] == ALL_RELATIONS].iloc[0]
    layer, head, direction, offset = int(head_row["layer"]), int(head_row["head"]), head_row["direction"], \
        int(head_row["baseline_offset"])
    rows = [
        {"method": "best single head", "layer": layer, "head": head, "head_label": head_label(layer, head),
         "direction": direction,
         "uas": _head_uas(parse["test"], direction, layer, head, False),
         "uas_no_punct": _head_uas(parse["test"], direction, layer, head, True)},
        {"method": "best fixed offset", "offset": offset,
         "uas": _offset_uas(base["test"], offset, False), "uas_no_punct": _offset_uas(base["test"], offset, True)},
    ]
    if probe_seeds:  # the features once, for every seed
        train = probe_batches(stores["train"].iter_attentions(), sentences["train"])
        test = probe_batches(stores["test"].iter_attentions(), sentences["test"], need_tree=False)
    for seed in probe_seeds:
        probe = AttentionOnlyProbe(epochs=probe_epochs, seed=seed).fit(train)
        predictions = probe.predict(test)
        rows.append({"method": "attention-only probe", "seed": seed, "epochs": probe_epochs,
                     "uas": attachment_score(predictions, sentences["test"]),
                     "uas_no_punct": attachment_score(predictions, sentences["test"], ("punct",))})
    frame = pd.DataFrame(rows).reindex(columns=PROBE_COLUMNS)
    for column in ("offset", "epochs"):
        frame[column] = pd.array(frame[column], dtype="Int64")
    return tidy(frame)


def probe_summary(probe: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds of each method's UAS (fractions; the baselines have one row,
    no seed), with the columns that describe each method (head, offset, epochs)."""
    keys = [c for c in ("model", "method") if c in probe.columns]
    described = [c for c in ("layer", "head", "head_label", "direction", "offset", "epochs") if c in probe.columns]
    grouped = probe.groupby(keys, sort=False, dropna=False)
    summary = grouped.agg(uas=("uas", "mean"), uas_std=("uas", "std"), uas_no_punct=("uas_no_punct", "mean"),
                          n_seeds=("seed", "count"), **{c: (c, "first") for c in described}).reset_index()
    return tidy(summary)
