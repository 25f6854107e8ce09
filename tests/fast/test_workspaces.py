"""Workspaces that outlive their sandbox, with the real session manager and the real sealed
store on local files (the fake backend plays the kernel): saved when a session ends for any
reason but a reset, restored into the conversation's next session with one line that says
what came back, never into another conversation, and a clear note when storage fails."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path

import pytest

from bot.agent import Agent
from bot.platforms.console import CONVERSATION
from bot.sandbox_words import spoken
from bot.workspaces import StoredWorkspaces
from executor import Executor, PoolSettings, SandboxLimits, Status
from executor.fake_backend import FakeBackend, FakeRun, stdout
from executor.workspace import WorkspaceSettings
from storage.base import Data, StoredObject
from storage.errors import StorageUnavailable
from storage.local import META_SUFFIX, LocalStorage
from tests.fast.test_console_turns import Chat

SECRET = b"k" * 32


class Outage(LocalStorage):
    """Local storage that can be switched off, as a storage outage looks to the bot."""

    down = False

    async def put(
        self, key: str, data: Data, content_type: str, max_bytes: int | None = None
    ) -> StoredObject:
        if self.down:
            raise StorageUnavailable("the storage account did not answer")
        return await super().put(key, data, content_type, max_bytes)

    async def get(self, key: str) -> bytes | None:
        if self.down:
            raise StorageUnavailable("the storage account did not answer")
        return await super().get(key)


@pytest.fixture
def storage(tmp_path: Path) -> Outage:
    return Outage(tmp_path / "files", SECRET)


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend(
        {
            "x = 41": FakeRun(assigns={"x": "41"}, files={"data.csv": b"a,b\n1,2\n"}),
            "y = 'b'": FakeRun(assigns={"y": "b"}),
            "y <- 1": FakeRun(assigns={"y": "1"}),
            "conn = connect()": FakeRun(unsaveable=["conn"]),
            "big()": FakeRun(files={"big.bin": b"0" * 2_000_000}),
            "print(x)": FakeRun(shows="x"),
            "print(y)": FakeRun(shows="y"),
            "print('hi')": FakeRun(outputs=[stdout("hi\n")]),
        }
    )


def executor(backend: FakeBackend, storage: Outage, max_mb: int = 100, **pool: float) -> Executor:
    return Executor(
        "fake",
        limits=SandboxLimits(timeout_s=5),
        backend=backend,
        pool=PoolSettings(size=0, **pool),  # type: ignore[arg-type]
        workspaces=StoredWorkspaces(storage, SECRET, timedelta(days=7)),
        workspace_settings=WorkspaceSettings(max_mb=max_mb),
    )


@pytest.fixture
async def idle(backend: FakeBackend, storage: Outage) -> AsyncIterator[Executor]:
    async with executor(backend, storage, idle_timeout_s=0.05) as ex:
        yield ex


def saved_in(storage: LocalStorage, session: str) -> list[Path]:
    """The files a conversation's saved workspace (and any marker) is kept in."""
    folder = storage.root / StoredWorkspaces.folder(session)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if not p.name.endswith(META_SUFFIX))


async def end_idle_sessions(ex: Executor) -> None:
    await asyncio.sleep(0.1)
    await ex.sessions.reap()
    await asyncio.gather(*ex.sessions._saving.values())


async def test_an_idle_session_comes_back_with_its_variables_and_files(idle: Executor) -> None:
    session = idle.session("conv-a")
    await session.run("x = 41")
    await session.run("conn = connect()")
    await end_idle_sessions(idle)
    assert idle.sessions.active == []

    back = spoken(await session.run("print(x)"))
    assert back.status is Status.OK, back.message
    assert back.stdout == "41\n"
    assert back.message == (
        "This is a new session (the previous one was idle for 0.05 s). Restored your workspace "
        "from a moment ago: x, data.csv; not restored: conn (an open connection)."
    )
    assert [(path, size) for path, size in await session.list_files()] == [("data.csv", 8)]
    exported = await session.export_notebook()
    assert exported is not None
    assert [c["source"] for c in exported["cells"]][:2] == ["x = 41", "conn = connect()"]
    follow_up = spoken(await session.run("print(x)"))
    assert "Restored" not in follow_up.message


async def test_a_restore_never_shows_another_conversations_workspace(
    idle: Executor, storage: Outage
) -> None:
    await idle.session("conv-a").run("x = 41")
    await end_idle_sessions(idle)
    other = spoken(await idle.session("conv-b").run("print(x)"))
    assert other.error is not None
    assert other.error.name == "NameError"
    assert "Restored" not in other.message
    assert await idle.session("conv-b").list_files() == []

    # A copy of one conversation's workspace put under another's name does not open.
    await idle.session("conv-b").run("y = 'b'")
    await end_idle_sessions(idle)
    (own,) = saved_in(storage, "conv-a")
    for other in saved_in(storage, "conv-b"):
        other.unlink()
    moved_to = storage.root / StoredWorkspaces.folder("conv-b") / own.name
    for suffix in ("", META_SUFFIX):
        moved_to.with_name(own.name + suffix).write_bytes(
            own.with_name(own.name + suffix).read_bytes()
        )
    moved = spoken(await idle.session("conv-b").run("print(x)"))
    assert moved.error is not None
    assert moved.error.name == "NameError"
    assert "Your saved workspace could not be restored (the saved workspace does not open" in (
        moved.message
    )


