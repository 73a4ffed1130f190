"""The runs behind docs/probing.md."""
