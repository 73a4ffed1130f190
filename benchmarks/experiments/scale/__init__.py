"""The runs behind docs/scale.md."""
