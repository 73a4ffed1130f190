"""Every setting of the languages experiment in one frozen :class:`LanguagesSpec`, checked once when it is made.

``bertology languages`` builds it from its options before torch loads (this module imports only light ones);
:func:`bertology.languages.run_languages` takes it, or its fields as keywords. What to read (the model, the
treebanks, the English treebank the transfer probes train on) and where to run (cache folder, device,
progress display) are not settings of the experiment and are passed beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bertology.errors import SettingError
from bertology.numbering import parse_layers
from bertology.probing.spec import check_probe_settings
from bertology.settings import spec_of

#: The probe tasks that transfer from English (their probe levels: ``experiment.TRANSFER_TASKS``).
TRANSFER_TASK_NAMES = ("upos", "deprel")


def transfer_tasks(tasks) -> tuple[str, ...]:
    """The transfer tasks from names or a comma-separated string (``"none"``: none), in order, once each."""
    given = [tasks] if isinstance(tasks, str) else list(tasks)
    names = [name.strip().lower() for item in given for name in str(item).split(",") if name.strip()]
    if names == ["none"]:
        return ()
    if isinstance(tasks, str) and not names:
        raise SettingError("tasks", tasks, f"expected any of {', '.join(TRANSFER_TASK_NAMES)} (comma-separated) or "
                           "none")
    unknown = [name for name in names if name not in TRANSFER_TASK_NAMES]
    if unknown:
        raise SettingError("tasks", ",".join(unknown), f"expected any of {', '.join(TRANSFER_TASK_NAMES)} "
                           "(comma-separated) or none", shown=", ".join(unknown))
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class LanguagesSpec:
    """What the languages experiment measures and how; every field has the default of ``bertology languages``.

    ``seeds``: seed ``s`` draws each probe's training share (``train_fraction``) and initialises it; the first is
    the untrained twin's (``untrained``). ``layers``: ``None`` (all), a list or a spelling such as ``"0,3,6"``.
    ``tasks``: the probes that transfer from English (``upos``, ``deprel``; names or a comma-separated string).
    Sizes: the first ``max_sentences`` of each language; ``max_train`` training and ``max_dev`` dev examples
    per language and for English (``None``: all; test splits are used whole). ``senteval``: also list the
    SentEval tasks each treebank supports. ``projection_sentences`` per language in the 2-D projection,
    ``split_seed`` splits the sentence ids into train/dev/test, ``n_boot`` bootstrap resamples per interval,
    ``probe_options`` go to every probe.
    """

    seeds: tuple[int, ...] = (0, 1, 2)
    layers: str | tuple[int, ...] | None = None
    tasks: str | tuple[str, ...] = ("upos",)
    max_sentences: int | None = None
    max_train: int | None = 5000
    max_dev: int | None = 2000
    train_fraction: float = 0.8
    untrained: bool = True
    senteval: bool = True
    projection_sentences: int = 100
    split_seed: int = 0
    n_boot: int = 1000
    probe_options: Mapping = field(default_factory=dict)

    def __post_init__(self) -> None:
        tasks = transfer_tasks(self.tasks)
        seeds = tuple(check_probe_settings("linear", self.seeds, self.train_fraction))
        for name in ("max_train", "max_dev"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or value < 2):
                raise SettingError(name, value, "expected at least 2 examples (or None for all)", shown=str(value))
        for name in ("max_sentences", "projection_sentences", "n_boot"):
            value = getattr(self, name)
            if value is None and name == "max_sentences":
                continue  # every sentence
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SettingError(name, value, "expected a whole number of at least 1", shown=str(value))
        layers = self.layers
        if layers is not None and not isinstance(layers, str):
            layers = tuple(int(layer) for layer in ([layers] if isinstance(layers, int) else layers))
        parse_layers(layers, option="layers")  # the spelling now; the range once the model's depth is known
        for name, value in (("tasks", tasks), ("seeds", seeds), ("layers", layers),
                            ("probe_options", dict(self.probe_options or {})), ("untrained", bool(self.untrained)),
                            ("senteval", bool(self.senteval))):
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, spec: "LanguagesSpec | None" = None, **settings) -> "LanguagesSpec":
        """``spec`` (default: the defaults) with ``settings`` (field names) replaced; an unknown name is one
        :class:`UsageError` line listing the fields."""
        return spec_of(cls, spec, settings, "languages")
