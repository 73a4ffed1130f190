"""The runs behind docs/readouts.md."""
