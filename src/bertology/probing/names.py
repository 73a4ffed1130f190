"""Plain name lists of probing, in a module that imports nothing, so that :mod:`bertology.probing.tasks` and
``bertology probe`` check names before numpy, sklearn or torch load."""

#: What a task's examples are: a word, an arc, a span or a sentence (:mod:`bertology.probing.tasks`).
LEVELS = ("token", "edge", "span", "sentence")
#: The probes (:class:`~bertology.probing.probes.LayerwiseProbe` ``kind``, ``bertology probe --probe``).
PROBE_KINDS = ("linear", "mlp")
