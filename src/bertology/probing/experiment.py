"""The probing experiment: every layer of a model (and of its untrained twins) on every task, with baselines.

``run_probing(model, spec)`` (settings: :class:`~bertology.probing.spec.ProbingSpec`) returns a
:class:`~bertology.results.Result` named ``probing`` with six tables, each computed once, here:

* ``results``: tidy, one row per model x task x probe x component x layer x seed x baseline x split x
  metric (columns :data:`COLUMNS`);
* ``summary``: mean, std and number of seeds per cell (:func:`~bertology.probing.report.summarize`);
* ``table2``: the numbers behind the Table 2 layout on test (:func:`~bertology.probing.report.table2_frame`);
  ``table2_dev``: the same on dev (what the best layer is chosen on);
* ``best_layer``: the verdict of :func:`~bertology.probing.summary.best_layer` per task
  (:func:`best_layer_table`; :func:`best_layer_verdicts` reads it back);
* ``datasets``: each task's level, source and the examples per split (``train_used`` after the
  per-seed ``train_fraction``), with notes.

The views in :mod:`bertology.probing.report` (console table, figure) and the report only draw these tables.

Baselines (``baseline`` column):

* ``"none"``: the probe on the encoder's features (the number itself);
* ``"untrained"``: the same probe on the untrained twin ``encoder.untrained(seed)``;
* ``"control"``: the probe trained on Hewitt-and-Liang control labels over the encoder's features
  (metric ``accuracy``), and ``metric="selectivity"`` = task accuracy - control accuracy;
* ``"majority"``: always the most frequent training label (repeated for every layer and seed, so it
  lines up with the curves; its spread is truthfully 0).

Metrics: ``accuracy`` (dev and test; a fraction in [0, 1]), ``l2`` (the L2 strength each layer chose on
dev). The scalar mix has ``component="scalar-mix"``: its ``accuracy`` rows have ``layer`` <NA>, its
``mix_weight`` rows one row per layer. ``layer`` and ``seed`` are nullable integers; layer ``l`` is
``hidden_states[l]`` (0 = embeddings).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bertology.errors import DataError, SettingError, UsageError
from bertology.settings import cache_root
from bertology.tasks.cache import built_tasks, treebank_hash  # noqa: F401 (treebank_hash: public here too)
from bertology.numbering import parse_layers
from bertology.probing.controls import majority_label, resolve_types, word_identity_predictions
from bertology.probing.datasets import (
    SPLITS,
    ProbingDataset,
)
from bertology.probing.probes import (
    LayerwiseProbe,
    grid_of,
)
from bertology.probing.fits import (  # noqa: F401 (Scores, fit_and_score, score_fit: public here too)
    Scores,
    _correct,
    _rows,
    fit_and_score,
    fit_and_score_group,
    mix_scores,
    score_fit,
)
from bertology.probing.tasks import (  # resolve_tasks: public here too
    resolve_tasks,  # noqa: F401
    senteval_names,
)
from bertology.probing.names import SCALAR_MIX
from bertology.probing.report import PRIMARY_METRIC, best_layer_table, summarize, table2_frame
from bertology.probing.mdl import online_codelength
from bertology.probing.spec import TRAIN_SAMPLINGS, ProbingSpec
from bertology.progress import progress_bar
from bertology.results import Result
from bertology.runtime import derive_seed, resolve_device
from bertology.data import packaged_treebank
from bertology.models import as_encoder
from bertology.probing.arcs import arc_length_table, arc_lengths
from bertology.probing.structural import run_structural
from bertology.probing.summary import POINT, bootstrap_intervals
from bertology.probing.inputs import (
    _extract_pools,
    _features_for,
    build_datasets,
    merge_pools,
    sentence_only_sources,
)

COLUMNS = ["model", "task", "probe", "component", "layer", "seed", "metric", "value", "baseline", "split"]

def mdl_scores(X, y, layers, model, task, baseline, seed, timestamps, l2, device, probe: str = "linear") -> Scores:
    """The online codelength of every layer (:func:`bertology.probing.mdl.online_codelength`) as rows of the
    ``train`` split: ``codelength`` and ``uniform_codelength`` in bits, and ``compression`` (uniform / online).
    MDL is measured with the exact linear probe whatever ``probe`` the accuracies use; the rows carry
    ``probe`` so that they sit beside that probe's accuracies."""
    code = online_codelength(X["train"], y["train"], X["dev"], y["dev"], timestamps=timestamps, l2=l2, seed=seed,
                             device=device)
    scores = Scores()
    for metric, values in (("codelength", code.online), ("uniform_codelength", code.uniform),
                           ("compression", code.compression)):
        scores.rows += _rows(model, task, probe, layers, seed, metric, values, baseline, "train")
    return scores


