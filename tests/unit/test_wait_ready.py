"""A pool hands out only sandboxes whose data stack is loaded; a cold start does not wait."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from executor.errors import SandboxError
from executor.run import wait_ready


class Events:
    """The receiving side of a sandbox, fed by the test."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    async def receive(self) -> dict[str, Any] | None:
        return await self.queue.get()


async def test_a_cold_start_is_ready_before_the_warm_up_ends() -> None:
    sandbox = Events()
    sandbox.queue.put_nowait({"type": "ready", "startup_ms": 700})
    assert await wait_ready(sandbox, 5) == 700  # type: ignore[arg-type]
    assert sandbox.queue.empty()


async def test_a_pooled_sandbox_waits_for_the_warm_up() -> None:
    sandbox = Events()
    sandbox.queue.put_nowait({"type": "ready", "startup_ms": 700})
    waiting = asyncio.create_task(wait_ready(sandbox, 5, warm=True))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not waiting.done()
    sandbox.queue.put_nowait({"type": "warm"})
    assert await waiting >= 700


async def test_a_warm_event_before_ready_does_not_count() -> None:
    sandbox = Events()
    sandbox.queue.put_nowait({"type": "warm"})
    sandbox.queue.put_nowait({"type": "ready", "startup_ms": 10})
    with pytest.raises(SandboxError, match="not ready within"):
        await wait_ready(sandbox, 0.2, warm=True)  # type: ignore[arg-type]
