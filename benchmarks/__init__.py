"""Benchmarks: speed and memory, measured outside the test suite (`make bench`)."""