def baseline_scores(model, task, probe_name, baseline, layers, seeds, predictions: dict, y: dict) -> Scores:
    """A deterministic baseline (majority, word identity): its dev and test accuracy repeated for every layer
    and seed, so it lines up with the curves (its seed spread is, truthfully, 0)."""
    scores = Scores()
    for split in ("dev", "test"):
        hits = _correct(np.asarray(predictions[split], dtype=object)[None], y[split])[0]
        for seed in seeds:
            scores.rows += _rows(model, task, probe_name, layers, seed, "accuracy", [hits.mean()] * len(layers),
                                 baseline, split)
        scores.hits[(probe_name, None, baseline, split)] = {seeds[0]: np.repeat(hits[None], len(layers), 0)}
    return scores


def _baseline_rows(model, task, probe_name, baseline, layers, seeds, predictions: dict, y: dict,
                   correct: dict) -> list[dict]:
    """:func:`baseline_scores`'s rows, its hits merged into ``correct`` (for :mod:`bertology.probing.labels`)."""
    scores = baseline_scores(model, task, probe_name, baseline, layers, seeds, predictions, y)
    Scores(hits=correct).add(Scores(hits=scores.hits))
    return scores.rows


def _intervals(model: str, task: str, layers: Sequence[int], correct: dict, n_boot: int) -> list[dict]:
    """95% intervals (pooled bootstrap over seeds x resamples, :mod:`bertology.probing.summary`) of every
    collected accuracy of one task; the resamples are shared by every baseline, layer and seed of a split."""
    out = []
    for (probe, component, baseline, split), by_seed in correct.items():
        boot_seed = derive_seed(0, "bootstrap", task, split)
        low, high = bootstrap_intervals(by_seed, n_boot=n_boot, seed=boot_seed)
        # delta = encoder - untrained twin, paired per example and seed (same resamples): its own interval.
        twin = correct.get((probe, component, "untrained", split)) if baseline == "none" else None
        if twin is not None and set(twin) == set(by_seed):
            d_low, d_high = bootstrap_intervals({s: by_seed[s].astype(np.float64) - twin[s] for s in by_seed},
                                                n_boot=n_boot, seed=boot_seed)
        else:
            d_low = d_high = np.full(np.shape(low), np.nan)
        names = [pd.NA] if component == SCALAR_MIX else list(layers)
        for layer, lo, hi, dlo, dhi in zip(names, np.atleast_1d(low), np.atleast_1d(high), np.atleast_1d(d_low),
                                           np.atleast_1d(d_high)):
            out.append({"model": model, "task": task, "probe": probe, "component": component, "layer": layer,
                        "baseline": baseline, "split": split, "metric": "accuracy", "ci_low": float(lo),
                        "ci_high": float(hi), "delta_ci_low": float(dlo), "delta_ci_high": float(dhi)})
    return out


def _train_index(seed: int, task: str, n_train: int, train_fraction: float, sampling: str = "bootstrap",
                 labels=None) -> np.ndarray:
    """The training examples seed ``seed`` uses (indices into the training split, sorted; repeats allowed).

    ``all``: every example, or a random ``train_fraction`` of them. ``bootstrap``: ``round(train_fraction *
    n_train)`` draws with replacement, a resample of the training set, so that the seeds vary what the
    probe's number depends on (the training sample) and the seed spread measures it. With ``labels``, a
    resample holding fewer than two classes is drawn again (a probe needs two)."""
    size = n_train if train_fraction >= 1 else max(2, int(round(train_fraction * n_train)))
    rng = np.random.default_rng(derive_seed(seed, "train-subset", task))
    if sampling == "all":
        return np.arange(n_train) if train_fraction >= 1 else np.sort(rng.permutation(n_train)[:size])
    if sampling != "bootstrap":
        raise SettingError("train_sampling", sampling, f"expected {' or '.join(TRAIN_SAMPLINGS)}")
    for _ in range(100):
        index = np.sort(rng.integers(0, n_train, size=size))
        if labels is None or len(set(np.asarray(labels)[index].tolist())) > 1:
            return index
    return np.arange(n_train) if train_fraction >= 1 else np.sort(rng.permutation(n_train)[:size])


