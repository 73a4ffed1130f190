"""Connecting to Ray: the one place that imports it, so nothing else does unless ``--engine ray`` is asked for."""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

from bertology.errors import BertologyError, SettingError

ENGINES = ("local", "ray")
INSTALL_HINT = "pip install 'bertology[ray]'"
#: Seconds to wait for a cluster's address to answer before giving up (Ray itself retries for many minutes).
CONNECT_TIMEOUT_S = 5.0


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise SettingError("engine", engine, f"expected one of {', '.join(ENGINES)}")
    return engine


def require_ray():
    """Import and return ``ray``; without it, one line saying how to install the extra."""
    try:
        import ray
        import ray.data  # the extraction engine needs Ray Data too
    except ImportError as error:
        raise SettingError("engine", "ray", f"needs Ray, which is not installed ({error.name or error}); install "
                           f"the extra: {INSTALL_HINT}", shown="ray") from None
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
            check_reachable(address)  # an address nothing answers at: one line now, not minutes of Ray's retries
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


def _bootstrap(address: str) -> tuple[str, int] | None:
    """(host, port) Ray would connect to for ``address`` (``auto``: the cluster `ray start` runs here), or
    None where that cannot be told without Ray's own connection."""
    if address.startswith("ray://"):  # Ray Client: its own port, 10001 by default
        target = address[len("ray://"):].split("/", 1)[0]
        host, sep, port = target.rpartition(":")
        return (host, int(port)) if sep and port.isdigit() else (target, 10001)
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:  # a Ray without it: leave the address to ray.init
        return None
    try:
        target = canonicalize_bootstrap_address(address)
    except ConnectionError as error:  # "auto" and no cluster runs here
        raise SettingError("address", address, f"{' '.join(str(error).split())} (`ray start --head` starts one; "
                           "without address= a local instance is started)", shown=address) from None
    except ValueError:
        raise SettingError("address", address, "expected auto or HOST:PORT (e.g. 10.0.0.5:6379)") from None
    if target is None:
        return None
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        raise SettingError("address", address, "expected auto or HOST:PORT (e.g. 10.0.0.5:6379)")
    return host.strip("[]"), int(port)


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse, within ``timeout`` seconds, an ``address`` where nothing accepts a connection: ``ray.init``
    would retry for many minutes without a word."""
    target = _bootstrap(address)
    if target is None:
        return
    host, port = target
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as error:
        reason = (f"no answer in {timeout:g} s" if isinstance(error, TimeoutError)
                  else (error.strerror or str(error)).lower())
        raise SettingError("address", address, f"no Ray cluster answers at {host}:{port} ({reason}); check the "
                           f"address (`ray status` on the head node prints it), start one there with `ray start "
                           "--head`, or leave address= out to start a local instance", shown=address) from None


def check_resources(cpus_per_worker: float, gpus_per_worker: float) -> dict:
    """Refuse, in one line, a worker the connected cluster has no room for: Ray would wait for such a worker
    forever (its autoscaler waits for a node that never comes). Returns the cluster's resources."""
    resources = cluster_resources()
    cpus, gpus = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
    has = f"the Ray cluster has {cpus:g} CPU{'s' if cpus != 1 else ''} and {gpus:g} GPU{'s' if gpus != 1 else ''}"
    if gpus_per_worker > gpus:
        hint = ("use gpus_per_worker= 0 to run the workers on CPUs" if not gpus
                else f"ask for at most {gpus:g} (fractions share one)")
        raise SettingError("gpus_per_worker", gpus_per_worker, f"each worker asks for {gpus_per_worker:g} GPU(s) but "
                           f"{has} (an autoscaling cluster: start its GPU nodes first); {hint}",
                           shown=f"{gpus_per_worker:g}")
    if cpus_per_worker > cpus:
        raise SettingError("cpus_per_worker", cpus_per_worker, f"each worker asks for {cpus_per_worker:g} CPUs but "
                           f"{has}; ask for at most {cpus:g}", shown=f"{cpus_per_worker:g}")
    return resources


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
