"""The runner's key comes only from the host's first line, under runc and runsc: a runner
that gets no hello with a key writes nothing on its stdout (no key, no `ready`) and exits
saying why; one that does never writes its key."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator

import docker
import pytest

from executor import SandboxLimits, default_tag
from executor.docker_specs import INSTANCE_LABEL, SANDBOX_LABEL, sandbox_specs
from tests.integration.conftest import TEST_INSTANCE

pytestmark = pytest.mark.docker

KEY = "ab" * 32
READ_LIMIT_S = 90


@contextlib.contextmanager
def runner(client: docker.DockerClient, runtime: str) -> Iterator[tuple[str, socket.socket]]:
    """A sandbox container as the Docker backend makes it, attached, not yet started."""
    name = f"cellmate-{uuid.uuid4().hex[:16]}"
    labels = {SANDBOX_LABEL: "1", INSTANCE_LABEL: TEST_INSTANCE}
    limits = SandboxLimits(runtime=runtime)  # type: ignore[arg-type]
    volume, container = sandbox_specs(default_tag(), name, limits, labels)
    client.volumes.create(**volume)
    try:
        client.containers.create(**container)
        attached = client.api.attach_socket(
            name, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        original: socket.socket = getattr(attached, "_sock", attached)
        raw = socket.socket(fileno=os.dup(original.fileno()))
        attached.close()
        original.close()
        try:
            client.api.start(name)
            yield name, raw
        finally:
            raw.close()
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(name, force=True, v=True)
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_volume(name, force=True)


def read_until(raw: socket.socket, done: bytes | None) -> tuple[bytes, bytes]:
    """stdout and stderr, demultiplexed, until the stream ends (or stdout holds `done`)."""
    streams = {1: bytearray(), 2: bytearray()}
    pending = bytearray()
    deadline = time.monotonic() + READ_LIMIT_S
    raw.settimeout(5)
    while time.monotonic() < deadline:
        try:
            chunk = raw.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            break
        pending += chunk
        while len(pending) >= 8 and len(pending) >= 8 + int.from_bytes(pending[4:8], "big"):
            size = int.from_bytes(pending[4:8], "big")
            streams.setdefault(pending[0], bytearray()).extend(pending[8 : 8 + size])
            del pending[: 8 + size]
        if done is not None and done in streams[1]:
            break
    return bytes(streams[1]), bytes(streams[2])


@pytest.mark.parametrize(
    "first_line",
    [
        b"hello\n",
        b'{"op": "hello"}\n',
        b'{"op": "hello", "key": null}\n',
        b'{"op": "hello", "key": "' + b"ab" * 16 + b'"}\n',
        b'{"op": "run", "id": "r", "cells": ["1"]}\n',
        b"\n",
    ],
)
def test_a_runner_without_a_key_from_the_host_does_not_start(
    docker_client: docker.DockerClient, runtime: str, first_line: bytes
) -> None:
    with runner(docker_client, runtime) as (name, raw):
        raw.sendall(first_line)
        stdout, stderr = read_until(raw, None)
        state = docker_client.api.inspect_container(name)["State"]
    assert stdout == b""
    assert b"not a hello with a key" in stderr, stderr[-2000:]
    assert state["ExitCode"] == 2, state


def test_a_runner_never_writes_its_key(docker_client: docker.DockerClient, runtime: str) -> None:
    with runner(docker_client, runtime) as (_, raw):
        raw.sendall(json.dumps({"op": "hello", "key": KEY}).encode() + b"\n")
        stdout, stderr = read_until(raw, b'"type": "ready"')
    assert b'"type": "ready"' in stdout
    assert KEY.encode() not in stdout + stderr
    assert b'"key"' not in stdout
