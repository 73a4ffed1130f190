"""Every setting of a probing run in one frozen :class:`ProbingSpec`, checked once when it is made.

``bertology probe`` builds it from its options (before numpy, sklearn or torch load: this module imports
only light ones) and the report from its budget; :func:`bertology.probing.run_probing` takes it. Where the
run happens (cache folder, device, progress display) is not a setting of the experiment and is passed beside
it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from bertology.errors import SettingError, UsageError
from bertology.numbering import parse_layers
from bertology.probing.names import PROBE_KINDS, PUNCT_SCHEMES, STRUCTURAL_KINDS
from bertology.probing.tasks import resolve_tasks
from bertology.settings import check_layer_spelling, check_whole

#: What a word type is for control tasks and the word-identity baseline.
CONTROL_TYPES = ("auto", "lower", "exact")
#: Control tasks for SentEval sentence tasks (:mod:`bertology.probing.controls`).
SENTENCE_CONTROLS = ("none", "first-word", "bag-of-words")
#: How each seed draws its training examples (:func:`bertology.probing.experiment._train_index`).
TRAIN_SAMPLINGS = ("bootstrap", "all")
#: How SentEval tasks built from the treebank are split.
SENTEVAL_SPLITS = ("pooled", "treebank")


def check_probe_settings(probe: str, seeds: Iterable[int], train_fraction: float) -> list[int]:
    """The settings every probing experiment shares, checked; returns the seeds as a list."""
    if probe not in PROBE_KINDS:
        raise SettingError("probe", probe, f"expected {' or '.join(PROBE_KINDS)}")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise SettingError("seeds", seeds, "give at least one seed (three or more for a spread)", shown="(none)")
    if not 0 < train_fraction <= 1:
        raise SettingError("train_fraction", train_fraction, "expected a number in (0, 1]", shown=str(train_fraction))
    return seeds


#: Voita and Titov's timestamps: 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.25, 12.5, 25, 50 and 100% of the training set.
DEFAULT_TIMESTAMPS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.0625, 0.125, 0.25, 0.5, 1.0)


def check_timestamps(timestamps: Sequence[float], n_train: int | None = None) -> tuple[float, ...]:
    """The timestamps as a tuple, checked: not empty, strictly increasing, each in (0, 1]; with ``n_train``,
    a training set at least as large as the first block (one example)."""
    values = tuple(float(t) for t in timestamps)
    if not values:
        raise SettingError("mdl_timestamps", "", "give at least one share of the training set in (0, 1]",
                           shown="(none)")
    outside = [t for t in values if not 0 < t <= 1 or not math.isfinite(t)]
    if outside:
        raise SettingError("mdl_timestamps", outside[0], "every timestamp must be a share of the training set in (0, 1]")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise SettingError("mdl_timestamps", ",".join(f"{t:g}" for t in values),
                           "timestamps must be strictly increasing", shown=",".join(f"{t:g}" for t in values))
    if n_train is not None and int(values[0] * n_train) < 1:
        raise SettingError("mdl_timestamps", values[0], f"the training set ({n_train} examples) is smaller than the "
                           f"first block ({values[0]:g} of it is under one example); give a larger first timestamp "
                           "or more training examples")
    return values


#: The levels a task's examples live at; ``max_train``/``max_eval`` may give a cap per level.
LEVELS = ("token", "edge", "span", "sentence")


def _check_size(name: str, value) -> None:
    if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
        raise SettingError(name, value, "expected a whole number of at least 1 (or None: all)", shown=str(value))


@dataclass(frozen=True)
class ProbingSpec:
    """What to probe and how; every field has the default of ``bertology probe``.

    ``tasks``: names or a comma-separated string (``"senteval"``, ``"ud"``, registered tasks, ``structural``,
    SentEval names such as ``BShift``), kept resolved. ``treebank``: a UD folder (default: the packaged EWT).
    ``seeds``: seed ``s`` draws the training resample, initialises the probes, draws the control labels and is the
    untrained twin's seed.
    ``layers``: ``None`` (all), a list or a spec such as ``"0,3,6"``, ``"1-4"``, ``"L3"``, ``"last"``.
    Sizes: ``max_train``/``max_eval`` examples per task (default: :data:`bertology.probing.inputs.DEFAULT_MAX_TRAIN`,
    or the small ``quick`` caps), one number for every task or a cap per level (``{"token": 4000, "sentence":
    None}``: None = every example; a level left out keeps its default), ``max_sentences`` per split of each source, ``train_fraction`` of the capped
    training examples per seed, drawn as ``train_sampling`` says (``bootstrap``: each seed a resample with
    replacement, so the seed spread is the training variation; ``all``: the same examples for every seed). Baselines: ``untrained`` twin (one per seed, or the first seed's for all with
    ``twin_per_seed=False``), ``control`` tasks (``True``, ``False`` or ``"token"``: word, arc and span tasks
    only) keyed on ``control_types``, ``sentence_control`` for SentEval tasks. ``scalar_mix``: also a probe
    on a learned mix of all layers. ``l2``: the strengths each layer chooses from on dev (``None``: the
    probe's default, :func:`bertology.probing.probes.default_grid`: 1e-5 .. 1e3 for the exact linear probe,
    1e-5 .. 1e-2 for the others), ``hidden``: the MLP probe's width. ``probe_options`` go to every probe (e.g.
    ``max_iter``),
    ``structural_options`` to the structural probes; ``n_boot`` bootstrap resamples per interval. ``mdl``: also the online codelength of each layer (task,
    control task, untrained twin; the first seed; ``"token"``: word, arc and span tasks only) over ``mdl_timestamps`` (:mod:`bertology.probing.mdl`).
    """

    tasks: tuple[str, ...] = ("upos",)
    treebank: Path | None = None
    seeds: tuple[int, ...] = (0, 1, 2)
    layers: str | tuple[int, ...] | None = None
    probe: str = "linear"
    l2: float | tuple[float, ...] | None = None
    hidden: int = 128
    max_train: int | Mapping[str, int | None] | None = None
    max_eval: int | Mapping[str, int | None] | None = None
    max_sentences: int | None = None
    quick: bool = False
    train_fraction: float = 1.0
    train_sampling: str = "bootstrap"
    untrained: bool = True
    twin_per_seed: bool = True
    control: bool | str = True
    control_types: str = "auto"
    sentence_control: str = "none"
    senteval_split: str = "pooled"
    scalar_mix: bool = True
    wnut: Path | None = None
    senteval_samples: Path | None = None
    structural_options: Mapping = field(default_factory=dict)
    probe_options: Mapping = field(default_factory=dict)
    n_boot: int = 1000
    mdl: bool | str = False
    mdl_timestamps: tuple[float, ...] = DEFAULT_TIMESTAMPS

    def __post_init__(self) -> None:
        normal = {
            "tasks": tuple(resolve_tasks(self.tasks)),
            "seeds": tuple(check_probe_settings(self.probe, self.seeds, self.train_fraction)),
            "layers": (self.layers if self.layers is None or isinstance(self.layers, str)
                       else tuple(int(l) for l in ([self.layers] if isinstance(self.layers, int) else self.layers))),
            "l2": (None if self.l2 is None else tuple(float(v) for v in self.l2) if isinstance(self.l2, Iterable)
                   else float(self.l2)),
            "structural_options": dict(self.structural_options or {}),
            "probe_options": dict(self.probe_options or {}),
            "mdl_timestamps": check_timestamps(self.mdl_timestamps),
        }
        for name in ("treebank", "wnut", "senteval_samples"):
            value = getattr(self, name)
            normal[name] = None if value is None else Path(os.fspath(value))
        for name, value in normal.items():
            object.__setattr__(self, name, value)
        parse_layers(self.layers)  # the syntax now; the range once the model's depth is known
        for name in ("max_train", "max_eval"):
            value = getattr(self, name)
            if isinstance(value, Mapping):  # per level: {"token": 4000, "sentence": None, ...}
                unknown = sorted(set(value) - set(LEVELS))
                if unknown:
                    raise SettingError(name, value, f"its keys are levels: {', '.join(LEVELS)}",
                                       shown=", ".join(map(str, unknown)))
                for cap in value.values():
                    _check_size(name, cap)
                object.__setattr__(self, name, dict(value))
            else:
                _check_size(name, value)
        _check_size("max_sentences", self.max_sentences)
        for name, value, allowed in (("control", self.control, (True, False, "token")),
                                     ("control_types", self.control_types, CONTROL_TYPES),
                                     ("sentence_control", self.sentence_control, SENTENCE_CONTROLS),
                                     ("senteval_split", self.senteval_split, SENTEVAL_SPLITS),
                                     ("train_sampling", self.train_sampling, TRAIN_SAMPLINGS),
                                     ("mdl", self.mdl, (True, False, "token"))):
            if not any(value is choice or (isinstance(choice, str) and value == choice) for choice in allowed):
                raise SettingError(name, value, "expected " + ", ".join(map(str, allowed[:-1])) + f" or {allowed[-1]}")
        if self.n_boot < 1:
            raise SettingError("n_boot", self.n_boot, "expected at least 1 bootstrap resample")

    @classmethod
    def from_keywords(cls, **settings) -> "ProbingSpec":
        """A spec from :func:`~bertology.probing.run_probing`'s former keyword arguments (``structural_kwargs``
        is ``structural_options``); :class:`UsageError` names an unknown one."""
        if "structural_kwargs" in settings:
            settings["structural_options"] = settings.pop("structural_kwargs")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise UsageError(f"unknown probing setting(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}")
        return cls(**{k: v for k, v in settings.items() if v is not None or k in _NONE_MEANS_SOMETHING})

    @property
    def control_labels_for_sentences(self) -> bool:
        """Whether SentEval sentence tasks get a control task."""
        return self.control is True and self.sentence_control != "none"

    def wants_mdl(self, level: str) -> bool:
        """Whether tasks of ``level`` get their online codelength (``mdl``: True, False or ``"token"``: word,
        arc and span tasks only)."""
        return self.mdl is True or (self.mdl == "token" and level != "sentence")

    def wants_control(self, level: str) -> bool:
        """Whether tasks of ``level`` (token, edge, span, sentence) are also trained on control labels."""
        if level == "sentence":
            return self.control_labels_for_sentences
        return self.control in (True, "token")


#: Fields whose ``None`` is a value of its own, not "the default" (:meth:`ProbingSpec.from_keywords`).
_NONE_MEANS_SOMETHING = {"l2", "treebank", "layers", "max_train", "max_eval", "max_sentences", "wnut", "senteval_samples"}


@dataclass(frozen=True)
class StructuralSpec:
    """The settings of :func:`~bertology.probing.structural.run_structural`, checked once; every field has its
    default. ``seeds``: each trains its own probes (and, with one twin per seed, runs on twin ``s``). ``rank``: the
    probe's rank; ``kinds``: ``distance`` and/or ``depth``; ``layers``: ``None`` (every stored layer) or a list.
    ``epochs``, ``lr``, ``batch_size``: the training (each probe keeps its best-dev-loss epoch). ``punct``: which
    tags mark the punctuation UUAS and root accuracy leave out (:data:`PUNCT_SCHEMES`)."""

    seeds: Sequence[int] = (0, 1, 2)
    rank: int = 128
    kinds: Sequence[str] = STRUCTURAL_KINDS
    layers: Sequence[int] | None = None
    epochs: int = 40
    lr: float = 1e-3
    batch_size: int = 20
    punct: str = "upos"

    def __post_init__(self) -> None:
        for kind in self.kinds:
            if kind not in STRUCTURAL_KINDS:
                raise SettingError("kinds", kind, f"expected one of {', '.join(STRUCTURAL_KINDS)}")
        if self.punct not in PUNCT_SCHEMES:
            raise SettingError("punct", self.punct, f"expected one of {', '.join(PUNCT_SCHEMES)}")
        if not len(self.seeds):
            raise SettingError("seeds", tuple(self.seeds), "give at least one seed (three or more for a spread)",
                               shown="(none)")
        check_layer_spelling(self.layers)
        for name in ("rank", "epochs", "batch_size"):
            check_whole(getattr(self, name), name)
        if not self.lr > 0:
            raise SettingError("lr", self.lr, "expected a positive learning rate")


@dataclass(frozen=True)
class ProbeLabelsSpec:
    """The settings of :func:`~bertology.probing.labels.probe_labels`, checked once; every field has its default.

    ``layers``: ``None`` (every layer given), a list or a spelling such as ``"0,3,6"``. ``seeds``: seed ``s`` draws
    its training rows (``train_sampling``, of ``train_fraction`` of them), initialises the probes and draws the
    control labels. ``control``: also the Hewitt-and-Liang control task, keyed on word forms under
    ``control_types``. ``probe``: ``linear`` or ``mlp`` (``hidden`` units); ``l2``: the strengths each layer chooses
    from on dev (``None``: the probe's default, :func:`bertology.probing.probes.default_grid`: 1e-5 .. 1e3 for
    the exact linear probe, 1e-5 .. 1e-2 for the others); ``probe_options`` go to
    every probe. ``mdl``: also the online codelength over ``mdl_timestamps``. ``n_boot`` bootstrap resamples per
    interval; ``split_seed`` draws the default 80/10/10 split.
    """

    layers: str | Sequence[int] | None = None
    seeds: Sequence[int] = (0, 1, 2)
    control: bool = True
    control_types: str = "auto"
    probe: str = "linear"
    l2: float | Sequence[float] | None = None
    hidden: int = 128
    train_fraction: float = 1.0
    train_sampling: str = "bootstrap"
    mdl: bool = False
    mdl_timestamps: Sequence[float] = DEFAULT_TIMESTAMPS
    n_boot: int = 1000
    split_seed: int = 0
    probe_options: Mapping | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", tuple(check_probe_settings(self.probe, self.seeds, self.train_fraction)))
        if self.train_sampling not in TRAIN_SAMPLINGS:
            raise SettingError("train_sampling", self.train_sampling, f"expected {' or '.join(TRAIN_SAMPLINGS)}")
        object.__setattr__(self, "mdl_timestamps", check_timestamps(self.mdl_timestamps))
        check_layer_spelling(self.layers)
        check_whole(self.hidden, "hidden")
        if self.n_boot < 1:
            raise SettingError("n_boot", self.n_boot, "expected at least 1 bootstrap resample")
