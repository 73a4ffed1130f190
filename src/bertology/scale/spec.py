"""Where a Ray run's workers come from, in one frozen :class:`ClusterSpec` checked once when it is made:
:func:`bertology.scale.extraction.extract_ray` takes it (or its fields as keywords) beside the
:class:`~bertology.extraction.spec.ExtractionSpec` of what to extract. Light: it imports neither Ray nor torch.
Whether the cluster has room for such workers is checked once connected
(:func:`bertology.scale.cluster.check_resources`).
"""

from __future__ import annotations

from dataclasses import dataclass

from bertology.errors import SettingError
from bertology.settings import check_whole


@dataclass(frozen=True)
class ClusterSpec:
    """``address``: ``None`` starts (or reuses) a local Ray instance, ``"auto"`` or ``HOST:PORT`` joins a cluster.
    ``workers``: how many actors (``None``: what the cluster has room for), each asking for ``cpus_per_worker``
    CPUs (its torch threads) and ``gpus_per_worker`` GPUs (then it runs on ``cuda``; fractions share one)."""

    address: str | None = None
    workers: int | None = None
    cpus_per_worker: float = 1
    gpus_per_worker: float = 0

    def __post_init__(self) -> None:
        check_whole(self.workers, "workers", allow_none=True)
        if not self.cpus_per_worker > 0:
            raise SettingError("cpus_per_worker", self.cpus_per_worker, "expected a positive number of CPUs")
        if not self.gpus_per_worker >= 0:
            raise SettingError("gpus_per_worker", self.gpus_per_worker, "expected 0 or more GPUs")
