"""Writing outputs: whole or not at all.

Every output is written to a temporary name in its folder and renamed into place, so a reader (or a
resumed run) never sees half a file. Operating-system failures (no space left, a read-only folder, a file
where a folder should be) become one :class:`~bertology.errors.OutputError` line naming the path.
What several processes may write at once (a store, a cached result, a fine-tuning checkpoint) is written
under :func:`exclusive`: the second process waits, then finds the first one's result and reuses it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import sys
import tempfile
import threading
from pathlib import Path
from typing import Iterator

from bertology.errors import OutputError

try:
    import fcntl
except ImportError:  # not on POSIX: exclusive() runs its body unlocked
    fcntl = None

_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EEXIST: "a file of that name is in the way",
    errno.EISDIR: "it is a folder, not a file",
}

#: Outputs are meant to be read by others (a report is shared): rw-r--r--, whatever mkstemp chose.
FILE_MODE = stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH


def describe_os_error(error: OSError, path: Path | str, doing: str = "write") -> OutputError:
    """One line for an operating-system error: what, where, why."""
    reason = _REASONS.get(error.errno or -1, error.strerror or str(error))
    return OutputError(f"cannot {doing} {path}: {reason}")


def ensure_dir(path: str | os.PathLike) -> Path:
    """Create the output folder ``path`` (and its parents), or say in one line why it cannot be."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"cannot write into {path}: it is a file, not a folder; choose another output folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise describe_os_error(error, path, "create the folder") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write into {path}: permission denied (read-only folder?)")
    return path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, mode: int = FILE_MODE) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed to ``path``, on failure removed."""
    path = Path(path)
    ensure_dir(path.parent)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise describe_os_error(error, path) from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        if isinstance(error, OutputError):
            raise
        raise describe_os_error(error, path) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_json(path: str | os.PathLike, payload, *, indent: int | None = 1, fsync: bool = False) -> Path:
    """JSON (``default=str`` for paths and numpy scalars), optionally fsynced before the rename."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            # dumps, not dump: only the one-shot encoder is the C one (dump streams through pure Python). No
            # circular check: what is written here is a tree, and the check (a set of every container's id) was
            # most of the time a store's sentences.json took to encode (on the writer's thread, holding the GIL
            # the model's thread waits for; the same bytes).
            handle.write(json.dumps(payload, indent=indent, default=_json_default, check_circular=False))
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
    return Path(path)


def _json_default(value):
    item = getattr(value, "item", None)  # numpy scalars
    return item() if callable(item) else str(value)


def write_table(frame, path: str | os.PathLike, formats: tuple[str, ...] = ("parquet", "csv")) -> list[Path]:
    """A tidy table as ``path.parquet`` and ``path.csv`` (``path`` without a suffix, or with one of them).

    Parquet keeps the column types (nullable integers stay integers); CSV is for reading by eye.
    """
    path = Path(path)
    if path.suffix in (".csv", ".parquet"):
        path = path.with_suffix("")
    written = []
    for kind in formats:
        target = path.with_name(f"{path.name}.{kind}")
        with atomic_path(target) as tmp:
            if kind == "parquet":
                frame.to_parquet(tmp, index=False)
            elif kind == "csv":
                frame.to_csv(tmp, index=False)
            else:
                raise ValueError(f"unknown table format {kind!r}")
        written.append(target)
    return written


def save_figure(figure, path: str | os.PathLike, **kwargs) -> Path:
    """``figure.savefig`` to a temporary file, then renamed; the format follows the suffix."""
    path = Path(path)
    kwargs.setdefault("dpi", 120)
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format=path.suffix.lstrip(".") or "png", **kwargs)
    return path


#: Output folders are listed and read by others too (mkdtemp makes them 0700).
FOLDER_MODE = 0o755


