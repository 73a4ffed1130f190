"""The registry of word-, arc- and span-level probing tasks: one entry and its builder per task.

A task is a name, a level, the sentences it reads (its *source*) and a **builder**: a function from the
sentences of one split to ``(refs, labels)``, one row per example::

    level      refs row                      features (per layer)
    token      (sentence, word)              the word's vector
    edge       (sentence, dependent, head)   [dep; head; dep * head]
    span       (sentence, start, end)        mean of words start..end-1
    sentence   (sentence,)                   mean of the sentence's words

Word and sentence indices count from 0 within the list the builder was given. Adding a task is one
call; ``bertology probe --tasks NAME``, :func:`~bertology.probing.run_probing` and the report (for
treebank tasks) pick it up::

    from bertology.probing import register_task

    def head_left(sentences):
        refs, labels = [], []
        for i, sentence in enumerate(sentences):
            for j, head in enumerate(sentence.heads):
                if head:  # the root has no head
                    refs.append((i, j))
                    labels.append(head - 1 < j)
        return refs, labels

    register_task("head_left", "token", head_left, description="is the word's head to its left?")

Control labels (Hewitt and Liang) need no code: they key on the word type (token), the dependent's type
(edge) or the span's types (span). The ten SentEval sentence tasks have their own catalogue
(:mod:`bertology.tasks.catalog`) and builder (``bertology tasks build``).

This module imports neither numpy nor torch: the built-in builders and loaders live in
:mod:`bertology.probing.datasets` and are imported when first called, so ``bertology probe --tasks``
checks its names (:func:`resolve_tasks`) before anything heavy loads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from bertology.errors import DataError, SettingError
from bertology.probing.names import LEVELS
from bertology.tasks.catalog import TASK_NAMES, resolve_task_name

if TYPE_CHECKING:
    from bertology.data import Sentence

Builder = Callable[[Sequence["Sentence"]], object]


def _from_datasets(name: str) -> Callable:
    """``bertology.probing.datasets.<name>``, imported when first called."""

    def call(*args, **kwargs):
        from bertology.probing import datasets

        return getattr(datasets, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"bertology.probing.datasets.{name} (imported when first called)."
    return call


upos_examples, xpos_examples, deprel_examples, position_examples, entity_examples = map(
    _from_datasets, ("upos_examples", "xpos_examples", "deprel_examples", "position_examples", "entity_examples"))
load_ud_pools, load_wnut_pools = map(_from_datasets, ("load_ud_pools", "load_wnut_pools"))


@dataclass(frozen=True)
class Source:
    """Where a task's sentences come from: a loader ``(folder, max_sentences) -> {split: sentences}`` and
    the folder used when none is given (a name under the shared data folder)."""

    name: str
    load: Callable[[Path, int | None], dict[str, list["Sentence"]]]
    default_folder: str
    description: str


SOURCES: dict[str, Source] = {
    "ud": Source("ud", load_ud_pools, "ud_english_ewt",
                 "a UD treebank folder with train/dev/test CoNLL-U (--treebank; default UD English EWT)"),
    "wnut17": Source("wnut17", load_wnut_pools, "wnut17", "WNUT-17 train/dev/test (emerging entities)"),
}


@dataclass(frozen=True)
class ProbingTask:
    """One registered task (see the module doc)."""

    name: str
    level: str
    builder: Builder
    source: str = "ud"
    description: str = ""
    notes: tuple[str, ...] = ()


_REGISTRY: dict[str, ProbingTask] = {}

#: Names that stand for several tasks on the command line.
GROUPS: dict[str, tuple[str, ...]] = {"ud": ("upos", "xpos", "deprel")}
#: Not registered tasks but understood by ``run_probing``: the structural probes on the treebank.
STRUCTURAL = "structural"


def register_task(name: str, level: str, builder: Builder, *, source: str = "ud", description: str = "",
                  notes: Sequence[str] = (), replace: bool = False) -> ProbingTask:
    """Register a probing task; returns its entry.

    ``level``: ``token``, ``edge``, ``span`` or ``sentence``; ``builder(sentences) -> (refs, labels)`` (see
    the module doc); ``source``: ``"ud"`` (the treebank) or ``"wnut17"``. Raises :class:`DataError` for a
    name already taken (unless ``replace``), an unknown level or source, or a builder that is not callable.
    """
    key = name.strip().lower()
    if not key or "," in key:
        raise DataError(f"task name {name!r}: expected a non-empty name without commas")
    if key in _REGISTRY and not replace:
        raise DataError(f"task {key!r} is already registered; pass replace=True to redefine it")
    if key in GROUPS or key in ("senteval", STRUCTURAL):
        raise DataError(f"task name {key!r} is reserved")
    if level not in LEVELS:
        raise DataError(f"task {key!r}: level {level!r}; expected one of {', '.join(LEVELS)}")
    if source not in SOURCES:
        raise DataError(f"task {key!r}: source {source!r}; expected one of {', '.join(SOURCES)}")
    if not callable(builder):
        raise DataError(f"task {key!r}: the builder must be a function sentences -> (refs, labels)")
    task = ProbingTask(key, level, builder, source, description, tuple(notes))
    _REGISTRY[key] = task
    return task


def unregister_task(name: str) -> None:
    """Remove a registered task (tests and notebooks that redefine tasks)."""
    _REGISTRY.pop(name.strip().lower(), None)


def get_task(name: str) -> ProbingTask:
    key = name.strip().lower()
    if key not in _REGISTRY:
        raise DataError(f"unknown probing task {name!r}; registered: {', '.join(_REGISTRY)}")
    return _REGISTRY[key]


def is_registered(name: str) -> bool:
    return name.strip().lower() in _REGISTRY


def task_names(source: str | None = None) -> tuple[str, ...]:
    """Registered task names in registration order, optionally of one source."""
    return tuple(name for name, task in _REGISTRY.items() if source is None or task.source == source)


register_task("upos", "token", upos_examples, description="universal part of speech of the word")
register_task("xpos", "token", xpos_examples, description="language-specific part of speech of the word")
register_task("deprel", "edge", deprel_examples, description="universal relation of the arc dependent -> head",
              notes=("root arcs left out; labels are universal relations without subtypes",))
register_task("position", "token", position_examples, description="linear position of the word in its sentence",
              notes=("labels 0-15 (0 = the first word) and 16+ for every later word (Lin et al. 2019's position "
                     "probe)",))
register_task("ner", "span", entity_examples, source="wnut17", description="type of a gold WNUT-17 entity span",
              notes=("gold entity spans, type predicted; span = mean of its word vectors",))


def senteval_names() -> tuple[str, ...]:
    """The ten SentEval tasks (:mod:`bertology.tasks.catalog`), in Table 2 order."""
    return TASK_NAMES


def resolve_tasks(tasks: str | Iterable[str]) -> list[str]:
    """Expand ``"senteval"`` (the ten SentEval tasks) and ``"ud"`` (upos, xpos, deprel); accept registered
    task names, ``structural``, Table 2 names (``BShift``) and comma-separated strings. Order is kept,
    duplicates dropped; :class:`DataError` names an unknown task and the known ones."""
    items = tasks.split(",") if isinstance(tasks, str) else [t for item in tasks for t in str(item).split(",")]
    out: list[str] = []
    for item in (t.strip() for t in items):
        if not item:
            continue
        key = item.lower()
        if key == "senteval":
            expanded = list(senteval_names())
        elif key in GROUPS:
            expanded = list(GROUPS[key])
        elif is_registered(key) or key == STRUCTURAL:
            expanded = [key]
        else:
            try:
                expanded = [resolve_task_name(item)]
            except DataError:
                raise DataError(
                    f"unknown task {item!r}; expected {', '.join(task_names())}, {STRUCTURAL}, ud (upos, xpos, "
                    f"deprel), senteval (all ten) or a SentEval task ({', '.join(senteval_names())})"
                ) from None
        out += [t for t in expanded if t not in out]
    if not out:
        raise SettingError("tasks", tasks, "no tasks given; expected e.g. senteval or upos,xpos,deprel", shown="")
    return out
