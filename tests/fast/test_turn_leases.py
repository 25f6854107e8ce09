"""One turn at a time in a conversation across replicas that share a database: the lease
on both engines (taken, renewed, given back, lapsed, never shared), and two bots (two
`Conversations`, each with its own agent and fake sandbox, like two replicas) on one
PostgreSQL database: a message to the conversation one of them is answering waits, says so
once, and starts when the other's turn has ended; a replica that died with the lease holds
the conversation only until the lease lapses."""

from __future__ import annotations

import asyncio
import contextlib
import io
import types
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.turn_leases import ANOTHER_REPLICA, LabelTaken, TurnLeases
from bot.database import Databases
from bot.metrics import Metrics
from bot.ops.health import Health
from bot.ops.services import services
from bot.platforms.console import CONVERSATION, Console, run_piped
from bot.settings import Settings, SettingsError
from executor import Executor, PoolSettings, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.support.screen import Screen

SLOW = "slow()"
QUICK = "print(6 * 7)"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


# ── the lease ──────────────────────────────────────────────────────────────────────────


async def test_a_lease_is_one_holders_until_given_back_or_lapsed(databases: Databases) -> None:
    clock = Clock()
    one = TurnLeases(databases, "replica-a", ttl_s=30, clock=clock)
    other = TurnLeases(databases, "replica-b", ttl_s=30, clock=clock)
    try:
        assert one.take("c1", "a/1")
        assert one.take("c1", "a/1")  # its holder may take it again
        assert not other.take("c1", "b/1")
        assert not one.take("c1", "a/2")  # another turn of the same replica waits too
        assert other.take("c2", "b/1")  # other conversations are free
        assert other.holder("c1") == "a/1"

        clock.now += 25
        assert one.renew("c1", "a/1")
        clock.now += 25  # 50 s after the take, 25 s after the renewal
        assert not other.take("c1", "b/1")

        one.give_back("c1", "b/1")  # only its holder gives it back
        assert other.holder("c1") == "a/1"
        one.give_back("c1", "a/1")
        assert other.holder("c1") is None
        assert other.take("c1", "b/1")

        clock.now += 31  # b stopped renewing: it lapsed
        assert one.holder("c1") is None
        assert not other.renew("c1", "b/2")
        assert one.take("c1", "a/3")
        assert not other.renew("c1", "b/1")  # a lapsed holder learns it lost the lease
    finally:
        one.close()
        other.close()


async def test_turns_wait_for_the_lease_and_are_told_once(databases: Databases) -> None:
    one = TurnLeases(databases, "replica-a", ttl_s=3, poll_s=0.02)
    other = TurnLeases(databases, "replica-b", ttl_s=3, poll_s=0.02)
    told: list[str] = []
    order: list[str] = []
    started = asyncio.Event()

    async def queued(text: str) -> None:
        told.append(text)

    async def turn(leases: TurnLeases, name: str, hold_s: float) -> None:
        async with leases.held("c1", queued):
            order.append(f"{name} starts")
            started.set()
            await asyncio.sleep(hold_s)
            order.append(f"{name} ends")

    try:
        first = asyncio.create_task(turn(one, "a", 0.5))
        await started.wait()
        await asyncio.gather(first, turn(other, "b", 0), turn(other, "c", 0))
        assert order[:2] == ["a starts", "a ends"]
        assert sorted(order[2:]) == ["b ends", "b starts", "c ends", "c starts"]
        assert order[2].endswith("starts")  # one at a time
        assert order[3].endswith("ends")
        # b asked the database and was told; c waited behind b in its own process.
        assert told == [ANOTHER_REPLICA]
        assert one.holder("c1") is None
    finally:
        one.close()
        other.close()


async def test_a_lease_is_renewed_while_its_turn_runs(databases: Databases) -> None:
    one = TurnLeases(databases, "replica-a", ttl_s=0.6, poll_s=0.02)
    other = TurnLeases(databases, "replica-b", ttl_s=0.6, poll_s=0.02)
    try:
        async with one.held("c1", _ignore):
            await asyncio.sleep(1.5)  # well past the ttl: renewals kept it
            holder = other.holder("c1")
            assert holder is not None
            assert holder.startswith("replica-a/")
            assert not other.take("c1", "b/1")
    finally:
        one.close()
        other.close()


async def _ignore(text: str) -> None:
    pass


# ── two replicas ───────────────────────────────────────────────────────────────────────


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


class Replica:
    """A bot process: its own executor and agent, the console as its front end, and the
    leases in the database the replicas share."""

    def __init__(self, agent: Agent, leases: TurnLeases, exports: Path) -> None:
        self.screen = Screen()
        conversations = Conversations(agent)
        conversations.leases = leases
        self.console = Console(conversations, self.screen, exports)

    async def say(self, text: str) -> None:
        await run_piped(self.console, io.StringIO(text + "\n"))


MakeReplica = Callable[..., Awaitable[Replica]]