def with_point(sampling: str) -> bool:
    """Whether a run adds a point fit beside its seeds: with bootstrap seeds (their resamples hold about 63%
    of the distinct examples, so their mean is biased low; :mod:`bertology.probing.summary`)."""
    return sampling == "bootstrap"


@dataclass(frozen=True)
class TrainingFit:
    """One fit of a seed's loop: ``seed`` (:data:`POINT` for the point fit) and its training ``index``.

    Every fit is polished in float64, the seeds too: they measure the spread, and without the polish WC's
    lower-layer seeds moved by about a point with the float32 solver's path, widening the interval by solver
    noise (docs/probing.md, "The two parts of an interval")."""

    seed: int | None
    index: np.ndarray

    def scores(self, scores: "Scores") -> "Scores":
        """``scores`` of this fit, relabelled as the point fit's (rows without a seed, hits under
        :data:`POINT`) when it is one."""
        if self.seed is not POINT:
            return scores
        return Scores(rows=[{**r, "seed": POINT} for r in scores.rows],
                      hits={key: {POINT: next(iter(by_seed.values()))} for key, by_seed in scores.hits.items()})


def training_fits(seed: int, seeds: Sequence[int], task: str, labels, train_fraction: float,
                  sampling: str) -> list[TrainingFit]:
    """The fits seed ``seed`` runs: its own training sample (:func:`_train_index`), and, on the first seed
    with bootstrap sampling, the point fit on the whole training set (or a ``train_fraction`` subset drawn
    without replacement), which the first seed initialises and whose control labels it draws."""
    fits = [TrainingFit(seed, _train_index(seed, task, len(labels), train_fraction, sampling, labels))]
    if with_point(sampling) and seed == seeds[0]:
        fits.append(TrainingFit(POINT, _train_index(seed, task, len(labels), train_fraction, "all")))
    return fits


def used_train(n_train: int, train_fraction: float) -> int:
    """How many training examples each seed uses (see :func:`_train_index`)."""
    return n_train if train_fraction >= 1 else max(2, int(round(train_fraction * n_train)))


# ------------------------------------------------------------------------------------------------
# the steps of run_probing


@dataclass
class ProbingPlan:
    """What :func:`plan_probing` decides before any model runs: the ``datasets`` that can be built (their
    sentence ``pools`` merged per source and split), the tasks left out (``absent``: ``(task, reason)``) and
    the ``treebank`` the treebank tasks read (the packaged EWT when SentEval tasks need one and none was named)."""

    datasets: list[ProbingDataset]
    pools: dict[str, dict[str, list]]
    absent: list[tuple[str, str]]
    treebank: Path | None

    @property
    def classify(self) -> list[ProbingDataset]:
        """The datasets a classifier probes (every one but the structural probes')."""
        return [d for d in self.datasets if d.level != "structural"]


def plan_probing(spec: ProbingSpec, cache: Path, progress: bool = False) -> ProbingPlan:
    """The datasets of ``spec`` (built or read from ``cache``); :class:`DataError` when none can be built."""
    treebank = spec.treebank
    if treebank is None and any(t in senteval_names() for t in spec.tasks):
        treebank = packaged_treebank()
    datasets, absent = build_datasets(spec.tasks, treebank, spec.wnut, spec.senteval_samples, spec.max_train,
                                      spec.max_eval, spec.max_sentences, cache, progress, quick=spec.quick,
                                      senteval_split=spec.senteval_split)
    if not datasets:
        raise DataError("no task can be built: " + "; ".join(f"{t}: {why}" for t, why in absent))
    return ProbingPlan(datasets, merge_pools(datasets), absent, treebank)


