"""The runs behind docs/compare.md."""
