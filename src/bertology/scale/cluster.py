"""Connecting to Ray: the one place that imports it, so nothing else does unless ``--engine ray`` is asked for."""

from __future__ import annotations

import logging
import os
import sys

from bertology.errors import UsageError

ENGINES = ("local", "ray")
INSTALL_HINT = "pip install 'bertology[ray]'"


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine!r}: expected one of {', '.join(ENGINES)}")
    return engine


def require_ray():
    """Import and return ``ray``; without it, one line saying how to install the extra."""
    try:
        import ray
        import ray.data  # the extraction engine needs Ray Data too
    except ImportError as error:
        raise UsageError(f"--engine ray needs Ray, which is not installed ({error.name or error}); "
                         f"install the extra: {INSTALL_HINT}") from None
    return ray


def connect(address: str | None = None, num_cpus: int | None = None, progress: bool = True):
    """Join the cluster at ``address`` (``auto``: the one `ray start` started on this machine; ``HOST:PORT``),
    or start a local one (``None``) with ``num_cpus``; an instance this process already runs is reused.
    Workers inherit this process's ``PYTHONPATH``, so a checkout run with ``PYTHONPATH=src`` works on a local
    instance; on a real cluster every node needs bertology installed (docs/scale.md)."""
    ray = require_ray()
    if not ray.is_initialized():
        settings = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": True}
        env = {key: os.environ[key] for key in ("PYTHONPATH", "HF_HOME", "HF_HUB_OFFLINE") if key in os.environ}
        if address:
            ray.init(address=address, runtime_env={"env_vars": env} if env else None, **settings)
        else:
            ray.init(num_cpus=num_cpus, **settings)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = bool(progress) and sys.stderr.isatty()
    context.print_on_execution_start = False
    return ray


def cluster_resources() -> dict:
    import ray

    return dict(ray.cluster_resources())


def default_workers(cpus_per_worker: float, gpus_per_worker: float) -> int:
    """As many workers as the cluster has room for: GPUs when each worker takes some, CPUs otherwise."""
    resources = cluster_resources()
    if gpus_per_worker:
        return max(1, int(resources.get("GPU", 0) // gpus_per_worker))
    return max(1, int(resources.get("CPU", 1) // max(cpus_per_worker, 1e-9)))
