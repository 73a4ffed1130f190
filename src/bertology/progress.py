"""Progress for long work: a live bar on a terminal, a plain line every few seconds in a log file.

``progress_bar()`` returns an object with rich's ``Progress`` interface (``add_task``, ``advance``,
``update``, used as a context manager). When stderr is not a terminal (``nohup``, cluster jobs, CI) a
live bar would print nothing until the end, so a line such as ``extract minilm: 1200/2001 (60%), 14 s``
is logged instead, at most every ``interval`` seconds per task, and once when a task completes.
"""

from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

T = TypeVar("T")

#: Seconds between log lines when stderr is not a terminal.
LOG_INTERVAL = 5.0


class LogProgress:
    """rich ``Progress``'s interface, printing a line per task every ``interval`` seconds."""

    def __init__(self, interval: float = LOG_INTERVAL, stream=None, disable: bool = False) -> None:
        self.interval = interval
        self.stream = stream
        self.disable = disable
        self.tasks: dict[int, dict] = {}

    def __enter__(self) -> "LogProgress":
        return self

    def __exit__(self, *exc) -> None:
        for task_id in list(self.tasks):
            self._log(task_id, force=True)

    def add_task(self, description: str, total: float | None = None, completed: float = 0, **fields) -> int:
        task_id = len(self.tasks)
        now = time.perf_counter()
        self.tasks[task_id] = {"description": description, "total": total, "completed": completed,
                               "started": now, "last": now, "logged_done": False}
        return task_id

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.tasks[task_id]["completed"] += advance
        self._log(task_id)

    def update(self, task_id: int, *, completed: float | None = None, total: float | None = None,
               advance: float | None = None, description: str | None = None, **fields) -> None:
        task = self.tasks[task_id]
        if completed is not None:
            task["completed"] = completed
        if advance is not None:
            task["completed"] += advance
        if total is not None:
            task["total"] = total
        if description is not None:
            task["description"] = description
        self._log(task_id)

    def _log(self, task_id: int, force: bool = False) -> None:
        if self.disable:
            return
        task = self.tasks[task_id]
        now = time.perf_counter()
        done = task["total"] is not None and task["completed"] >= task["total"]
        if task["logged_done"] or not (force or done or now - task["last"] >= self.interval):
            return
        task["last"] = now
        task["logged_done"] = done
        completed, total = task["completed"], task["total"]
        share = f" ({100 * completed / total:.0f}%)" if total else ""
        amount = f"{completed:,.0f}/{total:,.0f}" if total is not None else f"{completed:,.0f}"
        stream = self.stream or sys.stderr
        print(f"{task['description']}: {amount}{share}, {now - task['started']:.0f} s", file=stream, flush=True)


def _interactive(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def progress_bar(enabled: bool = True, *, transient: bool = False, interval: float = LOG_INTERVAL, stream=None):
    """The one progress helper: a rich bar on a terminal, :class:`LogProgress` otherwise."""
    stream = stream or sys.stderr
    if not _interactive(stream):
        return LogProgress(interval=interval, stream=stream, disable=not enabled)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=Console(file=stream), disable=not enabled, transient=transient)


def track(iterable: Iterable[T], description: str, total: int | None = None, enabled: bool = True) -> Iterator[T]:
    """Iterate with progress (see :func:`progress_bar`)."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with progress_bar(enabled) as bar:
        task = bar.add_task(description, total=total)
        for item in iterable:
            yield item
            bar.advance(task)
