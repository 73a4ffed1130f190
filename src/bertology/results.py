"""The one result shape: every capability returns a :class:`Result`.

A result is a name, a few tidy tables and a JSON-able ``meta`` dict (model, fingerprint, settings, the
sizes actually used). Tables follow three rules:

* ``layer``, ``head`` and ``seed`` are nullable integers (pandas ``Int64``) in the one numbering
  (:mod:`bertology.numbering`); what is not a layer (pooler, classifier, a scalar mix) goes in its own
  column (``component``), never in ``layer``. A row that has no seed has ``<NA>``, never ``-1``.
* Accuracies and other rates are **fractions in [0, 1]** in every table and API; only what is shown to a
  person (console tables, the HTML report, figure axes) is formatted as percent, by :func:`percent`.
* Nothing that matters lives in ``DataFrame.attrs`` (concatenation and Parquet lose it): it goes in
  ``meta`` or in a table of its own.

``result.save(folder)`` writes ``<table>.parquet`` + ``<table>.csv`` for each table and ``meta.json``,
each atomically; :meth:`Result.load` reads them back.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bertology.errors import DataError
from bertology.files import staged_dir, write_json, write_table

#: Integer columns that are nullable everywhere.
INTEGER_COLUMNS = ("layer", "head", "seed")


def tidy(frame: pd.DataFrame, columns: list[str] | None = None) -> pd.DataFrame:
    """``frame`` with ``layer``/``head``/``seed`` as ``Int64``, ``columns`` (if given) first, attrs dropped.

    Raises :class:`DataError` if ``layer`` holds something that is not an integer (e.g. ``"pooler"``).
    """
    frame = frame.copy()
    frame.attrs = {}
    for column in INTEGER_COLUMNS:
        if column in frame.columns:
            try:
                frame[column] = pd.array(pd.to_numeric(frame[column], errors="raise"), dtype="Int64")
            except (ValueError, TypeError):
                bad = [v for v in frame[column].dropna().unique() if not _is_integral(v)][:3]
                raise DataError(f"column {column!r} holds non-integer values {bad}; put them in 'component'") \
                    from None
    if columns is not None:
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise DataError(f"table is missing columns {missing}; it has {list(frame.columns)}")
        frame = frame[columns + [c for c in frame.columns if c not in columns]]
    return frame.reset_index(drop=True)


def _is_integral(value) -> bool:
    try:
        return float(value) == int(float(value))
    except (TypeError, ValueError):
        return False


#: What a table shows for a missing number (NaN, None, ``pd.NA``).
MISSING = "–"


def is_missing(value) -> bool:
    """Whether ``value`` is a missing number (None, NaN, ``pd.NA``); a string or a sequence never is."""
    return value is None or (not isinstance(value, str) and pd.api.types.is_scalar(value) and bool(pd.isna(value)))


def percent(value: float, digits: int = 1) -> str:
    """A fraction shown as percent: ``0.8312`` -> ``"83.1"``. NaN shows as an en dash (:data:`MISSING`)."""
    if is_missing(value):
        return MISSING
    return f"{100 * float(value):.{digits}f}"


def number(value: float, digits: int = 3, unit: str = "", thousands: bool = False) -> str:
    """A number with ``digits`` decimals for a table: ``0.8312`` -> ``"0.831"``, ``unit`` after it
    (``number(1234.5, 0, " s", thousands=True)`` -> ``"1,234 s"``). NaN shows as an en dash (:data:`MISSING`),
    as in :func:`percent`: the one NaN-to-dash formatter of console tables and reports."""
    if is_missing(value):
        return MISSING
    return f"{float(value):{',' if thousands else ''}.{digits}f}{unit}"


@dataclass
class Result:
    """What every experiment returns: ``tables`` of tidy DataFrames and JSON-able ``meta``.

    ``result["layers"]`` is ``result.tables["layers"]``; ``result.save(out)`` writes them all.
    """

    name: str
    tables: dict[str, pd.DataFrame]
    meta: dict = field(default_factory=dict)
    figures: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tables = {key: tidy(frame) for key, frame in self.tables.items()}

    def __getitem__(self, key: str) -> pd.DataFrame:
        try:
            return self.tables[key]
        except KeyError:
            raise KeyError(f"{self.name} result has no table {key!r}; it has {sorted(self.tables)}") from None

    def __contains__(self, key: str) -> bool:
        return key in self.tables

    def save(self, out: str | os.PathLike) -> Path:
        """Write every table (Parquet + CSV) and ``meta.json`` into ``out``; returns ``out``.

        All of them or none (:func:`~bertology.files.staged_dir`): a full disk or a kill part-way leaves the
        folder as it was, never new tables beside an old ``meta.json``; other files in ``out`` are kept."""
        out = Path(out)
        with staged_dir(out) as staged:
            for key, frame in self.tables.items():
                write_table(frame, staged / key)
            payload = {"name": self.name, "tables": sorted(self.tables), "meta": self.meta,
                       "figures": {k: str(Path(v).name) for k, v in self.figures.items()}}
            write_json(staged / "meta.json", payload)
        return out

    @classmethod
    def load(cls, out: str | os.PathLike) -> "Result":
        """Read a saved result back (tables from Parquet, so types survive)."""
        out = Path(out)
        meta_path = out / "meta.json"
        if not meta_path.is_file():
            raise DataError(f"{out}: no meta.json; expected a folder written by Result.save")
        payload = json.loads(meta_path.read_text(encoding="utf-8"))
        tables = {key: pd.read_parquet(out / f"{key}.parquet") for key in payload["tables"]}
        figures = {k: out / v for k, v in payload.get("figures", {}).items()}
        return cls(name=payload["name"], tables=tables, meta=payload.get("meta", {}), figures=figures)
