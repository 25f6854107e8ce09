"""The fake sandbox backend drives the real executor (pool, sessions, limits, stop, caps)
without Docker: the fast layer's base. Each test checks what a caller of the executor sees."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bot.sandbox_words import spoken
from executor import Executor, PoolSettings, SandboxError, SandboxLimits, Status, wire
from executor.fake_backend import (
    FakeBackend,
    FakeRun,
    FakeSandbox,
    image,
    result,
    stderr,
    stdout,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend(
        {
            "print('hi')": FakeRun(outputs=[stdout("hi\n")]),
            "1 / 0": FakeRun(error=("ZeroDivisionError", "division by zero")),
            "plot()": FakeRun(outputs=[image(PNG)], files={"chart.png": PNG}),
            "sleep()": FakeRun(outputs=[stdout("going\n")], hang=True),
            "stubborn()": FakeRun(hang=True, ignore_interrupt=True),
            "crash()": FakeRun(outputs=[stderr("bye\n")], kernel_dies=-11),
            "hog()": FakeRun(kernel_dies=-9, out_of_memory=True),
            "x": FakeRun(outputs=[result("42")]),
            "re:display": FakeRun(outputs=[result("shown")] * 5),
            "scribble()": FakeRun(outputs=[stdout("a\n")], breaks_channel=True),
        }
    )


@pytest.fixture
async def executor(backend: FakeBackend) -> AsyncIterator[Executor]:
    limits = SandboxLimits(timeout_s=1, interrupt_grace_s=0.2, max_rich_results=3)
    async with Executor("fake", limits=limits, backend=backend, pool=PoolSettings(size=1)) as ex:
        yield ex
    assert not backend.live, "a fake sandbox was left behind"


async def test_outputs_errors_files_and_results(executor: Executor) -> None:
    session = executor.session("k")
    said = await session.run("print('hi')")
    assert (said.status, said.stdout) == (Status.OK, "hi\n")
    failed = await session.run("1 / 0")
    assert failed.status is Status.ERROR
    assert failed.error is not None
    assert failed.error.name == "ZeroDivisionError"
    charted = await session.run("plot()")
    assert [f.path for f in charted.files] == ["chart.png"]
    assert "image/png" in charted.results[0].data
    assert (await session.run("x")).results[-1].text == "42"


async def test_timeouts_stop_and_kernel_deaths(executor: Executor) -> None:
    session = executor.session("k")
    timed_out = await session.run("sleep()")
    assert timed_out.status is Status.TIMEOUT
    assert timed_out.stdout == "going\n"
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.1, stop.set)
    stopped = spoken(await session.run("sleep()", stop=stop, timeout_s=30))
    assert stopped.status is Status.KILLED
    assert "stopped on request" in stopped.message
    killed = spoken(await session.run("stubborn()"))
    assert killed.status is Status.TIMEOUT
    assert "stopped" in killed.message
    died = await session.run("crash()")
    assert died.status is Status.KILLED
    assert "segmentation fault" in died.message
    oom = await session.run("hog()")
    assert oom.status is Status.MEMORY


async def test_code_that_breaks_the_runners_messages_ends_its_session_and_says_so(
    executor: Executor,
) -> None:
    session = executor.session("k")
    await session.run("x = 1")
    spoiled = spoken(await session.run("scribble()"))
    assert spoiled.status is Status.KILLED
    assert spoiled.message.startswith("Part of this run's output may be missing: code in the")
    assert spoiled.stdout == "a\n"  # what arrived whole is kept
    after = spoken(await session.run("x"))
    assert after.session_restarted
    assert after.message.startswith(
        "This is a new session (code in its sandbox broke the runner's messages to the bot"
    ), after.message
    assert (after.status, after.results[-1].text) == (Status.OK, "42")
    notebook = await executor.run_notebook(["scribble()", "x"])
    assert notebook.status is Status.KILLED
    assert "output may be missing" in notebook.message


async def test_files_in_and_caps_on_results(executor: Executor, backend: FakeBackend) -> None:
    session = executor.session("k")
    await session.put_files({"in.csv": b"a\n1\n"})
    assert await session.list_files() == [("in.csv", 4)]
    assert await session.get_file("in.csv") == b"a\n1\n"
    shown = await session.run("display(many)")
    assert len(shown.results) == 3
    assert backend.runs[-1] == "display(many)"


async def test_notebook_mode(executor: Executor) -> None:
    ran = await executor.run_notebook(["print('hi')", "x"])
    assert ran.status is Status.OK
    assert ran.stdout == "hi\n"
    assert ran.results[-1].text == "42"


async def test_with_a_backend_that_keeps_sessions_a_restart_carries_them_on() -> None:
    """The executor's side of re-attaching after a bot restart: sessions' sandboxes are left
    running and adopted by the next executor (its first run says so), pooled ones are not,
    and a session that is closed, or stopped mid-run, behaves as before."""
    backend = FakeBackend(
        {"sleep()": FakeRun(hang=True), "print('hi')": FakeRun(outputs=[stdout("hi\n")])},
        keeps_sessions=True,
    )
    limits = SandboxLimits(timeout_s=5, interrupt_grace_s=0.2)

    def executor() -> Executor:
        return Executor("fake", limits=limits, backend=backend, pool=PoolSettings(size=1))

    async with executor() as first:
        await first.session("a").run("print('hi')")
        await first.session("b").run("print('hi')")
        busy = asyncio.create_task(first.session("c").run("sleep()"))
        await asyncio.sleep(0.1)
        kept = {s.id for s in backend.live if s.session}
    stopped = await busy
    assert stopped.message == "The run was stopped on request."
    assert len(kept) == 3
    assert {s.id for s in backend.live} == kept  # the pooled sandbox went

    async with executor() as second:
        assert sorted(second.sessions.active) == ["a", "b", "c"]
        again = spoken(await second.session("a").run("print('hi')"))
        assert again.stdout == "hi\n"
        assert again.message.startswith("The bot restarted since the last run")
        assert not again.session_restarted
        assert "restarted" not in spoken(await second.session("a").run("print('hi')")).message
        await second.session("b").close()
        fresh = await second.session("d").run("print('hi')")
        assert "restarted" not in fresh.message
    assert {s.session for s in backend.live} == {"a", "c", "d"}

    # A backend that cannot make the keys again (no persistent secret) ends them all.
    backend.keeps_sessions = False
    async with executor() as third:
        assert third.sessions.active == []
        assert {s.session for s in backend.live} <= {""}  # only the pool's
        assert (await third.session("a").run("print('hi')")).stdout == "hi\n"
    assert not backend.live


async def test_a_stop_ends_runs_that_still_wait_and_nothing_of_them_runs() -> None:
    backend = FakeBackend({"sleep()": FakeRun(hang=True), "print('hi')": FakeRun()})
    limits = SandboxLimits(timeout_s=30, interrupt_grace_s=0.2)
    pool = PoolSettings(size=0, max_live=1)
    async with Executor("fake", limits=limits, backend=backend, pool=pool) as executor:
        busy = asyncio.create_task(executor.session("a").run("sleep()"))
        await asyncio.sleep(0.05)
        # Waiting for a sandbox: conversation a holds the only one, and is running.
        waiting = asyncio.create_task(executor.session("b").run("print('hi')"))
        await asyncio.sleep(0.05)
        assert executor.pool.waiting == 1
        assert executor.session("b").stop() is True
        stopped = await asyncio.wait_for(waiting, 5)
        assert stopped.message == "The run was stopped before it started; nothing ran."
        assert stopped.status is Status.KILLED
        assert executor.pool.waiting == 0
        # Waiting behind another run of the same conversation: one stop ends both.
        queued = asyncio.create_task(executor.session("a").run("print('hi')"))
        await asyncio.sleep(0.05)
        assert executor.session("a").stop() is True
        assert (await busy).message == "The run was stopped on request."
        assert (await queued).message == "The run was stopped before it started; nothing ran."
        assert executor.session("a").stop() is False
    assert backend.runs == ["sleep()"]


@pytest.mark.parametrize("taken", [False, True], ids=["request-unread", "after-started"])
async def test_a_sandbox_that_ends_as_a_run_reaches_it_reruns_the_code_only_if_none_ran(
    executor: Executor, backend: FakeBackend, taken: bool
) -> None:
    """Removed from outside between two runs, with the host not yet aware: the next run's
    request goes to a sandbox that is gone. If its runner never said it took the run, none
    of the code ran, so it runs in a new sandbox, once; if it did, the code may have run in
    part, and the person is told the sandbox stopped instead of its running twice."""
    session = executor.session("k")
    await session.run("print('hi')")
    sandbox = executor.sessions._live["k"].lease.sandbox
    assert isinstance(sandbox, FakeSandbox)
    ends_on_its_next_run(sandbox, acknowledged=taken)
    ran_before = backend.runs.count("print('hi')")
    after = spoken(await session.run("print('hi')"))
    assert sandbox.destroyed
    if taken:
        assert after.status is Status.KILLED
        assert after.message.startswith("The sandbox stopped unexpectedly"), after.message
        assert backend.runs.count("print('hi')") == ran_before
    else:
        assert (after.status, after.stdout) == (Status.OK, "hi\n"), after.message
        assert after.session_restarted
        assert "its sandbox had stopped" in after.message, after.message
        assert backend.runs.count("print('hi')") == ran_before + 1
    again = await session.run("print('hi')")
    assert again.stdout == "hi\n"


def ends_on_its_next_run(sandbox: FakeSandbox, acknowledged: bool = False) -> None:
    """The sandbox is removed as the next run's request reaches it: before its runner says
    `Started`, or just after."""
    answer = sandbox._answer

    async def ends(request: wire.Request) -> None:
        if not isinstance(request, wire.Run):
            await answer(request)
            return
        if acknowledged:
            await sandbox._emit(wire.Started(id=request.id))
        await sandbox.destroy()

    sandbox._answer = ends  # type: ignore[method-assign]


@pytest.mark.parametrize("acknowledged", [False, True], ids=["never-acknowledged", "acknowledged"])
async def test_a_sandbox_adopted_after_a_restart_reruns_only_once_its_runner_acknowledged_one(
    acknowledged: bool,
) -> None:
    """A sandbox adopted from an earlier process may hold an earlier version's runner, which
    never acknowledges a run: its silence proves nothing, so the code is not run again
    elsewhere until that runner has acknowledged a run once."""
    backend = FakeBackend({"print('hi')": FakeRun(outputs=[stdout("hi\n")])}, keeps_sessions=True)
    limits = SandboxLimits(timeout_s=5, interrupt_grace_s=0.2)

    def executor() -> Executor:
        return Executor("fake", limits=limits, backend=backend, pool=PoolSettings(size=0))

    async with executor() as first:
        await first.session("a").run("print('hi')")
    async with executor() as second:
        if acknowledged:
            assert (await second.session("a").run("print('hi')")).stdout == "hi\n"
        sandbox = second.sessions._live["a"].lease.sandbox
        assert isinstance(sandbox, FakeSandbox)
        ends_on_its_next_run(sandbox)
        ran_before = backend.runs.count("print('hi')")
        after = spoken(await second.session("a").run("print('hi')"))
        assert sandbox.destroyed
        if acknowledged:
            assert (after.status, after.stdout) == (Status.OK, "hi\n"), after.message
            assert after.session_restarted
            assert backend.runs.count("print('hi')") == ran_before + 1
        else:
            assert after.status is Status.KILLED
            assert after.message.startswith("The sandbox stopped unexpectedly"), after.message
            assert backend.runs.count("print('hi')") == ran_before
        again = spoken(await second.session("a").run("print('hi')"))
        assert again.stdout == "hi\n"


async def test_a_pooled_sandbox_that_ended_while_it_waited_is_replaced_before_a_session_starts(
    executor: Executor, backend: FakeBackend
) -> None:
    """An engine restart ends the sandboxes waiting in the pool, and the host may not have
    read the end of their streams yet: the first request to one fails. Nothing ran in it, so
    the new session takes another instead of failing the person's run."""
    await executor.session("first").run("print('hi')")
    async with asyncio.timeout(5):
        while executor.pool.ready < 1:  # noqa: ASYNC110 (the pool's refill has no event)
            await asyncio.sleep(0.01)
    waiting = backend.every[-1]

    async def connection_lost(request: object) -> None:
        raise SandboxError("the sandbox stopped accepting requests: Connection lost")

    waiting.send = connection_lost  # type: ignore[method-assign]
    started = len(backend.every)
    after = spoken(await executor.session("second").run("print('hi')"))
    assert (after.status, after.stdout) == (Status.OK, "hi\n"), after.message
    assert waiting.destroyed
    assert executor.sessions._live["second"].lease.sandbox is not waiting
    assert len(backend.every) > started
