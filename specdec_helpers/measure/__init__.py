"""Benchmarks: the interleaved harness, Leviathan's theory, perf ratios, the results format."""
