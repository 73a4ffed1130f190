"""Benchmarks and the stored runs behind every published number (BENCHMARKS.md, "Layout"). Run from the repository root as modules: ``python -m benchmarks.perf.bench_extract``."""
