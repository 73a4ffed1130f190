"""The runs behind docs/knowledge.md."""
