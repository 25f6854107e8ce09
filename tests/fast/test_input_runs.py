"""The code's `input()` and `getpass()` through the real executor (fake sandbox): each ask
goes to the caller's callback, the answer back to the code, the time limit waits meanwhile,
and what a getpass() answer was is kept nowhere."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from executor import Executor, InputAsked, PoolSettings, SandboxLimits, Status
from executor.fake_backend import FakeBackend, FakeRun
from tests.support.prompts import answering

NAME = "name = input('Name: ')\nprint(name)"
HIDDEN = "pw = getpass()\nprint(pw)"
TWO = "a, b = input('First: '), input('Second: ')\nprint(a, b)"
ASKS = {
    NAME: FakeRun(asks=[("Name: ", False)]),
    HIDDEN: FakeRun(asks=[("Password: ", True)]),
    TWO: FakeRun(asks=[("First: ", False), ("Second: ", False)]),
}


@pytest.fixture
async def executor() -> AsyncIterator[Executor]:
    limits = SandboxLimits(timeout_s=0.5, interrupt_grace_s=0.2)
    backend = FakeBackend(ASKS)
    async with Executor("fake", limits=limits, backend=backend, pool=PoolSettings(size=1)) as ex:
        yield ex


async def test_an_answer_goes_to_the_code_and_the_time_limit_waits_for_it(
    executor: Executor,
) -> None:
    asked, on_input = answering("Ada", after_s=1.0)  # twice the run's time limit
    ran = await executor.session("k").run(NAME, on_input=on_input)
    assert (ran.status, ran.stdout) == (Status.OK, "Ada\n"), ran.message
    assert asked == [InputAsked("Name: ", False)]
    assert [(i.prompt, i.answered, i.answer) for i in ran.inputs] == [("Name: ", True, "Ada")]


async def test_several_asks_in_one_cell_are_asked_in_order(executor: Executor) -> None:
    asked, on_input = answering("1", "2")
    ran = await executor.session("k").run(TWO, on_input=on_input)
    assert ran.stdout == "1 2\n"
    assert [a.prompt for a in asked] == ["First: ", "Second: "]


async def test_no_answer_ends_the_cell_with_eof_and_says_so(executor: Executor) -> None:
    _, on_input = answering(None)
    ran = await executor.session("k").run(NAME, on_input=on_input)
    assert ran.status is Status.ERROR
    assert ran.error is not None
    assert ran.error.name == "EOFError"
    assert "Nobody answered the code's input() ('Name:'), so it raised EOFError." in ran.message


async def test_without_a_callback_input_raises_as_in_any_notebook(executor: Executor) -> None:
    ran = await executor.session("k").run(NAME)
    assert ran.error is not None
    assert ran.error.name == "StdinNotImplementedError"
    assert ran.inputs == ()


async def test_a_getpass_answer_is_kept_nowhere_in_the_result(executor: Executor) -> None:
    _, on_input = answering("hunter2-secret")
    ran = await executor.session("k").run(HIDDEN, on_input=on_input)
    assert ran.status is Status.OK
    assert "hunter2-secret" not in repr(ran.to_json())
    assert [(i.password, i.answered, i.answer) for i in ran.inputs] == [(True, True, "")]


async def test_a_stop_while_the_code_waits_for_input_ends_the_run(executor: Executor) -> None:
    stop = asyncio.Event()

    async def never(question: InputAsked) -> str | None:
        stop.set()
        await asyncio.Event().wait()
        return None

    ran = await executor.session("k").run(NAME, on_input=never, stop=stop)
    assert ran.status is Status.KILLED
    assert "stopped on request" in ran.message