class Twins:
    """The untrained twins' stores, extracted on first use, one per twin seed (``encoder.untrained(seed)``)."""

    def __init__(self, encoder, plan: ProbingPlan, layers, cache: Path, progress: bool, device: str):
        self.encoder, self.plan, self.layers = encoder, plan, layers
        self.cache, self.progress, self.device = cache, progress, device
        self.sentence_only = sentence_only_sources(plan.datasets)
        self._stores: dict[int, dict] = {}

    def stores(self, seed: int) -> dict:
        if seed not in self._stores:
            self._stores[seed] = _extract_pools(self.encoder.untrained(seed), self.plan.pools, self.layers, self.cache,
                                                self.progress, self.device, self.sentence_only)
        return self._stores[seed]


def _labels(dataset: ProbingDataset) -> dict[str, np.ndarray]:
    return {s: dataset.splits[s].labels for s in SPLITS}


def baselines(plan: ProbingPlan, model: str, layer_ids: Sequence[int], seeds: Sequence[int], types: str) -> dict[str, Scores]:
    """Per task: the majority class and, for word, arc and span tasks, word identity (the key's most frequent
    training label, keys per ``types``)."""
    out = {}
    for dataset in plan.classify:
        y = _labels(dataset)
        label = majority_label(y["train"])
        scores = baseline_scores(model, dataset.name, "majority", "majority", layer_ids, seeds,
                                 {s: [label] * len(y[s]) for s in ("dev", "test")}, y)
        if dataset.level in ("token", "edge", "span") and dataset.splits["train"].control_keys:
            keys = {s: dataset.type_keys(s, types) for s in SPLITS}
            predictions = {s: word_identity_predictions(keys["train"], y["train"], keys[s]) for s in ("dev", "test")}
            scores.add(baseline_scores(model, dataset.name, "word-identity", "word-identity", layer_ids, seeds,
                                       predictions, y))
        out[dataset.name] = scores
    return out


