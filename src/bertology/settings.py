"""Settings the library and the command line share: the checks of a value that name the option it came from,
and where the cache lives (:func:`cache_root`, the one root every cached task, store and result is under).

Light (no numpy or torch): :mod:`bertology.cli.options` re-uses these checks for the command line, and library
modules take them from here, never from the CLI's ``options.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import os
import warnings
from pathlib import Path
from typing import Optional, TypeVar

from bertology.errors import SettingError, UsageError
from bertology.numbering import parse_layers

Spec = TypeVar("Spec")


def check_positive(value: Optional[int], option: str, allow_none: bool = True) -> Optional[int]:
    """A count that must be at least 1 (``--max-sentences``, ``--batch-tokens``, ``--epochs``...)."""
    if value is None and allow_none:
        return None
    if value is None or isinstance(value, bool) or value < 1:
        raise UsageError(f"{option} {value}: expected a whole number of at least 1")
    return int(value)


def check_count(value: Optional[int], option: str) -> Optional[int]:
    """A count that may be 0."""
    if value is not None and value < 0:
        raise UsageError(f"{option} {value}: expected a whole number of at least 0")
    return value


def check_cache_dir(path: str | Path | None, option: str = "cache_dir") -> Path | None:
    """A cache folder (created when missing): refused in one line naming ``option`` when it, or a folder
    above it, is a file. Say ``$BERTOLOGY_CACHE`` for a folder that came from the environment."""
    if path is None:
        return None
    path = Path(path)
    for part in (path, *path.parents):
        if part.exists():
            if not part.is_dir():
                where = "it is a file" if part == path else f"{part} is a file"
                raise SettingError(option, path, f"{where}, not a folder; give a folder for the cache (created "
                                   "when missing)", shown=str(path))
            break
    return path


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir``, else ``$BERTOLOGY_CACHE``, else ``~/.cache/bertology``; a file there is refused in one
    line naming where it came from."""
    if cache_dir is not None:
        return check_cache_dir(cache_dir, "cache_dir")
    if os.environ.get("BERTOLOGY_CACHE"):
        return check_cache_dir(os.environ["BERTOLOGY_CACHE"], "$BERTOLOGY_CACHE")
    return check_cache_dir(Path.home() / ".cache" / "bertology", "the cache folder")


def spec_of(kind: type[Spec], spec: Spec | None, settings: dict, what: str) -> Spec:
    """``spec`` (default: ``kind()``, the defaults) with ``settings`` (its field names) replaced: how an experiment
    function takes its frozen spec or, as before the spec, its settings as keywords. An unknown name is one
    :class:`UsageError` line listing the fields; a bad value the spec's own :class:`SettingError`."""
    names = [f.name for f in dataclasses.fields(kind)]
    unknown = sorted(set(settings) - set(names))
    if unknown:
        raise UsageError(f"unknown {what} setting(s) {', '.join(unknown)}; expected some of {', '.join(names)}")
    if spec is None:
        return kind(**settings)
    if not isinstance(spec, kind):
        raise UsageError(f"spec: expected a {kind.__name__}, got {type(spec).__name__}")
    return dataclasses.replace(spec, **settings) if settings else spec


def renamed_keywords(renames: dict[str, str]):
    """A class decorator for a spec or config whose keywords were renamed (``{old: new}``): the old keyword still
    works, with a :class:`DeprecationWarning`, until the next release; given beside its new one it is one
    :class:`SettingError` naming both."""

    def decorate(cls):
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise SettingError(old, kwargs[old], f"the old name of {new}; give only {new}")
                    warnings.warn(f"{cls.__name__}({old}=...) is deprecated (it goes in the next release); use "
                                  f"{new}=", DeprecationWarning, stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            init(self, *args, **kwargs)

        cls.__init__ = __init__
        cls.renamed_keywords = dict(renames)
        return cls

    return decorate


def check_whole(value, setting: str, least: int = 1, allow_none: bool = False) -> None:
    """A spec's count: a whole number of at least ``least`` (or ``None`` with ``allow_none``), else a
    :class:`SettingError` naming ``setting``."""
    if value is None and allow_none:
        return
    if value is None or isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise SettingError(setting, value, f"expected a whole number of at least {least}"
                           + (" (or None: all)" if allow_none else ""), shown=str(value))


def check_seeds(seeds, setting: str = "seeds") -> tuple[int, ...]:
    """A spec's seeds as a tuple of ints: at least one, else a :class:`SettingError` naming ``setting``."""
    values = tuple(int(s) for s in ([seeds] if isinstance(seeds, numbers.Integral) else seeds))
    if not values:
        raise SettingError(setting, values, "expected at least one seed", shown="(none)")
    return values


def check_layer_spelling(layers, setting: str = "layers") -> None:
    """A spec's layers spelt as :func:`~bertology.numbering.parse_layers` reads them (the range is checked once
    the model's depth is known), else a :class:`SettingError` naming ``setting``."""
    try:
        parse_layers(layers, option=setting)
    except UsageError as error:
        raise SettingError(setting, layers, str(error).split(": ", 1)[-1]) from None
