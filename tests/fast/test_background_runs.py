"""Runs that go on in the background, on the fake sandbox through the console: a run that
reaches its time limit goes on (the turn ends saying so, the run's output and end follow,
the starter is named, the history notes it), `/run --background` sends it at once, Keep
running sends the turn's run, Stop ends a background run, a follow-up's code waits for it
and says so, the per-person limit keeps a run in the foreground, a model's turn tells the
model, and a shutdown stops background runs and says why."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.standins.openai_server import ScriptedModel, runs, says
from bot.agent import Agent, UserMessage
from bot.conversations import ConversationKey, Conversations, Person, Place
from bot.conversations.background import STOPPED_FOR_SHUTDOWN
from bot.conversations.quotas import Quotas, QuotaSettings
from bot.database import Databases
from bot.platforms.console import ME, Console, run_piped
from bot.platforms.console_reply import WAITS_BEHIND_PIPED
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend
from tests.support.later import HANG, SLOW, Posting, slow_backend


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=1, interrupt_grace_s=0.2)


@pytest.fixture
def fake_backend() -> FakeBackend:
    return slow_backend()


@dataclass
class Chat:
    console: Console
    conversations: Conversations
    out: io.StringIO

    async def say(self, *messages: str) -> str:
        start = self.out.tell()
        await run_piped(self.console, io.StringIO("\n\n".join(messages) + "\n"))
        return self.out.getvalue()[start:]

    async def printed(self, text: str) -> None:
        async with asyncio.timeout(10):
            while text not in self.out.getvalue():  # noqa: ASYNC110 (a StringIO has no event)
                await asyncio.sleep(0.01)

    async def background_ended(self) -> str:
        """Wait for every background run to be reported; what was printed meanwhile."""
        start = self.out.tell()
        watching = [r.watching for r in self.conversations.background.runs.values()]
        async with asyncio.timeout(20):
            await asyncio.gather(*[w for w in watching if w is not None])
        return self.out.getvalue()[start:]


@pytest.fixture
async def chat(
    fake_executor: Executor,
    make_agent: Callable[..., Agent],
    model: ScriptedModel,
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Chat]]:
    made: list[Conversations] = []
    opened: list[Quotas] = []

    def make(per_person: int = 2, use_model: bool = False) -> Chat:
        agent = make_agent(fake_executor, model if use_model else None, tmp_path, timeout=5)
        quotas = Quotas(Databases.sqlite(tmp_path / f"usage-{len(made)}"), QuotaSettings())
        opened.append(quotas)
        conversations = Conversations(
            agent, quotas=quotas, background_max_s=20, background_per_person=per_person
        )
        made.append(conversations)
        out = io.StringIO()
        return Chat(Console(conversations, out, tmp_path / "exports"), conversations, out)

    yield make
    for conversations in made:
        await conversations.background.close(grace_s=5)
    for quotas in opened:
        quotas.close()


async def test_a_run_past_its_limit_goes_on_in_the_background_and_its_end_is_posted(
    chat: Callable[..., Chat], fake_backend: FakeBackend
) -> None:
    talk = chat()
    turn = await talk.say(f"/run {SLOW}")
    assert "This run goes on in the background (up to 0 min in all)" not in turn
    assert "⏳ This run goes on in the background" in turn
    assert "time limit" not in turn
    ended = await talk.background_ended()
    assert "step 4\n" in talk.out.getvalue()
    assert "Your background run ended: it finished in" in ended
    assert "Its output is in the message above." in ended
    history = await talk.conversations.agent.history.load("console:dm:console:")
    assert any("ended: ok after" in str(m.message.get("content")) for m in history)
    # Its whole time counts toward the person's quotas, as a run in the turn would.
    assert talk.conversations.quotas is not None
    assert "console: 1 runs, 2 s" in talk.conversations.quotas.report(None)
    assert [code.strip() for code in fake_backend.runs] == [SLOW]


async def test_run_background_goes_at_once_and_a_follow_up_waits_saying_so(
    chat: Callable[..., Chat],
) -> None:
    talk = chat()
    first = await talk.say(f"/run --background {SLOW}")
    assert "⏳ This run goes on in the background" in first
    assert "step 4" not in first  # the turn did not wait for it
    follow = await talk.say("/run print(6 * 7)")
    assert WAITS_BEHIND_PIPED in follow
    assert "42\n" in follow
    printed = talk.out.getvalue()
    assert printed.index("step 4") < printed.index("42\n")  # it ran after the first
    await talk.background_ended()


async def test_stop_ends_a_background_run(chat: Callable[..., Chat]) -> None:
    talk = chat()
    await talk.say(f"/run --background {HANG}")
    await talk.printed("waiting\n")
    (stop_key,) = talk.conversations.background.runs
    assert await talk.conversations.stop(talk.console.door, ME, stop_key) is None
    ended = await talk.background_ended()
    assert "The run was stopped on request." in talk.out.getvalue()
    assert "Your background run ended: killed after" in ended
    assert await talk.conversations.stop(talk.console.door, ME, stop_key) == (
        "That has already finished."
    )


async def test_past_the_per_person_limit_a_run_ends_at_its_limit(
    chat: Callable[..., Chat],
) -> None:
    talk = chat(per_person=1)
    poster = Posting(talk.out)
    talk.conversations.post_with("chat", poster)
    ann = Person("ann", Place("ann", "team", "c1"))
    first, second = (ConversationKey("chat", "team", "c1", t) for t in ("t1", "t2"))
    await _direct(talk, poster, ann, first, f"/run --background {HANG}")
    (stop_key,) = talk.conversations.background.runs
    # Her second run, in another conversation, may not go too: it ends at its limit.
    shown = await _direct(talk, poster, ann, second, f"/run {SLOW}")
    assert "The code ran longer than the 1 s time limit" in shown
    assert "step 4" not in shown
    refused = await _direct(talk, poster, ann, second, f"/run --background {SLOW}")
    assert "You have 1 runs in the background already" in refused
    assert "So this run stays in the foreground." in refused
    talk.conversations.background.stop(stop_key)
    await talk.background_ended()
    assert not talk.conversations.background.runs


async def _direct(
    talk: Chat, poster: Posting, person: Person, key: ConversationKey, text: str
) -> str:
    start = talk.out.tell()
    message = UserMessage(text, user=person.user, server=key.workspace)
    reply = await poster.reply_in(key, person.user)
    await talk.conversations.turn(poster.door, person, key, message, reply)
    return talk.out.getvalue()[start:]


async def test_a_model_turn_tells_the_model_and_answers_while_the_run_goes_on(
    chat: Callable[..., Chat], model: ScriptedModel
) -> None:
    model.script(runs(SLOW), says("It is still running; I will show the result when it ends."))
    talk = chat(use_model=True)
    turn = await talk.say("train the model")
    assert "It is still running; I will show the result when it ends." in turn
    told = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert "went on in the background" in str(told[-1])
    await talk.background_ended()
    assert "step 4\n" in talk.out.getvalue()


async def test_keep_running_sends_the_turns_run_to_the_background(
    chat: Callable[..., Chat],
) -> None:
    talk = chat()
    conversations = talk.conversations

    async def press_when_running() -> str | None:
        async with asyncio.timeout(10):
            while not conversations.turns.keys():  # noqa: ASYNC110 (no event for a start)
                await asyncio.sleep(0.01)
        (stop_key,) = list(conversations.turns.keys())
        return await conversations.keep_running(talk.console.door, ME, stop_key)

    pressing = asyncio.create_task(press_when_running())
    turn = await talk.say(f"/run {HANG}")
    assert await pressing is None
    assert "⏳ This run goes on in the background" in turn
    (stop_key,) = conversations.background.runs
    assert await conversations.keep_running(talk.console.door, ME, stop_key) == (
        "That run is already going on in the background."
    )
    conversations.background.stop(stop_key)
    await talk.background_ended()


async def test_a_shutdown_stops_background_runs_and_says_why(chat: Callable[..., Chat]) -> None:
    talk = chat()
    await talk.say(f"/run --background {HANG}")
    start = talk.out.tell()
    await talk.conversations.background.close(grace_s=10)
    shown = talk.out.getvalue()[start:]
    assert STOPPED_FOR_SHUTDOWN in shown
    assert "Your background run ended: killed" in shown
    assert not talk.conversations.background.runs