def probe_layers(spec: ProbingSpec, plan: ProbingPlan, model: str, features: dict, twins: Twins | None,
                 layer_ids: Sequence[int], types: str, device, progress: bool) -> list[tuple[str, Scores]]:
    """``(task, scores)`` of every fit, in the order seed by seed, task by task: each layer's probe on the encoder
    (baseline ``none``, with the scalar mix when asked), on control labels (``control``, with the selectivity
    rows) and on the untrained twin (``untrained``).

    The exact linear probe fits a task's fits on the same features together (:func:`fit_and_score_group`: the
    point fit, every seed's resample and their control tasks on the encoder's features, and the same fits on the
    twin's), each to its own optimum (the scalar mix, when asked, alone); other probes fit one at a time."""
    probe_kwargs = {"l2": spec.l2, "hidden": spec.hidden, "device": device,
                    **spec.probe_options}
    classify = plan.classify
    n_fits = (len(spec.seeds) + with_point(spec.train_sampling)) * sum(
        1 + int(spec.wants_control(d.level)) + int(twins is not None) for d in classify)
    grouped = LayerwiseProbe(kind=spec.probe, **probe_kwargs)._exact()
    twin_seed = (lambda seed: seed) if spec.twin_per_seed else (lambda seed: spec.seeds[0])
    fits = {(d.name, seed): training_fits(seed, spec.seeds, d.name, _labels(d)["train"], spec.train_fraction,
                                          spec.train_sampling) for d in classify for seed in spec.seeds}
    controls = {(d.name, seed): d.control_labels(seed, types, spec.sentence_control)
                for d in classify for seed in spec.seeds if spec.wants_control(d.level)}
    done: dict[tuple, Scores] = {}  # (task, seed, fit number, baseline) -> scores
    out: list[tuple[str, Scores]] = []
    with progress_bar(progress, transient=True) as bar:
        job = bar.add_task("probing", total=n_fits)
        if grouped and classify:
            twin_features: dict = {}
            for dataset in classify:
                name, y = dataset.name, _labels(dataset)
                groups: dict = {}  # features -> [(key, seed, y, index, baseline)]
                for seed in dict.fromkeys(spec.seeds):  # a repeated seed repeats the same fits
                    for i, fit in enumerate(fits[name, seed]):
                        groups.setdefault("encoder", []).append(((name, seed, i, "none"), seed, y, fit.index, "none"))
                        if (name, seed) in controls:
                            groups["encoder"].append(((name, seed, i, "control"), seed, controls[name, seed],
                                                      fit.index, "control"))
                        if twins is not None:
                            groups.setdefault(twin_seed(seed), []).append(((name, seed, i, "untrained"), seed, y,
                                                                           fit.index, "untrained"))
                for features_of, jobs in groups.items():
                    if features_of == "encoder":
                        X = {s: features[name, s] for s in SPLITS}
                        shown = "encoder" + (" and control task" if any(j[4] == "control" for j in jobs) else "")
                    else:
                        if features_of not in twin_features:  # one twin's features at a time
                            twin_features = {features_of: _features_for(plan.datasets, twins.stores(features_of),
                                                                        layer_ids)}
                        X = {s: twin_features[features_of][name, s] for s in SPLITS}
                        shown = "untrained twin"
                    bar.update(job, description=f"{name}: {shown}, {len(jobs)} fits together")
                    scored = fit_and_score_group(spec.probe, probe_kwargs, X, [j[1:] for j in jobs], layer_ids,
                                                 model, name)
                    for (key, seed, labels, index, baseline), scores in zip(jobs, scored):
                        if spec.scalar_mix and baseline != "control":  # the mix is fitted alone
                            scores.add(mix_scores(spec.probe, probe_kwargs, seed, X, labels, index, layer_ids, model,
                                                  name, baseline))
                        done[key] = scores
                    bar.advance(job, len(jobs))
        twin_features, twin_of_features = None, None
        for seed in spec.seeds:
            if twins is not None and classify and not grouped:
                if twin_of_features != twin_seed(seed):
                    # Features of the twin of *this* seed: a repeated seed must not reuse the last twin's.
                    twin_features = _features_for(plan.datasets, twins.stores(twin_seed(seed)), layer_ids)
                    twin_of_features = twin_seed(seed)
            for dataset in classify:
                name, y = dataset.name, _labels(dataset)
                X = {s: features[name, s] for s in SPLITS}
                y_control = controls.get((name, seed))
                Xu = {s: twin_features[name, s] for s in SPLITS} if twins is not None and not grouped else None

                def scored(i, fit, labels, features_of, baseline, mix):
                    if (name, seed, i, baseline) in done:
                        return done[name, seed, i, baseline]
                    description = f"{name} seed {seed}" if fit.seed is not POINT else f"{name} all training examples"
                    bar.update(job, description=f"{description}: {baseline}")
                    result = fit_and_score(spec.probe, probe_kwargs, seed, features_of, labels, fit.index, layer_ids,
                                           model, name, baseline, mix)
                    bar.advance(job)
                    return result

                for i, fit in enumerate(fits[name, seed]):
                    ours = fit.scores(scored(i, fit, y, X, "none", spec.scalar_mix))
                    out.append((name, ours))
                    if y_control is not None:
                        control = fit.scores(scored(i, fit, y_control, X, "control", False))
                        control.rows += _selectivity(ours.rows, control.rows)
                        out.append((name, control))
                    if twins is not None:
                        out.append((name, fit.scores(scored(i, fit, y, Xu, "untrained", spec.scalar_mix))))
                if spec.wants_mdl(dataset.level) and seed == spec.seeds[0]:
                    # MDL once, on the first seed (its order of examples): the task, its control, the twin.
                    bar.update(job, description=f"{name}: online codelength")
                    mdl = {"layers": layer_ids, "model": model, "task": name, "seed": seed, "probe": spec.probe,
                           "timestamps": spec.mdl_timestamps, "l2": probe_kwargs["l2"], "device": device}
                    out.append((name, mdl_scores(X, y, baseline="none", **mdl)))
                    if y_control is not None:
                        out.append((name, mdl_scores(X, y_control, baseline="control", **mdl)))
                    if twins is not None:
                        Xu = Xu or {s: _features_for([dataset], twins.stores(twin_seed(seed)), layer_ids)[name, s]
                                    for s in SPLITS}
                        out.append((name, mdl_scores(Xu, y, baseline="untrained", **mdl)))
    return out


def dataset_notes(spec: ProbingSpec, plan: ProbingPlan, types: str) -> dict[str, list[str]]:
    """Each dataset's notes, with what the run adds: which control task it had (or why none)."""
    notes = {d.name: list(d.notes) for d in plan.datasets}
    classify = plan.classify
    if any(d.level == "sentence" for d in classify) and spec.control is True and spec.sentence_control == "none":
        for d in classify:
            if d.level == "sentence":
                notes[d.name].append("no control task: a bag-of-words control is decodable from mean-pooled vectors "
                                     "(docs/probing.md); --sentence-control first-word runs one")
    for d in classify:
        if d.level != "sentence" and spec.wants_control(d.level):
            notes[d.name].append(f"control task keyed on {'lower-cased' if types == 'lower' else 'exact'} word types")
    return notes


