"""The warm pool with real containers: handed out once, capped, queued, and cleaned up."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import docker
import pytest

from bot.sandbox_words import spoken
from executor import SandboxBusy, Status
from tests.integration.conftest import Pooled
from tests.support.sandboxes import live_sandboxes

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]


async def wait_until(predicate: Callable[[], bool], seconds: float = 60) -> None:
    """Poll the pool's counters (they have no events to wait on)."""
    async with asyncio.timeout(seconds):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.1)


async def test_the_pool_fills_and_never_hands_a_sandbox_out_twice(pooled: Pooled) -> None:
    async with pooled(size=2, max_live=4) as executor:
        pool = executor.pool
        await wait_until(lambda: pool.ready == 2)
        leases = await asyncio.gather(*(pool.acquire() for _ in range(4)))
        assert len({lease.sandbox.id for lease in leases}) == 4
        assert pool.live == 4
        for lease in leases:
            pool.release(lease.sandbox)
        await wait_until(lambda: pool.ready == 2)
        again = await pool.acquire()
        assert again.sandbox.id not in {lease.sandbox.id for lease in leases}
        pool.release(again.sandbox)


async def test_when_full_callers_queue_with_their_position_then_get_busy(pooled: Pooled) -> None:
    async with pooled(size=0, max_live=1, queue_limit=1) as executor:
        pool = executor.pool
        held = await pool.acquire()
        positions: list[int] = []
        waiting = asyncio.create_task(pool.acquire(on_queued=positions.append))
        await wait_until(lambda: pool.waiting == 1)
        assert positions == [1]
        with pytest.raises(
            SandboxBusy, match="All 1 sandboxes are busy and 1 requests are already waiting"
        ):
            await pool.acquire()
        pool.release(held.sandbox)
        second = await asyncio.wait_for(waiting, 60)
        assert second.sandbox.id != held.sandbox.id
        pool.release(second.sandbox)


async def test_a_session_and_notebook_runs_start_from_the_pool(pooled: Pooled) -> None:
    async with pooled(size=2, max_live=4) as executor:
        await wait_until(lambda: executor.pool.ready == 2)
        result = await executor.session("warm").run("1 + 1")
        assert result.status is Status.OK
        assert result.startup_ms > 0  # paid before the call, by the pool
        one_off = await executor.run_notebook("import os\nos.getpid() > 0")
        assert one_off.results[-1].text == "True"


async def test_shutdown_removes_every_sandbox(
    pooled: Pooled, docker_client: docker.DockerClient
) -> None:
    async with pooled(size=2, max_live=6) as executor:
        await wait_until(lambda: executor.pool.ready == 2)
        await executor.session("one").run("x = 1")
        busy = asyncio.create_task(executor.session("two").run("import time\ntime.sleep(60)"))
        await wait_until(lambda: len(executor.sessions.active) == 2)
        assert len(live_sandboxes(docker_client)) >= 2
    result = await asyncio.wait_for(busy, 30)
    assert result.status is not Status.OK
    assert live_sandboxes(docker_client) == []


async def test_an_idle_session_makes_room_when_every_sandbox_is_taken(pooled: Pooled) -> None:
    async with pooled(size=0, max_live=1) as executor:
        first = executor.session("first")
        await first.run("x = 1")
        second = await executor.session("second").run("y = 2\ny")
        assert second.status is Status.OK
        assert second.results[-1].text == "2"
        again = spoken(await first.run("x"))
        assert again.session_restarted
        assert "idle while another conversation needed a sandbox" in again.message
        assert again.error is not None
        assert again.error.name == "NameError"


async def test_a_waiting_session_gets_the_sandbox_an_idle_one_no_longer_uses(
    pooled: Pooled,
) -> None:
    async with pooled(size=0, max_live=1) as executor:
        busy = asyncio.create_task(executor.session("busy").run("import time\ntime.sleep(1)"))
        await wait_until(lambda: executor.pool.live == 1)
        waiting = asyncio.create_task(executor.session("waiting").run("'got one'"))
        assert (await busy).status is Status.OK
        # Without making room, this would wait for the idle timeout (15 minutes).
        result = await asyncio.wait_for(waiting, 60)
        assert result.results[-1].text == "'got one'"
