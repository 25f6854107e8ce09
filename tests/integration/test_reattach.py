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
from executor.docker_sandbox import remove_sandbox
from executor.docker_specs import INSTANCE_LABEL
from executor.errors import SandboxTaken
from executor.ownership import MemoryOwners
from executor.runner_client import RunnerClient
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


def replica(instance: str, secret: str, store: StoredWorkspaces, owners: MemoryOwners) -> Executor:
    """A bot replica with its own sandbox label, sharing the secret, the workspaces and the
    session ledger (a database's, in the bot) with the others."""
    return Executor(
        default_tag(),
        limits=SandboxLimits(timeout_s=30),
        backend=DockerBackend(default_tag(), instance=instance, session_secret=secret),
        pool=PoolSettings(size=0, template=False, pause_after_s=0),
        workspaces=store,
        workspace_settings=WorkspaceSettings(max_mb=20, max_variables_mb=2),
        owners=owners,
    )


async def test_a_live_session_moves_to_another_replica_and_the_first_leaves_it_running(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    store = StoredWorkspaces(LocalStorage(tmp_path / "files", KEY), KEY, timedelta(days=1))
    secret, other = secrets.token_hex(32), f"{TEST_INSTANCE}-b"
    ledger = MemoryOwners(TEST_INSTANCE)
    theirs = ledger.sharing(other)

    def named(instance: str) -> dict[str, str]:
        found = docker_client.containers.list(
            all=True, filters={"label": f"{INSTANCE_LABEL}={instance}"}, sparse=True
        )
        return {c.id: c.attrs["Names"][0].lstrip("/") for c in found}

    def containers(instance: str) -> set[str]:
        return set(named(instance))

    try:
        async with (
            replica(TEST_INSTANCE, secret, store, ledger) as a,
            replica(other, secret, store, theirs) as b,
        ):
            made = await a.session("conv").run(SET_UP)
            assert made.status is Status.OK, made.message
            held_by_a = a.sessions._live["conv"].lease.sandbox
            [held] = containers(TEST_INSTANCE)
            # A's reaper also asks the ledger every few seconds and lets go of what another
            # replica took; with the key's lock held it leaves the session to A's stream.
            busy = a.sessions.lock("conv")
            await busy.acquire()
            read = spoken(await b.session("conv").run(CHECK))
            assert read.status is Status.OK, read.message
            assert read.stdout == "42 still open on disk\n"  # the very kernel, socket and all
            assert not read.session_restarted
            assert RESUMED not in read.message
            assert containers(other) == set()  # B started no sandbox
            # What A's stream heard of B's `resume` is B's traffic, not a forgery: A is told
            # another replica took the session over, and stops nothing.
            with pytest.raises(SandboxTaken):
                await RunnerClient(held_by_a, timeout_s=20).export()
            busy.release()
            # A's reaper, past every idle timeout: it neither saves nor removes B's sandbox.
            a.sessions.idle_timeout_s = 0.001
            await a.sessions.reap()
            await a.sessions.settle()  # what A ended in the background is done
            await asyncio.gather(*a.pool._tasks)
            assert a.sessions.active == []
            assert await store.load("conv") is None  # nothing saved over
            again = await b.session("conv").run("print(x)")
            assert again.stdout == "41\n", again.message
            assert containers(TEST_INSTANCE) == {held}
            await b.session("conv").close()  # B holds it: B may end it
    finally:
        left = named(TEST_INSTANCE) | named(other)
        for container, name in left.items():  # each replica keeps its sessions: none may be left
            remove_sandbox(docker_client, container, name)
    assert not left, "a sandbox was left behind"
