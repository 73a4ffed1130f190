"""Results keyed by what they were computed from, so a rerun reuses them and an interrupted run resumes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

import pandas as pd

from bertology.files import atomic_dir, atomic_path, write_json



def key_hash(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]


class ResultCache:
    """A folder of finished results: ``<name>-<hash of inputs>/<table>.parquet`` plus ``key.json``.

    A result folder appears only when complete (written to a temporary folder, then renamed), so an
    interrupted computation is simply redone and a finished one is never recomputed unless ``fresh``.
    """

    def __init__(self, root: str | Path, fresh: bool = False):
        self.root = Path(root)
        self.fresh = fresh
        self.hits: list[str] = []
        self.misses: list[str] = []

    def path(self, name: str, key: dict) -> Path:
        return self.root / f"{name}-{key_hash(key)}"

    def get_or_compute(self, name: str, key: dict, compute: Callable[[], dict[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
        target = self.path(name, key)
        if target.is_dir() and not self.fresh and (target / "key.json").is_file():
            self.hits.append(name)
            return {p.stem: pd.read_parquet(p) for p in sorted(target.glob("*.parquet"))}
        self.misses.append(name)
        tables = compute()
        with atomic_dir(target) as tmp:
            for table_name, frame in tables.items():
                with atomic_path(tmp / f"{table_name}.parquet") as part:
                    _clean_for_parquet(frame).to_parquet(part, index=False)
            write_json(tmp / "key.json", json.loads(json.dumps(key, sort_keys=True, default=str)))
        return {k: pd.read_parquet(target / f"{k}.parquet") for k in tables}


def _clean_for_parquet(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.reset_index(drop=True).copy()
    for column in frame.columns:
        if frame[column].dtype == object:
            frame[column] = frame[column].map(lambda v: v if v is None or isinstance(v, (str, int, float, bool))
                                              else json.dumps(v, default=str))
    frame.columns = [str(c) for c in frame.columns]
    return frame