def run_probing(model="minilm", spec: ProbingSpec | None = None, *legacy, cache_dir: str | os.PathLike | None = None,
                device: str | None = "auto", progress: bool = True, **settings) -> Result:
    """Probe every layer of ``model`` as ``spec`` says (:class:`~bertology.probing.spec.ProbingSpec`); return
    the :class:`Result` of the module doc.

    ``model``: an alias, folder or hub id, or an :class:`~bertology.models.Encoder`. ``cache_dir``: where the
    representations are extracted once per encoder (keyed by model fingerprint and input words; default
    ``$BERTOLOGY_CACHE``); ``device``: ``"auto"`` (cuda if available), ``"cpu"``, ``"cuda"``.

    The steps: :func:`plan_probing` (datasets), the encoder's features, :func:`baselines` (majority, word
    identity), :func:`probe_layers` (encoder, control task, untrained twin per seed), the structural probes,
    the intervals (:func:`_intervals`), then :func:`probing_result` (every table, ``table2`` and
    ``best_layer`` included). Every accuracy gets a 95% interval (``summary`` and ``table2`` columns
    ``ci_low``/``ci_high``) from ``spec.n_boot`` bootstrap resamples of the evaluation examples
    (:mod:`bertology.probing.summary`): with bootstrap seeds (the default), the number is the point fit on every
    training example (rows without a seed) and the interval is centred on it, the seeds giving its training
    variation; else the resamples are pooled over seeds. Accuracies are fractions.

    Deprecated: ``run_probing(model, tasks, treebank, seeds, layers, probe, **settings)`` with the spec's fields
    as keywords (``structural_kwargs`` for ``structural_options``) still works, for scripts written before the spec.
    """
    if not isinstance(spec, ProbingSpec):
        positional = dict(zip(("tasks", "treebank", "seeds", "layers", "probe"), ((spec,) if spec is not None else ())
                              + legacy))
        spec = ProbingSpec.from_keywords(**positional, **settings)
    elif legacy or settings:
        raise UsageError("run_probing(model, spec): the settings belong in the spec, not beside it "
                        f"({', '.join(settings) or 'positional arguments'})")
    run_device = resolve_device(device)
    cache = cache_root(cache_dir)
    plan = plan_probing(spec, cache, progress)
    encoder = as_encoder(model, device=str(run_device))
    model = encoder.name if model is encoder else model
    types = resolve_types(spec.control_types, getattr(encoder, "tokenizer", None))
    layers = parse_layers(spec.layers, encoder.num_layers)
    stores = _extract_pools(encoder, plan.pools, layers, cache, progress, str(run_device),
                            sentence_only_sources(plan.datasets))
    store_layers = list(next(iter(stores.values())).layers)
    layer_ids = store_layers if layers is None else list(layers)
    twins = Twins(encoder, plan, layers, cache, progress, str(run_device)) if spec.untrained else None
    scores = baselines(plan, model, layer_ids, spec.seeds, types)
    fitted = probe_layers(spec, plan, model, _features_for(plan.datasets, stores, layer_ids), twins, layer_ids,
                          types, run_device, progress)
    rows = [row for task_scores in scores.values() for row in task_scores.rows]  # every baseline, then the fits
    for name, fit in fitted:
        rows += fit.rows
        scores[name].add(Scores(hits=fit.hits))
    intervals = [row for name, task_scores in scores.items()
                 for row in _intervals(model, name, layer_ids, task_scores.hits, spec.n_boot)]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    if any(d.level == "structural" for d in plan.datasets):
        twin = twins.stores(spec.seeds[0]) if twins is not None else None
        structural, structural_ci = _structural(model, plan.pools["ud"], stores, twin, spec.seeds, layers, run_device,
                                                spec.structural_options, progress, spec.n_boot)
        frame = pd.concat([frame, structural], ignore_index=True) if len(frame) else structural
        intervals += structural_ci
    return probing_result(spec, plan, frame, pd.DataFrame(intervals), encoder, model, layer_ids, types, run_device,
                          arc_length=arc_length_tables(plan, scores, model, layer_ids, spec.n_boot))


