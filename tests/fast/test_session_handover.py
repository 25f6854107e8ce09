"""A live session moves between the bot's replicas: two (or three) executors on one fake
cluster, sharing a ledger of who holds each session. The replica a conversation's turn
reaches adopts the sandbox another replica holds (its variables intact), and the replica
that lost it never stops, saves, pauses or removes it afterwards, nor at its next start."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

import executor.session as session_module
from bot.conversations.session_owners import SessionOwners
from bot.database import Databases
from executor import ExecutionResult, Executor, PoolSettings, SandboxBusy, SandboxLimits
from executor.errors import SandboxTaken
from executor.fake_backend import FakeBackend, FakeRun, FakeSandbox
from executor.ownership import MemoryOwners, Owner
from executor.ownership import SessionOwners as OwnersSeam
from executor.runner_client import RunnerClient

SCRIPT = {
    "x = 41": FakeRun(assigns={"x": "41"}),
    "print(x)": FakeRun(shows="x"),
}
LIMITS = SandboxLimits(timeout_s=5, interrupt_grace_s=0.2)


def cluster() -> FakeBackend:
    return FakeBackend(SCRIPT, keeps_sessions=True, instance="replica-a")


def replica(backend: FakeBackend, owners: OwnersSeam) -> Executor:
    return Executor(
        "fake", limits=LIMITS, backend=backend, pool=PoolSettings(size=0), owners=owners
    )


@contextlib.asynccontextmanager
async def running(executor: Executor) -> AsyncIterator[Executor]:
    await executor.__aenter__()
    try:
        yield executor
    finally:
        await executor.aclose()


@contextlib.asynccontextmanager
async def two_replicas() -> AsyncIterator[tuple[Executor, Executor, FakeBackend, MemoryOwners]]:
    """Replicas A and B on one fake cluster, sharing a ledger: A, B, the cluster, and the
    ledger as B sees it."""
    backend, ledger = cluster(), MemoryOwners("replica-a")
    theirs = ledger.sharing("replica-b")
    async with (
        running(replica(backend, ledger)) as a,
        running(replica(backend.replica("replica-b"), theirs)) as b,
    ):
        yield a, b, backend, theirs


def only_sandbox(backend: FakeBackend) -> FakeSandbox:
    assert len(backend.every) == 1, "a second sandbox was started"
    return backend.every[0]


async def taken_over(a: Executor, b: Executor, backend: FakeBackend) -> FakeSandbox:
    """`x` set through replica A, read through replica B: B adopted A's sandbox."""
    assert (await a.session("k").run("x = 41")).status.value == "ok"
    read = await b.session("k").run("print(x)")
    assert read.stdout == "41\n"
    assert not read.session_restarted
    assert read.ended is None
    assert not read.resumed
    sandbox = only_sandbox(backend)
    assert "k" in b.sessions.active
    return sandbox


async def still_bs(b: Executor, sandbox: FakeSandbox, ledger: MemoryOwners) -> None:
    assert sandbox.alive
    assert not sandbox.destroyed
    assert ledger.owner("k") == Owner(sandbox.id, "replica-b")
    assert (await b.session("k").run("print(x)")).stdout == "41\n"


async def settled(a: Executor) -> None:
    """Whatever A started in the background (a save, a release, a removal) has run."""
    await a.sessions.settle()
    await asyncio.gather(*a.pool._tasks)


async def reap(a: Executor) -> None:
    a.sessions.idle_timeout_s = 0.0
    await a.sessions.reap()


async def pause(a: Executor) -> None:
    await a.session("k").pause()


async def make_room(a: Executor) -> None:
    a.sessions._make_room(None)


async def close_all(a: Executor) -> None:
    await a.aclose()


@pytest.mark.parametrize("after", [reap, pause, make_room, close_all])
async def test_a_replica_adopts_an_idle_session_and_the_other_leaves_it_running(
    after: Callable[[Executor], Awaitable[None]],
) -> None:
    async with two_replicas() as (a, b, backend, theirs):
        sandbox = await taken_over(a, b, backend)
        await after(a)
        await settled(a)
        await still_bs(b, sandbox, theirs)
        assert sandbox.holder is b.backend
    # B's shutdown left it running for B's next start, as any session it holds.
    assert sandbox.alive
    assert sandbox in backend.detached
    assert sandbox.holder is None


