"""The runs behind docs/attention.md."""
