"""How long a conversation waits when the replica running its turn goes away:
`python -m bench failover [--samples N]`.

In the test cluster (../shared/k8s-kit; `make kube` starts it and prints the kubeconfig for
CELLMATE_TEST_KUBECONFIG), the bot runs as the HA overlay deploys it: three replicas sharing
PostgreSQL, Slack in HTTP mode through their Service. The measurement is the Kubernetes
test's own (tests/kubernetes/test_ha_replicas.py, run here with `--samples`): each sample
sets a variable in a new conversation, starts a long run there, deletes the replica running
it (as `kubectl delete pod` does: it drains, stops the turn and says so in the thread), and
times from the deletion to the next message's answer, which another replica gives with the
variable intact. Prints median and p95 in ms, the machine and the settings, and one JSON
line; `failover_p50_ms` is the figure the README quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.executor_bench import Figures, machine

ROOT = Path(__file__).resolve().parents[1]
TEST = (
    "tests/kubernetes/test_ha_replicas.py::"
    "test_deleting_the_replica_running_a_turn_tells_the_thread_and_the_next_message_works"
)
MARK = "failover sample: "
"""How the test prints each sample (JSON after it)."""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench failover")
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args(argv)
    if not os.environ.get("CELLMATE_TEST_KUBECONFIG"):
        raise SystemExit("no cluster: set CELLMATE_TEST_KUBECONFIG (`make -s kube | tail -1`)")
    environment = {**os.environ, "CELLMATE_FAILOVER_SAMPLES": str(args.samples)}
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", TEST]
    ran = subprocess.run(
        command, cwd=ROOT, env=environment, capture_output=True, text=True, check=False
    )
    samples = [
        json.loads(line.split(MARK, 1)[1]) for line in ran.stdout.splitlines() if MARK in line
    ]
    if ran.returncode != 0 or not samples:
        print(ran.stdout[-6000:], ran.stderr[-3000:], sep="\n")
        raise SystemExit(f"the failover test failed (exit {ran.returncode})")
    first = samples[0]
    print(
        f"machine: {machine()}; {first['replicas']} replicas, runc sandboxes, PostgreSQL, "
        f"CELLMATE_SHUTDOWN_GRACE_S={first['grace_s']} (the stopped turn's grace comes first)"
    )
    for sample in samples:
        print(f"  {sample['victim']} deleted: answered after {sample['seconds']:.1f} s")
    figures = Figures()
    seconds = [sample["seconds"] * 1000 for sample in samples]
    figures.add("replica deleted -> next answer (failover)", seconds, "failover")
    print(f"{'figure':48} {'p50 ms':>9} {'p95 ms':>9} {'n':>5}")
    for name, p50, p95, count in figures.rows:
        print(f"{name:48} {p50:9.1f} {p95:9.1f} {count:5}")
    figures.summary["grace_s"] = first["grace_s"]
    print(json.dumps(figures.summary))
    return 0