async def test_the_replica_that_lost_a_session_lets_go_of_it_when_it_reaps() -> None:
    async with two_replicas() as (a, b, backend, theirs):
        sandbox = await taken_over(a, b, backend)
        assert "k" in a.sessions.active
        await a.sessions.reap()  # idle timeouts far off: only the ledger says so
        assert a.sessions.active == []
        assert a.pool.live == 0
        await still_bs(b, sandbox, theirs)


async def test_the_first_replica_takes_the_session_back_with_its_next_turn() -> None:
    async with two_replicas() as (a, b, backend, theirs):
        sandbox = await taken_over(a, b, backend)
        back = await a.session("k").run("print(x)")
        assert back.stdout == "41\n"
        assert not back.session_restarted
        assert theirs.owner("k") == Owner(sandbox.id, "replica-a")
        await b.sessions.reap()
        assert b.sessions.active == []
        assert (await a.session("k").run("print(x)")).stdout == "41\n"
        only_sandbox(backend)


async def test_a_restart_of_either_replica_keeps_the_session_where_it_is() -> None:
    backend, ledger = cluster(), MemoryOwners("replica-a")
    theirs = ledger.sharing("replica-b")
    b_backend = backend.replica("replica-b")
    async with running(replica(b_backend, theirs)) as b:
        async with running(replica(backend, ledger)) as a:
            sandbox = await taken_over(a, b, backend)
        # A restarts while B holds the sandbox (labelled A's): A neither attaches to it (B
        # would hear a `resume` it did not ask for) nor removes it.
        async with running(replica(backend, ledger)) as a:
            assert a.sessions.active == []
            await still_bs(b, sandbox, theirs)
        assert sandbox.alive
        assert not sandbox.destroyed
    # Both stopped, B keeping its session: A's start and stop do not touch it.
    async with running(replica(backend, ledger)) as a:
        assert a.sessions.active == []
        assert sandbox.alive
        assert not sandbox.destroyed
        async with running(replica(b_backend, theirs)) as b:
            assert b.sessions.active == ["k"]
            again = await b.session("k").run("print(x)")
            assert again.stdout == "41\n"
            assert again.resumed  # "The bot restarted since the last run; ..."
    only_sandbox(backend)


async def test_a_session_whose_sandbox_is_gone_starts_afresh_on_the_other_replica() -> None:
    async with two_replicas() as (a, b, backend, theirs):
        await a.session("k").run("x = 41")
        gone = only_sandbox(backend)
        await gone.destroy()  # deleted from outside (a node lost, a Pod's deadline)
        fresh = await b.session("k").run("print(x)")
        assert fresh.status.value == "error"  # x is not defined: a new kernel
        assert len(backend.every) == 2
        assert theirs.owner("k") == Owner(backend.every[1].id, "replica-b")
        await a.sessions.reap()
        assert backend.every[1].alive


@pytest.mark.parametrize("silent", [1, 2])
async def test_a_sandbox_that_does_not_answer_at_once_is_asked_again_not_replaced(
    silent: int,
) -> None:
    """Busy with another host for a moment (the replica that held it restarting and
    attaching again, or letting go as it shuts down): the taker asks again and adopts it,
    variables intact, instead of starting a new session in its place."""
    async with two_replicas() as (a, b, backend, theirs):
        await a.session("k").run("x = 41")
        b_backend = b.pool.backend
        adopt = b_backend.adopt  # type: ignore[attr-defined]
        asked: list[str] = []

        async def busy_at_first(sandbox_id: str) -> object:
            asked.append(sandbox_id)
            return None if len(asked) <= silent else await adopt(sandbox_id)

        b_backend.adopt = busy_at_first  # type: ignore[attr-defined]
        read = await b.session("k").run("print(x)")
        assert read.stdout == "41\n"
        assert len(asked) == silent + 1
        assert len(backend.every) == 1
        assert theirs.owner("k") == Owner(backend.every[0].id, "replica-b")


