"""`python -m bench executor|turns [options]`: see bench/executor_bench.py and
bench/turns_bench.py."""

import sys

from bench import executor_bench, turns_bench

BENCHMARKS = {"executor": executor_bench.main, "turns": turns_bench.main}

if len(sys.argv) < 2 or sys.argv[1] not in BENCHMARKS:
    sys.exit(f"usage: python -m bench {{{','.join(BENCHMARKS)}}} [options]")
sys.exit(BENCHMARKS[sys.argv[1]](sys.argv[2:]))
