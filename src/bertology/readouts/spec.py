"""Every setting of a readouts experiment in one frozen spec, checked once when it is made: :class:`SquadReadoutsSpec`
(``bertology readouts squad``, the seed's experiment) and :class:`GlueReadoutsSpec` (``bertology readouts glue``).

A spec's fields are named after the command's options (``readout_epochs`` is ``--readout-epochs``) and hold
their defaults; a bad value is one :class:`~bertology.errors.SettingError` naming the field
(``SettingError.as_option()`` names the option). The sizes that ``--quick`` shrinks are ``None`` until the spec
is made: then the preset's value (:data:`SQUAD_PRESETS`, :data:`GLUE_PRESETS`, their ``quick`` column), unless
given. What to read (model, data files) and where to run (device, progress, cache) are not settings of the
experiment and are passed beside it (:meth:`bertology.readouts.squad.SquadReadoutsConfig.from_spec`,
:meth:`bertology.readouts.glue.GlueReadoutsConfig.from_spec`).

Light (no numpy or torch), so the command line builds and checks the spec before anything heavy loads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

from bertology.errors import SettingError, UsageError
from bertology.readouts.names import READOUT_HELP, SEED_READOUTS, check_readout_name
from bertology.settings import renamed_keywords

#: ``squad2``: every question, the no-answer decision included; ``answerable``: only questions with an answer
#: (SQuAD 1.1-style), training windows without the answer dropped, a span always predicted.
MODES = ("squad2", "answerable")
#: GLUE sentence vector per layer.
GLUE_POOLS = ("cls", "mean")
#: The readouts `readouts glue` trains by default.
GLUE_READOUTS = ("lp", "ap", "last", "adapter-shared-64", "adapter-shared-386-skip", "cnn")

#: The sizes ``--quick`` shrinks: ``{field: (default, quick)}``; a value given explicitly wins over both.
SQUAD_PRESETS: Mapping[str, tuple] = {
    "max_length": (384, 128), "stride": (128, 32), "batch_size": (16, 8), "finetune_batch_size": (16, 8),
    "max_train": (None, 64), "max_test": (None, 32), "readouts": (SEED_READOUTS, SEED_READOUTS[:2]),
    "classify_readouts": (("lp",), ("lp",)), "readout_epochs": (10, 2), "patience": (2, 1)}
GLUE_PRESETS: Mapping[str, tuple] = {
    "max_train": (None, 200), "max_dev": (None, 100), "epochs": (50, 1), "patience": (5, 1),
    "readouts": (GLUE_READOUTS, GLUE_READOUTS[:2])}


def readout_names(value: str | Iterable[str], setting: str, allow_empty: bool = False) -> tuple[str, ...]:
    """Readout names from a comma-separated string or a sequence, checked (lower-cased)."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    names = []
    for part in (str(p) for p in parts):
        if not part.strip():
            continue
        try:
            names.append(check_readout_name(part, setting))
        except UsageError:
            raise SettingError(setting, part.strip().lower(), f"unknown readout; expected {READOUT_HELP}") from None
    if not names and not allow_empty:
        raise SettingError(setting, value, "expected comma-separated readout names")
    return tuple(names)


def fractions(value: str | Iterable[float], setting: str, allow_zero: bool = False) -> tuple[float, ...]:
    """Fractions of an epoch from ``"0.3,1"`` or a sequence: at least one, each above 0 (or 0 with
    ``allow_zero``: the pretrained encoder)."""
    least = "0 (the pretrained encoder) or above" if allow_zero else "above 0"
    try:
        values = tuple(float(part) for part in (value.split(",") if isinstance(value, str) else value)
                       if str(part).strip())
    except (TypeError, ValueError):
        raise SettingError(setting, value, f"expected fractions of an epoch {least} separated by commas, "
                                           "e.g. 0.3,1") from None
    if not values or min(values) < 0 or (not allow_zero and min(values) == 0) or not all(map(math.isfinite, values)):
        raise SettingError(setting, value, f"expected fractions of an epoch {least}, e.g. 0.3,1")
    return values


def _whole(value, setting: str, least: int, allow_none: bool = False, note: str = "") -> int | None:
    if value is None and allow_none:
        return None
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value \
            or value < least:
        raise SettingError(setting, value, f"expected a whole number of at least {least}{note}", shown=str(value))
    return int(value)


