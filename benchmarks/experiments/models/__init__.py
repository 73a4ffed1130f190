"""The runs behind docs/models.md."""
