"""The runs behind docs/finetune.md."""
