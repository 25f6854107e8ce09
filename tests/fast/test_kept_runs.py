"""Kept runs (a run that went on in the background) outlive the process: a shutdown that
keeps sessions leaves them going, and the next process takes them over with everything
they printed, including what they printed while no process listened (wire's Keep and
Follow, on the fake runner that speaks the protocol as the real one does)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from executor import Executor, PoolSettings, RunClock, SandboxLimits, Status
from executor.fake_backend import FakeBackend, FakeRun, stdout
from executor.models import OutputEvent
from executor.session import NOT_FOLLOWED

COUNT = "for i in range(6): print(i)"
HANG = "while True: pass"
LIMITS = SandboxLimits(timeout_s=30, interrupt_grace_s=0.2)


def backend() -> FakeBackend:
    return FakeBackend(
        {
            COUNT: FakeRun(outputs=[stdout(f"{i}\n") for i in range(6)], delay_s=0.15),
            HANG: FakeRun(outputs=[stdout("started\n")], hang=True),
            "x = 1": FakeRun(assigns={"x": "1"}),
        },
        keeps_sessions=True,
    )


def executor(fake: FakeBackend) -> Executor:
    return Executor("fake", limits=LIMITS, backend=fake, pool=PoolSettings(size=0))


async def started(code: str, first: Executor, key: str = "k") -> tuple[asyncio.Task[object], str]:
    """The code running in `key`'s session, its first output seen, and kept."""
    seen = asyncio.Event()

    def saw(event: OutputEvent) -> None:
        seen.set()

    run_id = uuid.uuid4().hex
    task: asyncio.Task[object] = asyncio.create_task(
        first.session(key).run(code, on_output=saw, clock=RunClock(LIMITS.timeout_s), run_id=run_id)
    )
    async with asyncio.timeout(10):
        await seen.wait()
    await first.session(key).keep(run_id)
    return task, run_id


async def abandoned(task: asyncio.Task[object]) -> None:
    """What the process does with its side of a kept run on shutdown: lets go of it."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def collected() -> tuple[list[str], Callable[[OutputEvent], None]]:
    texts: list[str] = []

    def take(event: OutputEvent) -> None:
        texts.append(event.text)

    return texts, take


async def test_a_kept_run_goes_on_through_a_restart_and_is_reported_whole() -> None:
    fake = backend()
    async with executor(fake) as first:
        task, run_id = await started(COUNT, first)
        await abandoned(task)
    assert [s.session for s in fake.live] == ["k"]  # its sandbox was left going

    async with executor(fake) as second:
        texts, take = collected()
        result = await second.session("k").follow(run_id, on_output=take)
    assert result.status is Status.OK
    assert result.stdout == "0\n1\n2\n3\n4\n5\n"  # before, during and after the restart
    assert "".join(texts) == result.stdout


async def test_a_kept_run_that_ended_while_nobody_listened_is_reported_at_once() -> None:
    fake = backend()
    async with executor(fake) as first:
        task, run_id = await started(COUNT, first)
        await abandoned(task)
    sandbox = next(iter(fake.live))
    async with asyncio.timeout(10):  # it ends while no process is attached
        while sandbox._running is not None and not sandbox._running.done():  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    async with executor(fake) as second:
        result = await second.session("k").follow(run_id)
        assert result.status is Status.OK
        assert result.stdout.endswith("5\n")
        again = await second.session("k").follow(run_id)  # followed once, not twice
    assert again.status is Status.KILLED
    assert again.message == NOT_FOLLOWED


async def test_a_run_that_was_not_kept_is_stopped_by_the_shutdown_and_cannot_be_followed() -> None:
    fake = backend()
    async with executor(fake) as first:
        seen = asyncio.Event()
        task = asyncio.create_task(first.session("k").run(HANG, on_output=lambda _: seen.set()))
        async with asyncio.timeout(10):
            await seen.wait()
    stopped = await task
    assert stopped.message == "The run was stopped on request."
    async with executor(fake) as second:
        result = await second.session("k").follow("no-such-run")
    assert result.status is Status.KILLED
    assert result.message == NOT_FOLLOWED


async def test_a_followed_run_stops_on_request_and_the_kernel_goes_on() -> None:
    fake = backend()
    async with executor(fake) as first:
        task, run_id = await started(HANG, first)
        await abandoned(task)
    async with executor(fake) as second:
        stop = asyncio.Event()
        texts, take = collected()

        def stop_once_shown(event: OutputEvent) -> None:
            take(event)
            stop.set()

        result = await second.session("k").follow(run_id, on_output=stop_once_shown, stop=stop)
        assert result.status is Status.KILLED
        assert result.message == "The run was stopped on request."
        assert texts[0] == "started\n"
        assert (await second.session("k").run("x = 1")).status is Status.OK


async def test_a_followed_run_keeps_its_time_limit_across_the_restart() -> None:
    fake = backend()
    async with executor(fake) as first:
        task, run_id = await started(HANG, first)
        await abandoned(task)
    async with executor(fake) as second:
        result = await second.session("k").follow(run_id, clock=RunClock(0.3))
    assert result.status is Status.TIMEOUT
    assert "0.3 s time limit" in result.message


async def test_a_run_kept_before_it_starts_is_kept_from_its_start() -> None:
    """`/run --background`: the run goes to the background before its session exists."""
    fake = backend()
    async with executor(fake) as first:
        await first.session("k").keep("early")
        seen = asyncio.Event()
        task = asyncio.create_task(
            first.session("k").run(COUNT, run_id="early", on_output=lambda _: seen.set())
        )
        async with asyncio.timeout(10):
            await seen.wait()
        await abandoned(task)
    async with executor(fake) as second:
        result = await second.session("k").follow("early")
    assert result.stdout == "0\n1\n2\n3\n4\n5\n"


async def test_a_new_run_in_the_session_ends_what_was_kept() -> None:
    """The runner keeps one run: once the session ran something else, the kept run's id
    is not followed (nothing stale is reported as it)."""
    fake = backend()
    async with executor(fake) as first:
        task, run_id = await started(COUNT, first)
        await task
        await first.session("k").run("x = 1")
    async with executor(fake) as second:
        followed = await second.session("k").follow(run_id)
    assert followed.message == NOT_FOLLOWED


async def test_a_follow_cut_short_by_the_next_shutdown_leaves_the_run_kept() -> None:
    """A second restart before the run ends: the process that followed it lets go of it as
    the first did (kept, neither stopped nor saved), and a third follows it to its end."""
    fake = backend()
    async with executor(fake) as first:
        task, run_id = await started(HANG, first)
        await abandoned(task)
    async with executor(fake) as second:
        following = asyncio.create_task(second.session("k").follow(run_id))
        async with asyncio.timeout(10):
            while second.sessions._running.get("k") != run_id:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        await abandoned(following)
        assert second.sessions.kept("k") == run_id
    async with executor(fake) as third:
        result = await third.session("k").follow(run_id, clock=RunClock(0.3))
    assert result.status is Status.TIMEOUT
    assert result.stdout == "started\n"
