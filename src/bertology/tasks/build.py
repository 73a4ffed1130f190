"""``build_tasks``: the ten SentEval probing tasks from a CoNLL-U treebank, written in SentEval's format."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd

from bertology import __version__ as version
from bertology.data import Sentence, read_conllu
from bertology.data.treebank import conllu_files, split_of
from bertology.errors import DataError, OutputError
from bertology.files import atomic_dir, describe_os_error, ensure_dir, write_text
from bertology.progress import progress_bar
from bertology.store.store import file_sha256
from bertology.tasks.builders import BUILDERS, SPLITS, BuildContext, TaskOutput
from bertology.tasks.catalog import SENTEVAL_FILES, SPLIT_CHOICES, TABLE2_COLUMNS, TASK_NAMES, resolve_task_name

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "bertology-senteval-tasks/2"
#: The first format named splits by SentEval's codes (tr/va/te) inside the manifest too; it is read as /2.
MANIFEST_FORMAT_TR_VA_TE = "bertology-senteval-tasks/1"
#: SentEval's corpus held sentences of 5-28 Moses tokens (its SentLen bins end at 28).
DEFAULT_LENGTH_RANGE = (5, 28)
#: Fractions used to split a treebank that does not come as train/dev/test files.
RANDOM_SPLIT = (0.8, 0.1, 0.1)
#: Fractions of ``split="pooled"``: every sentence of the treebank re-split with a large test share, so the
#: big binary tasks (BShift, SOMO) reach a 95% interval of about +/-1.5 points on UD EWT.
POOLED_SPLIT = (0.5, 0.1, 0.4)
#: Split -> SentEval's code for it, written only into the task files (the format's own vocabulary).
SENTEVAL_SPLIT = {"train": "tr", "dev": "va", "test": "te"}


@dataclass
class BuildReport:
    """What ``build_tasks`` did: tasks written, tasks skipped (with the reason) and per-label counts."""

    out_dir: Path
    built: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    counts: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["task", "split", "label", "n"]))
    split_source: str = ""

    @property
    def manifest_path(self) -> Path:
        return self.out_dir / MANIFEST_NAME

    def totals(self) -> pd.DataFrame:
        """One row per built task, one column per split."""
        if self.counts.empty:
            return pd.DataFrame(columns=["task", *SPLITS])
        table = self.counts.pivot_table(index="task", columns="split", values="n", aggfunc="sum", fill_value=0)
        return table.reindex(columns=list(SPLITS), fill_value=0).reindex(self.built).reset_index()

    def summary(self) -> str:
        lines = [f"built {len(self.built)} task(s) in {self.out_dir} ({self.split_source})"]
        for row in self.totals().itertuples(index=False):
            lines.append(f"  {row.task}: train={row.train} dev={row.dev} test={row.test}")
        for task, reason in self.skipped.items():
            lines.append(f"  skipped {task}: {reason}")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------ input


def _conllu_files(paths: Sequence[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(conllu_files(path))
        elif path.exists():
            files.append(path)
        else:
            raise DataError(f"{path}: file not found; expected a CoNLL-U file or a UD treebank directory")
    return files


def split_role(path: Path) -> str | None:
    """train/dev/test of a treebank file, by the one naming rule of :func:`bertology.data.treebank.split_of`."""
    return split_of(path)


def _clean_words(sentence: Sentence) -> Sentence:
    # SentEval's format is space-delimited; a word with a space (allowed in some UD treebanks) is kept as one.
    if any(any(ch.isspace() for ch in w) for w in sentence.words):
        words = tuple("_".join(w.split()) for w in sentence.words)
        return dataclasses.replace(sentence, words=words)
    return sentence


def load_splits(
    treebank: str | os.PathLike | Sequence[str | os.PathLike], seed: int = 0, split: str = "treebank"
) -> tuple[dict[str, list[Sentence]], list[dict], str]:
    """Sentences per split (train/dev/test), the input files (path, sha256, split) and how splits were made.

    ``split="treebank"``: a treebank given as train, dev and test files keeps those splits; anything else
    (one file, or files that do not name all three splits) is pooled and split 80/10/10 at random
    (seeded). ``split="pooled"``: every file's sentences are pooled and split 50/10/40 at random
    (:data:`POOLED_SPLIT`), for test sets large enough for +/-1.5-point intervals on the big tasks; the
    treebank's own test file is then mixed into training, so do not use it for a model trained on the
    treebank.
    """
    if split not in SPLIT_CHOICES:
        raise DataError(f"split {split!r}: expected one of {', '.join(SPLIT_CHOICES)}")
    items = [treebank] if isinstance(treebank, (str, os.PathLike)) else list(treebank)
    if not items:
        raise DataError("no treebank given; expected a UD treebank directory or CoNLL-U files")
    files = _conllu_files([Path(p) for p in items])
    roles = {f: split_role(f) for f in files}
    file_info = []
    by_split: dict[str, list[Sentence]] = {s: [] for s in SPLITS}
    keeps_files = all(any(r == s for r in roles.values()) for s in SPLITS) and all(r is not None for r in roles.values())
    if split == "treebank" and keeps_files:
        for f in files:
            by_split[roles[f]].extend(_clean_words(s) for s in read_conllu(f))
            file_info.append({"path": str(f.resolve()), "sha256": file_sha256(f), "split": roles[f]})
        return by_split, file_info, "treebank train/dev/test files"
    pooled: list[Sentence] = []
    for f in files:
        pooled.extend(_clean_words(s) for s in read_conllu(f))
        file_info.append({"path": str(f.resolve()), "sha256": file_sha256(f), "split": None})
    shares = POOLED_SPLIT if split == "pooled" else RANDOM_SPLIT
    order = np.random.default_rng([seed, 7]).permutation(len(pooled))
    n_tr = int(round(shares[0] * len(pooled)))
    n_va = int(round(shares[1] * len(pooled)))
    by_split["train"] = [pooled[i] for i in sorted(order[:n_tr])]
    by_split["dev"] = [pooled[i] for i in sorted(order[n_tr:n_tr + n_va])]
    by_split["test"] = [pooled[i] for i in sorted(order[n_tr + n_va:])]
    percents = "/".join(f"{round(100 * x)}" for x in shares)
    return by_split, file_info, f"random {percents} split of the pooled sentences (seeded)"


def _prepare(by_split: dict[str, list[Sentence]], length_range: tuple[int, int], seed: int,
             form_shares: tuple[float, float, float] | None = None):
    """De-duplicate across and within splits (test > dev > train), filter by length, count corpus statistics."""
    seen: set[str] = set()
    kept: dict[str, list[Sentence]] = {}
    stats: dict[str, dict] = {}
    for split in ("test", "dev", "train"):
        unique = []
        for sentence in by_split[split]:
            text = " ".join(sentence.words)
            if text in seen:
                continue
            seen.add(text)
            unique.append(sentence)
        in_range = [s for s in unique if length_range[0] <= len(s) <= length_range[1]]
        kept[split] = in_range
        stats[split] = {
            "sentences": len(by_split[split]),
            "duplicates_dropped": len(by_split[split]) - len(unique),
            "outside_length_range": len(unique) - len(in_range),
            "used": len(in_range),
        }
    frequency: Counter = Counter()
    train_frequency: Counter = Counter()
    spellings: Counter = Counter()
    initial_spellings: Counter = Counter()
    for split in SPLITS:
        for sentence in by_split[split]:
            for position, w in enumerate(sentence.words):
                frequency[w.lower()] += 1
                # A word's usual spelling is learnt away from the sentence start, where it is capitalised.
                (spellings if position > 0 else initial_spellings)[w] += 1
                if split == "train":
                    train_frequency[w.lower()] += 1
    casing: dict[str, str] = {}
    for table in (spellings, initial_spellings):
        for spelling, n in sorted(table.items(), key=lambda kv: (-kv[1], kv[0])):
            casing.setdefault(spelling.lower(), spelling)
    ctx = BuildContext(
        splits={s: kept[s] for s in SPLITS}, seed=seed, frequency=frequency,
        train_frequency=train_frequency, casing=casing, form_shares=form_shares,
    )
    return ctx, {s: stats[s] for s in SPLITS}


# ----------------------------------------------------------------------------------------- output


def _skip_reason(output: TaskOutput) -> str | None:
    sizes = {s: len(output.instances[s]) for s in SPLITS}
    if all(sizes[s] > 0 for s in SPLITS):
        return None
    empty = ", ".join(s for s in SPLITS if sizes[s] == 0)
    why = "; ".join(f"{reason} ({n} sentences)" for reason, n in output.rejected.most_common(3))
    return f"no instances in split(s) {empty}" + (f"; sentences were rejected because: {why}" if why else "")


def _task_text(output: TaskOutput) -> str:
    lines = []
    for split in SPLITS:
        for inst in output.instances[split]:
            lines.append(f"{SENTEVAL_SPLIT[split]}\t{inst.label}\t{' '.join(inst.words)}\n")
    return "".join(lines)


def _counts(output: TaskOutput) -> dict[str, dict[str, int]]:
    return {
        split: dict(sorted(Counter(inst.label for inst in output.instances[split]).items()))
        for split in SPLITS
    }


def manifest_entry_splits(entry: dict) -> dict:
    """A task's manifest entry with its splits named train/dev/test (an entry of the first format names them
    tr/va/te; one of the current format is returned as it is)."""
    if not isinstance(entry, dict):
        return entry
    named = {code: split for split, code in SENTEVAL_SPLIT.items()}
    out = dict(entry)
    for key in ("input", "counts", "totals"):
        if isinstance(entry.get(key), dict):
            out[key] = {named.get(split, split): value for split, value in entry[key].items()}
    if isinstance(entry.get("treebank"), list):
        out["treebank"] = [{**f, "split": named.get(f.get("split"), f.get("split"))} if isinstance(f, dict) else f
                           for f in entry["treebank"]]
    return out


def _read_manifest(out_dir: Path) -> dict:
    path = out_dir / MANIFEST_NAME
    if not path.exists():
        return {"format": MANIFEST_FORMAT, "tasks": {}, "skipped": {}}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a valid JSON manifest ({exc}); delete it or choose another output "
                        "folder") from None
    if not isinstance(manifest, dict) or manifest.get("format") not in (MANIFEST_FORMAT, MANIFEST_FORMAT_TR_VA_TE):
        raise DataError(f"{path}: not a bertology task manifest (expected format {MANIFEST_FORMAT!r})")
    if manifest["format"] == MANIFEST_FORMAT_TR_VA_TE:
        manifest["format"] = MANIFEST_FORMAT
        manifest["tasks"] = {name: manifest_entry_splits(entry) for name, entry in manifest.get("tasks", {}).items()}
    manifest.setdefault("tasks", {})
    manifest.setdefault("skipped", {})
    return manifest


def build_tasks(
    treebank: str | os.PathLike | Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    tasks: Iterable[str] | None = None,
    seed: int = 0,
    length_range: tuple[int, int] = DEFAULT_LENGTH_RANGE,
    progress: bool = False,
    split: str = "treebank",
) -> BuildReport:
    """Build SentEval probing tasks from a CoNLL-U treebank into ``out_dir``.

    ``treebank`` is a UD directory (its ``*-train/dev/test.conllu(.gz)`` keep their split), one CoNLL-U
    file or a list of them. ``tasks`` takes canonical names or Table 2 names (default: all ten). Each
    task is written as ``<senteval file name>`` (``split<TAB>label<TAB>sentence``) and described in
    ``manifest.json``. Tasks the treebank cannot support (e.g. no Number feature) are skipped with the
    reason in the report and manifest; the others are still built. ``split``: ``"treebank"`` (its
    train/dev/test files) or ``"pooled"`` (all sentences re-split 50/10/40; :func:`load_splits`).
    """
    wanted = [resolve_task_name(t) for t in tasks] if tasks is not None else list(TASK_NAMES)
    wanted = [t for t in TASK_NAMES if t in set(wanted)]
    if not wanted:
        raise DataError("no tasks requested; expected at least one of " + ", ".join(TASK_NAMES))
    lo, hi = length_range
    if not (1 <= lo <= hi):
        raise DataError(f"length_range {length_range!r}: expected 1 <= min <= max")
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        ensure_dir(out_dir)  # raises the one-line OutputError before any work
    manifest = _read_manifest(out_dir)

    by_split, file_info, split_source = load_splits(treebank, seed=seed, split=split)
    if manifest["tasks"] and {t.get("split_source") for t in manifest["tasks"].values()} != {split_source}:
        # Tasks split another way would mix two splits in one folder.
        raise DataError(f"{out_dir}: holds tasks split as {sorted({t.get('split_source') for t in manifest['tasks'].values()})}, "
                        f"not {split_source!r}; choose another output folder")
    ctx, input_stats = _prepare(by_split, (lo, hi), seed, POOLED_SPLIT if split == "pooled" else None)

    report = BuildReport(out_dir=out_dir, split_source=split_source)
    rows = []
    stale: list[Path] = []
    with progress_bar(progress, transient=True) as live, _staged(out_dir, stale) as stage:
        job = live.add_task("building probing tasks", total=len(wanted))
        for name in wanted:
            output = BUILDERS[name](ctx)
            reason = _skip_reason(output)
            target = stage / SENTEVAL_FILES[name]
            if reason is not None:
                report.skipped[name] = reason
                manifest["skipped"][name] = reason
                if name in manifest["tasks"]:
                    # A file from an earlier build would now contradict the manifest.
                    stale.append(out_dir / SENTEVAL_FILES[name])
                    del manifest["tasks"][name]
            else:
                write_text(target, _task_text(output))
                counts = _counts(output)
                manifest["skipped"].pop(name, None)
                manifest["tasks"][name] = {
                    "file": SENTEVAL_FILES[name],
                    "column": TABLE2_COLUMNS[name],
                    "treebank": file_info,
                    "split_source": split_source,
                    "input": input_stats,
                    "seed": seed,
                    "length_range": [lo, hi],
                    "labels": output.label_order or sorted({lbl for c in counts.values() for lbl in c}),
                    "counts": counts,
                    "totals": {s: len(output.instances[s]) for s in SPLITS},
                    "rejected": dict(output.rejected.most_common()),
                    "params": output.params,
                    "deviations": output.deviations,
                    "bertology_version": version,
                }
                report.built.append(name)
                rows += [
                    {"task": name, "split": split, "label": label, "n": n}
                    for split, by_label in counts.items() for label, n in by_label.items()
                ]
            live.advance(job)
        manifest["tasks"] = {k: manifest["tasks"][k] for k in TASK_NAMES if k in manifest["tasks"]}
        write_text(stage / MANIFEST_NAME, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    report.counts = pd.DataFrame(rows, columns=["task", "split", "label", "n"])
    return report


@contextlib.contextmanager
def _staged(out_dir: Path, stale: list[Path]) -> Iterator[Path]:
    """A temporary folder that :func:`build_tasks` writes every file into; only once all are written do they
    reach ``out_dir``, so a failed write (no space left...) leaves nothing behind, and one
    :class:`~bertology.errors.OutputError` line naming ``out_dir``.

    A new ``out_dir`` appears whole (:func:`bertology.files.atomic_dir`). An existing one (an earlier build,
    tasks added to it) keeps what it holds: the new task files are renamed into it, then the manifest, then
    the files of tasks now skipped (``stale``) are removed."""
    if not out_dir.exists():
        stage = None
        try:
            with atomic_dir(out_dir, replace=False) as stage:
                yield stage
        except OutputError as error:
            raise _naming(error, stage, out_dir, "nothing was written") from None
        return
    ensure_dir(out_dir)
    try:
        stage = Path(tempfile.mkdtemp(prefix=".build-", dir=out_dir))
    except OSError as error:
        raise describe_os_error(error, out_dir) from None
    try:
        yield stage
        staged = sorted(p.name for p in stage.iterdir() if p.name != MANIFEST_NAME)
        for name in [*staged, MANIFEST_NAME]:
            os.replace(stage / name, out_dir / name)
        for path in stale:
            path.unlink(missing_ok=True)
    except OutputError as error:
        raise _naming(error, stage, out_dir, f"{out_dir} was left as it was") from None
    except OSError as error:
        raise describe_os_error(error, out_dir) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _naming(error: OutputError, stage: Path | None, out_dir: Path, outcome: str) -> OutputError:
    """The error of a write into the temporary folder, naming the output folder instead, and what became of it."""
    message = str(error).replace(str(stage), str(out_dir)) if stage is not None else str(error)
    return OutputError(f"{message}; {outcome}")
