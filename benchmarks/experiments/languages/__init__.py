"""The runs behind docs/languages.md."""
