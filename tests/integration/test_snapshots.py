"""Sessions paused to memory snapshots on the real engine under gVisor: the whole sandbox
is checkpointed (a DataFrame, an open socket pair, a generator mid-iteration and a class
defined in the session), the executor that paused it goes away, and the next one resumes it
with all four intact, its files put back and a fresh runner key. A snapshot that is not
the session's own cannot be resumed: the workspace comes back instead. Under runc the
workspace path stays."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from pathlib import Path

import docker
import pytest

from bot.sandbox_words import spoken
from bot.workspaces import StoredWorkspaces
from executor import Executor, PoolSettings, SandboxLimits, Status, default_tag, wire
from executor.docker_backend import DockerBackend
from executor.docker_sandbox import DockerSandbox
from executor.runner_client import RunnerClient
from executor.workspace import WorkspaceSettings, pack, unpack
from storage.local import LocalStorage
from tests.support.runner_events import notices_and_outputs
from tests.support.sandboxes import TEST_INSTANCE

pytestmark = pytest.mark.docker

SECRET = b"s" * 32

WORK = """
import socket, itertools, pandas as pd
df = pd.DataFrame({'city': ['Oslo', 'Lima'], 'sales': [3, 4]})
left, right = socket.socketpair()
left.sendall(b'still here')
squares = (n * n for n in itertools.count())
first = [next(squares), next(squares), next(squares)]
class Counter:
    def __init__(self):
        self.n = 0
    def bump(self):
        self.n += 1
        return self.n
counter = Counter()
counter.bump()
open('notes.txt', 'w').write('kept on disk')
print('set up', first)
"""

CHECK = """
kind = type(counter).__name__
print(df.sales.sum(), right.recv(100).decode(), next(squares), counter.bump(), kind)
print(open('notes.txt').read())
"""
STARTUP_S = 180.0


@pytest.fixture
def store(tmp_path: Path) -> StoredWorkspaces:
    return StoredWorkspaces(LocalStorage(tmp_path / "files", SECRET), SECRET, timedelta(days=1))


def executor(runtime: str, store: StoredWorkspaces, pause_max_mb: int = 4096) -> Executor:
    return Executor(
        default_tag(),
        limits=SandboxLimits(
            runtime=runtime,  # type: ignore[arg-type]
            timeout_s=60,
            # A checkpoint or restore beside other tests' sandboxes can hold the engine for
            # a while; these tests are about what comes back, not how fast.
            startup_timeout_s=STARTUP_S,
        ),
        instance=TEST_INSTANCE,
        pool=PoolSettings(size=0, pause_max_mb=pause_max_mb, template=False),
        workspaces=store,
        workspace_settings=WorkspaceSettings(),
    )


async def test_a_paused_session_comes_back_whole_in_the_next_process(
    store: StoredWorkspaces, docker_client: docker.DockerClient
) -> None:
    async with executor("runsc", store) as first:
        session = first.session("conv-snap")
        made = await session.run(WORK)
        assert made.status is Status.OK, made.message + made.stderr
        assert made.stdout == "set up [0, 1, 4]\n"
        assert await session.pause() is None
        assert not session.active
    saved = await store.load("conv-snap")
    assert saved is not None
    paused = unpack(saved, 100, 10**9).paused
    assert paused is not None
    state = docker_client.api.inspect_container(paused.sandbox)["State"]
    assert not state["Running"]  # stopped: it holds no memory while paused

    async with executor("runsc", store) as second:  # the bot restarted in between
        session = second.session("conv-snap")
        back = spoken(await session.run(CHECK))
        assert back.status is Status.OK, back.message + back.stderr
        assert back.stdout == "7 still here 9 2 Counter\nkept on disk\n"
        assert back.message.startswith(
            "Resumed your session from a moment ago: every variable is as you left it, "
            "and its files are back (notes.txt)."
        ), back.message
        await session.close()
    with pytest.raises(docker.errors.NotFound):
        docker_client.api.inspect_container(paused.sandbox)


async def test_a_bot_restart_pauses_live_sessions_and_the_next_start_resumes_them(
    store: StoredWorkspaces,
) -> None:
    async with executor("runsc", store) as first:
        made = await first.session("conv-restart").run(WORK)
        assert made.status is Status.OK, made.message + made.stderr
    async with executor("runsc", store) as second:
        session = second.session("conv-restart")
        back = spoken(await session.run(CHECK))
        assert back.stdout == "7 still here 9 2 Counter\nkept on disk\n", back.message
        assert back.message.startswith("Resumed your session from a moment ago"), back.message
        await session.close()


async def test_a_snapshot_of_another_session_is_refused_and_the_workspace_comes_back(
    store: StoredWorkspaces,
) -> None:
    """The record names a snapshot the session did not take (a store tampered with, or a
    sandbox swapped): its runner cannot answer under the recorded key, so it is removed and
    the workspace's files and variables come back instead."""
    async with executor("runsc", store) as ex:
        one, other = ex.session("conv-one"), ex.session("conv-other")
        assert (await one.run("x = 1\nopen('a.txt', 'w').write('a')")).status is Status.OK
        assert (await other.run("x = 2")).status is Status.OK
        assert await one.pause() is None
        assert await other.pause() is None
        one_saved = unpack(await store.load("conv-one") or b"", 100, 10**9)
        other_saved = unpack(await store.load("conv-other") or b"", 100, 10**9)
        assert one_saved.paused is not None
        assert other_saved.paused is not None
        # conv-one's record now points at conv-other's snapshot, with conv-one's key.
        swapped = dataclasses.replace(one_saved.paused, sandbox=other_saved.paused.sandbox)
        await store.save("conv-one", pack(dataclasses.replace(one_saved, paused=swapped)))
        back = spoken(await one.run("print(x)"))
        assert back.status is Status.OK, back.message
        assert back.stdout == "1\n"
        assert "Your paused session could not be kept in memory (it could not be resumed: " in (
            back.message
        )
        assert "so its saved workspace came back instead. Restored your workspace" in back.message
        # The other conversation's snapshot was removed with the refusal: it starts afresh
        # from its own workspace.
        again = spoken(await other.run("print(x)"))
        assert again.stdout == "2\n"
        assert "could not be resumed" in again.message
        await one.close()
        await other.close()
        # conv-one's own snapshot is named by nothing now: a sweep would keep it until the
        # workspaces' retention, so it is removed here.
        assert isinstance(ex.backend, DockerBackend)
        await ex.backend.remove_paused(one_saved.paused)


