"""Packages whose public names are imported on first use, so that ``import bertology.<capability>.cli``
(and ``bertology --help``) does not load torch, transformers or sklearn.

A package's ``__init__`` says which submodule holds each public name::

    __getattr__ = lazy_exports(__name__, {"experiment": ("run_probing",), "probes": ("LayerwiseProbe",)})

``from bertology.probing import run_probing`` then imports :mod:`bertology.probing.experiment` at that
moment, and keeps the object on the package. Where a public name is also a submodule's name
(``bertology.knowledge.lama``, the function, in ``bertology/knowledge/lama.py``), importing the submodule
leaves the function on the package, as the eager ``from .lama import lama`` did.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Mapping, Sequence


class _LazyPackage(types.ModuleType):
    """A package module that keeps its public names when a same-named submodule is imported."""

    def __setattr__(self, name: str, value: object) -> None:
        # The import system sets ``package.<child> = <module>`` once a submodule has run; an eager __init__
        # would have bound the public object of that name instead, so that is what the package keeps.
        if (isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}"
                and name in self.__dict__.get("_lazy_sources", {})):
            value = getattr(importlib.import_module(f"{self.__name__}.{self._lazy_sources[name]}"), name)
        super().__setattr__(name, value)


def lazy_exports(package: str, exports: Mapping[str, Sequence[str]]) -> Callable[[str], object]:
    """The package's module ``__getattr__``: each name of ``exports[submodule]`` comes from
    ``package.submodule``, imported when the name is first read."""
    sources = {name: submodule for submodule, names in exports.items() for name in names}
    module = sys.modules[package]
    module._lazy_sources = sources
    module.__class__ = _LazyPackage

    def __getattr__(name: str) -> object:
        submodule = sources.get(name)
        if submodule is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{submodule}"), name)
        module.__dict__[name] = value
        return value

    return __getattr__