async def test_a_takeover_stopped_before_the_sandbox_answered_gives_the_session_back() -> None:
    """The taker's turn is stopped (its replica shutting down) while it waits for the
    sandbox: the record goes back to the replica that had it, not to nobody, so the next
    turn, anywhere, takes the session over with its variables instead of starting anew."""
    async with two_replicas() as (a, b, backend, theirs):
        await a.session("k").run("x = 41")
        sandbox = only_sandbox(backend)
        b_backend = b.pool.backend
        adopt = b_backend.adopt  # type: ignore[attr-defined]
        waiting = asyncio.Event()

        async def never_answers(sandbox_id: str) -> object:
            waiting.set()
            await asyncio.Event().wait()

        b_backend.adopt = never_answers  # type: ignore[attr-defined]
        stopped = asyncio.create_task(b.session("k").run("print(x)"))
        await waiting.wait()
        assert theirs.owner("k") == Owner(sandbox.id, "replica-b")
        stopped.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stopped
        assert theirs.owner("k") == Owner(sandbox.id, "replica-a")
        assert sandbox.alive
        b_backend.adopt = adopt  # type: ignore[attr-defined]
        read = await b.session("k").run("print(x)")
        assert read.stdout == "41\n"
        assert len(backend.every) == 1


async def test_a_session_handed_back_to_a_replica_that_let_it_go_is_attached_again() -> None:
    """The record names this replica, but its session is not live here (it let go when
    another replica took it, and that takeover was stopped and gave it back; or this is a
    restarted Pod of the same name): the next turn attaches to the sandbox again, variables
    intact, instead of starting a new session beside it."""
    async with two_replicas() as (a, b, backend, theirs):
        await a.session("k").run("x = 41")
        sandbox = only_sandbox(backend)
        b_backend = b.pool.backend
        waiting = asyncio.Event()

        async def never_answers(sandbox_id: str) -> object:
            waiting.set()
            await asyncio.Event().wait()

        b_backend.adopt = never_answers  # type: ignore[attr-defined]
        stopped = asyncio.create_task(b.session("k").run("print(x)"))
        await waiting.wait()
        await a.sessions.reap()  # A sees B took it, and lets go
        assert "k" not in a.sessions.active
        stopped.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stopped
        assert theirs.owner("k") == Owner(sandbox.id, "replica-a")
        read = await a.session("k").run("print(x)")
        assert read.stdout == "41\n"
        assert len(backend.every) == 1


class Racing(MemoryOwners):
    """A ledger whose takers wait for each other, so that both have read who holds the
    session before either takes it."""

    def __init__(self, replica: str, barrier: threading.Barrier, table: MemoryOwners) -> None:
        super().__init__(replica, table.table)
        self.barrier = barrier

    def take(self, key: str, sandbox: str, from_replica: str) -> bool:
        self.barrier.wait(timeout=5)
        return super().take(key, sandbox, from_replica)


async def test_two_replicas_adopting_at_once_one_wins_and_the_other_is_told_to_wait() -> None:
    backend, ledger = cluster(), MemoryOwners("replica-a")
    barrier = threading.Barrier(2)
    b_owners, c_owners = Racing("replica-b", barrier, ledger), Racing("replica-c", barrier, ledger)
    async with (
        running(replica(backend, ledger)) as a,
        running(replica(backend.replica("replica-b"), b_owners)) as b,
        running(replica(backend.replica("replica-c"), c_owners)) as c,
    ):
        await a.session("k").run("x = 41")
        sandbox = only_sandbox(backend)
        results = await asyncio.gather(
            b.session("k").run("print(x)"),
            c.session("k").run("print(x)"),
            return_exceptions=True,
        )
        won = [r for r in results if not isinstance(r, BaseException)]
        lost = [r for r in results if isinstance(r, BaseException)]
        assert len(won) == 1
        assert won[0].stdout == "41\n"
        assert len(lost) == 1
        assert isinstance(lost[0], SandboxBusy)
        owner = ledger.owner("k")
        assert owner is not None
        assert owner.sandbox == sandbox.id
        assert owner.replica in {"replica-b", "replica-c"}
        only_sandbox(backend)


class Stale(MemoryOwners):
    """A ledger read that is out of date once: it says this replica holds the session (as
    when the other replica's takeover landed between the read and the run)."""

    stale_reads = 0

    def owner(self, key: str) -> Owner | None:
        found = super().owner(key)
        if found is None or not self.stale_reads:
            return found
        self.stale_reads -= 1
        return Owner(found.sandbox, self.replica)