def arc_length_tables(plan: ProbingPlan, scores: dict[str, Scores], model: str, layer_ids: Sequence[int],
                      n_boot: int) -> pd.DataFrame | None:
    """Every edge task's test accuracy by dependency arc length (:mod:`bertology.probing.arcs`), for every
    baseline and layer; None when no edge task ran."""
    frames = [arc_length_table(scores[d.name].hits, arc_lengths(d.splits["test"].refs), layer_ids, model, d.name,
                               n_boot=n_boot)
              for d in plan.classify if d.level == "edge" and d.name in scores]
    return pd.concat(frames, ignore_index=True) if frames else None


def probing_result(spec: ProbingSpec, plan: ProbingPlan, frame: pd.DataFrame, intervals: pd.DataFrame, encoder,
                   model: str, layer_ids: Sequence[int], types: str, device,
                   arc_length: pd.DataFrame | None = None) -> Result:
    """The probing :class:`Result`: the tables of :func:`probing_tables` (and ``arc_length`` when given: the edge
    tasks by arc length, :func:`arc_length_tables`) and ``meta`` (the spec as run)."""
    notes = dataset_notes(spec, plan, types)
    return _result(spec, plan, frame, encoder, model, layer_ids, {
        "probe": spec.probe, "l2": [float(v) for v in np.atleast_1d(grid_of(spec.l2, spec.probe, spec.probe_options))],
        "hidden": spec.hidden, "max_train": spec.max_train, "max_eval": spec.max_eval,
        "max_sentences": spec.max_sentences, "quick": spec.quick, "untrained": spec.untrained,
        "control": spec.control, "control_types": types,
        "sentence_control": spec.sentence_control if spec.control is True else "none",
        "senteval_split": spec.senteval_split, "train_sampling": spec.train_sampling,
        "mdl": {"tasks": spec.mdl, "timestamps": list(spec.mdl_timestamps)} if spec.mdl else None, "scalar_mix": spec.scalar_mix, "twin_per_seed": spec.twin_per_seed,
        "treebank": None if plan.treebank is None else str(plan.treebank), "device": str(device),
        "probe_options": dict(spec.probe_options), "n_boot": spec.n_boot,
        "interval": ("95% percentile interval of the bootstrap over evaluation examples around the point fit, plus "
                     "each bootstrap seed's deviation" if with_point(spec.train_sampling) else
                     "95% percentile interval of the bootstrap over evaluation examples pooled over seeds"),
    }, intervals=intervals, notes=notes, extra=None if arc_length is None else {"arc_length": arc_length})


def _result(spec: ProbingSpec, plan: ProbingPlan, frame, encoder, model, layers, settings, intervals=None,
            notes: dict[str, list[str]] | None = None, extra: dict[str, pd.DataFrame] | None = None) -> Result:
    """The probing Result: the tables of ``frame`` and the datasets' sizes (``plan``'s datasets and the tasks it
    left out), and the meta (the spec's tasks, seeds and training share, ``layers`` and ``settings``)."""
    datasets, absent, train_fraction = plan.datasets, plan.absent, spec.train_fraction
    sizes = []
    for d in datasets:
        counts = {s: len(d.splits[s]) for s in SPLITS}
        used = counts["train"] if d.level == "structural" else used_train(counts["train"], train_fraction)
        sizes.append({"task": d.name, "level": d.level, "source": d.source, **counts, "train_used": used,
                      "unit": UNITS[d.level], "notes": list(d.notes) if notes is None else notes[d.name],
                      "n_train": used, "n_dev": counts["dev"], "n_test": counts["test"], "status": "ok"})
    for task, reason in absent:
        sizes.append({"task": task, "level": None, "source": None, "train": 0, "dev": 0, "test": 0, "train_used": 0,
                      "unit": None, "notes": [reason], "n_train": 0, "n_dev": 0, "n_test": 0, "status": "absent"})
    meta = {"model": model, "fingerprint": encoder.fingerprint, "tasks": list(spec.tasks), "seeds": list(spec.seeds),
            "layers": [int(l) for l in layers], "train_fraction": train_fraction, **settings,
            "absent": {task: reason for task, reason in absent}}
    return Result("probing", tables={**_tables(frame, pd.DataFrame(sizes), intervals), **(extra or {})}, meta=meta)


