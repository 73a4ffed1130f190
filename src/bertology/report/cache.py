"""Results keyed by what they were computed from, so a rerun reuses them and an interrupted run resumes."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Callable

from bertology.files import atomic_dir, exclusive, write_json
from bertology.results import Result


def key_hash(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]


class ResultCache:
    """A folder of finished :class:`~bertology.results.Result`\\ s: ``<name>-<hash of inputs>/`` holds what
    ``Result.save`` writes (``<table>.parquet``/``.csv``, ``meta.json``) plus ``key.json``.

    A result folder appears only when complete (written to a temporary folder, then renamed), so an
    interrupted computation is simply redone and a finished one is never recomputed unless ``fresh``. An entry is
    computed under its lock (:func:`~bertology.files.exclusive`): a second process asking for it meanwhile waits
    and reuses it (with ``fresh`` too: the entry it waited for is as fresh as its own would be).
    """

    def __init__(self, root: str | Path, fresh: bool = False):
        self.root = Path(root)
        self.fresh = fresh
        self.opened = time.time()
        self.hits: list[str] = []
        self.misses: list[str] = []

    def path(self, name: str, key: dict) -> Path:
        return self.root / f"{name}-{key_hash(key)}"

    def get_or_compute(self, name: str, key: dict, compute: Callable[[], Result]) -> Result:
        """The Result cached under ``name`` and ``key``, or ``compute()``'s, saved first. Both are read back
        from the folder, so a fresh and a reused Result hold the same types."""
        target = self.path(name, key)
        # Under the lock even to read: an entry another process is replacing (--fresh) is never read half-removed.
        with exclusive(target, "computing"):
            if _finished(target) and (not self.fresh or _published_since(target, self.opened)):
                self.hits.append(name)  # (with fresh: another process finished it while this one waited)
                return Result.load(target)
            self.misses.append(name)
            result = compute()
            if not isinstance(result, Result):
                raise TypeError(f"the {name!r} computation returned {type(result).__name__}; expected a Result")
            with atomic_dir(target) as tmp:
                result.save(tmp)
                write_json(tmp / "key.json", json.loads(json.dumps(key, sort_keys=True, default=str)))
            return Result.load(target)


def _finished(target: Path) -> bool:
    # An entry written before the cache held Results has key.json but no meta.json: it is simply recomputed.
    return (target / "key.json").is_file() and (target / "meta.json").is_file()


def _published_since(target: Path, moment: float) -> bool:
    """Whether the entry was put in place after ``moment`` (a ``fresh`` cache reuses only those)."""
    return (target / "key.json").stat().st_mtime >= moment
