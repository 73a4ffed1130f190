"""The settings of a compression run in one frozen :class:`CompressionSpec`, and of one model's measures in
:class:`MeasureSpec`, each checked once when it is made.

:func:`bertology.compression.run.run_compression` takes a ``CompressionSpec`` (or its fields as keywords) and
measures every variant with the ``MeasureSpec`` it implies (:meth:`CompressionSpec.measure`);
:func:`bertology.compression.measure.measure_encoder` takes a ``MeasureSpec`` (or its fields as keywords). What
to compress (the model, the methods, a teacher), what to measure on (the sentence sets) and where the run
happens (the output folder, progress) are not settings and are passed beside the spec. A bad value is one
:class:`~bertology.errors.SettingError` naming the field. Light (no numpy or torch): ``bertology compress``
builds the spec before anything heavy loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bertology.data.glue import glue_task
from bertology.errors import SettingError
from bertology.settings import check_whole

#: L2 strengths the UPOS probe chooses from on dev (per layer).
UPOS_L2 = (1e-4, 1e-3)


@dataclass(frozen=True)
class MeasureSpec:
    """How :func:`~bertology.compression.measure.measure_encoder` measures one model: ``seed`` of every probe and
    sample, the structural probe's ``structural_rank``, ``structural_epochs`` and ``structural_lr`` (10 x the
    probing default: few sentences, few epochs), the L2 strengths ``upos_l2`` the UPOS probe chooses from on dev,
    and the dev words a relation needs (``min_relation_count``) for its best parser head to be chosen."""

    seed: int = 0
    structural_rank: int = 64
    structural_epochs: int = 10
    structural_lr: float = 1e-2
    upos_l2: Sequence[float] = UPOS_L2
    min_relation_count: int = 30

    def __post_init__(self) -> None:
        for name in ("structural_rank", "structural_epochs", "min_relation_count"):
            check_whole(getattr(self, name), name)
        if not self.structural_lr > 0:
            raise SettingError("structural_lr", self.structural_lr, "expected a positive learning rate")
        if not len(self.upos_l2) or any(not value > 0 for value in self.upos_l2):
            raise SettingError("upos_l2", self.upos_l2, "expected one or more positive L2 strengths")


@dataclass(frozen=True)
class CompressionSpec:
    """How :func:`~bertology.compression.run.run_compression` compresses and measures; every field has the
    library's default.

    ``rounds``: timed rounds of extraction per model (after one warm-up). ``seed``: of the probes, the random
    head choice, the importance and the fine-tuning. ``engine``: PyTorch's quantized engine (``None``: the
    machine's). ``calibration_sentences`` calibrate ``int8-static``; ``importance_sentences`` score the heads of
    ``heads-importance``. The measures: ``structural_rank``, ``structural_epochs``, ``min_relation_count``
    (:class:`MeasureSpec`); ``n_boot`` bootstrap resamples per retention interval. ``finetune_task`` (a GLUE task or
    ``bshift``; kept by its canonical name): also fine-tune the original and every variant with
    ``finetune_config`` (a :class:`~bertology.finetune.FinetuneConfig`; ``None``: the report's BShift recipe).
    """

    rounds: int = 3
    seed: int = 0
    engine: str | None = None
    calibration_sentences: int = 64
    importance_sentences: int = 200
    structural_rank: int = 64
    structural_epochs: int = 10
    min_relation_count: int = 30
    n_boot: int = 1000
    finetune_task: str | None = None
    finetune_config: Any = None

    def __post_init__(self) -> None:
        if self.finetune_task is not None:  # an unknown task fails before any work
            object.__setattr__(self, "finetune_task", glue_task(self.finetune_task).name)
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 1:
            raise SettingError("rounds", self.rounds, "expected at least 1", shown=str(self.rounds))
        for name in ("calibration_sentences", "importance_sentences", "n_boot"):
            check_whole(getattr(self, name), name)
        self.measure()  # the measures' settings, checked now

    def measure(self) -> MeasureSpec:
        """The :class:`MeasureSpec` every model of the run is measured with."""
        return MeasureSpec(seed=self.seed, structural_rank=self.structural_rank,
                           structural_epochs=self.structural_epochs, min_relation_count=self.min_relation_count)

    def settings(self) -> dict:
        """The settings the Result's meta records (``settings``), as before the spec."""
        return dict(seed=self.seed, rounds=self.rounds, engine=self.engine,
                    calibration_sentences=self.calibration_sentences, importance_sentences=self.importance_sentences,
                    structural_rank=self.structural_rank, structural_epochs=self.structural_epochs,
                    min_relation_count=self.min_relation_count, n_boot=self.n_boot)