def _rate(value, setting: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
        raise SettingError(setting, value, "expected a positive learning rate", shown=str(value))
    return float(value)


def _seeds(seeds) -> tuple[int, ...]:
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise SettingError("seeds", seeds, "expected at least one seed", shown="(none)")
    return seeds


class _Presets:
    """What both specs share: the preset sizes (``None`` until made) and which were given."""

    PRESETS: Mapping[str, tuple] = {}

    def _fill_presets(self) -> frozenset[str]:
        given = frozenset(name for name in self.PRESETS if getattr(self, name) is not None)
        column = 1 if self.quick else 0
        for name, values in self.PRESETS.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, values[column])
        return given

    def _set(self, **values) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def presets(self) -> dict[str, tuple[object, bool]]:
        """``{field: (value, given)}`` for the sizes ``--quick`` shrinks: what the run uses, and whether it was
        given explicitly (then it won over the preset)."""
        return {name: (getattr(self, name), name in self.given) for name in self.PRESETS}

    @classmethod
    def option(cls, name: str) -> str:
        """The command-line option of field ``name``."""
        if name not in {f.name for f in fields(cls)}:
            raise KeyError(name)
        return "--" + name.replace("_", "-")


#: The keywords the readouts' specs and configs had before train/dev/test (docs/ARCHITECTURE.md's glossary).
SQUAD_RENAMED = {"eval_share": "test_share", "heldout_share": "dev_share", "max_train_questions": "max_train",
                 "max_eval_questions": "max_test"}
GLUE_RENAMED = {"heldout_share": "early_stopping_share"}