async def test_runc_sessions_keep_the_workspace_path(store: StoredWorkspaces) -> None:
    async with executor("runc", store) as ex:
        session = ex.session("conv-runc")
        assert (await session.run("y = 5\nimport socket\ns = socket.socket()")).status is Status.OK
        why = await session.pause()
        assert why is not None
        assert "runc" in why
        back = spoken(await session.run("print(y, 's' in globals())"))
        assert back.stdout == "5 False\n"
        assert back.message.startswith("Restored your workspace from a moment ago"), back.message
        await session.close()


async def test_a_record_naming_a_running_session_leaves_that_session_alone(
    store: StoredWorkspaces,
) -> None:
    """A paused session's record pointed at another conversation's live sandbox: the resume
    is refused before anything is touched, and the other session goes on untouched."""
    async with executor("runsc", store) as ex:
        one, other = ex.session("conv-one"), ex.session("conv-live")
        assert (await one.run("x = 1")).status is Status.OK
        assert (await other.run("y = 2")).status is Status.OK
        assert await one.pause() is None
        one_saved = unpack(await store.load("conv-one") or b"", 100, 10**9)
        live = ex.sessions.live("conv-live")
        assert one_saved.paused is not None
        assert live is not None
        running = live.lease.sandbox
        assert isinstance(running, DockerSandbox)
        swapped = dataclasses.replace(one_saved.paused, sandbox=running.name)
        await store.save("conv-one", pack(dataclasses.replace(one_saved, paused=swapped)))
        back = spoken(await one.run("print(x)"))
        assert back.stdout == "1\n"
        assert "(it could not be resumed: its sandbox is running, not paused)" in back.message
        still = await other.run("print(y)")
        assert still.stdout == "2\n"
        assert not still.session_restarted
        await one.close()
        await other.close()
        assert isinstance(ex.backend, DockerBackend)
        await ex.backend.remove_paused(one_saved.paused)


