"""Which sandboxes are this test process's: its instance label, and what of it still exists."""

from __future__ import annotations

import os

import docker

from executor.docker_backend import INSTANCE_LABEL, SANDBOX_LABEL

# Its own instance label per test process, so that concurrent runs never see (or sweep)
# each other's sandboxes.
TEST_INSTANCE = os.environ.get("CELLMATE_TEST_INSTANCE", "tests")


def live_sandboxes(client: docker.DockerClient, instance: str = TEST_INSTANCE) -> list[str]:
    selector = [f"{SANDBOX_LABEL}=1", f"{INSTANCE_LABEL}={instance}"]
    names = [c.name for c in client.containers.list(all=True, filters={"label": selector})]
    names += [v.name for v in client.volumes.list(filters={"label": selector})]
    names += [n.name for n in client.networks.list(filters={"label": selector})]
    return [str(n) for n in names]


def assert_no_sandbox_left(instance: str) -> None:
    client = docker.from_env()
    try:
        assert live_sandboxes(client, instance) == [], "a sandbox was left behind"
    finally:
        client.close()
