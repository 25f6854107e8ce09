"""Benchmarks: `python -m bench` (or `make bench`) prints figures; tests never assert on them."""
