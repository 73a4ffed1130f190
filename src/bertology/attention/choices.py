"""The names the attention commands accept, in a module that imports nothing heavy, so that
``bertology attention ...`` checks them before numpy, sklearn or torch load."""

#: Classifier names :func:`bertology.attention.patterns.pattern_types` accepts.
CLASSIFIERS: tuple[str, ...] = ("cnn", "rules")
