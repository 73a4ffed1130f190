"""Where data lives: the corpus shipped inside the package, and the shared evaluation data."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from bertology.errors import DataError

_PACKAGED = {
    "ewt-train": "en_ewt-ud-train.conllu.gz",
    "ewt-dev": "en_ewt-ud-dev.conllu.gz",
    "ewt-test": "en_ewt-ud-test.conllu.gz",
}


def default_corpus(name: str = "ewt-dev") -> Path:
    """A corpus shipped inside the package (UD English EWT r2.16 train/dev/test, CC BY-SA 4.0; see
    resources/ATTRIBUTION.md). ``default_corpus(name).parent`` is a complete UD treebank folder."""
    if name not in _PACKAGED:
        raise DataError(f"unknown packaged corpus {name!r}; expected one of {', '.join(_PACKAGED)}")
    return Path(str(resources.files("bertology") / "resources" / "ud_english_ewt" / _PACKAGED[name]))


def shared_data_dir() -> Path:
    """The shared evaluation data (``../shared/data`` beside the checkout, or ``$BERTOLOGY_DATA``)."""
    env = os.environ.get("BERTOLOGY_DATA")
    candidates = [Path(env)] if env else []
    here = Path(__file__).resolve()
    candidates += [parent / "shared" / "data" for parent in here.parents]
    candidates += [Path.cwd().parent / "shared" / "data", Path.cwd() / "shared" / "data"]
    for candidate in candidates:
        if (candidate / "ud_english_ewt").is_dir():
            return candidate
    raise DataError(
        "shared evaluation data not found; set BERTOLOGY_DATA to the folder holding ud_english_ewt/, glue/, ..."
    )
