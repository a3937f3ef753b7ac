"""Generators of mutated configs for oracle and robustness tests."""
