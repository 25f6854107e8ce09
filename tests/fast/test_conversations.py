"""The conversation service on the fake sandbox: admission, each person's line, stop,
re-run, reset, export and files, and who may act, as a front end's `Reply` sees them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from bench.standins.openai_server import ScriptedModel, runs, says
from bot.agent import Agent, UserMessage
from bot.agent.history import History
from bot.conversations import (
    AccessRules,
    Admission,
    ConversationKey,
    Conversations,
    NotHere,
    NotYours,
    Person,
    Place,
    Refused,
)
from bot.conversations.lines import Lines
from bot.conversations.quotas import Quotas, QuotaSettings
from bot.conversations.service import FileListing
from bot.database import Databases
from bot.errors import QuotaExceeded
from bot.events import Answer, ExecutionFinished, Failure, TurnEvent
from executor import Executor, PoolSettings, Status
from executor.fake_backend import FakeBackend, FakeRun, stdout
from storage.local import LocalStorage
from tests.support.links import SECRET

KEY = ConversationKey("slack", "T1", "C1", "1700000000.000100")
ALICE = Person("alice", Place("alice", "T1", "C1"))
BOB = Person("bob", Place("bob", "T1", "C1"))


class Recorder:
    """A front end's reply that writes down what it was asked to show."""

    def __init__(self) -> None:
        self.shown: list[str] = []
        self.events: list[TurnEvent] = []
        self.stop_key = ""
        self.started = asyncio.Event()

    async def queued(self, stop: str, text: str) -> None:
        self.stop_key = stop
        self.shown.append(f"queued: {text}")

    async def start(self, stop: str) -> None:
        self.stop_key = stop
        self.shown.append("started")
        self.started.set()

    def __call__(self, event: TurnEvent) -> None:
        self.events.append(event)

    async def finish(self, rerun: str | None, notices: Sequence[str]) -> None:
        ending = next(e for e in self.events if isinstance(e, Answer | Failure))
        text = ending.text if isinstance(ending, Answer) else f"failed: {ending.message}"
        self.shown.append(f"answer: {text}" + (" [re-run]" if rerun else ""))

    async def refused(self, text: str) -> None:
        self.shown.append(f"refused: {text}")

    async def failed(self, text: str) -> None:
        self.shown.append(f"failed: {text}")


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend(
        {
            "print(1)": FakeRun(outputs=[stdout("1\n")]),
            "sleep()": FakeRun(hang=True),
            "open('a.csv', 'w')": FakeRun(files={"a.csv": b"a\n"}),
        }
    )


@pytest.fixture
async def service(backend: FakeBackend, tmp_path: Path) -> AsyncIterator[Conversations]:
    async with Executor("fake", backend=backend, pool=PoolSettings(size=0)) as executor:
        agent = Agent(
            executor, LocalStorage(tmp_path / "files", SECRET), History(Databases.sqlite(tmp_path))
        )
        yield Conversations(agent, admins=frozenset({"admin"}))


def run(code: str, user: str = "alice") -> UserMessage:
    return UserMessage(f"/run {code}", user=user, server="T1")


def test_keys_are_one_value_with_one_spelling() -> None:
    assert ConversationKey.parse(KEY.id) == KEY
    one_off = ConversationKey.one_off("discord", "G", "C")
    assert one_off.is_one_off
    assert not KEY.is_one_off
    with pytest.raises(ValueError, match="may not hold"):
        ConversationKey("slack", "T:1")


async def test_a_turn_gets_one_answer(service: Conversations) -> None:
    reply = Recorder()
    await service.turn(Admission(AccessRules()), ALICE, KEY, run("print(1)"), reply)
    assert reply.shown == ["started", "answer: "]  # the run report is the answer
    assert [e.status for e in reply.events if isinstance(e, ExecutionFinished)] == [Status.OK]


async def test_a_second_message_queues_behind_the_first_and_can_be_stopped(
    service: Conversations, backend: FakeBackend
) -> None:
    door = Admission(AccessRules())
    first, second, third = Recorder(), Recorder(), Recorder()
    running = asyncio.create_task(service.turn(door, ALICE, KEY, run("sleep()"), first))
    await first.started.wait()
    waiting = asyncio.create_task(service.turn(door, ALICE, KEY, run("print(1)"), second))
    stopped = asyncio.create_task(service.turn(door, ALICE, KEY, run("print(1)"), third))
    await asyncio.sleep(0.05)
    assert second.shown == ["queued: Queued: your previous request is still running."]
    assert await service.stop(door, ALICE, third.stop_key) is None  # stopped while queued
    with pytest.raises(NotYours):
        await service.stop(door, BOB, first.stop_key)
    assert await service.stop(door, ALICE, first.stop_key) is None
    await asyncio.gather(running, waiting, stopped)
    assert first.shown[-1].startswith("answer: ")
    assert second.shown[-1] == "answer: "
    assert [e.status for e in second.events if isinstance(e, ExecutionFinished)] == [Status.OK]
    assert backend.runs.count("print(1)") == 1  # the stopped one never ran


