"""Re-render tables from raw output already stored in benchmarks/results/ (nothing re-measured)."""