@contextlib.contextmanager
def _staged(path: Path, finish) -> Iterator[Path]:
    """A temporary folder beside ``path`` for the body to write into; ``finish(tmp, path)`` puts it in place on
    success (renames on one file system), and it is removed on failure, leaving ``path`` as it was."""
    ensure_dir(path.parent)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    except OSError as error:
        raise describe_os_error(error, path) from None
    try:
        yield tmp
        os.chmod(tmp, FOLDER_MODE)
        finish(tmp, path)
    except OutputError as error:  # named where it was going, not where it was staged
        raise OutputError(str(error).replace(str(tmp), str(path))) from None
    except OSError as error:
        raise describe_os_error(error, path) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def atomic_dir(path: str | os.PathLike, replace: bool = True) -> contextlib.AbstractContextManager[Path]:
    """Yield a temporary folder beside ``path``; on success it replaces ``path`` (a whole folder appears
    or nothing does), on failure it is removed. With ``replace=False`` an existing non-empty ``path`` is
    an error instead of being replaced."""
    path = Path(path)
    if not replace and path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise OutputError(f"cannot write {path}: it exists and is not empty; choose a new output folder")

    def replace_folder(tmp: Path, target: Path) -> None:
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(tmp, target)

    return _staged(path, replace_folder)


def staged_dir(path: str | os.PathLike) -> contextlib.AbstractContextManager[Path]:
    """Yield a temporary folder beside ``path`` to write a whole result into (tables, figures, meta); on
    success its files are moved into ``path`` (created when missing; files of the same names replaced, any
    other file kept), on failure it is removed and ``path`` is left as it was. Every move is a rename on the
    same file system, so a full disk stops the writes into the temporary folder, never the moves: a result
    appears whole or not at all, also in a folder that already holds other files."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"cannot write into {path}: it is a file, not a folder; choose another output folder")

    def move_files(tmp: Path, target: Path) -> None:
        if target.is_dir():
            _move_into(tmp, target)
        else:
            os.replace(tmp, target)

    return _staged(path, move_files)


def _move_into(source: Path, target: Path) -> None:
    for entry in sorted(source.iterdir()):
        destination = target / entry.name
        if entry.is_dir() and destination.is_dir():
            _move_into(entry, destination)
            continue
        if destination.is_dir():
            shutil.rmtree(destination)
        os.replace(entry, destination)


_held = threading.local()


def lock_path(path: str | os.PathLike) -> Path:
    """The lock file :func:`exclusive` takes for ``path``: ``.<name>.lock`` beside it (gone when released)."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


@contextlib.contextmanager
def exclusive(path: str | os.PathLike, what: str = "writing") -> Iterator[None]:
    """Hold the one lock on ``path`` (a store, a cache entry, a checkpoint folder) while the body runs.

    Another process (or thread) asking for the same ``path`` waits, saying so once on stderr, and runs its body
    after this one's: a body that first looks for a finished result then reuses it instead of writing it a second
    time. An ``fcntl`` lock on ``.<name>.lock`` beside ``path``: the kernel releases it when its holder dies (even by
    ``kill -9``), so a lock is never stale; the file is removed on release. Taken again by the thread that holds
    it, it is already held (no deadlock). Where no lock file can be made (a read-only or missing folder), the
    body runs unlocked and says itself what is wrong with the folder.
    """
    path = Path(path).absolute()
    held = _held.__dict__.setdefault("paths", set())
    if path in held:
        yield
        return
    target = lock_path(path)
    handle = _acquire(target, path, what)
    held.add(path)
    try:
        yield
    finally:
        held.discard(path)
        if handle is not None:
            with contextlib.suppress(OSError):
                target.unlink()  # while still held: a waiter on this file retries on the new one
            os.close(handle)


def _acquire(target: Path, path: Path, what: str) -> int | None:
    if fcntl is None:
        return None
    told = False
    while True:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            handle = os.open(target, os.O_RDWR | os.O_CREAT, FILE_MODE)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not told:
                    print(f"waiting for another process {what} {path}", file=sys.stderr, flush=True)
                    told = True
                fcntl.flock(handle, fcntl.LOCK_EX)
            # The holder we waited for removed the file on release: lock the one there now, if any.
            try:
                if os.fstat(handle).st_ino == os.stat(target).st_ino:
                    return handle
            except FileNotFoundError:
                pass
        except BaseException:
            os.close(handle)
            raise
        os.close(handle)
