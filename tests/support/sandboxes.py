"""Which sandboxes are this test process's: its instance label, and what of it still exists."""

from __future__ import annotations

import contextlib
import os
import time

import docker

from executor.docker_backend import INSTANCE_LABEL, SANDBOX_LABEL

# Its own instance label per test process, so that concurrent runs never see (or sweep)
# each other's sandboxes.
TEST_INSTANCE = os.environ.get("CELLMATE_TEST_INSTANCE", "tests")


def live_sandboxes(client: docker.DockerClient, instance: str = TEST_INSTANCE) -> list[str]:
    selector = [f"{SANDBOX_LABEL}=1", f"{INSTANCE_LABEL}={instance}"]
    # The engine's list as it is: docker-py's models would inspect each container again,
    # and fail on one removed in between.
    listed = client.api.containers(all=True, filters={"label": selector})
    names = [str(c["Names"][0]).lstrip("/") for c in listed if c.get("Names")]
    names += [v.name for v in client.volumes.list(filters={"label": selector})]
    names += [n.name for n in client.networks.list(filters={"label": selector})]
    return [str(n) for n in names]


def assert_no_sandbox_left(instance: str) -> None:
    client = docker.from_env()
    try:
        assert live_sandboxes(client, instance) == [], "a sandbox was left behind"
    finally:
        client.close()


SETTLE_S = 30.0
"""How long a removal under way (a bot process exiting, a pool's background clean-up) may
take before what remains counts as left behind."""


def left_behind(client: docker.DockerClient, instance: str = TEST_INSTANCE) -> list[str]:
    """What of `instance` still exists once the removals under way have had time to end."""
    deadline = time.monotonic() + SETTLE_S
    while (names := live_sandboxes(client, instance)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return names


def describe(client: docker.DockerClient, instance: str = TEST_INSTANCE) -> str:
    """When and how what is left of `instance` was made: what tells which test made it."""
    selector = [f"{SANDBOX_LABEL}=1", f"{INSTANCE_LABEL}={instance}"]
    lines = []
    for container in client.api.containers(all=True, filters={"label": selector}):
        made = time.strftime("%H:%M:%S", time.gmtime(int(container.get("Created", 0))))
        lines.append(
            f"container {','.join(container.get('Names') or [])}: created {made} UTC, "
            f"{container.get('Status')}, image {container.get('Image')}"
        )
    for volume in client.volumes.list(filters={"label": selector}):
        lines.append(f"volume {volume.name}: created {volume.attrs.get('CreatedAt')}")
    for network in client.networks.list(filters={"label": selector}):
        lines.append(f"network {network.name}: created {network.attrs.get('Created')}")
    return "\n".join(lines)


def sweep(client: docker.DockerClient, instance: str = TEST_INSTANCE) -> None:
    """Remove what is left of `instance`, so that one test's leftover fails that test only."""
    selector = [f"{SANDBOX_LABEL}=1", f"{INSTANCE_LABEL}={instance}"]
    for container in client.api.containers(all=True, filters={"label": selector}):
        with contextlib.suppress(docker.errors.APIError):
            client.api.remove_container(container["Id"], force=True, v=True)
    for volume in client.volumes.list(filters={"label": selector}):
        with contextlib.suppress(docker.errors.APIError):
            volume.remove(force=True)
    for network in client.networks.list(filters={"label": selector}):
        with contextlib.suppress(docker.errors.APIError):
            network.remove()
