"""Schedules on Discord, as people see them: `/schedule` in a thread where code has run makes
and lists a schedule; at its time (a clock the test moves) the run is posted in the thread
under a heading that notifies its owner and nobody else, with its output and, the next time,
the numbers that moved; someone else may not cancel it, its owner may; and `/schedule` in a
plain channel is told to use a thread. The real discord.py client against the Discord
stand-in, on the fake sandbox (no Docker), without a model (code runs directly)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.standins.discord_server import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL_GENERAL,
    EPHEMERAL,
    GUILD_ID,
    OWNER,
    Message,
)
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.schedule_store import ScheduleStore
from bot.conversations.schedules import Scheduler, ScheduleSettings
from bot.database import Databases
from bot.errors import NOT_YOURS
from bot.platforms.on_discord.schedules import NO_THREAD
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend
from tests.support.later import MONDAY_9_BERLIN, REPORT, WEEK, Clock, Totals
from tests.support.on_discord import Bot, interaction_reply, running_bot

# Thursday 26 November 2026, 12:00 UTC; the first Monday 09:00 in Berlin after it.
WHEN = "every monday 09:00 Europe/Berlin"
HEADING = f"⏰ Schedule 1 ({WHEN}) for "


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def totals() -> Totals:
    return Totals()


@pytest.fixture
def fake_backend(totals: Totals) -> FakeBackend:
    return FakeBackend(totals.run)


@dataclass
class Scheduled:
    """The bot on the stand-in, with its scheduler on the test's clock."""

    bot: Bot
    scheduler: Scheduler
    store: ScheduleStore
    clock: Clock

    async def due(self, moment: float) -> int:
        """Move the clock to `moment` and run what is due to its end; how many started."""
        self.clock.now = moment
        started = self.scheduler.tick()
        await asyncio.gather(*started)
        return len(started)


@pytest.fixture
async def scheduled(
    fake_executor: Executor, make_agent: Callable[..., Agent], tmp_path: Path
) -> AsyncIterator[Scheduled]:
    agent = make_agent(fake_executor, None, tmp_path, timeout=5)
    conversations = Conversations(agent)
    store = ScheduleStore(Databases.sqlite(tmp_path))
    clock = Clock()
    scheduler = Scheduler(conversations, store, ScheduleSettings(), now=clock)
    conversations.schedules = scheduler
    try:
        async with running_bot(agent, conversations) as bot:
            try:
                yield Scheduled(bot, scheduler, store, clock)
            finally:
                await scheduler.close()  # no run left to post once the client is gone
    finally:
        await scheduler.close()
        store.close()


# ── helpers ──────────────────────────────────────────────────────────────────────────────────


async def _thread_with_a_run(bot: Bot) -> int:
    """Alice mentions the bot with a fenced block in #general: the thread it ran in."""
    await bot.server.post_message(
        CHANNEL_GENERAL, f"```python\n{REPORT}\n```", mention_bot=True, author=ALICE
    )
    thread_id = await bot.server.wait_for(lambda: next(iter(bot.server.threads), None))
    assert isinstance(thread_id, int)
    (report,) = await bot.answer_in(thread_id)
    assert "total: 1,200" in report.content
    return thread_id


async def _schedule(bot: Bot, what: str, channel: int, user: int = ALICE) -> str:
    """`/schedule what:…` typed by `user` in `channel`: what they were shown."""
    done = await bot.server.slash("schedule", {"what": what}, channel_id=channel, user=user)
    return await interaction_reply(bot, done)


def _after(bot: Bot, channel: int, first: Message) -> list[Message]:
    return [m for m in bot.bot_messages(channel) if m.id >= first.id]


async def _run_posted(bot: Bot, thread_id: int, count: int, note: str) -> list[Message]:
    """The `count`th scheduled run's messages in the thread (its heading first), once its
    answer shows `note`."""

    def posted() -> list[Message] | None:
        headings = [m for m in bot.bot_messages(thread_id) if m.content.startswith("⏰")]
        if len(headings) < count:
            return None
        run = _after(bot, thread_id, headings[count - 1])
        if count < len(headings):
            run = [m for m in run if m.id < headings[count].id]
        return run if any(note in m.content for m in run) else None

    found = await bot.server.wait_for(posted)
    assert isinstance(found, list)
    return found


# ── tests ────────────────────────────────────────────────────────────────────────────────────


async def test_schedule_in_a_thread_where_code_ran_is_made_and_listed(
    scheduled: Scheduled,
) -> None:
    bot = scheduled.bot
    thread_id = await _thread_with_a_run(bot)
    made = await _schedule(bot, WHEN, thread_id)
    assert made.startswith(f"Schedule 1 made: {WHEN} (cron ")
    assert "Next run: Mon 30 Nov 2026 09:00 CET." in made
    assert "this conversation's 1 code cell " in made
    assert REPORT in made  # the code it runs is shown
    key = f"discord:{GUILD_ID}:{CHANNEL_GENERAL}:{thread_id}"
    (kept,) = scheduled.store.of_conversation(key)
    assert (kept.owner, kept.next_due) == (str(ALICE), MONDAY_9_BERLIN)
    assert [cell.strip() for cell in kept.cells] == [REPORT]

    listed = await _schedule(bot, "list", thread_id)
    assert listed.startswith("Schedules in this conversation:")
    assert f"1. {WHEN}: next Mon 30 Nov 2026 09:00 CET; 1 code cell, made by <@{ALICE}>" in listed


