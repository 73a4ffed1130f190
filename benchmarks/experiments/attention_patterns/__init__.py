"""The runs behind docs/attention_patterns.md."""
