"""Checks that every executor backend must pass, shared by the Docker and Kubernetes
integration tests (each runs them on its own sandboxes)."""

from __future__ import annotations

import asyncio

from executor import Executor, Status

DEAD_KERNELS = [
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", Status.KILLED, "kernel died"),
    ("import ctypes\nctypes.string_at(0)", Status.KILLED, "kernel died"),
    (
        "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))",
        Status.MEMORY,
        "ran out of memory",
    ),
]
"""Code that kills its kernel, the status it gets, and what the next run says."""


async def a_dead_kernel_restarts_the_session_and_says_so(
    executor: Executor, code: str, status: Status, reason: str
) -> None:
    session = executor.session("fragile")
    await session.run("precious = 1")
    died = await session.run(code)
    assert died.status is status
    after = await session.run("'precious' in globals()")
    assert after.session_restarted
    assert reason in after.message
    assert "earlier variables and files are gone" in after.message
    assert after.results[-1].text == "False"
    again = await session.run("1")
    assert not again.session_restarted


async def a_stop_interrupts_and_keeps_state(executor: Executor) -> None:
    session = executor.session("stoppable")
    await session.run("kept = 'still here'")
    running = asyncio.create_task(session.run("import time\nwhile True:\n    time.sleep(0.1)"))
    await asyncio.sleep(1.5)
    assert session.stop()
    stopped = await running
    assert stopped.status is Status.KILLED
    assert stopped.message == "The run was stopped on request."
    after = await session.run("kept")
    assert after.results[-1].text == "'still here'"
    assert not after.session_restarted
    assert not session.stop()  # nothing runs now
