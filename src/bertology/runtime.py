"""Where and with what randomness things run: device resolution, seed derivation, seeded blocks and seeded
subsets, one helper each."""

from __future__ import annotations

import contextlib
import hashlib
import random
import re
from typing import TYPE_CHECKING, Iterator, Sequence

from bertology.errors import DataError, SettingError

if TYPE_CHECKING:  # torch is imported when a device is resolved, so the command line starts without it
    import torch

DEVICE_HELP = "auto (cuda if available, else cpu), cpu, cuda, cuda:N or mps"


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``None``/``"auto"`` -> cuda when available, else cpu; otherwise the named device, checked.

    Raises :class:`UsageError` for an unknown name or a device this machine does not have. A name that
    is not a device at all is refused before torch is imported (a usage error answers at once).
    """
    if isinstance(device, str):
        _check_device_name(device)
    import torch

    if isinstance(device, torch.device):
        return device
    name = "auto" if device is None else str(device).strip().lower()
    if name in ("", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(name)
    except (RuntimeError, ValueError):
        raise SettingError("device", device, f"unknown device; expected {DEVICE_HELP}") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise SettingError("device", device, "this machine has no CUDA device; use cpu or auto")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise SettingError("device", device, f"only {torch.cuda.device_count()} CUDA device(s) here")
    elif resolved.type == "mps" and not torch.backends.mps.is_available():
        raise SettingError("device", device, "MPS is not available on this machine")
    elif resolved.type not in ("cpu", "cuda", "mps"):
        raise SettingError("device", device, f"unsupported device type; expected {DEVICE_HELP}")
    return resolved


#: Device types torch knows (``torch.device("gpu")`` names them in its error); of these we run on cpu, cuda, mps.
_TORCH_DEVICE_TYPES = frozenset(
    "cpu cuda ipu xpu mkldnn opengl opencl ideep hip ve fpga maia xla lazy vulkan mps meta hpu mtia "
    "privateuseone".split())


def _check_device_name(device: str) -> None:
    """The errors :func:`resolve_device` gives for names torch rejects or we do not run on, without torch."""
    name = device.strip().lower()
    if name in ("", "auto"):
        return
    match = re.fullmatch(r"([a-z_]+)(?::\d+)?", name)
    if match is None or match.group(1) not in _TORCH_DEVICE_TYPES:
        raise SettingError("device", device, f"unknown device; expected {DEVICE_HELP}")
    if match.group(1) not in ("cpu", "cuda", "mps"):
        raise SettingError("device", device, f"unsupported device type; expected {DEVICE_HELP}")


def derive_seed(seed: int, *purpose: object) -> int:
    """A seed for one purpose of one run, independent of the others: ``derive_seed(seed, "control", task)``.

    The same inputs always give the same seed (a SHA-256 of their text, so Python's hash salting does not
    matter); different purposes give unrelated streams, which seed arithmetic such as ``seed * 1000 + 7``
    does not guarantee. The result fits numpy's and torch's seed range.
    """
    text = "\x1f".join([str(int(seed)), *map(str, purpose)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little") & 0x7FFFFFFF


def seed_list(count: int, first: int = 0, option: str = "seeds") -> tuple[int, ...]:
    """``count`` seeds from ``first``: ``--seeds 3 --seed 0`` -> (0, 1, 2), the one meaning everywhere."""
    if isinstance(count, bool) or int(count) != count or count < 1:
        raise SettingError(option, count, "expected a count of seeds, at least 1 (3 or more for a spread)",
                           shown=str(count))
    check_seed(first, "seed")
    return tuple(range(int(first), int(first) + int(count)))


def check_seed(seed: int | None, option: str = "seed") -> int | None:
    """One seed (``--seed``, ``--untrained-seed``...): a non-negative integer, or None when not given."""
    if seed is None:
        return None
    if isinstance(seed, bool) or int(seed) != seed or seed < 0:
        raise SettingError(option, seed, "expected a non-negative integer", shown=str(seed))
    return int(seed)


@contextlib.contextmanager
def seeded(seed: int | None, *, numpy: bool = False, python: bool = False) -> Iterator[None]:
    """Inside the block torch's global generator starts from ``seed`` (``torch.manual_seed``); after it, every
    generator it seeded is as it was before, so code around the block draws what it would have drawn without it.

    ``numpy``/``python``: also seed (and restore) numpy's and Python's global generators. ``seed=None`` seeds
    nothing and still restores, so what the block draws does not move the caller's stream. CUDA generators are
    saved and restored where CUDA is already initialised (``torch.manual_seed`` seeds them too).
    """
    import numpy as np
    import torch

    cpu_state = torch.random.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    numpy_state = np.random.get_state() if numpy else None
    python_state = random.getstate() if python else None
    try:
        if seed is not None:
            if python:
                random.seed(seed)
            if numpy:
                np.random.seed(seed)
            torch.manual_seed(seed)
        yield
    finally:
        torch.random.set_rng_state(cpu_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        if numpy_state is not None:
            np.random.set_state(numpy_state)
        if python_state is not None:
            random.setstate(python_state)


def seeded_subset(items: Sequence, n: int | None, seed: int = 0) -> list:
    """``n`` of ``items`` drawn without replacement by ``seed``, kept in their original order (all of them
    when ``n`` is None or at least ``len(items)``): the same subset for every run with the same seed."""
    import numpy as np

    items = list(items)
    if n is None or n >= len(items):
        return items
    if n < 1:
        raise DataError(f"subset of {n} examples: expected at least 1")
    keep = np.sort(np.random.default_rng(seed).choice(len(items), size=n, replace=False))
    return [items[i] for i in keep]
