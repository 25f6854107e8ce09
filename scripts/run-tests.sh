#!/usr/bin/env bash
# The test suite in two phases: everything that can share the engine runs in parallel
# (pytest-xdist, one sandbox label per worker, idle workers taking queued tests from busy
# ones), then the `serial` tests (engine restarts, the load tests) run alone, one after
# another (the cluster's load tests too: they build and load the bot's image through the
# Docker engine that the others restart).
# Arguments go to both phases (paths, -k, ...); a phase that selects no test is not a
# failure as long as the other one ran some.
# CELLMATE_TEST_WORKERS sets the parallel phase's workers (default 4; 0 runs it in-process).
# Each run labels its sandboxes with an instance of its own (CELLMATE_TEST_INSTANCE, unless
# given), so that what an earlier run left when it was killed (an engine restart cut short
# leaves stopped containers) fails no later run: it is that run's, not this one's.
set -uo pipefail
cd "$(dirname "$0")/.."
CELLMATE_TEST_INSTANCE="${CELLMATE_TEST_INSTANCE:-tests-$(head -c 3 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
export CELLMATE_TEST_INSTANCE
echo "[cellmate] this run's sandboxes are labelled cellmate.instance=$CELLMATE_TEST_INSTANCE(-gwN)"
PYTEST=.venv/bin/pytest
WORKERS="${CELLMATE_TEST_WORKERS:-4}"
parallel=(-m "not serial" --durations=30)
if [ "$WORKERS" != 0 ]; then
  parallel+=(-n "$WORKERS" --dist worksteal)
fi
started=$(date +%s)
echo "[cellmate] tests, phase 1 of 2: in parallel ($WORKERS workers)"
"$PYTEST" "${parallel[@]}" "$@"
first=$?
echo "[cellmate] phase 1 took $(( $(date +%s) - started )) s"
started=$(date +%s)
echo "[cellmate] tests, phase 2 of 2: the serial tests, alone"
"$PYTEST" -m serial "$@"
second=$?
echo "[cellmate] phase 2 took $(( $(date +%s) - started )) s"
# pytest's 5 means "no test selected": fine for one phase, not for both.
if [ "$first" = 5 ] && [ "$second" = 5 ]; then
  exit 5
fi
for code in "$first" "$second"; do
  if [ "$code" != 0 ] && [ "$code" != 5 ]; then
    exit "$code"
  fi
done
exit 0
