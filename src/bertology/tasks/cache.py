"""SentEval tasks built from a treebank once and kept in the bertology cache (``$BERTOLOGY_CACHE`` or
``~/.cache/bertology``), keyed by the treebank files' content."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from bertology.data.corpus import read_senteval
from bertology.data.treebank import find_splits
from bertology.store.store import file_sha256
from bertology.tasks.build import build_tasks
from bertology.tasks.catalog import SENTEVAL_FILES


def treebank_hash(treebank: str | os.PathLike) -> str:
    """A key for a treebank folder's content: the SHA-256 of its train/dev/test files (not their path)."""
    files = find_splits(treebank)
    digest = hashlib.sha256()
    for split in sorted(files):
        digest.update(f"{split}:{file_sha256(files[split])}\n".encode())
    return digest.hexdigest()[:16]


def built_tasks(names: list[str], treebank: Path | None, cache: Path, progress: bool, split: str = "pooled"
                    ) -> tuple[dict[str, list], dict[str, str], dict[str, str]]:
    """SentEval tasks built from the treebank by bertology.tasks, cached by the treebank files' content
    (SHA-256), so an edited file at the same path is rebuilt. Returns ``(built, skipped, split_sources)``:
    sentences per built task, per task the treebank cannot support the builder's reason, and per built task
    how its splits were made (the manifest's ``split_source``). ``split``: the treebank's
    own train/dev/test or ``"pooled"`` (:func:`bertology.tasks.load_splits`), cached apart."""
    if treebank is None:
        return {}, {}, {}
    out_dir = cache / (f"senteval-tasks-{treebank_hash(treebank)}" + ("" if split == "treebank" else f"-{split}"))
    manifest = out_dir / "manifest.json"
    state = json.loads(manifest.read_text()) if manifest.is_file() else {"tasks": {}, "skipped": {}}
    known = set(state.get("tasks", {})) | set(state.get("skipped", {}))
    missing = [n for n in names if n not in known
               or (n in state.get("tasks", {}) and not (out_dir / SENTEVAL_FILES[n]).is_file())]
    if missing:
        build_tasks(treebank, out_dir, tasks=missing, progress=progress, split=split)
        state = json.loads(manifest.read_text())
    built = {n: read_senteval(out_dir / SENTEVAL_FILES[n]) for n in names if n in state.get("tasks", {})}
    skipped = {n: str(state.get("skipped", {}).get(n, "not built")) for n in names if n not in built}
    split_sources = {n: str(state["tasks"][n].get("split_source", "")) for n in built}
    return built, skipped, split_sources
