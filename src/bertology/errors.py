"""Errors a user can act on. The CLI prints their message (no traceback) and exits with code 1."""


class BertologyError(Exception):
    """Base class for errors caused by the user's input, not by a bug."""


class DataError(BertologyError, ValueError):
    """Bad input data; the message names the file, the line and what was expected."""


class MissingData(DataError):
    """Data the package cannot ship and that was not found (no path given, nothing under ``$BERTOLOGY_DATA``,
    not in the ``datasets`` cache and no network). A report section that needs it is skipped by design, not
    failed. ``dataset`` names it (a key of :data:`bertology.data.paths.EXTERNAL`)."""

    def __init__(self, message: str, dataset: str = ""):
        super().__init__(message)
        self.dataset = dataset


class UsageError(BertologyError, ValueError):
    """A bad option or argument value; the message names the option and what was expected."""


class ModelError(BertologyError):
    """A model that cannot be loaded or does not have what was asked for."""


class StoreError(BertologyError):
    """An activation store that is missing, corrupt, of another format, or built from other inputs."""


class OutputError(BertologyError, OSError):
    """An output that cannot be written (no space, read-only folder, a file where a folder should be)."""


class BertologyWarning(UserWarning):
    """Something the user should hear about that does not stop the run (a damaged cache recomputed, part of
    the input unusable). The CLI prints its message as one line: ``warning: ...``."""
