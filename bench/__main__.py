"""`python -m bench executor [options]`: see bench/executor_bench.py."""

import sys

from bench import executor_bench

BENCHMARKS = {"executor": executor_bench.main}

if len(sys.argv) < 2 or sys.argv[1] not in BENCHMARKS:
    sys.exit(f"usage: python -m bench {{{','.join(BENCHMARKS)}}} [options]")
sys.exit(BENCHMARKS[sys.argv[1]](sys.argv[2:]))
