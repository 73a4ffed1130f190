"""The labelled sentences of a fine-tuning task: GLUE's (:func:`bertology.data.read_glue`) or a packaged
task's (:data:`bertology.data.glue.PACKAGED_TASKS`), built from the packaged UD English EWT once and kept
in the bertology cache."""

from __future__ import annotations

from pathlib import Path

from bertology.data.glue import GlueExample, glue_task, read_glue
from bertology.data.paths import packaged_treebank
from bertology.errors import DataError
from bertology.settings import cache_root
from bertology.tasks.cache import built_tasks

#: Packaged task -> (the SentEval task it is, its labels in class-id order).
_SENTEVAL = {"bshift": ("bigram_shift", ("O", "I"))}


def read_examples(task: str, split: str = "train", data_dir: str | Path | None = None) -> list[GlueExample]:
    """``task``'s ``split`` ('train' or 'dev') as :class:`GlueExample` s, wherever the task comes from."""
    spec = glue_task(task)
    if spec.source == "glue":
        return read_glue(spec.name, split, data_dir)
    if split not in spec.files:
        raise DataError(f"unknown split {split!r} for {spec.name}; expected one of {', '.join(spec.files)}")
    senteval, labels = _SENTEVAL[spec.name]
    built, skipped, _ = built_tasks([senteval], packaged_treebank(), cache_root(), False, "pooled")
    if senteval not in built:
        raise DataError(f"{spec.name}: cannot be built from the packaged treebank: {skipped.get(senteval)}")
    wanted = spec.files[split]
    examples = [GlueExample(" ".join(s.words), None, labels.index(s.label), f"{wanted}-{i}", i + 1)
                for i, s in enumerate(x for x in built[senteval] if x.split == wanted)]
    if not examples:
        raise DataError(f"{spec.name}: no {split} sentences in the built task")
    return examples
