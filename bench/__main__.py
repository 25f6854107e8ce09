"""`python -m bench executor|turns|doors|schedules|failover|e2b|languages [options]`: see
bench/executor_bench.py, bench/turns_bench.py, bench/doors_bench.py, bench/schedules_bench.py,
bench/failover_bench.py, bench/e2b/suite.py and bench/languages_bench.py."""

import sys

from bench import (
    doors_bench,
    executor_bench,
    failover_bench,
    languages_bench,
    schedules_bench,
    turns_bench,
)
from bench.e2b import suite as e2b_suite

BENCHMARKS = {
    "executor": executor_bench.main,
    "turns": turns_bench.main,
    "doors": doors_bench.main,
    "schedules": schedules_bench.main,
    "failover": failover_bench.main,
    "e2b": e2b_suite.main,
    "languages": languages_bench.main,
}

if len(sys.argv) < 2 or sys.argv[1] not in BENCHMARKS:
    sys.exit(f"usage: python -m bench {{{','.join(BENCHMARKS)}}} [options]")
sys.exit(BENCHMARKS[sys.argv[1]](sys.argv[2:]))
