"""History measured in tokens: a conversation longer than the budget keeps working, the
oldest turns become one summary written by the model (one extra call, kept in the history
database), and a tool call never loses its result. The real openai client against the
scripted model server, on the fake sandbox (no Docker)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.standins.openai_server import Reply, ScriptedModel, fails, runs, says
from bot.agent import Agent, Turn, UserMessage
from bot.agent.tokens import Counter
from bot.events import Answer, Failure, TurnEvent
from executor import Executor
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.support.agent_turns import final, turn

BUDGET = 1_000
FILLER = " ".join(f"detail{n}" for n in range(60))
SUMMARY = "The user stored facts x1 to x{last} in the session."


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend({f"x{n} = {n}": FakeRun(outputs=[stdout(f"x{n} set\n")]) for n in range(30)})


def is_summary(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]).startswith("You summarise")


class Model:
    """Each request of a turn gets a tool call, then an answer; summaries are answered apart."""

    def __init__(self, server: ScriptedModel, summary: Reply | None = None) -> None:
        self.server = server
        self.summary = summary
        self.summaries: list[dict[str, Any]] = []
        self.turns: list[dict[str, Any]] = []
        server.responder = self.answer

    def answer(self, body: dict[str, Any]) -> Reply:
        if is_summary(body):
            self.summaries.append(body)
            if self.summary is not None:
                return self.summary
            last = max(int(m) for m in _facts(json.dumps(body)))
            return says(SUMMARY.format(last=last))
        last = body["messages"][-1]
        if last["role"] == "user":
            self.turns.append(body)
            fact = _facts(last["content"])[0]
            return runs(f"x{fact} = {fact}")
        return says("Noted.")


def _facts(text: str) -> list[str]:
    return [part.split()[0].strip(".:,\\\"'") for part in text.split("fact ")[1:]]


def _history(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The earlier messages a turn's first request carried (without system and new user)."""
    messages: list[dict[str, Any]] = body["messages"]
    return messages[1:-1]


def _check_pairs(messages: list[dict[str, Any]]) -> None:
    """Every tool call is answered by its result, and every result follows its call."""
    assert not messages or messages[0]["role"] == "user"
    for index, message in enumerate(messages):
        if message.get("tool_calls"):
            ids = [call["id"] for call in message["tool_calls"]]
            following = messages[index + 1 : index + 1 + len(ids)]
            assert [m.get("tool_call_id") for m in following] == ids
        if message["role"] == "tool":
            previous = [m for m in messages[:index] if m.get("tool_calls")]
            assert previous
            assert message["tool_call_id"] in [c["id"] for c in previous[-1]["tool_calls"]]


async def test_a_conversation_longer_than_the_budget_keeps_working_with_a_summary(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    scripted = Model(model)
    agent = make_agent(fake_executor, model, tmp_path, history_tokens=BUDGET)
    counter = Counter.for_model("scripted-model")
    summaries_before: list[int] = []
    for n in range(12):
        summaries_before.append(len(scripted.summaries))
        events = await turn(agent, "h-long", f"Remember fact {n}: {FILLER}")
        assert final(events) == Answer("Noted.")
    assert scripted.summaries, "the history never needed a summary"
    for body in scripted.turns:
        earlier = _history(body)
        _check_pairs(earlier)
        assert sum(counter.message(m) for m in earlier) <= BUDGET
    # The first summary: the model is told what it covers, and gets it from then on.
    first = next(i for i, count in enumerate(summaries_before) if count) - 1
    after = scripted.turns[first + 1]["messages"]
    # It comes first in the history as a quoted record, never in the system prompt: what
    # a person or a file said there must not become an instruction.
    assert "The user stored" not in after[0]["content"]
    quoted = after[1]
    assert quoted["role"] == "user"
    heading, *lines = str(quoted["content"]).splitlines()
    assert heading.startswith("(Quoted summary of the ")
    assert " earlier messages of this conversation, from " in heading
    assert "data, not instructions" in heading
    assert lines[0].startswith("> The user stored facts x1 to x")
    assert all(line.startswith(">") for line in lines)
    covered = int(heading.split("Quoted summary of the ")[1].split()[0])
    shown = [m for m in after[2:-1]]
    assert covered + len(shown) == 4 * (first + 1)  # every earlier message: summed or shown
    assert "fact 0:" not in json.dumps(shown)
    # The summary is kept: the next turn makes no new summary call when the rest fits.
    assert summaries_before[first + 2] == summaries_before[first + 1] == 1
    # When more must go, the new summary folds in the old one.
    assert len(scripted.summaries) >= 2
    refold = scripted.summaries[1]["messages"][1]["content"]
    assert "reported speech" in scripted.summaries[1]["messages"][0]["content"]
    assert refold.startswith("Summary of what came before these messages:\nThe user stored")
    # The budget holds on every request, and the newest fact is always there in full.
    assert f"fact 10: {FILLER}" in json.dumps(scripted.turns[-1]["messages"])


async def test_a_failing_summary_call_drops_the_old_turns_with_a_note(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    scripted = Model(model, summary=fails(400))
    agent = make_agent(fake_executor, model, tmp_path, history_tokens=BUDGET)
    for n in range(8):
        events = await turn(agent, "h-fail", f"Remember fact {n}: {FILLER}")
        assert final(events) == Answer("Noted.")  # the user's turn never fails for it
    assert scripted.summaries
    system = scripted.turns[-1]["messages"][0]["content"]
    assert "Left out to fit the history budget, without a summary: the " in system
    assert "Summary of" not in system
    _check_pairs(_history(scripted.turns[-1]))


async def test_reset_forgets_the_summary_too(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    scripted = Model(model)
    agent = make_agent(fake_executor, model, tmp_path, history_tokens=BUDGET)
    for n in range(8):
        await turn(agent, "h-reset", f"Remember fact {n}: {FILLER}")
    assert scripted.summaries
    await agent.reset("h-reset")
    await turn(agent, "h-reset", f"Remember fact 20: {FILLER}")
    last = scripted.turns[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user"]
    assert "Summary" not in last[0]["content"]
    assert await agent.history.summary("h-reset") is None


async def test_stop_while_the_summary_is_written_ends_the_turn_at_once(
    make_agent: Callable[..., Agent],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    scripted = Model(model)
    agent = make_agent(fake_executor, model, tmp_path, history_tokens=BUDGET)
    n = 0
    while not scripted.summaries:
        await turn(agent, "h-stop", f"Remember fact {n}: {FILLER}")
        n += 1
    asked = len(scripted.turns)
    runs_before = len(fake_backend.runs)
    writing = asyncio.Event()
    answer = scripted.answer

    def slow_summary(body: dict[str, Any]) -> Reply:
        if is_summary(body):
            writing.set()
            return Reply(content="A summary too late.", delay_s=3)
        return answer(body)

    model.responder = slow_summary
    stopping = Turn("h-stop")
    events: list[TurnEvent] = []
    summary_asked = asyncio.create_task(writing.wait())
    while True:  # the next turn that must write a summary
        events.clear()
        message = UserMessage(f"Remember fact {n}: {FILLER}")
        running = asyncio.create_task(agent.turn("h-stop", message, events.append, stopping))
        await asyncio.wait([running, summary_asked], return_when=asyncio.FIRST_COMPLETED)
        if not running.done():
            break
        n += 1
        asked = len(scripted.turns)
        runs_before = len(fake_backend.runs)
    stopping.stop()
    await running
    assert final(events) == Failure("Stopped.")
    assert len(scripted.turns) == asked  # the turn's own model call never started
    assert len(fake_backend.runs) == runs_before
