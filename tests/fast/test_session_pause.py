"""Sessions paused to memory snapshots, with the real session manager, the real sealed
workspace store and the fake backend playing a gVisor sandbox that can be checkpointed:
an idle session is paused instead of ended (its workspace saved beside the snapshot), the
next run resumes it with everything, unpicklable variables too, and says so; a snapshot
that cannot be taken or resumed falls back to the workspace, and the note says why."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path

import pytest

from bot.agent import Agent
from bot.sandbox_words import spoken
from bot.workspaces import StoredWorkspaces
from executor import Executor, PoolSettings, SandboxLimits, Status
from executor.fake_backend import FakeBackend, FakeRun
from executor.session_news import WorkspaceEvent
from executor.workspace import WorkspaceSettings
from storage.local import LocalStorage
from tests.fast.test_console_turns import Chat

SECRET = b"p" * 32
RESUMED = "Resumed your session from a moment ago: every variable is as you left it"


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend(
        {
            "x = 41": FakeRun(assigns={"x": "41"}, files={"data.csv": b"a,b\n1,2\n"}),
            "conn = connect()": FakeRun(unsaveable=["conn"]),
            "print(x)": FakeRun(shows="x"),
            "print(conn)": FakeRun(shows="conn"),
            "key = getpass()": FakeRun(asks=[("Password: ", True)]),
        },
        pausable=True,
    )


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path / "files", SECRET)


def executor(backend: FakeBackend, storage: LocalStorage, **pool: float) -> Executor:
    return Executor(
        "fake",
        limits=SandboxLimits(timeout_s=5, runtime="runsc"),
        backend=backend,
        pool=PoolSettings(size=0, **pool),  # type: ignore[arg-type]
        workspaces=StoredWorkspaces(storage, SECRET, timedelta(days=7)),
        workspace_settings=WorkspaceSettings(),
    )


@pytest.fixture
async def paused(backend: FakeBackend, storage: LocalStorage) -> AsyncIterator[Executor]:
    async with executor(backend, storage, pause_after_s=0.05) as ex:
        yield ex


async def pause_idle_sessions(ex: Executor) -> None:
    await asyncio.sleep(0.1)
    await ex.sessions.reap()
    await asyncio.gather(*ex.sessions._saving.values())


async def test_an_idle_session_is_paused_and_resumed_with_what_cannot_be_pickled(
    paused: Executor, backend: FakeBackend
) -> None:
    session = paused.session("conv-a")
    await session.run("x = 41")
    await session.run("conn = connect()")
    await pause_idle_sessions(paused)
    assert paused.sessions.active == []
    assert len(backend.paused) == 1
    assert paused.pool.live == 0  # a paused session holds no sandbox slot

    back = spoken(await session.run("print(conn)"))
    assert back.status is Status.OK, back.message
    assert back.stdout == "<connection>\n"
    assert back.message == f"{RESUMED}, and its files are back (data.csv)."
    assert not back.session_restarted
    assert backend.restores == []  # nothing was unpickled: the kernel had it all
    assert [(p, s) for p, s in await session.list_files()] == [("data.csv", 8)]
    (sandbox,) = backend.live
    assert sandbox.keys == 2  # a fresh key before anything else
    follow_up = spoken(await session.run("print(x)"))
    assert follow_up.stdout == "41\n"
    assert "Resumed" not in follow_up.message


async def test_a_paused_session_is_resumed_by_the_next_process(
    backend: FakeBackend, storage: LocalStorage
) -> None:
    async with executor(backend, storage) as first:
        await first.session("conv-a").run("conn = connect()")
        assert await first.session("conv-a").pause() is None
    async with executor(backend, storage) as second:
        back = spoken(await second.session("conv-a").run("print(conn)"))
        assert back.stdout == "<connection>\n"
        assert back.message.startswith(RESUMED)
        await second.session("conv-a").close()
    assert backend.paused == {}


async def test_resume_now_says_what_came_back(paused: Executor) -> None:
    session = paused.session("conv-a")
    await session.run("x = 41")
    assert await session.pause() is None
    news = await session.resume()
    assert news is not None
    assert news.event is WorkspaceEvent.RESUMED
    assert news.names == ("data.csv",)
    assert session.active
    assert "Resumed" not in spoken(await session.run("print(x)")).message


@pytest.mark.parametrize(
    "why",
    [
        "the restored sandbox did not answer under its snapshot's key",
        "its sandbox is gone (removed, or the engine was reset)",
    ],
)
async def test_a_snapshot_that_cannot_be_resumed_falls_back_to_the_workspace(
    paused: Executor, backend: FakeBackend, why: str
) -> None:
    session = paused.session("conv-a")
    await session.run("x = 41")
    await session.run("conn = connect()")
    assert await session.pause() is None
    if why.startswith("its sandbox is gone"):
        backend.paused.clear()
    else:
        backend.refuse_resume = why
    back = spoken(await session.run("print(x)"))
    assert back.stdout == "41\n"
    assert back.message == (
        f"Your paused session could not be kept in memory (it could not be resumed: {why}), "
        "so its saved workspace came back instead. Restored your workspace from a moment ago: "
        "x, data.csv; not restored: conn (an open connection)."
    )
    assert backend.restores == [["x"]]
    assert backend.paused == {}


async def test_a_sandbox_that_cannot_be_paused_saves_its_workspace_and_says_why(
    paused: Executor, backend: FakeBackend
) -> None:
    backend.refuse_pause = "its memory (5000 MB) is more than a snapshot may hold (4096 MB)"
    session = paused.session("conv-a")
    await session.run("x = 41")
    await pause_idle_sessions(paused)
    assert backend.paused == {}
    assert paused.sessions.active == []
    back = spoken(await session.run("print(x)"))
    assert back.stdout == "41\n"
    assert back.message.startswith(
        "Your paused session could not be kept in memory (it could not be paused: its memory "
        "(5000 MB) is more than a snapshot may hold (4096 MB)), so its saved workspace came "
        "back instead. Restored your workspace from a moment ago: x, data.csv."
    )


async def test_a_session_given_a_getpass_answer_is_never_paused_to_a_snapshot(
    paused: Executor, backend: FakeBackend
) -> None:
    session = paused.session("conv-a")
    await session.run("x = 41")

    async def answer(asked: object) -> str:
        return "hunter2-secret"

    await session.run("key = getpass()", on_input=answer)
    await pause_idle_sessions(paused)
    assert backend.paused == {}  # a memory image would hold the answer on the host's disk
    back = spoken(await session.run("print(x)"))
    assert back.stdout == "41\n"
    assert back.message.startswith(
        "Your paused session could not be kept in memory (it was given a getpass() answer, "
        "which is never saved), so its saved workspace came back instead."
    )
    # Only a sandbox that was given one: the new session of conv-a, and another, pause.
    await paused.session("conv-b").run("x = 41")
    await pause_idle_sessions(paused)
    assert len(backend.paused) == 2


async def test_where_no_snapshot_can_be_taken_pause_saves_the_workspace(
    storage: LocalStorage,
) -> None:
    backend = FakeBackend({"x = 41": FakeRun(assigns={"x": "41"})}, pausable=False)
    backend.script = {**backend.script, "print(x)": FakeRun(shows="x")}  # type: ignore[dict-item]
    async with executor(backend, storage, pause_after_s=0.05) as ex:
        session = ex.session("conv-a")
        await session.run("x = 41")
        await pause_idle_sessions(ex)
        assert ex.sessions.active == ["conv-a"]  # not paused: the idle timeout applies
        assert await session.pause() == "the fake backend was made without snapshots"
        assert ex.sessions.active == []
        back = spoken(await session.run("print(x)"))
        assert back.stdout == "41\n"
        assert "Restored your workspace from a moment ago: x." in back.message


async def test_a_reset_removes_the_snapshot(paused: Executor, backend: FakeBackend) -> None:
    session = paused.session("conv-a")
    await session.run("x = 41")
    await pause_idle_sessions(paused)
    assert len(backend.paused) == 1
    await session.close()
    assert backend.paused == {}
    back = spoken(await session.run("print(x)"))
    assert back.status is Status.ERROR
    assert "Resumed" not in back.message
    assert "Restored" not in back.message


async def test_the_console_says_a_paused_session_was_resumed(
    backend: FakeBackend,
    storage: LocalStorage,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
) -> None:
    async with executor(backend, storage, pause_after_s=0.05) as ex:
        console = Chat(make_agent(ex, None, tmp_path), tmp_path)
        await console.pipe("/run conn = connect()")
        await pause_idle_sessions(ex)
        assert len(backend.paused) == 1
        back = await console.pipe("/run print(conn)")
        assert f"{RESUMED}." in back
        assert "<connection>" in back.splitlines()


async def test_a_session_that_makes_room_for_another_is_paused_not_ended(
    backend: FakeBackend, storage: LocalStorage
) -> None:
    async with executor(backend, storage, max_live=1) as ex:
        await ex.session("conv-a").run("conn = connect()")
        assert (await ex.session("conv-b").run("x = 41")).status is Status.OK
        assert len(backend.paused) == 1
        back = spoken(await ex.session("conv-a").run("print(conn)"))
        assert back.stdout == "<connection>\n"
        assert back.message.startswith(RESUMED)
        assert not back.session_restarted


async def test_a_shutdown_pauses_sessions_and_the_next_process_resumes_them(
    backend: FakeBackend, storage: LocalStorage
) -> None:
    async with executor(backend, storage) as first:
        await first.session("conv-a").run("conn = connect()")
        await first.session("conv-b").run("x = 41")
    assert len(backend.paused) == 2
    async with executor(backend, storage) as second:
        back = spoken(await second.session("conv-a").run("print(conn)"))
        assert back.stdout == "<connection>\n"
        assert back.message.startswith(RESUMED)
        again = spoken(await second.session("conv-b").run("print(x)"))
        assert again.stdout == "41\n"
        await second.session("conv-a").close()
        await second.session("conv-b").close()
    assert backend.paused == {}


async def test_a_pause_that_takes_too_long_keeps_the_workspace(
    backend: FakeBackend, storage: LocalStorage
) -> None:
    """The workspace is saved before the checkpoint: a pause past the deadline loses
    nothing that the workspace holds."""

    async def slow_pause(*_: object) -> None:
        await asyncio.sleep(30)

    async with executor(backend, storage, shutdown_save_s=0.5) as first:
        await first.session("conv-a").run("x = 41")
        backend.pause = slow_pause  # type: ignore[assignment,method-assign]
    assert backend.paused == {}
    del backend.pause
    async with executor(backend, storage) as second:
        back = spoken(await second.session("conv-a").run("print(x)"))
        assert back.stdout == "41\n"
        assert back.message == "Restored your workspace from a moment ago: x, data.csv."
