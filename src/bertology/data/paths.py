"""Where data lives: the corpus shipped inside the package, and where the data it cannot ship is found.

Every default reads only what the package ships (UD English EWT train/dev/test). Data that cannot be
shipped (GLUE, SQuAD 2.0, BLiMP, LAMA, WNUT-17) is found in this order:

1. an explicit path (``--data``, ``--data-dir``, ``--treebank``...);
2. ``$BERTOLOGY_DATA/<folder>`` (one folder holding ``glue/``, ``squad_v2/``, ``lama/``...);
3. the Hugging Face ``datasets`` cache, or the hub when online, for the sets with a loadable hub copy
   (GLUE ``nyu-mll/glue``, SQuAD 2.0 ``rajpurkar/squad_v2``, BLiMP ``nyu-mll/blimp``);
4. otherwise :class:`~bertology.errors.MissingData`: one line naming what is missing and these ways to
   provide it.

The product never looks for a ``shared/`` folder beside the checkout: only this project's machines have one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from bertology.errors import DataError, MissingData

_PACKAGED = {
    "ewt-train": "en_ewt-ud-train.conllu.gz",
    "ewt-dev": "en_ewt-ud-dev.conllu.gz",
    "ewt-test": "en_ewt-ud-test.conllu.gz",
}

#: The names :func:`default_corpus` takes; every ``--data`` option accepts them too.
PACKAGED_CORPORA = tuple(_PACKAGED)

DATA_ENV = "BERTOLOGY_DATA"


def default_corpus(name: str = "ewt-dev") -> Path:
    """A corpus shipped inside the package (UD English EWT r2.16 train/dev/test, CC BY-SA 4.0; see
    resources/ATTRIBUTION.md). ``default_corpus(name).parent`` is a complete UD treebank folder."""
    if name not in _PACKAGED:
        raise DataError(f"unknown packaged corpus {name!r}; expected one of {', '.join(_PACKAGED)}")
    return Path(str(resources.files("bertology") / "resources" / "ud_english_ewt" / _PACKAGED[name]))


def packaged_treebank() -> Path:
    """The packaged UD English EWT folder (``*-ud-{train,dev,test}.conllu.gz``): every treebank default."""
    return default_corpus("ewt-dev").parent


@dataclass(frozen=True)
class ExternalData:
    """A data set the package cannot ship, and where it may be found instead."""

    name: str            # as a user knows it: "GLUE"
    folder: str          # its folder under $BERTOLOGY_DATA
    option: str          # the command-line option that takes its path
    hub_id: str | None   # a Hugging Face `datasets` id, when a loadable hub copy exists
    licence: str

    def ways(self) -> str:
        """How a user provides it, in the order it is looked for."""
        ways = [f"pass {self.option} PATH", f"set {DATA_ENV} to a folder holding {self.folder}/"]
        if self.hub_id:
            ways.append(f"or go online once so that `datasets` can fetch {self.hub_id} into its cache")
        else:
            ways.append("(it has no loadable copy on the Hugging Face hub)")
        return "; ".join(ways)


EXTERNAL: dict[str, ExternalData] = {
    "glue": ExternalData("GLUE", "glue", "--data-dir", "nyu-mll/glue", "per task; MRPC is not redistributable"),
    "squad_v2": ExternalData("SQuAD 2.0", "squad_v2", "--data", "rajpurkar/squad_v2", "CC BY-SA 4.0"),
    "blimp": ExternalData("BLiMP", "blimp", "--data", "nyu-mll/blimp", "CC BY 4.0"),
    "lama": ExternalData("LAMA", "lama", "--data", None, "CC BY-NC 4.0: never shipped"),
    "wnut17": ExternalData("WNUT-17", "wnut17", "--wnut", None, "CC BY 4.0"),
}


def data_root() -> Path | None:
    """``$BERTOLOGY_DATA`` when it is set (an existing folder), else None."""
    value = os.environ.get(DATA_ENV)
    if not value:
        return None
    root = Path(value).expanduser()
    if not root.is_dir():
        raise DataError(f"{DATA_ENV}={value}: not a folder; expected the folder holding glue/, squad_v2/, lama/, ...")
    return root


def external_folder(key: str, given: str | os.PathLike | None = None) -> Path | None:
    """Where the external data set ``key`` (see :data:`EXTERNAL`) is: ``given``, else
    ``$BERTOLOGY_DATA/<folder>`` when it exists, else None (the caller may then try `datasets`)."""
    spec = EXTERNAL[key]
    if given is not None:
        return Path(given)
    root = data_root()
    if root is not None and (root / spec.folder).exists():
        return root / spec.folder
    return None


def resolve_corpus(path: str | os.PathLike) -> Path:
    """The file a corpus argument names: a path as given, or a packaged corpus name (``ewt-train``,
    ``ewt-dev``, ``ewt-test``: :func:`default_corpus`) when no such path exists. Every ``--data`` goes
    through here (by :func:`bertology.data.corpus.read_corpus`)."""
    if not Path(path).exists() and str(path) in PACKAGED_CORPORA:
        return default_corpus(str(path))
    return Path(path)


def missing_data(key: str, what: str = "", why: str = "") -> MissingData:
    """The one-line error for an external data set that was not found, naming the ways to provide it."""
    spec = EXTERNAL[key]
    subject = f"{spec.name} {what}".strip()
    because = f" ({why})" if why else ""
    return MissingData(f"{subject} not found{because}: {spec.ways()}", dataset=key)


def shared_data_dir() -> Path:
    """The evaluation data folder named by ``$BERTOLOGY_DATA`` (tests and benchmarks set it to this
    project's ``shared/data``; the product's defaults never need it)."""
    root = data_root()
    if root is None:
        raise DataError(f"no evaluation data folder: set {DATA_ENV} to the folder holding ud_english_ewt/, glue/, ...")
    return root


def load_hub_split(key: str, config: str | None, split: str, what: str):
    """``datasets.load_dataset(<hub id of key>, config, split=...)``; :class:`MissingData` when `datasets`
    is not installed or the set is neither cached nor reachable (offline)."""
    try:
        import datasets  # only when a hub copy is read: it loads pandas and pyarrow; this module loads at CLI start
    except ImportError:
        raise missing_data(key, what, "the `datasets` package is not installed") from None
    try:
        return datasets.load_dataset(EXTERNAL[key].hub_id, config, split=split)
    except Exception as error:  # offline and not cached, hub unreachable: all end in "not found"
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise missing_data(key, what, f"`datasets`: {reason}") from None