async def test_a_replica_that_hears_another_took_its_session_takes_it_back_unharmed() -> None:
    backend = cluster()
    stale = Stale("replica-a")
    theirs = stale.sharing("replica-b")
    async with (
        running(replica(backend, stale)) as a,
        running(replica(backend.replica("replica-b"), theirs)) as b,
    ):
        sandbox = await taken_over(a, b, backend)
        stale.stale_reads = 1
        # A's stream heard the runner answer B's `resume` (B's traffic, not a forgery)
        # before A's code started: A lets go, takes the session back, and runs there.
        again = await a.session("k").run("print(x)")
        assert again.stdout == "41\n"
        assert len(backend.every) == 1
        assert sandbox.alive
        assert theirs.owner("k") == Owner(sandbox.id, "replica-a")
        await b.sessions.reap()  # B lets go at its next look at the ledger
        assert "k" not in b.sessions.active
        assert sandbox.alive


async def test_the_runner_client_reports_another_hosts_resume() -> None:
    backend, ledger = cluster(), MemoryOwners("replica-a")
    async with (
        running(replica(backend, ledger)) as a,
        running(replica(backend.replica("replica-b"), ledger.sharing("replica-b"))) as b,
    ):
        await taken_over(a, b, backend)
        with pytest.raises(SandboxTaken):
            await RunnerClient(only_sandbox(backend), timeout_s=2).export()


async def test_a_reset_on_the_replica_that_lost_the_session_ends_it_where_it_lives() -> None:
    async with two_replicas() as (a, b, backend, theirs):
        sandbox = await taken_over(a, b, backend)
        await a.session("k").close()  # the person asked for a fresh start
        await settled(a)
        assert sandbox.destroyed
        assert theirs.owner("k") is None
        fresh = await b.session("k").run("print(x)")
        assert fresh.status.value == "error"  # a new kernel: x is gone
        assert len(backend.every) == 2


async def test_without_a_shared_session_secret_each_replica_keeps_its_own_sessions() -> None:
    backend = FakeBackend(SCRIPT, keeps_sessions=False, instance="replica-a")
    ledger = MemoryOwners("replica-a")
    async with (
        running(replica(backend, ledger)) as a,
        running(replica(backend.replica("replica-b"), ledger.sharing("replica-b"))) as b,
    ):
        await a.session("k").run("x = 41")
        fresh = await b.session("k").run("print(x)")
        assert fresh.status.value == "error"  # B cannot attach to A's sandbox: as before
        assert (await a.session("k").run("print(x)")).stdout == "41\n"
        assert ledger.table == {}  # no ledger in use
        first, second = backend.every
        await reap(a)
        await settled(a)
        assert first.destroyed
        assert not second.destroyed


async def test_the_ledger_in_the_database_moves_a_session_as_the_memory_one(
    databases: Databases,
) -> None:
    backend = cluster()
    ours, theirs = SessionOwners(databases, "replica-a"), SessionOwners(databases, "replica-b")
    try:
        async with (
            running(replica(backend, ours)) as a,
            running(replica(backend.replica("replica-b"), theirs)) as b,
        ):
            sandbox = await taken_over(a, b, backend)
            await reap(a)
            await settled(a)
            assert a.sessions.active == []
            assert sandbox.alive
            assert not sandbox.destroyed
            assert ours.owner("k") == Owner(sandbox.id, "replica-b")
            assert (await b.session("k").run("print(x)")).stdout == "41\n"
    finally:
        ours.close()
        theirs.close()


async def test_a_replica_lets_go_of_a_session_taken_over_long_before_its_next_reap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session_module, "TAKEOVER_CHECK_S", 0.02)
    backend, ledger = cluster(), MemoryOwners("replica-a")
    theirs = ledger.sharing("replica-b")
    a = replica(backend, ledger)
    a.sessions.reap_interval_s = 60.0  # no reap during the test
    async with running(a), running(replica(backend.replica("replica-b"), theirs)) as b:
        sandbox = await taken_over(a, b, backend)
        async with asyncio.timeout(5):
            while "k" in a.sessions.active:  # noqa: ASYNC110 (the ledger has no event)
                await asyncio.sleep(0.01)
        await settled(a)
        await still_bs(b, sandbox, theirs)


