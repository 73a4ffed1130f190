"""The one place where command-line values are parsed and checked, so every command reads them alike.

Each ``*_option`` returns a typer ``Option`` with the same flag names, default and help on every command;
each ``check_*``/``parse_*`` turns a raw value into what the API takes or raises
:class:`~bertology.errors.UsageError` naming the option, which the CLI prints as one line (exit 1).

The library never speaks in flags: it raises :class:`~bertology.errors.SettingError` naming the setting (a
keyword, a spec's field) and writes a keyword in a hint as ``name=`` (``give more text (data=)``). Every
command of :class:`CommandApp` says the same with the command's option instead (``--data``), in one place
(:func:`speaking_options`); ``bertology.cli.main`` does it for what escapes a command (``as_option()``).
"""

from __future__ import annotations

import functools
import inspect
import re
from pathlib import Path
from typing import Optional

import typer

from bertology.data.paths import resolve_corpus
from bertology.errors import BertologyError, SettingError, UsageError
from bertology.models.sources import resolve_model_source
from bertology import numbering, runtime
from bertology import settings as library_settings
from bertology.numbering import HEAD_FORMAT_HELP
from bertology.runtime import DEVICE_HELP, resolve_device
from bertology.settings import check_count, check_positive

__all__ = [
    "check_cache_dir", "check_count", "check_exists", "check_positive", "check_seed", "default_out", "parse_heads",
    "parse_layers", "resolve_device", "seed_list",
    "data_option", "device_option", "heads_option", "layers_option", "max_sentences_option", "model_option",
    "out_option", "progress_option", "seed_option", "seeds_option",
]

#: Where results go when ``--out`` is not given: ``results/<command>/<model>[-<what>]``.
RESULTS_ROOT = Path("results")


def default_out(command: str, *parts: object) -> Path:
    """``results/probe/minilm-senteval``: one folder per command and input, so runs do not overwrite."""
    slug = "-".join(re.sub(r"[^A-Za-z0-9._]+", "_", str(p)).strip("_") for p in parts if p not in (None, ""))
    return RESULTS_ROOT / command / (slug or "default")


# The library's checks, naming the option by default (a command outside CommandApp too).
def parse_layers(spec, num_layers=None, *, transformer_only: bool = False, option: str = "--layers"):
    return numbering.parse_layers(spec, num_layers, transformer_only=transformer_only, option=option)


def parse_heads(spec, num_layers=None, num_heads=None, *, option: str = "--heads"):
    return numbering.parse_heads(spec, num_layers, num_heads, option=option)


def check_seed(seed, option: str = "--seed"):
    return runtime.check_seed(seed, option)


def seed_list(count, first: int = 0, option: str = "--seeds") -> tuple[int, ...]:
    check_seed(first)
    return runtime.seed_list(count, first, option)


def check_cache_dir(path, option: str = "--cache-dir"):
    return library_settings.check_cache_dir(path, option)


def check_exists(path: Optional[Path], option: str, corpus: bool = False) -> Optional[Path]:
    """An input the command reads (``--treebank``, a store folder...): one line now, before anything heavy
    loads, when there is no such file or folder. ``corpus``: a packaged corpus name (``ewt-dev``) passes."""
    if path is None:
        return None
    found = Path(path).exists()
    if not found and corpus:
        found = resolve_corpus(path).exists()
    if not found:
        raise UsageError(f"{option} {path}: no such file or folder")
    return path


def check_fraction(value: Optional[float], option: str, low: float = 0.0, high: float = 1.0) -> Optional[float]:
    if value is not None and not (low < value <= high):
        raise UsageError(f"{option} {value}: expected a number in ({low}, {high}]")
    return value


def deprecation_note(old: str, new: str) -> None:
    """One line on stderr for an old spelling that still works."""
    typer.echo(f"note: {old} is deprecated (it goes in the next release); use {new}", err=True)


def renamed(value, old_value, new: str, old: str):
    """The value of option ``new`` given either as itself or as its old spelling ``old`` (with a note)."""
    if _absent(old_value):
        return value
    if not _absent(value):
        raise UsageError(f"{old} is the old spelling of {new}; give only {new}")
    deprecation_note(old, new)
    return old_value


def _absent(value) -> bool:
    return value is None or (isinstance(value, (list, tuple)) and not value)  # a list option not given: empty


def old_option(name: str):
    """An old spelling, hidden from help, that :func:`renamed` maps onto its new one."""
    return typer.Option(None, name, hidden=True, show_default=False)


# ----------------------------------------------------------------------------------------------------
# Library settings -> this command's options.

#: A keyword in a library hint: ``name=`` with no value after it (``seeds=(0, 1)`` is an example, not a hint).
KEYWORD_HINT = re.compile(r"(?<![\w.-])([a-z][a-z0-9_]*)=(?![\w(\[{'\"=])")


def option_names(function) -> dict[str, str]:
    """A command's keyword -> its long option (``max_dev`` -> ``--max-dev``), hidden old spellings left out."""
    names = {}
    for name, parameter in inspect.signature(function).parameters.items():
        info = parameter.default
        if not isinstance(info, typer.models.OptionInfo) or info.hidden:
            continue
        longs = [decl.split("/")[0] for decl in info.param_decls or () if decl.startswith("--")]
        names[name] = longs[0] if longs else "--" + name.replace("_", "-")
    return names