async def test_a_sandbox_over_the_snapshot_cap_keeps_its_workspace_instead(
    store: StoredWorkspaces,
) -> None:
    async with executor("runsc", store, pause_max_mb=50) as ex:
        session = ex.session("conv-big")
        assert (await session.run("import numpy\nz = 7")).status is Status.OK
        why = await session.pause()
        assert why is not None
        assert why.startswith("it could not be paused: its memory (")
        assert why.endswith("MB) is more than a snapshot may hold (50 MB)")
        back = spoken(await session.run("print(z)"))
        assert back.stdout == "7\n"
        assert back.message.startswith(
            "Your paused session could not be kept in memory (it could not be paused: its memory ("
        ), back.message
        assert "Restored your workspace from a moment ago: z" in back.message
        await session.close()


async def test_the_engine_says_whether_it_can_checkpoint() -> None:
    backend = DockerBackend(default_tag(), instance=TEST_INSTANCE)
    try:
        assert await backend.pause_refusal(SandboxLimits(runtime="runsc")) is None
        refused = await backend.pause_refusal(SandboxLimits(runtime="runc"))
        assert refused is not None
        assert "runc" in refused
    finally:
        await backend.close()


RANDOM = (
    "import random, sys, numpy\n"
    "print(random.random(), numpy.random.rand(), 'pandas' in sys.modules)"
)


async def test_cold_sandboxes_are_clones_of_a_warm_template_with_their_own_keys_and_seeds(
    docker_client: docker.DockerClient,
) -> None:
    limits = SandboxLimits(runtime="runsc", timeout_s=60, startup_timeout_s=STARTUP_S)
    pool = PoolSettings(size=0, template=True)
    async with Executor(default_tag(), limits=limits, instance=TEST_INSTANCE, pool=pool) as ex:
        first = await ex.session("cold").run("import sys\nprint('pandas' in sys.modules)")
        assert first.stdout == "False\n"  # a cold start: pandas is not preloaded under runsc
        backend = ex.backend
        assert isinstance(backend, DockerBackend)
        async with asyncio.timeout(180):
            assert await backend.templates.warmed(limits)
        one, two = await asyncio.gather(
            ex.session("clone-1").run(RANDOM), ex.session("clone-2").run(RANDOM)
        )
        assert one.status is Status.OK, one.message + one.stderr
        assert two.status is Status.OK, two.message + two.stderr
        # Both come warm from the template (pandas imported there) ...
        assert one.stdout.split()[2] == two.stdout.split()[2] == "True"
        # ... and neither repeats the other's numbers.
        assert one.stdout.split()[:2] != two.stdout.split()[:2]
        assert one.stdout.split()[0] != two.stdout.split()[0]
        assert one.stdout.split()[1] != two.stdout.split()[1]

        sandboxes = [ex.sessions.live(key) for key in ("clone-1", "clone-2")]
        assert sandboxes[0] is not None
        assert sandboxes[1] is not None
        a, b = (live.lease.sandbox for live in sandboxes)
        assert isinstance(a, DockerSandbox)
        assert isinstance(b, DockerSandbox)
        (template,) = backend.templates._templates.values()
        assert len({a.key, b.key, template.sandbox.key}) == 3
        # A line sealed with one clone's key means nothing to the other.
        forged = wire.Run(id="forged", cells=("print('forged')",))
        await b._write(wire.seal(a.key, 10**18, wire.dumps(wire.encode(forged))))
        client = RunnerClient(b)
        run_id = await client.run(
            ["print('mine')"], output_limit=10**6, rich_limit=10**7, rich_count_limit=100
        )
        notices, outputs = await notices_and_outputs(client, run_id)
        assert notices == ["unsealed request ignored"]
        assert [output.get("text") for output in outputs] == ["mine\n"]
        for key in ("cold", "clone-1", "clone-2"):
            await ex.session(key).close()