async def test_lines_keep_order_bound_the_wait_and_apply_the_cooldown() -> None:
    lines = Lines(cooldown_s=0.2, max_waiting=1)
    order: list[str] = []
    said: list[str] = []

    async def note(text: str) -> None:
        said.append(text)

    async def one(name: str) -> None:
        async with lines.turn("u", note):
            order.append(name)
            await asyncio.sleep(0.01)

    first = asyncio.create_task(one("a"))
    await asyncio.sleep(0)
    second = asyncio.create_task(one("b"))
    await asyncio.sleep(0)
    with pytest.raises(Refused, match="1 requests waiting"):
        await one("c")
    await asyncio.gather(first, second)
    assert order == ["a", "b"]
    assert said == ["Queued: your previous request is still running."]
    await one("d")
    assert said[-1] == "Queued: starting in 1 s."


async def test_who_may_act_on_a_conversation(service: Conversations) -> None:
    door = Admission(AccessRules())
    await service.turn(door, ALICE, KEY, run("open('a.csv', 'w')"), Recorder())
    assert await service.files(door, ALICE, KEY) == FileListing([("a.csv", 2)])
    with pytest.raises(NotYours):
        await service.files(door, BOB, KEY)
    with pytest.raises(NotYours):
        await service.reset(door, BOB, KEY)

    async def yes() -> bool:
        return True

    moderator = Person("mod", Place("mod", "T1", "C1"), vouched=yes)
    assert await service.export(door, moderator, KEY) is not None
    admin = Person("admin", Place("admin", "T1", "C1"))
    assert await service.may_act(admin, KEY)
    dm = ConversationKey("discord", "dm", "bob")
    assert await service.may_act(BOB, dm)
    assert not await service.may_act(ALICE, dm)
    only_bob = Admission(AccessRules(users=frozenset({"bob"})))
    with pytest.raises(NotHere):
        await service.files(only_bob, ALICE, KEY)
    await service.reset(door, ALICE, KEY)
    assert await service.files(door, ALICE, KEY) == FileListing([])


async def test_refusals_are_told_once_and_quiet_places_get_nothing(
    service: Conversations,
) -> None:
    only_bob = Admission(AccessRules(users=frozenset({"bob"})))
    told, quiet = Recorder(), Recorder()
    await service.turn(only_bob, ALICE, KEY, run("print(1)"), told)
    await service.turn(only_bob, ALICE, KEY, run("print(1)"), quiet, quiet=True)
    assert told.shown == ["refused: Cellmate is not enabled here."]
    assert quiet.shown == []
    service.turns.accepting = False
    draining = Recorder()
    await service.turn(Admission(AccessRules()), ALICE, KEY, run("print(1)"), draining)
    assert draining.shown[0].startswith("refused: Cellmate is restarting")


async def test_direct_runs_offer_re_run_and_one_off_sessions_end(
    service: Conversations, backend: FakeBackend
) -> None:
    door = Admission(AccessRules())
    reply = Recorder()
    one_off = ConversationKey.one_off("slack", "T1", "C1")
    await service.turn(door, ALICE, one_off, run("print(1)"), reply, rerun_code="print(1)")
    assert reply.shown[-1] == "answer:  [re-run]"
    assert one_off.id not in service.agent.executor.sessions.active  # its session is gone
    with pytest.raises(NotYours):
        await service.rerun(door, BOB, reply.stop_key)
    assert await service.rerun(door, ALICE, reply.stop_key) == ("print(1)", None)
    with pytest.raises(Refused, match="no longer have that code"):
        await service.rerun(door, ALICE, "unknown")


async def test_a_quota_reached_between_two_runs_of_a_turn_ends_it_with_one_answer(
    backend: FakeBackend,
    make_agent: Callable[..., Agent],
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    """The second run of a model's turn is refused by the quota: the turn's one answer says
    so, the first run's time is recorded, and the person's next message is refused at once."""
    quotas = Quotas(Databases.sqlite(tmp_path), QuotaSettings(user_runs_per_hour=1))
    async with Executor("fake", backend=backend, pool=PoolSettings(size=0)) as executor:
        service = Conversations(make_agent(executor, model, tmp_path), quotas=quotas)
        model.script(runs("print(1)"), runs("print(1)"), says("never said"))
        reply = Recorder()
        door = Admission(AccessRules())
        await service.turn(door, ALICE, KEY, UserMessage("twice", user="alice", server="T1"), reply)
        assert reply.shown[-1].startswith("answer: failed: That would exceed your limit of 1 runs")
        assert backend.runs == ["print(1)"]
        assert "1. alice: 1 runs" in service.usage("T1")
        again = Recorder()
        await service.turn(door, ALICE, KEY, run("print(1)"), again)
        assert again.shown == [f"refused: {again_refusal(quotas)}"]
        assert backend.runs == ["print(1)"]
    quotas.close()


def again_refusal(quotas: Quotas) -> str:
    try:
        quotas.check("alice", "T1")
    except QuotaExceeded as exc:
        return str(exc)
    raise AssertionError("the quota should refuse")
