"""Saved workspaces within a cap per person and a cap for everyone: saving one more removes
the oldest first (the same person's, then anyone's), the owner is told when they come back
to that conversation, and a workspace larger than a cap on its own is not saved, saying why.
The real session manager and sealed store, on local files and on Azurite (the root
conftest's `storage`); the fake backend
plays the kernel. On Discord, through the stand-in server, in DMs (whose person the
conversation names)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest

from bench.standins.discord_server import ALICE, BOB, CAROL, Message
from bot.sandbox_words import spoken
from bot.workspaces import StoredWorkspaces, workspace_person
from executor import Executor, PoolSettings, SandboxLimits, Status
from executor.fake_backend import FakeBackend, FakeRun
from executor.workspace import WorkspaceSettings, WorkspaceStore
from storage.base import Storage
from storage.local import LocalStorage
from tests.fast import test_discord_turns
from tests.fast.restore_fixtures import end_sessions
from tests.support.on_discord import Bot

SECRET = b"c" * 32
BLOCK = 400_000
"""Bytes of the file each run leaves: three of them are more than 1 MB."""
REMOVED_FOR_PERSON = (
    "Your saved workspace could not be restored (it was saved on {day} and removed to make "
    "room: the bot keeps at most 1 MB of workspaces per person); this session starts empty."
)


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend(
        {
            "keep()": FakeRun(assigns={"x": "1"}, files={"block.bin": b"0" * BLOCK}),
            "huge()": FakeRun(files={"huge.bin": b"0" * 1_500_000}),
            "print(x)": FakeRun(shows="x"),
        }
    )


def store(storage: Storage, person_mb: int = 1, total_mb: int = 100) -> StoredWorkspaces:
    return StoredWorkspaces(storage, SECRET, timedelta(days=7), person_mb, total_mb)


def executor(backend: FakeBackend, workspaces: StoredWorkspaces) -> Executor:
    return Executor(
        "fake",
        limits=SandboxLimits(timeout_s=5),
        backend=backend,
        pool=PoolSettings(size=0),
        workspaces=workspaces,
        workspace_settings=WorkspaceSettings(person_mb=1, total_mb=100),
    )


async def run_as(ex: Executor, person: str, conversation: str, code: str) -> str:
    """A run for `person` (as the conversation service marks each turn), and its message."""

    async def turn() -> str:
        workspace_person.set(person)
        result = spoken(await ex.session(conversation).run(code))
        assert result.status is Status.OK or code == "print(x)", result.message
        return result.message

    return await asyncio.create_task(turn())


async def kept(workspaces: StoredWorkspaces, storage: Storage, conversation: str) -> bool:
    found = await storage.list(workspaces.folder(conversation))
    return any(item.key.endswith(".bin") for item in found)


async def test_a_persons_oldest_workspace_makes_room_and_they_are_told(
    backend: FakeBackend, storage: Storage
) -> None:
    workspaces = store(storage)
    async with executor(backend, workspaces) as ex:
        for conversation in ("alice-1", "alice-2"):
            await run_as(ex, "alice", conversation, "keep()")
            await end_sessions(ex)
        await run_as(ex, "bob", "bob-1", "keep()")
        await end_sessions(ex)
        assert [await kept(workspaces, storage, c) for c in ("alice-1", "alice-2", "bob-1")] == [
            True,
            True,
            True,
        ]
        # Alice's third workspace is past her 1 MB: her oldest goes, Bob's stays.
        await run_as(ex, "alice", "alice-3", "keep()")
        await end_sessions(ex)
        assert [
            await kept(workspaces, storage, c) for c in ("alice-1", "alice-2", "alice-3", "bob-1")
        ] == [False, True, True, True]

        back = await run_as(ex, "alice", "alice-1", "print(x)")
        day = back.split("saved on ", 1)[1].split(" and removed", 1)[0]
        assert day.endswith(" UTC")
        assert REMOVED_FOR_PERSON.format(day=day) in back
        # Said once: the session that follows saves anew, and its next visit restores that.
        await end_sessions(ex)
        again = await run_as(ex, "alice", "alice-1", "print(x)")
        assert "removed to make room" not in again
        assert "Restored your workspace" in again


async def test_the_total_cap_removes_the_oldest_of_anyone(
    backend: FakeBackend, storage: Storage
) -> None:
    workspaces = store(storage, person_mb=100, total_mb=1)
    async with executor(backend, workspaces) as ex:
        for person, conversation in (("carol", "c-1"), ("dave", "d-1"), ("erin", "e-1")):
            await run_as(ex, person, conversation, "keep()")
            await end_sessions(ex)
        assert [await kept(workspaces, storage, c) for c in ("c-1", "d-1", "e-1")] == [
            False,
            True,
            True,
        ]
        back = await run_as(ex, "carol", "c-1", "print(x)")
        assert "the bot keeps at most 1 MB of workspaces for everyone together" in back


async def test_a_workspace_larger_than_a_cap_is_not_saved_and_the_next_run_says_why(
    backend: FakeBackend, storage: Storage
) -> None:
    workspaces = store(storage)
    async with executor(backend, workspaces) as ex:
        await run_as(ex, "alice", "a-1", "keep()")
        await end_sessions(ex)
        await run_as(ex, "alice", "a-2", "huge()")
        await end_sessions(ex)
        assert not await kept(workspaces, storage, "a-2")
        assert await kept(workspaces, storage, "a-1")  # nothing was removed for it
        back = await run_as(ex, "alice", "a-2", "print(x)")
        assert (
            "Your workspace could not be saved when the last session ended (it is 1.5 MB, more "
            "than the 1 MB of workspaces the bot keeps per person); earlier variables and files "
            "are gone."
        ) in back


# ── Discord ────────────────────────────────────────────────────────────────────────────────

sandbox_limits = test_discord_turns.sandbox_limits
start_bot = test_discord_turns.start_bot


@pytest.fixture
def fake_backend(backend: FakeBackend) -> FakeBackend:
    return backend


@pytest.fixture
def workspaces(tmp_path: Path) -> WorkspaceStore:
    return store(LocalStorage(tmp_path / "ws", SECRET), person_mb=100, total_mb=1)


async def test_on_discord_a_dm_whose_workspace_made_room_is_told_on_the_next_visit(
    start_bot: Callable[..., Awaitable[Bot]], fake_executor: Executor
) -> None:
    bot = await start_bot(use_model=False)
    dms = {user: await bot.server.dm_channel(user) for user in (ALICE, BOB, CAROL)}
    for user, dm in dms.items():  # three of 0.4 MB: Alice's, the oldest, makes room
        await bot.server.post_message(dm, "```py\nkeep()\n```", author=user)
        await bot.answer_in(dm)
        await end_sessions(fake_executor)
    before = len(bot.bot_messages(dms[ALICE]))
    await bot.server.post_message(dms[ALICE], "```py\nprint(x)\n```", author=ALICE)

    def answered() -> list[Message] | None:
        messages = bot.bot_messages(dms[ALICE])[before:]
        idle = not bot.client.conversations.turns and not bot.client.door.lines.busy
        return messages if idle and any(m.content.startswith("ℹ️") for m in messages) else None

    turn = await bot.server.wait_for(answered, 30)
    assert isinstance(turn, list)
    assert len(turn) == 2  # the run report, and one notice
    notice = turn[1].content.replace("\\", "")
    assert "Your saved workspace could not be restored (it was saved on " in notice
    assert "removed to make room: the bot keeps at most 1 MB of workspaces for everyone " in notice
