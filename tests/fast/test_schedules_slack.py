"""Schedules on Slack, as people see them: `/schedule` (answered to its user alone) acting on
their latest conversation in the channel, a due schedule's run posted in that conversation's
thread with a heading that mentions its owner and, from the second run on, what changed, and
who may cancel it. The real slack_bolt app against the Slack stand-in, on the fake sandbox,
without a model (the conversation's code is a fenced block), with a clock the test moves and
`Scheduler.tick()` run by the test instead of its loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.standins.slack_server import ADMIN, ALICE, BOB, C_GENERAL, C_OTHER, Message
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.schedule_store import ScheduleStore
from bot.conversations.schedules import NOT_OWNER, Scheduler, ScheduleSettings
from bot.database import Databases
from bot.errors import NOT_YOURS
from bot.platforms.on_slack.schedules import NO_CONVERSATION
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend
from tests.support.later import MONDAY_9_BERLIN, REPORT, WEEK, Clock, Totals
from tests.support.on_slack import Bot, running_bot

# Thursday 26 November 2026, 12:00 UTC; the first Monday 09:00 in Berlin after it.
WEEKLY = "every monday 09:00 Europe/Berlin"
RUN_TIMEOUT_S = 30.0


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def totals() -> Totals:
    return Totals()


@pytest.fixture
def fake_backend(totals: Totals) -> FakeBackend:
    return FakeBackend(totals.run)


@pytest.fixture
def mode() -> str:
    """Socket Mode unless a test asks for both connection modes."""
    return "socket"


@dataclass
class Chat:
    bot: Bot
    scheduler: Scheduler
    store: ScheduleStore
    clock: Clock

    async def schedule(self, text: str, user: str = ALICE, channel: str = C_GENERAL) -> str:
        """`/schedule text` by `user`, and what the bot answered them (by response_url)."""
        server = self.bot.server
        before = len(server.responses)
        await server.slash("/schedule", text, user=user, channel=channel)
        await server.wait_for(lambda: len(server.responses) > before)
        answer = server.responses[before]
        assert answer.get("response_type") == "ephemeral", answer
        return str(answer["text"])

    async def conversation(self, code: str = REPORT, user: str = ALICE) -> str:
        """`user` mentions the bot with a fenced block of code; the thread's root, once the
        run has answered."""
        asked, _ = await self.bot.server.post(
            C_GENERAL, f"```python\n{code}\n```", user=user, mention_bot=True
        )
        await self.bot.answered(C_GENERAL, asked.ts)
        return asked.ts

    async def due(self, moment: float, root: str) -> list[Message]:
        """Move the clock to `moment`, run what is due to its end, and return the bot's
        messages it posted in the channel."""
        before = {m.ts for m in self.bot.server.channel_messages(C_GENERAL, by_bot=True)}
        self.clock.now = moment
        started = self.scheduler.tick()
        async with asyncio.timeout(RUN_TIMEOUT_S):
            await asyncio.gather(*started)
        posted = [
            m
            for m in self.bot.server.channel_messages(C_GENERAL, by_bot=True)
            if m.ts not in before
        ]
        assert all(m.thread_ts == root for m in posted), [(m.ts, m.thread_ts) for m in posted]
        return posted


@pytest.fixture
async def chat(
    mode: str, fake_executor: Executor, make_agent: Callable[..., Agent], tmp_path: Path
) -> AsyncIterator[Chat]:
    agent = make_agent(fake_executor, None, tmp_path, timeout=5)
    conversations = Conversations(agent)
    store = ScheduleStore(Databases.sqlite(tmp_path))
    clock = Clock()
    scheduler = Scheduler(conversations, store, ScheduleSettings(), now=clock)
    conversations.schedules = scheduler
    try:
        async with running_bot(mode, conversations) as bot:
            try:
                yield Chat(bot, scheduler, store, clock)
            finally:
                await scheduler.close()
    finally:
        with contextlib.suppress(Exception):
            store.close()


def _texts(messages: list[Message]) -> str:
    return "\n".join(m.text for m in messages)


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_schedule_makes_one_for_the_latest_conversation_and_lists_it(chat: Chat) -> None:
    await chat.conversation()
    made = await chat.schedule(WEEKLY)
    assert made.startswith(
        f"Schedule 1 made: {WEEKLY} (cron `0 9 * * 1`, Europe/Berlin). "
        "Next run: Mon 30 Nov 2026 09:00 CET."
    ), made
    assert "this conversation's 1 code cell " in made
    assert made.endswith(f"```python\n{REPORT}\n```")
    listed = await chat.schedule("list")
    assert listed.startswith("Schedules in this conversation:\n"), listed
    assert f"1. {WEEKLY}: next Mon 30 Nov 2026 09:00 CET; 1 code cell, made by <@{ALICE}>" in listed
    (kept,) = chat.store.due(float("inf"))
    assert kept.next_due == MONDAY_9_BERLIN
    # Nothing was posted for anyone else to see: the answers went to Alice alone.
    assert not any("Schedule 1" in m.text for m in chat.bot.server.messages.values())


async def test_a_due_schedule_posts_its_run_in_the_thread_and_then_what_changed(
    chat: Chat, fake_backend: FakeBackend, totals: Totals
) -> None:
    root = await chat.conversation()
    assert (await chat.schedule(WEEKLY)).startswith("Schedule 1 made")
    started = fake_backend.started
    assert await chat.due(MONDAY_9_BERLIN - 1, root) == []  # not yet

    first = await chat.due(MONDAY_9_BERLIN, root)
    assert first, "the due schedule posted nothing"
    assert first[0].text == f"⏰ Schedule 1 ({WEEKLY}) for <@{ALICE}>"
    shown = _texts(first)
    assert "total: 1,200" in shown
    assert "rows 30" in shown
    assert "This is the schedule's first run: the next one says what changed." in shown
    assert "late" not in shown
    assert fake_backend.started == started + 1  # a sandbox of its own, gone with its run
    assert len(fake_backend.live) == 1  # the conversation's own session stays

    totals.total = 1350
    second = await chat.due(MONDAY_9_BERLIN + WEEK, root)
    assert second[0].text == f"⏰ Schedule 1 ({WEEKLY}) for <@{ALICE}>"
    shown = _texts(second)
    assert "total: 1,350" in shown
    assert "Since the last run (Mon 30 Nov 2026 09:00 CET): Numbers that moved: " in shown
    assert "total: 1,200 → 1,350 (+150, +12.5%)" in shown
    listed = await chat.schedule("list")
    assert "last run Mon 07 Dec 2026 09:00 CET" in listed
    assert "next Mon 14 Dec 2026 09:00 CET" in listed


async def test_only_the_owner_cancels_others_are_refused_or_have_no_conversation(
    chat: Chat,
) -> None:
    root = await chat.conversation()
    assert (await chat.schedule(WEEKLY)).startswith("Schedule 1 made")

    # Bob has not taken part in Alice's conversation: the schedule is named there, and he
    # may not act on it; neither from a conversation of his own in the channel.
    assert await chat.schedule("cancel 1", user=BOB) == NOT_YOURS
    await chat.conversation(user=BOB)
    assert await chat.schedule("cancel 1", user=BOB) == NOT_YOURS
    # In another channel the number names nothing of his.
    assert await chat.schedule("cancel 1", user=BOB, channel=C_OTHER) == NO_CONVERSATION

    # Once he writes in Alice's thread it is his latest conversation, but not his schedule.
    await chat.bot.server.post(C_GENERAL, f"```python\n{REPORT}\n```", user=BOB, thread_ts=root)
    await chat.bot.answered(C_GENERAL, root, count=2)
    assert await chat.schedule("cancel 1", user=BOB) == NOT_OWNER.format(n=1, what="cancel")
    assert "1. every monday" in await chat.schedule("list", user=BOB)

    assert await chat.schedule("cancel 1") == "Schedule 1 is cancelled: it will not run again."
    assert (await chat.schedule("list")).startswith("No schedules in this conversation.")
    assert await chat.due(MONDAY_9_BERLIN, root) == []

    # The workspace's admin (a moderator) cancels a schedule of the channel without having
    # written in its thread.
    assert (await chat.schedule(WEEKLY)).startswith("Schedule 2 made")
    assert await chat.schedule("cancel 2", user=ADMIN) == (
        "Schedule 2 is cancelled: it will not run again."
    )


async def test_schedule_without_a_conversation_in_the_channel_says_so(chat: Chat) -> None:
    assert await chat.schedule(WEEKLY) == NO_CONVERSATION
    assert await chat.schedule("") == NO_CONVERSATION
    await chat.conversation()
    # A conversation is of its channel: in another one Alice has none.
    assert await chat.schedule(WEEKLY, channel=C_OTHER) == NO_CONVERSATION
    assert chat.store.due(float("inf")) == []
