"""Benchmarks proper: each runs a baseline and ours in one process and stores the timing (what ``make bench`` runs)."""
