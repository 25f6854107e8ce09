"""The fake sandbox backend drives the real executor (pool, sessions, limits, stop, caps)
without Docker: the fast layer's base. Each test checks what a caller of the executor sees."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from executor import Executor, PoolSettings, SandboxLimits, Status
from executor.fake_backend import FakeBackend, FakeRun, image, result, stderr, stdout

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
    stopped = await session.run("sleep()", stop=stop, timeout_s=30)
    assert stopped.status is Status.KILLED
    assert "stopped on request" in stopped.message
    killed = await session.run("stubborn()")
    assert killed.status is Status.TIMEOUT
    assert "stopped" in killed.message
    died = await session.run("crash()")
    assert died.status is Status.KILLED
    assert "segmentation fault" in died.message
    oom = await session.run("hog()")
    assert oom.status is Status.MEMORY


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
