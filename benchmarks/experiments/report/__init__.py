"""The runs behind docs/report.md (the report's interventions recipe)."""
