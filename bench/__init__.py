"""Benchmarks for longhaul (run by hand, never as timed tests). See ``docs/benchmarks.md``."""
