"""Plain name lists of probing, in a module that imports nothing, so that :mod:`bertology.probing.tasks` and
``bertology probe`` check names before numpy, sklearn or torch load."""

#: What a task's examples are: a word, an arc, a span or a sentence (:mod:`bertology.probing.tasks`).
LEVELS = ("token", "edge", "span", "sentence")
#: The probes (:class:`~bertology.probing.probes.LayerwiseProbe` ``kind``, ``bertology probe --probe``).
PROBE_KINDS = ("linear", "mlp")
#: The component name of the probe on Tenney et al.'s scalar mix of all layers (a row beside the layers).
SCALAR_MIX = "scalar-mix"
#: The structural probes' kinds (Hewitt and Manning's distance and depth probes).
STRUCTURAL_KINDS = ("distance", "depth")
#: Which tags mark the punctuation that UUAS and root accuracy leave out (``none``: nothing is left out).
PUNCT_SCHEMES = ("upos", "xpos", "none")
#: A structural probe's headline metric by its kind (``distance``, ``depth``).
PRIMARY_METRIC = {"distance": "uuas", "depth": "root_acc"}
#: The widest 95% half-width (a fraction) a probing result may have to be called powered.
POWER_HALF_WIDTH = 0.015
