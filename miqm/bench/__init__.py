"""Benchmarks: figures measured side by side in one run (ratios), never timed unit tests."""