@pytest.fixture
async def replicas(
    shared_database: Databases,
    sandbox_limits: SandboxLimits,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
) -> AsyncIterator[MakeReplica]:
    where = shared_database
    async with contextlib.AsyncExitStack() as stack:

        async def make(name: str, ttl_s: float = 30.0) -> Replica:
            backend = FakeBackend(
                {
                    SLOW: FakeRun(
                        outputs=[stdout(f"{name} step {n}\n") for n in range(4)], delay_s=0.3
                    ),
                    QUICK: FakeRun(outputs=[stdout(f"{name} says 42\n")]),
                }
            )
            executor = await stack.enter_async_context(
                Executor("fake", limits=sandbox_limits, backend=backend, pool=PoolSettings(size=0))
            )
            leases = TurnLeases(where, name, ttl_s=ttl_s, poll_s=0.05)
            stack.callback(leases.close)
            folder = tmp_path / name
            return Replica(make_agent(executor, None, folder), leases, folder / "exports")

        yield make


async def test_a_message_to_a_conversation_another_replica_answers_waits_its_turn(
    replicas: MakeReplica,
) -> None:
    a = await replicas("a")
    b = await replicas("b")
    running = asyncio.create_task(a.say(f"/run {SLOW}"))
    await a.screen.wait_for("a step 0")
    await b.say(f"/run {QUICK}")
    assert running.done()  # b's turn could not end before a's
    await running
    shown = b.screen.getvalue()
    assert ANOTHER_REPLICA in shown
    assert "b says 42" in shown
    # b's run started after a's had ended: a's last step was printed before b's output.
    assert "a step 3" in a.screen.getvalue()
    assert a.console.conversations.leases is not None
    assert a.console.conversations.leases.holder(CONVERSATION.id) is None


async def test_a_dead_replicas_conversation_is_taken_over_when_its_lease_lapses(
    replicas: MakeReplica, postgres_url: str
) -> None:
    b = await replicas("b", ttl_s=1.0)
    ghost = TurnLeases(Databases(postgres_url), "dead-replica", ttl_s=1.0)
    try:
        assert ghost.take(CONVERSATION.id, "dead-replica/turn")  # then it died
        await b.say(f"/run {QUICK}")
        shown = b.screen.getvalue()
        assert ANOTHER_REPLICA in shown
        assert "b says 42" in shown
    finally:
        ghost.close()


async def test_healthz_says_whether_the_shared_database_answers(postgres_url: str) -> None:
    where = Databases(postgres_url)
    leases = TurnLeases(where, "replica-a")
    running = types.SimpleNamespace(conversations=types.SimpleNamespace(leases=leases))
    health = Health(running, [])  # type: ignore[arg-type]
    try:
        assert await health._database() == "ok"
        where.close()  # the pool is gone, as when the server cannot be reached
        said = await health._database()
        assert said != "ok"
        assert "closed" in said  # what went wrong, in its own words
    finally:
        leases.close()
        where.close()


async def test_metrics_show_the_replica_and_the_turns_on_every_replica(
    shared_database: Databases,
) -> None:
    one = TurnLeases(shared_database, "replica-a")
    other = TurnLeases(shared_database, "replica-b")
    metrics = Metrics()
    metrics.watch_cluster(one)
    try:
        assert one.take("c1", "replica-a/t1")
        assert other.take("c2", "replica-b/t1")
        assert other.take("c3", "replica-b/t2")
        shown = metrics.exposition().decode()
        assert 'cellmate_replica_info{replica="replica-a"} 1.0' in shown
        assert "cellmate_cluster_turns 3.0" in shown
        assert "cellmate_cluster_replicas_busy 2.0" in shown
        shared_database.close()  # a database that cannot answer fails no scrape
        shown = metrics.exposition().decode()
        assert 'cellmate_replica_info{replica="replica-a"} 1.0' in shown
        assert "cellmate_cluster_turns" not in shown
    finally:
        one.close()
        other.close()


async def test_a_sandbox_label_is_one_live_hosts_and_a_restarted_host_takes_it_back(
    shared_database: Databases,
) -> None:
    one = TurnLeases(shared_database, "bot-a:1")
    again = TurnLeases(shared_database, "bot-a:2")  # the same Pod, restarted
    other = TurnLeases(shared_database, "bot-b:1")
    try:
        async with one.label_held("team", "bot-a"):
            with pytest.raises(LabelTaken, match="another replica \\(bot-a\\) runs with"):
                async with other.label_held("team", "bot-b"):
                    pass
            async with other.label_held("team-shard1", "bot-b"):  # a label of its own
                pass
        async with other.label_held("team", "bot-b"):  # given back at the end
            pass
        # A process that died with the label: its Pod, restarted, takes it back at once.
        assert one.take("sandboxes:team", "bot-a")
        async with again.label_held("team", "bot-a"):
            assert other.holder("sandboxes:team") == "bot-a"
    finally:
        for leases in (one, again, other):
            leases.close()


async def test_a_replica_with_another_live_replicas_label_is_refused_before_any_sandbox(
    shared_database: Databases, postgres_url: str, tmp_path: Path
) -> None:
    live = TurnLeases(shared_database, "bot-a:1")
    settings = Settings(
        data_dir=tmp_path, database_url=postgres_url, instance="team", executor_backend="docker"
    )
    try:
        assert live.take("sandboxes:team", "another-host")
        with pytest.raises(SettingsError, match="give each replica its own CELLMATE_INSTANCE"):
            async with services(settings):
                pass
    finally:
        live.close()
