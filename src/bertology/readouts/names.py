"""Readout names, in a module that imports nothing heavy, so that ``bertology readouts --readouts`` is checked
before torch loads; :mod:`bertology.readouts.catalog` builds the readouts they name."""

from __future__ import annotations

import re

from bertology.errors import UsageError

#: The seed's Table 1 rows, in its order, plus the CNN and the final-layer baseline.
SEED_READOUTS = ("lp", "ap", "adapter-shared-386-skip", "adapter-independent-386", "adapter-shared-64",
                 "adapter-independent-64", "stack", "cnn", "last")
#: ``adapter-<shared|independent>-<size>[-skip]``: groups kind, size, skip.
ADAPTER_NAME = re.compile(r"^adapter-(shared|independent)-(\d+)(-skip)?$")
READOUT_HELP = "lp, ap, last, cnn, stack, adapter-<shared|independent>-<size>[-skip] (e.g. adapter-shared-386-skip)"


def check_readout_name(name: str, option: str = "--readouts") -> str:
    """The name, lower-cased, or :class:`UsageError` naming ``option`` and listing the readout names."""
    name = name.strip().lower()
    if name in ("lp", "ap", "last", "cnn", "stack") or ADAPTER_NAME.match(name):
        return name
    raise UsageError(f"{option} {name!r}: unknown readout; expected {READOUT_HELP}")
