"""What a test sees of a sandbox from the outside: its CPU time as the engine counts it, the
bytes it sends to the host, and a runner spoken to directly over its protocol."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import docker
from docker.models.containers import Container

from executor import SandboxLimits, default_tag
from executor.docker_backend import DockerBackend
from executor.docker_specs import INSTANCE_LABEL, SANDBOX_LABEL
from executor.protocol import Sandbox
from executor.run import wait_ready, wait_warm
from tests.integration.conftest import TEST_INSTANCE


def only_sandbox(client: docker.DockerClient) -> Container:
    """The one sandbox this test process has running (tests without a pool have one)."""
    selector = [f"{SANDBOX_LABEL}=1", f"{INSTANCE_LABEL}={TEST_INSTANCE}"]
    found = client.containers.list(filters={"label": selector})
    assert len(found) == 1, [c.name for c in found]
    return found[0]


def cpu_seconds(client: docker.DockerClient, container: Container) -> float:
    """CPU time of everything in the sandbox so far (its cgroup, as the engine counts it;
    under gVisor that includes the sandbox's own kernel)."""
    stats: Mapping[str, Any] = client.api.stats(str(container.id), stream=False, one_shot=True)
    return float(stats["cpu_stats"]["cpu_usage"]["total_usage"]) / 1e9


async def idle_cpu_seconds(
    client: docker.DockerClient, container: Container, window: float
) -> float:
    """CPU time the sandbox uses while the host asks nothing of it, over `window` seconds."""
    before = await asyncio.to_thread(cpu_seconds, client, container)
    await asyncio.sleep(window)  # the measurement's window, not a wait for a condition
    return await asyncio.to_thread(cpu_seconds, client, container) - before


class StreamCounter:
    """Counts the bytes the sandbox writes to its stdout and stderr, as a second host attached
    to it would receive them (the executor's own stream gets the same bytes)."""

    def __init__(self, client: docker.DockerClient, container: Container) -> None:
        self.bytes = 0
        attached = client.api.attach_socket(
            str(container.id), params={"stdout": 1, "stderr": 1, "stream": 1}
        )
        # A descriptor of its own, as the Docker backend keeps (see docker_backend.py).
        original: socket.socket = getattr(attached, "_sock", attached)
        self._raw = socket.socket(fileno=os.dup(original.fileno()))
        attached.close()
        original.close()
        self._thread = threading.Thread(target=self._count, daemon=True)
        self._thread.start()

    def _count(self) -> None:
        while True:
            try:
                chunk = self._raw.recv(1 << 20)
            except OSError:
                return
            if not chunk:
                return
            self.bytes += len(chunk)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_RDWR)
        self._raw.close()
        self._thread.join(10)


@asynccontextmanager
async def raw_sandbox(runtime: str, **limits: Any) -> AsyncIterator[Sandbox]:
    """A sandbox started by the Docker backend, ready and warm, to speak the runner's
    protocol to."""
    backend = DockerBackend(default_tag(), instance=TEST_INSTANCE)
    settings = SandboxLimits(runtime=runtime, **limits)  # type: ignore[arg-type]
    sandbox = await backend.start(settings, None)
    try:
        await wait_ready(sandbox, 120)
        async with asyncio.timeout(120):
            assert await wait_warm(sandbox)
        yield sandbox
    finally:
        await sandbox.destroy()
        await backend.close()


async def ask(sandbox: Sandbox, request: Mapping[str, Any], answer: str) -> list[dict[str, Any]]:
    """Send a request; the events up to and including the first of type `answer`."""
    await sandbox.send(request)
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        async with asyncio.timeout(deadline - time.monotonic()):
            event = await sandbox.receive()
        assert event is not None, f"the sandbox ended before it answered {request.get('op')}"
        events.append(event)
        if event.get("type") == answer:
            return events
    raise AssertionError(f"no {answer} within 120 s")


async def run_cells(sandbox: Sandbox, *cells: str) -> tuple[str, str]:
    """Run cells through the runner: (status, the text they printed)."""
    events = await ask(sandbox, {"op": "run", "id": "r", "cells": list(cells)}, "done")
    text = "".join(
        str(e["output"].get("text", "")) + str(e["output"].get("evalue", ""))
        for e in events
        if e.get("type") == "output"
    )
    return str(events[-1]["status"]), text