class TakenMeanwhile(MemoryOwners):
    """Replica A's ledger, restarting: right after its `nth` call of `method` (a read of who
    holds what), replica B's turn takes the session over, as a Service spreading a
    conversation's messages does while A's new Pod starts."""

    def __init__(self, table: MemoryOwners, method: str, nth: int, turn: Callable[[], object]):
        super().__init__("replica-a", table.table)
        self._lock = table._lock
        self.method, self.nth, self.turn = method, nth, turn
        self.seen = 0
        self.took: object = None

    def _then(self, method: str) -> None:
        if method != self.method:
            return
        self.seen += 1
        if self.seen == self.nth:
            self.took = self.turn()

    def others(self) -> set[str]:
        found = super().others()
        self._then("others")
        return found

    def mine(self) -> dict[str, str]:
        found = super().mine()
        self._then("mine")
        return found

    def owner(self, key: str) -> Owner | None:
        found = super().owner(key)
        self._then("owner")
        return found

    def named(self) -> set[str]:
        found = super().named()
        self._then("named")
        return found


@pytest.mark.parametrize(
    ("method", "nth"),
    [("others", 1), ("mine", 1), ("owner", 1), ("named", 1), ("named", 2)],
    ids=[
        "before-attaching",
        "while-checking-its-own",
        "after-its-record-was-read",
        "before-the-sweep",
        "at-its-stop",
    ],
)
async def test_a_restarting_replica_spares_a_session_another_takes_over_during_its_start(
    method: str, nth: int
) -> None:
    """A's Pod is replaced (a rolling update) while its conversations go on elsewhere: B
    takes a session labelled A's between A's reads of the ledger and its sweep of leftover
    sandboxes. A neither removes that sandbox nor keeps it; B's turn has its variables."""
    backend, ledger = cluster(), MemoryOwners("replica-a")
    theirs = ledger.sharing("replica-b")
    async with running(replica(backend.replica("replica-b"), theirs)) as b:
        async with running(replica(backend, ledger)) as a:
            assert (await a.session("k").run("x = 41")).status.value == "ok"
        sandbox = only_sandbox(backend)
        assert ledger.owner("k") == Owner(sandbox.id, "replica-a")  # kept for A's next start
        loop = asyncio.get_running_loop()

        def b_turn() -> object:
            turn = asyncio.run_coroutine_threadsafe(b.session("k").run("print(x)"), loop)
            return turn.result(timeout=10)

        racing = TakenMeanwhile(ledger, method, nth, b_turn)
        async with running(replica(backend, racing)):
            pass
        assert racing.seen >= nth, "B's turn never came"
        took = racing.took
        assert isinstance(took, ExecutionResult)
        assert took.stdout == "41\n", took
        assert sandbox.alive
        assert not sandbox.destroyed
        assert theirs.owner("k") == Owner(sandbox.id, "replica-b")
        again = await b.session("k").run("print(x)")
        assert again.stdout == "41\n"
        assert not again.session_restarted
        only_sandbox(backend)


async def test_a_sandbox_that_does_not_answer_at_a_restart_keeps_its_session() -> None:
    """A's Pod restarts (a rolling update) and its sandbox does not answer at once (slow to
    attach on a loaded cluster, or busy with another host): A keeps the record and the
    sandbox, and the conversation's next turn attaches again, variables intact."""
    backend, ledger = cluster(), MemoryOwners("replica-a")
    async with running(replica(backend, ledger)) as a:
        assert (await a.session("k").run("x = 41")).status.value == "ok"
    sandbox = only_sandbox(backend)
    restarted = replica(backend, ledger)
    keeper = restarted.pool.backend
    recover, adopt = keeper.recover, keeper.adopt  # type: ignore[attr-defined]

    async def silent(*args: object, **kwargs: object) -> list[object] | None:
        return [] if args == () or "skip" in kwargs else None

    keeper.recover = keeper.adopt = silent  # type: ignore[attr-defined]
    async with running(restarted) as a:
        assert a.sessions.active == []
        assert ledger.owner("k") == Owner(sandbox.id, "replica-a")
        assert sandbox.alive
        assert not sandbox.destroyed
        keeper.recover, keeper.adopt = recover, adopt  # type: ignore[attr-defined]
        again = await a.session("k").run("print(x)")
        assert again.stdout == "41\n"
        assert not again.session_restarted
    only_sandbox(backend)
