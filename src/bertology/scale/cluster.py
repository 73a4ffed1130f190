"""Connecting to Ray: the one place that imports it, so nothing else does unless ``--engine ray`` is asked for."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from bertology.errors import BertologyError, UsageError

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


def user_error(error: BaseException) -> BertologyError | None:
    """The bertology error an actor or task raised, from inside Ray's wrappers (None when there is none)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, BertologyError):
            inner = getattr(error, "cause", None)
            return inner if isinstance(inner, BertologyError) else error
        error = getattr(error, "cause", None) or error.__cause__ or error.__context__
    return None


def plain_error(cause: BertologyError) -> BertologyError:
    """``cause`` as its own bertology kind with its one-line message, without Ray's wrapping."""
    kind = next(c for c in type(cause).__mro__ if c.__module__ == "bertology.errors")
    return kind(str(cause).strip().splitlines()[-1])


def run_tasks(submit: Callable[[Any], Any], items: Sequence[Any], limit: int,
              on_done: Callable[[Any, Any], None] | None = None) -> list:
    """Run ``submit(item)`` (returning a Ray object ref) for every item, at most ``limit`` in flight;
    returns the results in the order of ``items``. A bertology error raised inside a task comes out as
    itself (see :func:`user_error`); ``on_done(item, result)`` runs as each finishes."""
    ray = require_ray()
    queue, pending, results = list(range(len(items))), {}, {}
    try:
        while queue or pending:
            while queue and len(pending) < limit:
                position = queue.pop(0)
                pending[submit(items[position])] = position
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                position = pending.pop(ref)
                results[position] = ray.get(ref)
                if on_done is not None:
                    on_done(items[position], results[position])
    except Exception as error:  # Ray wraps what the tasks raised
        cause = user_error(error)
        if cause is None:
            raise
        raise plain_error(cause) from None
    return [results[position] for position in range(len(items))]