async def test_at_its_time_the_run_is_posted_in_the_thread_and_then_what_moved(
    scheduled: Scheduled, fake_backend: FakeBackend, totals: Totals
) -> None:
    bot = scheduled.bot
    thread_id = await _thread_with_a_run(bot)
    assert "Schedule 1 made" in await _schedule(bot, WHEN, thread_id)
    before = len(bot.bot_messages(thread_id))
    assert await scheduled.due(MONDAY_9_BERLIN - 1) == 0  # not yet: nothing posted
    assert len(bot.bot_messages(thread_id)) == before

    assert await scheduled.due(MONDAY_9_BERLIN) == 1
    first = await _run_posted(bot, thread_id, 1, "This is the schedule's first run")
    heading = first[0]
    assert heading.content.startswith(HEADING)
    assert str(ALICE) in heading.content
    assert "late" not in heading.content
    # The heading's request lets Discord notify the owner and nobody else (no roles, no
    # @everyone, no other user); every other message of the run notifies nobody.
    assert heading.allowed_mentions is not None
    assert heading.allowed_mentions.get("parse") == []
    assert [str(user) for user in heading.allowed_mentions.get("users") or []] == [str(ALICE)]
    assert not heading.allowed_mentions.get("roles")
    assert all(m.mentions == [] for m in first[1:])
    assert any("total: 1,200\nrows 30" in m.content for m in first[1:])
    assert bot.bot_messages(CHANNEL_GENERAL) == []  # all of it in the thread
    assert len(fake_backend.every) == 2  # the run had a sandbox of its own

    totals.total = 1350
    assert await scheduled.due(MONDAY_9_BERLIN + WEEK) == 1
    second = await _run_posted(bot, thread_id, 2, "Numbers that moved")
    assert second[0].content.startswith(HEADING)
    assert any("total: 1,350\nrows 30" in m.content for m in second[1:])
    (note,) = [m.content for m in second if "Numbers that moved" in m.content]
    assert "Since the last run (Mon 30 Nov 2026 09:00 CET): Numbers that moved: " in note
    assert "total: 1,200 → 1,350 (+150, +12.5%)" in note
    assert "rows" not in note.split("Numbers that moved:")[1]  # unchanged, not listed
    (kept,) = scheduled.store.due(float("inf"))
    assert (kept.runs, kept.next_due) == (2, MONDAY_9_BERLIN + 2 * WEEK)


async def test_the_heading_of_a_run_notifies_its_owner(scheduled: Scheduled) -> None:
    bot = scheduled.bot
    thread_id = await _thread_with_a_run(bot)
    assert "Schedule 1 made" in await _schedule(bot, WHEN, thread_id)
    await scheduled.due(MONDAY_9_BERLIN)
    heading, *_ = await _run_posted(bot, thread_id, 1, "This is the schedule's first run")
    assert heading.content == f"{HEADING}<@{ALICE}>"
    assert heading.mentions == [ALICE]  # as the stand-in parses it, after allowed_mentions


async def test_only_its_owner_or_a_moderator_cancels_a_schedule(scheduled: Scheduled) -> None:
    bot = scheduled.bot
    thread_id = await _thread_with_a_run(bot)
    assert "Schedule 1 made" in await _schedule(bot, WHEN, thread_id)
    assert "Schedule 2 made" in await _schedule(bot, "daily 10:00 UTC", thread_id)

    # Bob never took part in the thread and moderates nothing: he may not touch it at all.
    assert await _schedule(bot, "cancel 1", thread_id, user=BOB) == NOT_YOURS
    # Carol takes part (she ran code in the thread) but did not make it.
    await bot.server.post_message(
        thread_id, "```python\nprint('carol')\n```", mention_bot=True, author=CAROL
    )
    await bot.answer_in(thread_id, count=2)
    refused = await _schedule(bot, "cancel 1", thread_id, user=CAROL)
    assert refused == "Only the person who made schedule 1, or a moderator, can cancel it."
    assert [s.id for s in scheduled.store.due(float("inf"))] == [2, 1]
    assert f"1. {WHEN}: next" in await _schedule(bot, "list", thread_id)

    assert await _schedule(bot, "cancel 1", thread_id) == (
        "Schedule 1 is cancelled: it will not run again."
    )
    # The server's owner moderates (Manage Messages): they may cancel anyone's.
    assert await _schedule(bot, "cancel 2", thread_id, user=OWNER) == (
        "Schedule 2 is cancelled: it will not run again."
    )
    assert "No schedules in this conversation." in await _schedule(bot, "list", thread_id)
    before = len(bot.bot_messages(thread_id))
    assert await scheduled.due(MONDAY_9_BERLIN) == 0
    assert len(bot.bot_messages(thread_id)) == before


async def test_schedule_outside_a_thread_is_told_to_use_one(scheduled: Scheduled) -> None:
    bot = scheduled.bot
    done = await bot.server.slash("schedule", {"what": WHEN}, channel_id=CHANNEL_GENERAL)
    assert await interaction_reply(bot, done) == NO_THREAD
    (answer,) = [c for c in bot.server.callbacks if c["interaction_id"] == done.id]
    assert answer["data"]["flags"] & EPHEMERAL  # only the person who asked sees it
    assert bot.bot_messages(CHANNEL_GENERAL) == []
    assert scheduled.store.due(float("inf")) == []
