"""The runs behind docs/tasks.md."""
