"""A run in the background survives a restart of the bot where sessions do (the fake
backend keeping sessions, as Kubernetes, or Docker with CELLMATE_SESSION_SECRET, do): the
shutdown leaves it going and tells the thread; the next start follows it once the platform
is up, shows its whole output (what it printed while no bot listened too), reports its end
once with the starter mentioned, and forgets it. Stop works on it after the restart (the
Stop from before the restart too); a run whose sandbox did not survive is reported as
lost; where sessions do not survive, a shutdown stops it as before."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bot.agent import Agent
from bot.conversations.background import (
    FOLLOWED_AFTER_RESTART,
    GOES_ON_THROUGH_RESTART,
    STOPPED_FOR_SHUTDOWN,
)
from bot.conversations.background_store import BackgroundStore, StoredRun
from bot.database import Databases
from bot.platforms.console import ME
from executor import Executor, PoolSettings, SandboxLimits
from executor.fake_backend import FakeBackend
from tests.support.later import HANG, SLOW, slow_backend
from tests.support.restarts import ENDED, Restarts

CONVERSATION = "console:dm:console:"
FOLLOWED = FOLLOWED_AFTER_RESTART.split("{ago}")[0]


async def hanging_through_a_restart(restarts: Restarts) -> StoredRun:
    """A run that never ends sent to the background, then the bot stopped: its record."""
    first = await restarts.start()
    await first.say(f"/run --background {HANG}")
    await first.printed("waiting")
    [stored] = restarts.store.of_platform("console")
    await restarts.stop(first)
    return stored


@pytest.fixture
def backend() -> FakeBackend:
    made = slow_backend()
    made.keeps_sessions = True
    return made


@pytest.fixture
async def restarts(
    backend: FakeBackend, make_agent: Callable[..., Agent], tmp_path: Path
) -> AsyncIterator[Restarts]:
    store = BackgroundStore(Databases.sqlite(tmp_path))
    limits = SandboxLimits(timeout_s=1, interrupt_grace_s=0.2)

    def executor() -> Executor:
        return Executor("fake", limits=limits, backend=backend, pool=PoolSettings(size=0))

    made = Restarts(executor, store, make_agent, tmp_path)
    yield made
    await made.close()
    for sandbox in list(backend.live):
        await sandbox.destroy()
    store.close()


async def test_a_background_run_goes_on_through_a_restart_and_is_reported_once(
    restarts: Restarts,
    backend: FakeBackend,
) -> None:
    first = await restarts.start()
    turn = await first.say(f"/run --background {SLOW}")
    assert "⏳ This run goes on in the background" in turn
    await first.printed("step 0")
    await restarts.stop(first)
    assert GOES_ON_THROUGH_RESTART in first.out.getvalue()
    assert ENDED not in first.out.getvalue()
    assert len(restarts.store.of_platform("console")) == 1

    second = await restarts.start()
    await second.printed(ENDED)
    await second.settled()
    shown = second.out.getvalue()
    assert FOLLOWED in shown
    for step in range(5):  # its whole output, what it printed before the restart too
        assert f"step {step}\n" in shown
    assert "Your background run ended: it finished in" in shown
    assert shown.count(ENDED) == 1
    assert restarts.store.of_platform("console") == []
    assert [code.strip() for code in backend.runs] == [SLOW]  # never run again
    history = await second.conversations.agent.history.load(CONVERSATION)
    assert any("ended: ok after" in str(m.message.get("content")) for m in history)
    # The conversation goes on in the same session.
    assert "42" in await second.say("/run print(6 * 7)")


async def test_stop_works_on_a_followed_run_with_the_stop_from_before_the_restart(
    restarts: Restarts,
    backend: FakeBackend,
) -> None:
    stored = await hanging_through_a_restart(restarts)

    second = await restarts.start()
    await second.printed(FOLLOWED)
    await second.printed("waiting")
    assert await second.conversations.stop(second.console.door, ME, stored.stop_key) is None
    await second.printed(ENDED)
    await second.settled()
    assert "killed after" in second.out.getvalue()
    assert "stopped on request" in second.out.getvalue()
    assert restarts.store.of_platform("console") == []


async def test_a_run_whose_sandbox_did_not_survive_the_restart_is_reported_lost(
    restarts: Restarts,
    backend: FakeBackend,
) -> None:
    first = await restarts.start()
    await first.say(f"/run --background {HANG}")
    await first.printed("waiting")
    await restarts.stop(first)
    for sandbox in list(backend.detached):  # the engine lost it meanwhile
        await sandbox.destroy()

    second = await restarts.start()
    await second.printed(ENDED)
    await second.settled()
    assert "could not be followed after the restart" in second.out.getvalue()
    assert restarts.store.of_platform("console") == []


async def test_where_sessions_do_not_survive_a_shutdown_stops_the_run_and_keeps_nothing(
    restarts: Restarts,
    backend: FakeBackend,
) -> None:
    backend.keeps_sessions = False
    first = await restarts.start()
    await first.say(f"/run --background {HANG}")
    await first.printed("waiting")
    assert restarts.store.of_platform("console") == []
    await restarts.stop(first)
    assert STOPPED_FOR_SHUTDOWN in first.out.getvalue()
    assert GOES_ON_THROUGH_RESTART not in first.out.getvalue()


async def test_a_run_goes_on_through_two_restarts_and_is_followed_by_each(
    restarts: Restarts,
) -> None:
    stored = await hanging_through_a_restart(restarts)
    second = await restarts.start()
    await second.printed(FOLLOWED)
    await second.printed("waiting")
    await restarts.stop(second)  # restarted again before the run ended
    assert GOES_ON_THROUGH_RESTART in second.out.getvalue()
    assert ENDED not in second.out.getvalue()
    assert restarts.store.of_platform("console") == [stored]

    third = await restarts.start()
    await third.printed("waiting")
    assert await third.conversations.stop(third.console.door, ME, stored.stop_key) is None
    await third.printed(ENDED)
    await third.settled()
    assert third.out.getvalue().count(ENDED) == 1
    assert restarts.store.of_platform("console") == []
