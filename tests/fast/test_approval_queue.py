"""Approvals of turns that waited: a turn queued behind another gets its whole time to be
approved, a direct run queued while an admin turns code off is refused, and only a press
from the conversation where code waits decides on it; on the fake sandbox (no Docker)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bench.standins.openai_server import ScriptedModel, runs, says
from bot.agent import Agent, UserMessage
from bot.conversations import (
    AccessRules,
    Admission,
    ConversationKey,
    Conversations,
    Person,
    Place,
    Refused,
)
from bot.conversations.approval import OFF_REFUSAL, Verdict
from bot.conversations.policy import Policies, PolicySettings, Scope
from bot.database import Databases
from bot.events import ApprovalRequested, TurnEvent
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.fast.test_conversations import Recorder

KEY = ConversationKey("slack", "T1", "C1", "1700000000.000100")
ALICE = Person("alice", Place("alice", "T1", "C1"))
BOB = Person("bob", Place("bob", "T1", "C1"))
ADMIN = "admin"
BUDGET_S = 2.5
"""The model turn's time budget: approval may wait 2 s of it."""


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(
        {"print(1)": FakeRun(outputs=[stdout("1\n")]), "sleep()": FakeRun(hang=True)}
    )


class Watched(Recorder):
    """A reply that also says when the turn waits in line and when it asks for approval."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: asyncio.Queue[ApprovalRequested] = asyncio.Queue()
        self.waits = asyncio.Event()

    async def queued(self, stop: str, text: str) -> None:
        await super().queued(stop, text)
        self.waits.set()

    def __call__(self, event: TurnEvent) -> None:
        super().__call__(event)
        if isinstance(event, ApprovalRequested):
            self.asked.put_nowait(event)


@pytest.fixture
async def service(
    fake_executor: Executor, make_agent: Callable[..., Agent], model: ScriptedModel, tmp_path: Path
) -> AsyncIterator[Conversations]:
    agent = make_agent(fake_executor, model, tmp_path, budget_s=BUDGET_S)
    policies = Policies(
        Databases.sqlite(tmp_path), PolicySettings(default="approve", timeout_s=240)
    )
    yield Conversations(agent, admins=frozenset({ADMIN}), policies=policies)
    with contextlib.suppress(Exception):
        policies.close()


def run(code: str, user: str = "alice") -> UserMessage:
    return UserMessage(f"/run {code}", user=user, server="T1")


async def test_a_turn_queued_behind_another_gets_its_whole_time_for_approval(
    service: Conversations, model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    door = Admission(AccessRules())
    first, second = Watched(), Watched()
    model.script(runs("print(1)"), says("It printed 1."))
    running = asyncio.create_task(service.turn(door, ALICE, KEY, run("sleep()"), first))
    await first.started.wait()
    asking = UserMessage("print one", user="bob", server="T1")
    waiting = asyncio.create_task(service.turn(door, BOB, KEY, asking, second))
    # Bob's turn waits for Alice's longer than the part of a budget approval may use.
    await asyncio.sleep(BUDGET_S)
    assert await service.stop(door, ALICE, first.stop_key) is None
    asked = await second.asked.get()
    assert asked.timeout_s > 0
    await service.decide(door, BOB, asked.key, Verdict.RUN)
    await asyncio.gather(running, waiting)
    assert second.shown[-1] == "answer: It printed 1."
    assert fake_backend.runs == ["sleep()", "print(1)"]


async def test_a_direct_run_queued_while_code_is_turned_off_is_refused_once(
    service: Conversations, fake_backend: FakeBackend
) -> None:
    door = Admission(AccessRules())
    first, second = Watched(), Watched()
    running = asyncio.create_task(service.turn(door, ALICE, KEY, run("sleep()"), first))
    await first.started.wait()
    waiting = asyncio.create_task(service.turn(door, ALICE, KEY, run("print(1)"), second))
    await second.waits.wait()  # queued behind Alice's own running turn
    admin = Person(ADMIN, Place(ADMIN, "T1", "C1"))
    await service.set_policy(door, admin, Scope.channel_of(KEY), "off")
    assert await service.stop(door, ALICE, first.stop_key) is None
    await asyncio.gather(running, waiting)
    assert second.shown == [
        "queued: Queued: your previous request is still running.",
        f"refused: {OFF_REFUSAL}",
    ]
    assert "print(1)" not in fake_backend.runs


async def test_only_a_press_from_the_conversation_where_code_waits_decides(
    service: Conversations, model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    door = Admission(AccessRules())
    reply = Watched()
    model.script(runs("print(1)"), says("It printed 1."))
    asking = UserMessage("print one", user="bob", server="T1")
    turn = asyncio.create_task(service.turn(door, BOB, KEY, asking, reply))
    asked = await reply.asked.get()
    for elsewhere in (
        Person("bob", Place("bob", "T1", "C2")),
        Person("bob", Place("bob", "T2", "C1")),
        Person(ADMIN, Place(ADMIN, "T1", "C2")),
    ):
        with pytest.raises(Refused, match="waits in another conversation"):
            await service.decide(door, elsewhere, asked.key, Verdict.RUN)
    assert fake_backend.runs == []
    await service.decide(door, BOB, asked.key, Verdict.RUN)
    await turn
    assert reply.shown[-1] == "answer: It printed 1."
    assert fake_backend.runs == ["print(1)"]


async def test_a_direct_run_waiting_for_the_conversation_while_code_is_turned_off_never_runs(
    service: Conversations, model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    door = Admission(AccessRules())
    first, second = Watched(), Watched()
    model.script(runs("print(1)"), says("Not run."))
    asking = UserMessage("print one", user="bob", server="T1")
    running = asyncio.create_task(service.turn(door, BOB, KEY, asking, first))
    asked = await first.asked.get()  # Bob's turn holds the conversation while code waits
    waiting = asyncio.create_task(service.turn(door, ALICE, KEY, run("print(1)"), second))
    await second.started.wait()
    admin = Person(ADMIN, Place(ADMIN, "T1", "C1"))
    await service.set_policy(door, admin, Scope.channel_of(KEY), "off")
    await service.decide(door, BOB, asked.key, Verdict.CANCELLED)
    await asyncio.gather(running, waiting)
    assert first.shown[-1] == "answer: Not run."
    assert second.shown == ["started", f"answer: failed: {OFF_REFUSAL}"]
    assert fake_backend.runs == []
