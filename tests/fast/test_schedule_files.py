"""A schedule's run gets the conversation's files even when its session has ended and its
workspace is saved: they are read from the saved workspace, and the conversation's own
restore (its variables with the next message) is left untouched."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.schedule_store import ScheduleStore
from bot.conversations.schedules import Scheduler, ScheduleSettings
from bot.database import Databases
from bot.platforms.console import Console, run_piped
from executor import Executor
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.fast.restore_fixtures import end_sessions, workspaces
from tests.support.later import Clock

__all__ = ["workspaces"]

LOAD = "x = 41"
REPORT = "report()"
TEN = datetime(2026, 11, 27, 10, 0, tzinfo=UTC).timestamp()


@pytest.fixture
def fake_backend() -> FakeBackend:
    def script(code: str) -> FakeRun | None:
        if code.strip() == LOAD:
            return FakeRun(assigns={"x": "41"}, files={"data.csv": b"a,b\n1,2\n"})
        if code.strip().endswith(REPORT):  # the schedule runs its cells as one
            return FakeRun(outputs=[stdout("reported\n")])
        if code.strip() == "print(x)":
            return FakeRun(shows="x")
        return None

    return FakeBackend(script)


@pytest.fixture
async def console(
    fake_executor: Executor, make_agent: Callable[..., Agent], tmp_path: Path
) -> AsyncIterator[tuple[Console, Scheduler, Clock, io.StringIO]]:
    agent = make_agent(fake_executor, None, tmp_path, timeout=5)
    conversations = Conversations(agent)
    store = ScheduleStore(Databases.sqlite(tmp_path))
    clock = Clock()
    scheduler = conversations.schedules = Scheduler(
        conversations, store, ScheduleSettings(), now=clock
    )
    out = io.StringIO()
    yield Console(conversations, out, tmp_path / "exports"), scheduler, clock, out
    await scheduler.close()
    store.close()


async def test_a_run_gets_the_files_of_a_saved_workspace_and_leaves_its_restore(
    console: tuple[Console, Scheduler, Clock, io.StringIO],
    fake_executor: Executor,
    fake_backend: FakeBackend,
) -> None:
    chat, scheduler, clock, out = console
    await run_piped(chat, io.StringIO(f"/run {LOAD}\n\n/run {REPORT}\n\n/schedule daily 10:00\n"))
    assert "Schedule 1 made" in out.getvalue()
    await end_sessions(fake_executor)  # the conversation's session ends; its workspace is saved
    assert not fake_executor.session("console:dm:console:").active

    clock.now = TEN
    start = out.tell()
    await asyncio.gather(*scheduler.tick())
    shown = out.getvalue()[start:]
    assert "reported\n" in shown
    assert "not copied" not in shown
    ran = fake_backend.every[-1]
    assert ran.files == {"data.csv": b"a,b\n1,2\n"}
    # The conversation's next message still gets its variables back.
    start = out.tell()
    await run_piped(chat, io.StringIO("/run print(x)\n"))
    assert "41" in out.getvalue()[start:]
