"""Schedules on the fake sandbox, with a clock the test moves: `/schedule` in the console
(making, listing, bad times, limits), runs when due (the heading, the output, what changed
since the last run), a time missed while the bot was down (one run, said late), the store
surviving a restart, approval under `approve` (at creation, and again when the code changes),
who may cancel, and quotas on scheduled runs."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.agent import Agent
from bot.conversations import ConversationKey, Conversations, Person, Place
from bot.conversations.access import AccessRules
from bot.conversations.people import Admission
from bot.conversations.policy import Policies, PolicySettings
from bot.conversations.quotas import Quotas, QuotaSettings
from bot.conversations.schedule_store import ScheduleStore
from bot.conversations.schedules import NOTHING_TO_SCHEDULE, Scheduler, ScheduleSettings
from bot.database import Databases
from bot.platforms.console import Console, run_piped
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.support.later import MONDAY_9_BERLIN, REPORT, WEEK, Clock, Posting, Totals

LOAD = "load()"


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def totals() -> Totals:
    return Totals()


@pytest.fixture
def fake_backend(totals: Totals) -> FakeBackend:
    def script(code: str) -> FakeRun | None:
        if code.strip() == LOAD:
            return FakeRun(outputs=[stdout("loaded\n")], files={"sales.csv": b"a,b\n1,2\n"})
        return totals.run(code)

    return FakeBackend(script)


@dataclass
class Bot:
    console: Console
    out: io.StringIO
    scheduler: Scheduler
    conversations: Conversations
    clock: Clock
    store: ScheduleStore

    async def say(self, *messages: str) -> str:
        start = self.out.tell()
        await run_piped(self.console, io.StringIO("\n\n".join(messages) + "\n"))
        return self.out.getvalue()[start:]

    async def due(self, moment: float) -> str:
        """Move the clock to `moment`, run what is due, and return what was printed."""
        self.clock.now = moment
        start = self.out.tell()
        await asyncio.gather(*self.scheduler.tick())
        return self.out.getvalue()[start:]


@pytest.fixture
async def bot(
    fake_executor: Executor, make_agent: Callable[..., Agent], tmp_path: Path
) -> AsyncIterator[Callable[..., Bot]]:
    made: list[tuple[Scheduler, ScheduleStore, Policies, Quotas]] = []

    def make(settings: ScheduleSettings | None = None, quota_runs: int = 0, **policy: str) -> Bot:
        agent = make_agent(fake_executor, None, tmp_path, timeout=5)
        policies = Policies(Databases.sqlite(tmp_path), PolicySettings(**policy))  # type: ignore[arg-type]
        quotas = Quotas(Databases.sqlite(tmp_path), QuotaSettings(user_runs_per_hour=quota_runs))
        conversations = Conversations(agent, policies=policies, quotas=quotas)
        store = ScheduleStore(Databases.sqlite(tmp_path))
        clock = Clock()
        scheduler = Scheduler(conversations, store, settings or ScheduleSettings(), now=clock)
        conversations.schedules = scheduler
        out = io.StringIO()
        console = Console(conversations, out, tmp_path / "exports")
        made.append((scheduler, store, policies, quotas))
        return Bot(console, out, scheduler, conversations, clock, store)

    yield make
    for scheduler, store, policies, quotas in made:
        await scheduler.close()
        for closing in (store.close, policies.close, quotas.close):
            with contextlib.suppress(Exception):
                closing()


async def test_a_schedule_is_made_from_the_cells_and_says_when_it_runs(
    bot: Callable[..., Bot],
) -> None:
    chat = bot()
    out = await chat.say(
        f"/run {LOAD}", f"/run {REPORT}", "/schedule every monday 09:00 Europe/Berlin"
    )
    assert (
        "Schedule 1 made: every monday 09:00 Europe/Berlin (cron `0 9 * * 1`, Europe/Berlin)."
        in out
    )
    assert "Next run: Mon 30 Nov 2026 09:00 CET." in out
    assert "this conversation's 2 code cells" in out
    assert f"```python\n{LOAD}\n\n{REPORT}\n```" in out
    listed = await chat.say("/schedule list")
    assert (
        "1. every monday 09:00 Europe/Berlin: next Mon 30 Nov 2026 09:00 CET; 2 code cells"
        in listed
    )
    (kept,) = chat.store.of_conversation("console:dm:console:")
    assert kept.next_due == MONDAY_9_BERLIN


@pytest.mark.parametrize(
    ("words", "said"),
    [
        ("every blursday 09:00", "'blursday' is not a day of the week."),
        ("daily 25:00", "25:00 is not a time of day"),
        ("daily 09:00 Mars/Olympus", "'Mars/Olympus' is not a time zone I know"),
        ("cron 61 * * * *", "is not a cron line croniter accepts"),
        ("cron 0 9 * *", "A cron line has five fields"),
        ("*/1 * * * *", "That runs every 1 min; schedules here run at most every 5 min"),
        ("weekly", "Say when:"),
        ("cancel", "Name the schedule: `/schedule cancel N`"),
        ("run-now two", "Name the schedule: `/schedule run-now N`"),
        ("daily cells 3", "This conversation has 1 code cells: pick among 1-1."),
        ("daily cells one", "'one' is not a cell number or range"),
    ],
)
async def test_a_time_or_command_that_cannot_be_read_is_said_and_nothing_is_made(
    bot: Callable[..., Bot], words: str, said: str
) -> None:
    chat = bot()
    out = await chat.say(f"/run {REPORT}", f"/schedule {words}")
    assert said in out
    assert chat.store.due(float("inf")) == []


async def test_nothing_is_scheduled_before_code_has_run(bot: Callable[..., Bot]) -> None:
    chat = bot()
    assert NOTHING_TO_SCHEDULE in await chat.say("/schedule daily")
    assert chat.store.due(float("inf")) == []


async def test_two_replicas_sharing_the_store_run_a_due_schedule_once(
    bot: Callable[..., Bot], fake_backend: FakeBackend
) -> None:
    chat, replica = bot(), bot()  # two bot processes, one schedules database
    await chat.say(f"/run {REPORT}", "/schedule every monday 09:00 Europe/Berlin")
    started = fake_backend.started
    chat.clock.now = replica.clock.now = MONDAY_9_BERLIN
    # Both read the schedule as due before either moved it on, as two processes may.
    seen_due = replica.store.due(MONDAY_9_BERLIN)
    replica.store.due = lambda moment: seen_due  # type: ignore[method-assign]
    tasks = chat.scheduler.tick() + replica.scheduler.tick()
    await asyncio.gather(*tasks)
    shown = chat.out.getvalue() + replica.out.getvalue()
    assert shown.count("⏰ Schedule 1 (every monday 09:00 Europe/Berlin) for you") == 1
    assert fake_backend.started == started + 1
    (kept,) = chat.store.due(float("inf"))
    assert kept.next_due == MONDAY_9_BERLIN + WEEK


async def test_at_its_time_it_runs_in_a_fresh_sandbox_and_then_says_what_changed(
    bot: Callable[..., Bot], fake_backend: FakeBackend, totals: Totals
) -> None:
    chat = bot()
    await chat.say(f"/run {REPORT}", "/schedule every monday 09:00 Europe/Berlin")
    started = fake_backend.started
    assert await chat.due(MONDAY_9_BERLIN - 1) == ""  # not yet
    first = await chat.due(MONDAY_9_BERLIN)
    assert "⏰ Schedule 1 (every monday 09:00 Europe/Berlin) for you" in first
    assert "late" not in first
    assert "total: 1,200\nrows 30\n" in first
    assert "This is the schedule's first run: the next one says what changed." in first
    assert fake_backend.started == started + 1  # a sandbox of its own
    assert len(fake_backend.live) == 1  # ... gone with its run: the conversation's stays

    totals.total = 1350
    second = await chat.due(MONDAY_9_BERLIN + WEEK)
    assert "total: 1,350\n" in second
    assert "Since the last run (Mon 30 Nov 2026 09:00 CET): Numbers that moved: " in second
    assert "total: 1,200 → 1,350 (+150, +12.5%)" in second
    assert "rows" not in second.split("Numbers that moved:")[1]  # unchanged, not listed
    third = await chat.due(MONDAY_9_BERLIN + 2 * WEEK)
    assert "The output is the same as last time." in third
    (kept,) = chat.store.due(float("inf"))
    assert kept.runs == 3
    assert kept.next_due == MONDAY_9_BERLIN + 3 * WEEK


async def test_the_runs_get_a_copy_of_the_conversations_files(
    bot: Callable[..., Bot], fake_backend: FakeBackend
) -> None:
    chat = bot()
    await chat.say(f"/run {LOAD}", f"/run {REPORT}", "/schedule daily 10:00 UTC")
    conversation = next(iter(fake_backend.live))
    out = await chat.due(datetime(2026, 11, 27, 10, 0, tzinfo=UTC).timestamp())
    assert "total: 1,200" in out
    assert "were not copied" not in out
    sandboxes = [s for s in fake_backend.every if s is not conversation]
    assert sandboxes
    assert sandboxes[-1].files == {"sales.csv": b"a,b\n1,2\n"}


async def test_a_time_missed_while_the_bot_was_down_runs_once_and_says_it_is_late(
    bot: Callable[..., Bot], tmp_path: Path
) -> None:
    chat = bot()
    await chat.say(f"/run {REPORT}", "/schedule every monday 09:00 Europe/Berlin")
    await chat.scheduler.close()
    chat.store.close()

    # The next start, three weeks on: the store is read again and the missed time runs once.
    again = bot()
    again.clock.now = MONDAY_9_BERLIN + 2 * WEEK + 3600
    assert "1. every monday 09:00" in await again.say("/schedule list")
    out = await again.due(again.clock.now)
    assert out.count("⏰ Schedule 1") == 1
    assert "this run is late. It was due at Mon 30 Nov 2026 09:00 CET" in out
    assert await again.due(again.clock.now + 60) == ""
    (kept,) = again.store.due(float("inf"))
    assert kept.next_due == MONDAY_9_BERLIN + 3 * WEEK


async def test_under_approve_a_schedule_runs_only_approved_code_and_a_change_asks_again(
    bot: Callable[..., Bot], fake_backend: FakeBackend
) -> None:
    chat = bot(default="approve", approvers="moderators")
    key = ConversationKey("chat", "team", "c1", "t1")
    owner = Person("ann", Place("ann", "team", "c1"))
    moderator = Person("mod", Place("mod", "team", "c1"), vouched=_yes, moderates=_yes)
    poster = Posting(chat.out)
    chat.conversations.post_with("chat", poster)
    chat.conversations.participants.add(key.id, "ann")
    await _ran(chat, key, owner, REPORT, poster)

    made = await chat.scheduler.command(poster.door, owner, key, "daily 10:00 UTC")
    assert "it runs once an approver says `/schedule approve 1`" in made
    out = await chat.due(datetime(2026, 11, 27, 10, 0, tzinfo=UTC).timestamp())
    assert "Schedule 1 did not run: code here waits for approval" in out
    assert "total:" not in out

    refused = await chat.scheduler.command(poster.door, owner, key, "approve 1")
    assert refused == "Only a moderator can approve the code of schedule 1."
    assert "is approved" in await chat.scheduler.command(poster.door, moderator, key, "approve 1")
    out = await chat.due(datetime(2026, 11, 28, 10, 0, tzinfo=UTC).timestamp())
    assert "total: 1,200" in out

    await _ran(chat, key, owner, LOAD, poster)
    changed = await chat.scheduler.command(poster.door, owner, key, "update 1")
    assert "Its code changed, so it waits for approval again" in changed
    out = await chat.due(datetime(2026, 11, 29, 10, 0, tzinfo=UTC).timestamp())
    assert "did not run" in out


async def test_only_the_owner_or_a_moderator_cancels_and_only_from_its_conversation(
    bot: Callable[..., Bot],
) -> None:
    chat = bot()
    key = ConversationKey("chat", "team", "c1", "t1")
    elsewhere = ConversationKey("chat", "team", "c2", "t9")
    owner = Person("ann", Place("ann", "team", "c1"))
    bystander = Person("bob", Place("bob", "team", "c1"))
    moderator = Person("mod", Place("mod", "team", "c1"), vouched=_yes, moderates=_yes)
    poster = Posting(chat.out)
    chat.conversations.post_with("chat", poster)
    for user in ("ann", "bob"):
        chat.conversations.participants.add(key.id, user)
    chat.conversations.participants.add(elsewhere.id, "ann")
    await _ran(chat, key, owner, REPORT, poster)
    await chat.scheduler.command(poster.door, owner, key, "daily")
    await chat.scheduler.command(poster.door, owner, key, "hourly")

    said = await chat.scheduler.command(poster.door, bystander, key, "cancel 1")
    assert said == "Only the person who made schedule 1, or a moderator, can cancel it."
    # Its owner, from another conversation, names it in vain: there it does not exist.
    assert await chat.scheduler.command(poster.door, owner, elsewhere, "cancel 1") == (
        "There is no schedule 1 in this conversation."
    )
    # Someone who may not act on the conversation at all is told so, and learns nothing.
    stranger = Person("eve", Place("eve", "team", "c1"))
    assert "schedule" not in (await chat.scheduler.command(poster.door, stranger, key, "list"))
    assert len(chat.store.of_conversation(key.id)) == 2
    assert "is cancelled" in await chat.scheduler.command(poster.door, owner, key, "cancel 1")
    assert "is cancelled" in await chat.scheduler.command(poster.door, moderator, key, "cancel 2")
    assert chat.store.of_conversation(key.id) == []


async def test_run_now_and_quotas_count_scheduled_runs(bot: Callable[..., Bot]) -> None:
    chat = bot(quota_runs=2)
    out = await chat.say(f"/run {REPORT}", "/schedule daily 10:00 UTC")
    assert "Schedule 1 made" in out
    assert "runs now" in await chat.say("/schedule run-now 1")
    await asyncio.gather(*chat.scheduler.running.values())
    assert out.count("total: 1,200") == 1
    printed = chat.out.getvalue()
    assert printed.count("total: 1,200") == 2  # the chat's run and the one run now
    out = await chat.due(datetime(2026, 11, 27, 10, 0, tzinfo=UTC).timestamp())
    assert "total:" not in out
    assert "That would exceed your limit of 2 runs per hour." in out


async def test_limits_on_how_many_schedules_one_person_makes(bot: Callable[..., Bot]) -> None:
    chat = bot(ScheduleSettings(per_person=1))
    out = await chat.say(f"/run {REPORT}", "/schedule daily", "/schedule hourly")
    assert "You have 1 schedules, the most one person may have" in out
    assert len(chat.store.due(float("inf"))) == 1


# ── helpers ──────────────────────────────────────────────────────────────────────────────────


async def _yes() -> bool:
    return True


async def _ran(chat: Bot, key: ConversationKey, person: Person, code: str, poster: Posting) -> None:
    from bot.agent import UserMessage

    message = UserMessage(f"/run\n{code}", user=person.user, server=key.workspace)
    await chat.conversations.turn(
        poster.door, person, key, message, await poster.reply_in(key, person.user), preapproved=True
    )


async def test_a_schedule_of_a_place_no_longer_served_runs_and_says_nothing(
    bot: Callable[..., Bot], fake_backend: FakeBackend
) -> None:
    chat = bot()
    key = ConversationKey("chat", "team", "c1", "t1")
    owner = Person("ann", Place("ann", "team", "c1"))
    poster = Posting(chat.out)
    chat.conversations.post_with("chat", poster)
    chat.conversations.participants.add(key.id, "ann")
    await _ran(chat, key, owner, REPORT, poster)
    assert "Schedule 1 made" in await chat.scheduler.command(poster.door, owner, key, "daily")
    started = fake_backend.started
    # The operator narrows the allowlist to another channel: the schedule's place is off it.
    poster.door = Admission(AccessRules(channels=frozenset({"c2"})))
    assert await chat.due(datetime(2026, 11, 27, 9, 0, tzinfo=UTC).timestamp()) == ""
    assert fake_backend.started == started
