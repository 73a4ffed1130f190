"""The runs behind docs/compression.md."""
