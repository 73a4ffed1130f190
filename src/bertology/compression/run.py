"""``bertology compress``: compress a model by each method, write the checkpoints, and measure every variant beside
the original in one run (the Primer's Table 1 layout: x smaller, % of the original's score kept, x faster)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Sequence
from dataclasses import asdict, dataclass

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bertology.compression.measure import (EvalSets, Measures, baselines, machine_load, measure_encoder,
                                           offset_baseline, packaged_sets, probe_importance, retention, speedups,
                                           throughput)
from bertology.compression.methods import (Variant, compress, file_bytes, nonzero_parameters, save_checkpoint,
                                           stored_bytes)
from bertology.compression.names import Method, parse_methods
from bertology.compression.spec import CompressionSpec
from bertology.models import Encoder, as_encoder, load_encoder
from bertology.models.texts import text_batches
from bertology.plots import finish_figure
from bertology.progress import progress_bar
from bertology.results import Result
from bertology.compression.finetuned import default_config, task_retention
from bertology.intervention.hooks import mask_heads
from bertology.settings import spec_of

REFERENCE = "original"


def _calibration(encoder: Encoder, sentences, batch_size: int = 16) -> list[dict]:
    return [dict(encoded) for _, encoded in text_batches(encoder.tokenizer, [list(s.words) for s in sentences],
                                                         batch_size, words=True, max_length=encoder.max_length)]


def _size_row(label: str, model, folder: str | Path | None) -> dict:
    nonzero, total = nonzero_parameters(model)
    on_disk = file_bytes(folder) if folder is not None and Path(folder).is_dir() else np.nan
    return {"variant": label, "parameter_bytes": stored_bytes(model), "file_bytes": on_disk,
            "values": total, "nonzero_fraction": nonzero / total}


def run_compression(model: str | os.PathLike | Encoder = "minilm", methods: str | Sequence[Method] | None = None,
                    out: str | os.PathLike | None = None, spec: CompressionSpec | None = None, *,
                    teacher: str | os.PathLike | Encoder | None = None, sets: EvalSets | None = None,
                    progress: bool = True, **settings) -> Result:
    """Compress ``model`` by each of ``methods`` (``"int8-dynamic,fp16,drop-top:2"`` or parsed
    :class:`Method` objects; ``None``: the default set), write each as a checkpoint under
    ``out/checkpoints/<variant>`` (reloaded through ``load_encoder`` before it is measured) and measure all of
    them beside the original on ``sets`` (default: the packaged EWT, :func:`packaged_sets`).

    With ``teacher``, the reference is the teacher and ``model`` (the student, e.g. a distilled model) is
    measured as the variant ``student`` beside the compressed versions of itself.

    Returns a :class:`Result` named ``compression`` with tables ``summary`` (one row per variant: sizes,
    compression, speed-up, retention of UPOS, UUAS and parser heads with 95% paired bootstrap intervals),
    ``retention`` (long form), ``layers`` (UPOS, UUAS, anisotropy, self-similarity per variant and layer),
    ``parser_heads`` (the head chosen per relation), ``throughput`` (every timed round), ``sizes`` and
    ``baselines``.

    With ``finetune_task`` (any ``bertology finetune`` task: a GLUE name or ``bshift``), the original and every
    variant are also fine-tuned on it with ``finetune_config`` (a :class:`~bertology.finetune.FinetuneConfig`;
    default: the report's BShift recipe, :func:`bertology.compression.finetuned.default_config`) and ``seed``, and
    scored on its dev split (table ``task``; ``task*`` columns in ``summary``): see
    :mod:`bertology.compression.finetuned` for the int8/fp16/bf16 variants (fine-tuned original, then compressed)
    and the learning check.

    The settings (rounds, seed, engine, sentences, the measures' sizes, ``n_boot``, ``finetune_task`` and
    ``finetune_config``) are ``spec`` (:class:`~bertology.compression.spec.CompressionSpec`), or its fields as
    keywords, checked once before any work.
    """
    chosen = parse_methods(methods) if methods is None or isinstance(methods, str) else list(methods)
    spec = spec_of(CompressionSpec, spec, settings, "compression")
    rounds, seed, engine, n_boot = spec.rounds, spec.seed, spec.engine, spec.n_boot
    finetune_task, finetune_config = spec.finetune_task, spec.finetune_config
    out = Path(out) if out is not None else None
    base = as_encoder(model)
    reference = as_encoder(teacher) if teacher is not None else base
    sets = sets or packaged_sets()
    work = out / "_work" if out is not None else Path(tempfile.mkdtemp(prefix="bertology-compress-"))
    variants: list[Variant] = []
    if teacher is not None:
        variants.append(Variant(label="student", encoder=base, details={"student": base.name}))
    importance = None
    calibration = _calibration(base, sets.train[:spec.calibration_sentences])
    # The originals saved the way the variants are, so file sizes compare like with like.
    folders: dict[str, Path | None] = {REFERENCE: save_checkpoint(Variant(REFERENCE, reference), work / REFERENCE)}
    if teacher is not None:
        folders["student"] = save_checkpoint(Variant("student", base), work / "student")
    sizes = [_size_row(REFERENCE, reference.model, folders[REFERENCE])]
    if teacher is not None:
        sizes.append(_size_row("student", base.model, folders["student"]))
    for folder in folders.values():
        shutil.rmtree(folder, ignore_errors=True)
    with progress_bar(progress) as bar:
        task = bar.add_task("compress", total=len(chosen))
        for method in chosen:
            bar.update(task, description=f"compress: {method.label}")
            if method.name == "heads-importance" and importance is None:
                importance = probe_importance(base, sets.train[:spec.importance_sentences], seed=seed)
            variant = compress(base, method, calibration=calibration, importance=importance, seed=seed,
                               engine=engine)
            if out is not None:
                folder = save_checkpoint(variant, out / "checkpoints" / variant.label)
                int8 = variant.method.name.startswith("int8")  # PyTorch's int8 kernels are CPU-only
                reloaded = load_encoder(folder, device=None if int8 else str(base.device))
                reloaded.name = f"{base.name} ({variant.label})"
                variant.encoder = reloaded  # what a user of the checkpoint gets
                folders[variant.label] = folder
            sizes.append(_size_row(variant.label, variant.encoder.model, folders.get(variant.label)))
            variants.append(variant)
            bar.advance(task)

        load_before = machine_load()
        timed = throughput({REFERENCE: reference, **{v.label: v.encoder for v in variants}}, sets.test,
                           work / "throughput", rounds=rounds)
        load_after = machine_load()

        task = bar.add_task("measure", total=len(variants) + 1)
        original = measure_encoder(reference, sets, work / REFERENCE, spec.measure(), label=REFERENCE)
        bar.advance(task)
        measured: dict[str, Measures] = {}
        for variant in variants:
            bar.update(task, description=f"measure: {variant.label}")
            extra = {}
            if variant.pruned_heads:
                extra = dict(attention_encoder=base, attention_context=mask_heads(base.model, variant.pruned_heads),
                             excluded_heads=variant.pruned_heads)
            measured[variant.label] = measure_encoder(variant.encoder, sets, work / variant.label, spec.measure(),
                                                      label=variant.label, **extra)
            bar.advance(task)
    task = None
    if finetune_task is not None:
        config = finetune_config if finetune_config is not None else default_config(progress=progress)
        table, check = task_retention(reference, variants, finetune_task, config,
                                      (out if out is not None else work) / "finetune",
                                      source_label="student" if teacher is not None else None,
                                      calibration=calibration, engine=engine, seed=seed, n_boot=n_boot)
        if out is None:
            shutil.rmtree(work / "finetune", ignore_errors=True)
        task = (table, {"task": finetune_task, "seed": seed, "recipe": {k: v for k, v in asdict(config).items()
                                                                         if k not in ("progress", "save")},
                        "learning_check": check})
    try:
        work.rmdir()
    except OSError:
        pass
    gathered = _Gathered(sizes, timed, original, measured, load_before, load_after)
    return _result(reference, base, variants, gathered, sets, chosen, teacher, spec.settings(), out, task)


@dataclass(frozen=True)
class _Gathered:
    """What a compression run measured, before its tables are made: the sizes' rows, the timed rounds, the
    original's and each variant's measures, and the machine's load before and after the timing."""

    sizes: list[dict]
    timed: pd.DataFrame
    original: Measures
    measured: dict[str, Measures]
    load_before: dict
    load_after: dict


def _result(reference, base, variants, gathered: _Gathered, sets, chosen, teacher, settings, out,
            task=None) -> Result:
    n_boot, seed = settings["n_boot"], settings["seed"]
    sizes, timed, original, measured = gathered.sizes, gathered.timed, gathered.original, gathered.measured
    load_before, load_after = gathered.load_before, gathered.load_after
    size_table = pd.DataFrame(sizes)
    speed = speedups(timed, REFERENCE)
    kept = []
    for variant in variants:
        frame = retention(original, measured[variant.label], n_boot=n_boot, seed=seed)
        frame.insert(0, "variant", variant.label)
        kept.append(frame)
    retention_table = pd.concat(kept, ignore_index=True) if kept else pd.DataFrame()
    ref_size = size_table.set_index("variant").loc[REFERENCE]
    rows = []
    for variant in [None, *variants]:
        label = REFERENCE if variant is None else variant.label
        size = size_table.set_index("variant").loc[label]
        pace = speed.set_index("variant").loc[label]
        row = {"variant": label, "method": "none" if variant is None else
               (variant.method.name if variant.method else "student"),
               "value": np.nan if variant is None or variant.method is None or variant.method.value is None
               else float(variant.method.value),
               "parameter_bytes": int(size["parameter_bytes"]), "file_bytes": size["file_bytes"],
               "compression": ref_size["parameter_bytes"] / size["parameter_bytes"],
               "file_compression": ref_size["file_bytes"] / size["file_bytes"],
               "nonzero_fraction": size["nonzero_fraction"],
               "tokens_per_second": pace["tokens_per_second"], "speedup": pace["speedup"],
               "speedup_min": pace["speedup_min"], "speedup_max": pace["speedup_max"]}
        for measure in ("upos", "uuas", "parser_heads"):
            if variant is None:
                row.update({f"{measure}": np.nan, f"{measure}_retention": 1.0, f"{measure}_ci_low": np.nan,
                            f"{measure}_ci_high": np.nan})
                continue
            match = retention_table[(retention_table["variant"] == label) & (retention_table["measure"] == measure)]
            if len(match):
                found = match.iloc[0]
                row.update({measure: found["compressed"], f"{measure}_retention": found["retention"],
                            f"{measure}_ci_low": found["ci_low"], f"{measure}_ci_high": found["ci_high"]})
        rows.append(row)
    summary = pd.DataFrame(rows)
    if len(retention_table):
        first = retention_table.drop_duplicates("measure").set_index("measure")["original"]
        for measure in ("upos", "uuas", "parser_heads"):
            if measure in first.index:
                summary.loc[summary["variant"] == REFERENCE, measure] = first[measure]
            else:  # not measured (e.g. no relation with enough dev words): no 100% for the original either
                summary.loc[summary["variant"] == REFERENCE, f"{measure}_retention"] = np.nan
    if task is not None:
        found = task[0].set_index("variant")
        for column, source in (("task", "value"), ("task_retention", "retention"), ("task_ci_low", "ci_low"),
                               ("task_ci_high", "ci_high"), ("task_scoring", "scoring")):
            summary[column] = summary["variant"].map(found[source])
    layers = pd.concat([original.per_layer(), *[measured[v.label].per_layer() for v in variants]], ignore_index=True)
    layers["layer"] = layers["layer"].astype("Int64")
    parser = pd.concat([original.parser.assign(variant=REFERENCE),
                        *[measured[v.label].parser.assign(variant=v.label) for v in variants]], ignore_index=True)
    base_values = baselines(sets)
    base_values["parser_heads_offset"] = offset_baseline(sets, list(original.parser_hits))
    baseline_table = pd.DataFrame([{"measure": k, "value": v} for k, v in base_values.items()])
    details = {v.label: {k: (list(map(str, x)) if isinstance(x, (list, tuple)) else x) for k, x in v.details.items()}
               for v in variants}
    meta = {"model": base.describe(), "reference": reference.describe(), "teacher": teacher is not None,
            "methods": [m.label for m in chosen], "details": details, "sets": sets.describe(),
            "measured_on": measured_on(sets), "settings": settings,
            "machine": {"before_throughput": load_before, "after_throughput": load_after},
            "checkpoints": {k: str(v) for k, v in ({} if out is None else
                                                   {v.label: out / "checkpoints" / v.label for v in variants
                                                    if v.method is not None}).items()}}
    tables = {"summary": summary, "retention": retention_table, "layers": layers, "parser_heads": parser,
              "throughput": timed, "sizes": size_table, "baselines": baseline_table}
    if task is not None:
        tables["task"] = task[0]
        meta["finetune"] = task[1]
    result = Result("compression", tables=tables, meta=meta)
    if out is not None:
        result.save(out)
        plot_layers(layers, Path(out) / "layers.png", title=f"{reference.name}: original vs compressed")
    return result


def measured_on(sets: EvalSets) -> str:
    """What the retention columns were measured on, in words."""
    described = sets.describe()
    return (f"UD EWT: probes trained on {described['train']['sentences']} sentences, chosen on "
            f"{described['dev']['sentences']}, scored on {described['test']['sentences']} "
            f"({described['test']['words']} words)")


def plot_layers(layers: pd.DataFrame, path: str | os.PathLike, title: str = "") -> Path:
    """Per-layer curves (UPOS, UUAS, anisotropy), the original in black and each variant beside it."""
    matplotlib.use("Agg")  # on a machine with a display too: the figure goes to a file
    measures = [m for m in ("upos", "uuas", "anisotropy", "self_similarity") if m in layers.columns]
    figure, axes = plt.subplots(1, len(measures), figsize=(4.2 * len(measures), 3.6), squeeze=False)
    palette = plt.get_cmap("tab20").colors  # 20 distinct colours: one per variant of the default set and more
    for axis, measure in zip(axes[0], measures):
        for index, (label, group) in enumerate(layers.groupby("variant", sort=False)):
            style = (dict(color="black", linewidth=2.2, zorder=5) if label == REFERENCE else
                     dict(color=palette[(index - 1) % len(palette)], linewidth=1, alpha=0.85))
            values = group[measure] * (100 if measure in ("upos", "uuas") else 1)
            axis.plot(group["layer"].astype(int), values, marker="o", markersize=3, label=label, **style)
        axis.set_xlabel("layer (0 = embeddings)")
        axis.set_title({"upos": "UPOS probe accuracy (%)", "uuas": "structural probe UUAS (%)",
                        "anisotropy": "anisotropy (mean cosine)",
                        "self_similarity": "self-similarity"}[measure], fontsize=10)
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))  # beside the curves, not on them
    if title:
        figure.suptitle(title, fontsize=11)
    return finish_figure(figure, path)