def as_options(error: BertologyError, names: dict[str, str]) -> BertologyError:
    """``error`` naming the command's options: a :class:`SettingError` becomes the same complaint about the
    option (:meth:`SettingError.as_option`), and a hint's ``name=`` becomes the option where the command has one."""
    if isinstance(error, SettingError):
        error = error.as_option(names)
    text = KEYWORD_HINT.sub(lambda found: names.get(found.group(1), found.group(0)), str(error))
    if text != str(error):
        error.args = (text, *error.args[1:])
    return error


def speaking_options(function, settings: dict[str, str] | None = None):
    """``function`` (a command), with the library's errors shown naming its options (:func:`as_options`);
    ``settings``: library settings named otherwise than the command's keywords (``allow_mismatch`` ->
    ``--allow-task-mismatch``)."""
    names = {**(settings or {}), **option_names(function)}

    @functools.wraps(function)
    def command(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except BertologyError as error:
            translated = as_options(error, names)
            if translated is error:
                raise
            raise translated from error  # --debug shows where the library raised it

    return command


class CommandApp(typer.Typer):
    """A typer app whose every command speaks in its options (:func:`speaking_options`): the one place where a
    library :class:`SettingError` becomes the option a user typed. Every command group of ``bertology`` is one
    (tests/test_cli_settings.py). ``settings``: library settings its commands name otherwise, for all of them."""

    def __init__(self, *args, settings: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.settings = dict(settings or {})

    def command(self, *args, **kwargs):
        register = super().command(*args, **kwargs)

        def decorator(function):
            register(speaking_options(function, self.settings))
            return function

        return decorator


# ----------------------------------------------------------------------------------------------------
# Shared options: same flags, defaults and help everywhere.


def check_model_source(value):
    """Refuse a ``--model`` that is no alias, existing model folder or hub id before torch loads (one value or
    a list of them)."""
    for one in value if isinstance(value, (list, tuple)) else [value]:
        if one is not None:
            try:
                resolve_model_source(one)
            except SettingError as error:  # checked while the options are read: before speaking_options
                raise error.as_option() from None
    return value


def model_option(default: str = "minilm"):
    return typer.Option(default, "--model", "-m", help="Encoder: alias (minilm), local model folder or hub id.",
                        callback=check_model_source)


def data_option(default=None, help: str = "Corpus: .conllu[.gz], .txt (one sentence a line), SentEval .txt/.tsv, "
                                          "or a packaged one: ewt-train, ewt-dev, ewt-test."):
    return typer.Option(default, "--data", "-d", help=help)


def out_option(command: str):
    return typer.Option(None, "--out", "-o", help=f"Output folder (default: results/{command}/<model>...).")


def max_sentences_option(help: str = "Use only the first N sentences (of each split).", default=None):
    return typer.Option(default, "--max-sentences", help=help)


def seeds_option(default: int = 3, help: str = "How many seeds (from --seed); mean and spread are reported."):
    return typer.Option(default, "--seeds", help=help)


def seed_option(default: int = 0):
    return typer.Option(default, "--seed", help="First seed; --seeds N runs seeds SEED..SEED+N-1.")


def layers_option(help: str = "Layers: all, 0,3,6, 1-4, L3 or last (0 = embeddings, as tables print them)."):
    return typer.Option(None, "--layers", help=help)


def heads_option(default=..., help: str = f"Heads as tables print them: {HEAD_FORMAT_HELP}."):
    return typer.Option(default, "--heads", help=help)


def device_option():
    return typer.Option("auto", "--device", help=f"Device: {DEVICE_HELP}.")


def progress_option():
    return typer.Option(True, "--progress/--no-progress", help="Show progress (a bar, or log lines when piped).")


# -- scale-out (docs/scale.md): the same four options on every command that can run on Ray ------------------
def engine_option():
    return typer.Option("local", "--engine", help="local (this process) or ray (a Ray cluster; needs the extra: "
                                                  "pip install 'bertology[ray]').")


def address_option():
    return typer.Option(None, "--address", help="With --engine ray: 'auto' (the cluster `ray start` runs here) or "
                                                "HOST:PORT; default: start a local Ray instance.")


def workers_option():
    return typer.Option(None, "--workers", help="With --engine ray: how many actors/parallel runs (default: as many "
                                                "as the cluster has room for).")


def cpus_per_worker_option(default: float = 1.0):
    return typer.Option(default, "--cpus-per-worker", help="With --engine ray: CPUs (torch threads) per worker.")


def gpus_per_worker_option():
    return typer.Option(0.0, "--gpus-per-worker", help="With --engine ray: GPUs per worker (fractions share one); "
                                                       "above 0 the worker runs on cuda.")


def check_scale(engine: str, workers: Optional[int], cpus_per_worker: float, gpus_per_worker: float) -> str:
    """Check the scale-out options before anything loads; returns the engine."""
    if engine not in ("local", "ray"):
        raise UsageError(f"--engine {engine!r}: expected local or ray")
    check_positive(workers, "--workers")
    if cpus_per_worker <= 0:
        raise UsageError(f"--cpus-per-worker {cpus_per_worker}: expected a positive number")
    if gpus_per_worker < 0:
        raise UsageError(f"--gpus-per-worker {gpus_per_worker}: expected 0 or more")
    return engine