async def test_a_reset_deletes_the_workspace(idle: Executor, storage: Outage) -> None:
    session = idle.session("conv-a")
    await session.run("x = 41")
    await end_idle_sessions(idle)
    assert len(saved_in(storage, "conv-a")) == 1
    await session.close()  # what /reset does
    assert saved_in(storage, "conv-a") == []
    fresh = await session.run("print(x)")
    assert fresh.error is not None
    assert fresh.error.name == "NameError"
    assert fresh.message.startswith("The code raised")


async def test_room_for_another_conversation_saves_the_one_that_made_room(
    backend: FakeBackend, storage: Outage
) -> None:
    async with executor(backend, storage, max_live=1) as ex:
        await ex.session("conv-a").run("x = 41")
        await ex.session("conv-b").run("y = 'b'")  # conv-a's sandbox goes to conv-b
        a = spoken(await ex.session("conv-a").run("print(x)"))  # and back
        assert a.stdout == "41\n"
        assert "idle while another conversation needed a sandbox). Restored your" in a.message
        b = spoken(await ex.session("conv-b").run("print(y)"))
        assert b.stdout == "b\n"
        assert "Restored your workspace" in b.message


async def test_r_variables_come_back_and_other_languages_are_named_as_not_restored(
    idle: Executor,
) -> None:
    session = idle.session("conv-lang")
    await session.run("x = 41")
    await session.run("y <- 1", language="r")
    await session.run("Y=1", language="bash")
    await end_idle_sessions(idle)
    back = spoken(await session.run("print(x)"))
    assert back.stdout == "41\n"
    assert back.message == (
        "This is a new session (the previous one was idle for 0.05 s). Restored your workspace "
        "from a moment ago: x, y (R), data.csv; not restored: Bash variables (only Python's "
        "and R's variables are kept; the files are)."
    )
    assert (await session.run("print(y)", language="r")).stdout == "1\n"
    assert (await session.run("print(y)")).error is not None  # R's y is not Python's


async def test_a_workspace_of_r_variables_alone_comes_back(idle: Executor) -> None:
    session = idle.session("conv-r")
    await session.run("y <- 1", language="r")
    await end_idle_sessions(idle)
    back = spoken(await session.run("print(y)", language="r"))
    assert back.stdout == "1\n"
    assert "Restored your workspace from a moment ago: y (R)." in back.message


async def test_a_restart_saves_every_session_and_the_next_process_restores_them(
    backend: FakeBackend, storage: Outage
) -> None:
    async with executor(backend, storage) as first:
        await first.session("conv-a").run("x = 41")
        await first.session("conv-b").run("y = 'b'")
    assert not backend.live
    async with executor(backend, storage) as second:
        a = spoken(await second.session("conv-a").run("print(x)"))
        assert a.stdout == "41\n"
        assert a.message.startswith("Restored your workspace from a moment ago: x, data.csv.")
        assert (await second.session("conv-b").run("print(y)")).stdout == "b\n"


async def test_files_past_the_cap_are_named_as_not_saved(
    backend: FakeBackend, storage: Outage
) -> None:
    async with executor(backend, storage, max_mb=1, idle_timeout_s=0.05) as ex:
        session = ex.session("conv-a")
        await session.run("x = 41")
        await session.run("big()")
        await end_idle_sessions(ex)
        back = spoken(await session.run("print(x)"))
        assert back.stdout == "41\n"
        assert (
            "Restored your workspace from a moment ago: x, data.csv; not restored: big.bin ("
            in (back.message)
        )
        assert [path for path, _ in await session.list_files()] == ["data.csv"]


async def test_storage_down_when_saving_or_restoring_says_so_and_the_run_still_runs(
    idle: Executor, storage: Outage
) -> None:
    session = idle.session("conv-a")
    await session.run("x = 41")
    storage.down = True
    await end_idle_sessions(idle)
    storage.down = False
    lost = spoken(await session.run("print('hi')"))
    assert lost.stdout == "hi\n"
    assert lost.message.startswith(
        "This is a new session (the previous one was idle for 0.05 s). Your workspace could not "
        "be saved when the last session ended (storage: the storage account did not answer); "
        "earlier variables and files are gone."
    )

    await session.run("x = 41")
    await end_idle_sessions(idle)
    storage.down = True
    unread = spoken(await session.run("print('hi')"))
    assert unread.stdout == "hi\n"
    assert "Your saved workspace could not be restored (storage: the storage account did " in (
        unread.message
    )
    assert "this session starts empty" in unread.message


async def test_the_console_lists_a_saved_workspace_and_reset_deletes_it(
    backend: FakeBackend,
    storage: Outage,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
) -> None:
    async with executor(backend, storage, idle_timeout_s=0.05) as ex:
        console = Chat(make_agent(ex, None, tmp_path), tmp_path)
        await console.pipe("/run x = 41")
        await end_idle_sessions(ex)
        listed = await console.pipe("/files")
        assert listed == (
            "Saved workspace (it comes back with the next message here):\ndata.csv (8 B)\n"
        )
        back = await console.pipe("/run print(x)")
        assert "Restored your workspace from a moment ago: x, data.csv." in back
        assert "41" in back.splitlines()
        assert (await console.pipe("/files")) == "data.csv (8 B)\n"  # live again
        await end_idle_sessions(ex)
        assert len(saved_in(storage, CONVERSATION.id)) == 1
        await console.pipe("/reset")
        assert (await console.pipe("/files")) == "No files in /mnt/data.\n"
        assert saved_in(storage, CONVERSATION.id) == []
