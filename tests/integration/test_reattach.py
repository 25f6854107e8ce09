"""With a session secret, a restart of the bot keeps its live sessions on Docker, as on
Kubernetes, under runc and runsc: the next process derives each sandbox's runner key again
and attaches to it (variables, open sockets and files kept, a run that was going on when the
process went interrupted and its session kept); a process with another secret cannot speak
to them and removes them, and their workspace, saved at the shutdown, comes back instead."""

from __future__ import annotations

import asyncio
import secrets
from datetime import timedelta
from pathlib import Path

import docker
import pytest

from bot.sandbox_words import spoken
from bot.workspaces import StoredWorkspaces
from executor import Executor, PoolSettings, SandboxLimits, Status, default_tag
from executor.docker_backend import DockerBackend
from executor.docker_specs import INSTANCE_LABEL
from executor.workspace import WorkspaceSettings
from storage.local import LocalStorage
from tests.support.sandboxes import TEST_INSTANCE

pytestmark = pytest.mark.docker

KEY = b"r" * 32
RESUMED = "The bot restarted since the last run"
SET_UP = """
import socket
x = 41
left, right = socket.socketpair()
left.sendall(b'still open')
open('kept.txt', 'w').write('on disk')
"""
CHECK = "print(x + 1, right.recv(10).decode(), open('kept.txt').read())"
LABEL = f"{INSTANCE_LABEL}={TEST_INSTANCE}"


def executor(runtime: str, store: StoredWorkspaces, secret: str) -> Executor:
    return Executor(
        default_tag(),
        limits=SandboxLimits(runtime=runtime, timeout_s=30),  # type: ignore[arg-type]
        backend=DockerBackend(default_tag(), instance=TEST_INSTANCE, session_secret=secret),
        pool=PoolSettings(size=1, template=False, pause_after_s=0),
        workspaces=store,
        workspace_settings=WorkspaceSettings(max_mb=20, max_variables_mb=2),
    )


async def test_a_restart_keeps_live_sessions_and_only_with_the_secret(
    runtime: str, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    store = StoredWorkspaces(LocalStorage(tmp_path / "files", KEY), KEY, timedelta(days=1))
    secret = secrets.token_hex(32)
    async with executor(runtime, store, secret) as first:
        made = await first.session("conv-a").run(SET_UP)
        assert made.status is Status.OK, made.message
        going = asyncio.Event()
        busy = asyncio.create_task(
            first.session("conv-b").run(
                "y = 'b'\nimport time\nprint('going', flush=True)\ntime.sleep(600)",
                on_output=lambda event: going.set(),
            )
        )
        async with asyncio.timeout(60):
            await going.wait()
        kept = {live.lease.sandbox.id for live in first.sessions._live.values()}
    stopped = await busy  # the shutdown stopped the run; its session stays
    assert stopped.status is Status.KILLED
    running = {c.id for c in docker_client.containers.list(filters={"label": LABEL}, sparse=True)}
    assert kept <= running  # the sessions' containers outlived the process

    async with executor(runtime, store, secret) as second:
        assert sorted(second.sessions.active) == ["conv-a", "conv-b"]
        again = spoken(await second.session("conv-a").run(CHECK))
        assert again.status is Status.OK, again.message
        assert again.stdout == "42 still open on disk\n"  # a socket too: the very kernel
        assert again.message.startswith(RESUMED)
        other = spoken(await second.session("conv-b").run("print(y)"))
        assert other.stdout == "b\n", other.message

    async with executor(runtime, store, secrets.token_hex(32)) as third:
        assert third.sessions.active == []  # it cannot speak to them: they were removed
        # Ids only (sparse): a full listing inspects each container, and one that another
        # test removes meanwhile would fail it.
        assert not kept & {c.id for c in docker_client.containers.list(all=True, sparse=True)}
        fresh = spoken(await third.session("conv-a").run("print(x, 'right' in dir())"))
        assert fresh.stdout == "41 False\n"  # the workspace saved at the last shutdown
        assert "Restored your workspace" in fresh.message
        assert "right (an open connection)" in fresh.message
    async with executor(runtime, store, ""):
        pass  # without a secret nothing is kept: what the third left running is removed