#: What one example of each level is.
UNITS = {"token": "words", "edge": "arcs", "span": "spans", "sentence": "sentences", "structural": "sentences"}
#: Columns of the ``intervals`` a run computes (merged into ``summary``).
INTERVAL_KEYS = ["model", "task", "probe", "component", "baseline", "split", "metric", "layer"]


def _tables(frame: pd.DataFrame, sizes: pd.DataFrame, intervals: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """The tables of a probing result (module doc) from the tidy rows, the dataset sizes and the intervals."""
    frame = frame.reindex(columns=COLUMNS).astype({"value": "float64"})
    summary = add_intervals(summarize(frame), intervals)
    tables = {"results": frame, "summary": summary, "datasets": sizes}
    table2 = table2_frame(tables)
    return {"results": frame, "summary": summary, "table2": table2, "table2_dev": table2_frame(tables, "dev"),
            "best_layer": best_layer_table(table2), "datasets": sizes}


def add_intervals(summary: pd.DataFrame, intervals: pd.DataFrame | None) -> pd.DataFrame:
    """``summary`` with the ``ci_low``/``ci_high`` columns of ``intervals`` (NaN where none was computed) and,
    on the encoder's rows, ``delta_ci_low``/``delta_ci_high``: the interval of encoder - untrained twin."""
    if intervals is None or intervals.empty:
        return summary.assign(ci_low=np.nan, ci_high=np.nan, delta_ci_low=np.nan, delta_ci_high=np.nan)
    left = summary.copy()
    right = intervals.copy()
    for column in ("delta_ci_low", "delta_ci_high"):
        if column not in right:
            right[column] = np.nan
    for table in (left, right):
        table["_layer"] = table["layer"].astype("Int64").astype("float64").fillna(-1.0)
        table["_component"] = table["component"].astype(object).where(table["component"].notna(), "")
    keys = [k for k in INTERVAL_KEYS if k not in ("layer", "component")] + ["_layer", "_component"]
    merged = left.merge(right[keys + ["ci_low", "ci_high", "delta_ci_low", "delta_ci_high"]], on=keys, how="left")
    return merged.drop(columns=["_layer", "_component"])


def _selectivity(task_rows: list[dict], control_rows: list[dict]) -> list[dict]:
    control = {(r["probe"], r["layer"], r["split"]): r["value"] for r in control_rows if r["metric"] == "accuracy"}
    out = []
    for r in task_rows:
        key = (r["probe"], r["layer"], r["split"])
        if r["metric"] == "accuracy" and r["component"] is None and key in control:
            out.append({**r, "metric": "selectivity", "value": r["value"] - control[key], "baseline": "control"})
    return out


def _structural(model, pool, stores, twin, seeds, layers, device, kwargs, progress, n_boot=1000):
    """Hewitt-and-Manning structural probes (:func:`~bertology.probing.structural.run_structural`) on the
    treebank pool, beside the untrained twin's stores ``twin`` (None: without); returns the rows and the
    intervals of UUAS and root accuracy (bootstrap over test sentences pooled over seeds)."""
    collected: dict = {}
    frame = run_structural(
        stores["ud", "train"], pool["train"], stores["ud", "dev"], pool["dev"], stores["ud", "test"], pool["test"],
        seeds=seeds, layers=layers, model=model, progress=progress, device=device,
        untrained=(twin["ud", "train"], twin["ud", "dev"], twin["ud", "test"]) if twin else None,
        collect=collected, **(kwargs or {}),
    )["results"].copy()
    frame["probe"] = "structural"
    frame["component"] = None
    layer_ids = sorted(int(x) for x in frame["layer"].dropna().unique())
    intervals = []
    for (task, baseline, split), by_seed in collected.items():
        low, high = bootstrap_intervals(by_seed, n_boot=n_boot, seed=derive_seed(0, "bootstrap", task, split))
        for layer, lo, hi in zip(layer_ids, np.atleast_1d(low), np.atleast_1d(high)):
            intervals.append({"model": model, "task": task, "probe": "structural", "component": None, "layer": layer,
                              "baseline": baseline, "split": split, "metric": PRIMARY_METRIC[task],
                              "ci_low": float(lo), "ci_high": float(hi)})
    return frame[COLUMNS], intervals
