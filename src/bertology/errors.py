"""Errors a user can act on. The CLI prints their message (no traceback) and exits with code 1."""

from __future__ import annotations

from collections.abc import Mapping


class BertologyError(Exception):
    """Base class for errors caused by the user's input, not by a bug."""


class DataError(BertologyError, ValueError):
    """Bad input data; the message names the file, the line and what was expected (a setting that would help
    is named as its keyword, ``name=``, which the CLI shows as the option)."""


class MissingData(DataError):
    """Data the package cannot ship and that was not found (no path given, nothing under ``$BERTOLOGY_DATA``,
    not in the ``datasets`` cache and no network). A report section that needs it is skipped by design, not
    failed. ``dataset`` names it (a key of :data:`bertology.data.paths.EXTERNAL`)."""

    def __init__(self, message: str, dataset: str = ""):
        super().__init__(message)
        self.dataset = dataset


class UsageError(BertologyError, ValueError):
    """A bad option or argument value; the message names the option and what was expected."""


class SettingError(UsageError):
    """A setting out of range, given to a library function or a spec (not a file's content: that is a
    :class:`DataError`). ``setting`` names it (a spec's field, a keyword), the message says what was expected;
    :meth:`as_option` is the same complaint naming the command-line option. A :class:`UsageError`, so the CLI
    refuses it in one line (exit 1) whichever layer raised it."""

    def __init__(self, setting: str, value, expected: str, shown: str | None = None):
        """``shown``: the value as the message shows it (default its ``repr``; ``""``: only the setting's name).
        A hint in ``expected`` names a keyword as ``name=`` (``leave layers= out``), which the CLI shows as the
        command's option."""
        self.setting, self.value, self.expected = setting, value, expected
        head = f"{setting} {value!r}" if shown is None else f"{setting} {shown}".rstrip()
        super().__init__(f"{head}: {expected}")

    def as_option(self, options: Mapping[str, str] | None = None) -> UsageError:
        """The same complaint naming the command-line option (``train_fraction`` -> ``--train-fraction``); a
        setting that is no keyword (``$BERTOLOGY_CACHE``, an option a command passed as it is) stays as it is."""
        default = "--" + self.setting.replace("_", "-") if self.setting.isidentifier() else self.setting
        option = (options or {}).get(self.setting, default)
        return UsageError(str(self).replace(self.setting, option, 1))


class ModelError(BertologyError):
    """A model that cannot be loaded or does not have what was asked for."""


class StoreError(BertologyError):
    """An activation store that is missing, corrupt, of another format, or built from other inputs."""


class OutputError(BertologyError, OSError):
    """An output that cannot be written (no space, read-only folder, a file where a folder should be)."""


class BertologyWarning(UserWarning):
    """Something the user should hear about that does not stop the run (a damaged cache recomputed, part of
    the input unusable). The CLI prints its message as one line: ``warning: ...``."""
