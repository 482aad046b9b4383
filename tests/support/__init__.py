"""Helpers the tests and benchmarks share (nothing here is part of swerl itself)."""