@renamed_keywords(SQUAD_RENAMED)
@dataclass(frozen=True)
class SquadReadoutsSpec(_Presets):
    """The settings of ``bertology readouts squad``: fine-tune part of an epoch and a full one
    (``checkpoints``, fractions of an epoch; 0 is the pretrained encoder, frozen), train ``readouts`` (span) and
    ``classify_readouts`` (answerable or not) on each checkpoint's frozen all-layer activations
    (``readout_checkpoints``: on some of them only) for each of ``seeds``, and score with the official SQuAD 2.0
    rules in ``mode``. The articles are split three ways: ``test_share`` of them are the test split (only
    scored), ``dev_share`` of the rest the dev split (early stopping, ``patience`` epochs, 0: none; the no-answer
    threshold), the others train; ``max_train``/``max_test`` draw a seeded subset of the train/test questions.
    ``curve``: extra fractions to score the fine-tuned encoder at. ``seeds[0]`` also seeds the fine-tuning.
    The old keywords ``eval_share``, ``heldout_share``, ``max_train_questions`` and ``max_eval_questions`` still
    work with a :class:`DeprecationWarning` (until the next release)."""

    PRESETS = SQUAD_PRESETS

    readouts: str | tuple[str, ...] | None = None
    classify_readouts: str | tuple[str, ...] | None = None
    checkpoints: str | tuple[float, ...] = (0.0, 0.3, 1.0)
    readout_checkpoints: str | tuple[float, ...] | None = None
    mode: str = "squad2"
    test_share: float = 0.25
    dev_share: float = 0.2
    curve: str | tuple[float, ...] = ()
    seeds: tuple[int, ...] = (0,)
    max_length: int | None = None
    stride: int | None = None
    max_train: int | None = None
    max_test: int | None = None
    readout_epochs: int | None = None
    patience: int | None = None
    standardise: bool = True
    readout_lr: float = 1e-3
    batch_size: int | None = None
    finetune_lr: float = 5e-5
    finetune_batch_size: int | None = None
    quick: bool = False
    given: frozenset[str] = field(default=frozenset(), init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        given = self._fill_presets()
        checkpoints = fractions(self.checkpoints, "checkpoints", allow_zero=True)
        readout_checkpoints = self.readout_checkpoints
        if readout_checkpoints is not None and (not isinstance(readout_checkpoints, str) or readout_checkpoints.strip()):
            readout_checkpoints = fractions(readout_checkpoints, "readout_checkpoints", allow_zero=True)
            if not set(readout_checkpoints) <= set(checkpoints):
                raise SettingError("readout_checkpoints", self.readout_checkpoints,
                                   f"expected some of the checkpoints ({','.join(f'{c:g}' for c in checkpoints)})")
        else:
            readout_checkpoints = None
        curve = self.curve
        curve = fractions(curve, "curve") if not isinstance(curve, str) and curve or \
            isinstance(curve, str) and curve.strip() else ()
        if self.mode not in MODES:
            raise SettingError("mode", self.mode, f"expected one of {', '.join(MODES)}")
        for name in ("test_share", "dev_share"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
                raise SettingError(name, value, "expected a fraction of the articles strictly between 0 and 1",
                                   shown=str(value))
        for name in ("max_length", "readout_epochs", "batch_size", "finetune_batch_size"):
            _whole(getattr(self, name), name, 1)
        for name in ("max_train", "max_test"):
            _whole(getattr(self, name), name, 1, allow_none=True)
        _whole(self.stride, "stride", 0)
        _whole(self.patience, "patience", 0, note=" (0: no early stopping)")
        self._set(readouts=readout_names(self.readouts, "readouts"),
                  classify_readouts=readout_names(self.classify_readouts, "classify_readouts", allow_empty=True),
                  checkpoints=checkpoints, readout_checkpoints=readout_checkpoints, curve=curve,
                  seeds=_seeds(self.seeds), readout_lr=_rate(self.readout_lr, "readout_lr"),
                  finetune_lr=_rate(self.finetune_lr, "finetune_lr"), standardise=bool(self.standardise),
                  quick=bool(self.quick), given=given)

    @property
    def finetune_checkpoints(self) -> tuple[float, ...]:
        """The checkpoints that fine-tune (above 0); empty when only the pretrained encoder is read."""
        return tuple(f for f in self.checkpoints if f > 0)

    @property
    def pretrained(self) -> bool:
        """Whether checkpoint 0 (the pretrained encoder, never fine-tuned) is one of the checkpoints."""
        return 0 in self.checkpoints


@renamed_keywords(GLUE_RENAMED)
@dataclass(frozen=True)
class GlueReadoutsSpec(_Presets):
    """The settings of ``bertology readouts glue``: ``readouts`` trained for each of ``seeds`` on a frozen
    encoder's all-layer sentence vectors (``pool``: ``cls`` or ``mean``) of a GLUE task's ``max_train``
    training examples (a seeded subset), ``early_stopping_share`` of them held out for early stopping
    (``patience`` epochs, 0: none; ``epochs`` at most), scored on the first ``max_dev`` examples of GLUE's dev
    split (GLUE's name for the labelled split its results are reported on; the held-out slice of train is
    therefore not called dev here); ``references``: the scikit-learn logistic regressions on the same features
    beside them. The old keyword ``heldout_share`` still works with a :class:`DeprecationWarning`."""

    PRESETS = GLUE_PRESETS

    readouts: str | tuple[str, ...] | None = None
    pool: str = "cls"
    seeds: tuple[int, ...] = (0, 1, 2)
    max_train: int | None = None
    max_dev: int | None = None
    epochs: int | None = None
    patience: int | None = None
    early_stopping_share: float = 0.1
    standardise: bool = True
    references: bool = True
    lr: float = 1e-3
    batch_size: int = 32
    quick: bool = False
    given: frozenset[str] = field(default=frozenset(), init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        given = self._fill_presets()
        _whole(self.patience, "patience", 0, note=" (0: no early stopping)")
        for name in ("epochs", "batch_size"):
            _whole(getattr(self, name), name, 1)
        for name in ("max_train", "max_dev"):
            _whole(getattr(self, name), name, 1, allow_none=True)
        if self.pool not in GLUE_POOLS:
            raise SettingError("pool", self.pool, f"expected {' or '.join(GLUE_POOLS)}")
        share = self.early_stopping_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share < 1:
            raise SettingError("early_stopping_share", share, "expected a fraction in [0, 1)", shown=str(share))
        self._set(readouts=readout_names(self.readouts, "readouts"), seeds=_seeds(self.seeds),
                  lr=_rate(self.lr, "lr"), standardise=bool(self.standardise), references=bool(self.references),
                  quick=bool(self.quick), given=given)
