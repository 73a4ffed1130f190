"""bertology: the BERTology literature, runnable."""

__version__ = "0.1.0"
