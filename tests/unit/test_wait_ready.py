"""A pool keeps a new sandbox until its data stack is loaded, unless a caller waits for one;
a cold start never waits for the warm-up."""

from __future__ import annotations

import asyncio
from typing import Any

from executor.limits import SandboxLimits
from executor.pool import SandboxPool
from executor.run import wait_ready, wait_warm


class Events:
    """The receiving side of a sandbox, fed by the test."""

    alive = True

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    async def receive(self) -> dict[str, Any] | None:
        return await self.queue.get()


async def test_ready_comes_before_the_warm_up_ends() -> None:
    sandbox = Events()
    sandbox.queue.put_nowait({"type": "ready", "startup_ms": 700})
    assert await wait_ready(sandbox, 5) == 700  # type: ignore[arg-type]
    waiting = asyncio.create_task(wait_warm(sandbox))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not waiting.done()
    sandbox.queue.put_nowait({"type": "warm"})
    assert await waiting


async def test_a_sandbox_that_stops_while_warming_is_not_warm() -> None:
    sandbox = Events()
    sandbox.queue.put_nowait(None)
    assert not await wait_warm(sandbox)  # type: ignore[arg-type]


class Backend:
    def __init__(self) -> None:
        self.sandboxes: list[Events] = []

    async def start(self, limits: SandboxLimits, input_tar: bytes | None) -> Events:
        sandbox = Events()
        sandbox.queue.put_nowait({"type": "ready", "startup_ms": 1})
        self.sandboxes.append(sandbox)
        return sandbox


async def test_the_pool_offers_a_sandbox_once_warm_and_a_waiting_caller_gets_one_at_once() -> None:
    backend = Backend()
    pool = SandboxPool(backend, SandboxLimits(), size=1, max_live=4)  # type: ignore[arg-type]
    pool.start()
    await asyncio.sleep(0.2)
    assert backend.sandboxes
    assert pool.ready == 0  # started and ready, but still warming up
    backend.sandboxes[0].queue.put_nowait({"type": "warm"})
    await asyncio.sleep(0.2)
    assert pool.ready == 1
    first = await pool.acquire()
    assert first.sandbox is backend.sandboxes[0]
    # The next one is still warming when a caller asks: it goes to the caller at once.
    lease = await asyncio.wait_for(pool.acquire(), 5)
    assert lease.sandbox is backend.sandboxes[1]
