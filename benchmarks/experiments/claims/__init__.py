"""The runs behind docs/claims.md."""
