"""Code run beside a run in the background (a second kernel of the same sandbox): in the
executor, and through the console (`/run --beside`, and Run beside for a follow-up that
already waits). It sees the session's files, not its variables; it says so; where nothing
runs in the background, code runs in the session as always."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.service import NOTHING_TO_RUN_BESIDE
from bot.platforms.console import ME, Console, run_piped
from bot.platforms.console_reply import WAITS_BEHIND_PIPED
from bot.sandbox_words import BESIDE_NOTE
from executor import Executor, PoolSettings, SandboxLimits, Status
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.support.later import HANG

FILE = "open('shared.txt', 'w').write('from the session')"
READ = "print(open('shared.txt').read())"
SET = "x = 41"
SHOW = "print(x)"


@pytest.fixture
def fake() -> FakeBackend:
    return FakeBackend(
        {
            HANG: FakeRun(outputs=[stdout("waiting\n")], hang=True),
            FILE: FakeRun(files={"shared.txt": b"from the session"}),
            READ: FakeRun(outputs=[stdout("from the session\n")]),
            SET: FakeRun(assigns={"x": "41"}),
            SHOW: FakeRun(shows="x"),
            "print(6 * 7)": FakeRun(outputs=[stdout("42\n")]),
        }
    )


@pytest.fixture
async def executor(fake: FakeBackend) -> AsyncIterator[Executor]:
    limits = SandboxLimits(timeout_s=5, interrupt_grace_s=0.2)
    async with Executor("fake", limits=limits, backend=fake, pool=PoolSettings(size=0)) as made:
        yield made


async def busy(executor: Executor, key: str = "k") -> asyncio.Task[object]:
    seen = asyncio.Event()
    task: asyncio.Task[object] = asyncio.create_task(
        executor.session(key).run(HANG, on_output=lambda _: seen.set())
    )
    async with asyncio.timeout(10):
        await seen.wait()
    return task


async def test_code_runs_beside_a_busy_session_with_its_files_not_its_variables(
    executor: Executor, fake: FakeBackend
) -> None:
    session = executor.session("k")
    assert (await session.run([FILE, SET])).status is Status.OK
    going = await busy(executor)
    beside = asyncio.Event()
    beside.set()
    read = await session.run(READ, beside=beside)
    assert (read.status, read.stdout, read.beside) == (Status.OK, "from the session\n", True)
    shown = await session.run(SHOW, beside=beside)
    assert shown.status is Status.ERROR  # the session's x is not the second kernel's
    assert shown.error is not None
    assert shown.error.name == "NameError"
    assert not going.done()  # the run it went beside goes on
    assert session.stop()
    stopped = await going
    assert stopped.message == "The run was stopped on request."  # type: ignore[attr-defined]
    again = await session.run(SHOW)
    assert (again.stdout, again.beside) == ("41\n", False)  # the session's own kernel
    assert fake.every[0].beside_runs == 2


async def test_code_waiting_for_the_session_goes_beside_once_asked(executor: Executor) -> None:
    session = executor.session("k")
    going = await busy(executor)
    beside = asyncio.Event()
    waiting = asyncio.create_task(session.run("print(6 * 7)", beside=beside))
    await asyncio.sleep(0)
    assert not waiting.done()
    beside.set()
    async with asyncio.timeout(10):
        result = await waiting
    assert (result.stdout, result.beside) == ("42\n", True)
    session.stop()
    await going


async def test_asked_beside_while_nothing_runs_it_runs_in_the_session(executor: Executor) -> None:
    beside = asyncio.Event()
    beside.set()
    session = executor.session("k")
    await session.run(SET)
    result = await session.run(SHOW, beside=beside)
    assert (result.stdout, result.beside) == ("41\n", False)


@pytest.fixture
async def console(
    executor: Executor, make_agent: Callable[..., Agent], tmp_path: Path
) -> AsyncIterator[tuple[Console, Conversations, io.StringIO]]:
    agent = make_agent(executor, None, tmp_path, timeout=5)
    conversations = Conversations(agent, background_max_s=60, background_per_person=2)
    out = io.StringIO()
    yield Console(conversations, out, tmp_path / "exports"), conversations, out
    await conversations.background.close(grace_s=5)


async def say(console: Console, out: io.StringIO, message: str) -> str:
    start = out.tell()
    await run_piped(console, io.StringIO(message + "\n"))
    return out.getvalue()[start:]


async def test_run_beside_in_the_console(
    console: tuple[Console, Conversations, io.StringIO],
) -> None:
    chat, conversations, out = console
    await say(chat, out, f"/run {SET}")
    await say(chat, out, f"/run --background {HANG}")
    async with asyncio.timeout(10):
        while "waiting" not in out.getvalue():  # noqa: ASYNC110 (a StringIO has no event)
            await asyncio.sleep(0.01)
    beside = await say(chat, out, f"/run --beside {SHOW}")
    assert BESIDE_NOTE in beside
    assert "NameError" in beside
    assert WAITS_BEHIND_PIPED not in beside  # it did not wait

    # A follow-up that waits is sent beside by the Run beside control (its turn's key).
    start = out.tell()
    waiting = asyncio.create_task(say(chat, out, "/run print(6 * 7)"))
    async with asyncio.timeout(10):
        while WAITS_BEHIND_PIPED not in out.getvalue()[start:]:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    assert "Stop button" not in out.getvalue()  # the console has no buttons
    [stop_key] = conversations.turns.keys()
    assert await conversations.run_beside(chat.door, ME, stop_key) is None
    async with asyncio.timeout(10):
        answered = await waiting
    assert "42" in answered
    assert BESIDE_NOTE in answered

    # With nothing in the background, there is nothing to run beside.
    for key in list(conversations.background.runs):
        conversations.background.stop(key)
    async with asyncio.timeout(10):
        while conversations.background.runs:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    waiting = asyncio.create_task(say(chat, out, "/run print(6 * 7)"))
    await asyncio.sleep(0)
    for key in conversations.turns.keys():  # noqa: SIM118 (Turns, not a dict)
        if conversations.turns.get(key):
            assert await conversations.run_beside(chat.door, ME, key) in (
                NOTHING_TO_RUN_BESIDE,
                "That has already finished.",
            )
    assert "42" in await waiting
