"""Schedules: a conversation's notebook run again at set times, in a fresh sandbox, with the
result posted in its thread beside what changed since the last time.

    /schedule WHEN [cells LIST]   make one (WHEN: see schedule_times; LIST: 1,3-4 of the
                                  code cells /export shows; all of them by default)
    /schedule list                this conversation's schedules
    /schedule cancel N            its owner, or a moderator
    /schedule run-now N           anyone who may act on the conversation
    /schedule update N [cells L]  take the conversation's cells again (owner or moderator)
    /schedule approve N           under policy approve: an approver consents to its code

Under policy `approve` a schedule runs only code an approver consented to: when it is made
(a creator who may approve consents by making it) and again whenever its code changes. Under
`off` it does not run. Each run counts toward its owner's quotas as any run does; a run due
while the previous one still runs is skipped, and said so. A time missed while the bot was
down runs once at the next start and says it is late.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bot.conversations.keys import ConversationKey
from bot.conversations.people import Admission, Person
from bot.conversations.schedule_changes import changes
from bot.conversations.schedule_runs import Poster, Recorded, RecordingReply, copy_files
from bot.conversations.schedule_store import Schedule, ScheduleStore
from bot.conversations.schedule_times import BadTime, When, parse_when
from bot.errors import Refused

if TYPE_CHECKING:
    from bot.agent import Agent, UserMessage
    from bot.conversations.policy import Policies
    from bot.conversations.reply import Reply


class Service(Protocol):
    """What schedules need of the conversation service."""

    posters: dict[str, Poster]
    agent: Agent
    policies: Policies | None

    async def check(
        self, door: Admission, person: Person, key: ConversationKey | None, owner: str = ""
    ) -> None: ...

    async def moderates(self, person: Person) -> bool: ...

    async def turn(
        self,
        door: Admission,
        person: Person,
        key: ConversationKey,
        message: UserMessage,
        reply: Reply,
        *,
        rerun_code: str | None = None,
        quiet: bool = False,
        preapproved: bool = False,
    ) -> None: ...


log = logging.getLogger(__name__)

USAGE = (
    "Use `/schedule every monday 09:00 Europe/Berlin` (or daily, hourly, a cron line; add "
    "`cells 1,3` to pick cells), `/schedule list`, `/schedule cancel N`, `/schedule run-now N`, "
    "`/schedule update N` or `/schedule approve N`."
)
NOTHING_TO_SCHEDULE = (
    "Nothing to schedule yet: no code has run in this conversation's session. Run the "
    "analysis here first; a schedule runs its cells again."
)
NOT_HERE = "There is no schedule {n} in this conversation."
NOT_OWNER = "Only the person who made schedule {n}, or a moderator, can {what} it."
NOT_APPROVER = {
    "requester": "Only the person who made schedule {n}, or a moderator, can approve its code.",
    "moderators": "Only a moderator can approve the code of schedule {n}.",
}
OFF = "Running code is turned off here (policy off), so no schedule can run here."
NO_SCHEDULES = "Schedules are not kept by this bot."
CODE_SHOWN_CHARS = 1500
CELLS = re.compile(r"^\s*(\d+)(?:\s*-\s*(\d+))?\s*$")


@dataclass(frozen=True, slots=True)
class ScheduleSettings:
    timezone: str = "UTC"
    """The zone of times that name none (CELLMATE_SCHEDULE_TIMEZONE)."""
    per_person: int = 10
    """Schedules one person may have at once (CELLMATE_SCHEDULES_PER_PERSON)."""
    min_interval_s: float = 300.0
    """The shortest gap between two runs of one schedule (CELLMATE_SCHEDULE_MIN_INTERVAL_S)."""
    at_once: int = 4
    """Scheduled runs under way at once, bot-wide (CELLMATE_SCHEDULE_RUNS_AT_ONCE)."""
    late_after_s: float = 60.0
    """A run this long after its time says it is late (the bot was down, or busy)."""

    def __post_init__(self) -> None:
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"{self.timezone!r} is not a time zone (such as Europe/Berlin)"
            ) from None
        if self.per_person < 0 or self.min_interval_s < 0 or self.late_after_s < 0:
            raise ValueError("schedule limits may not be negative")
        if self.at_once < 1:
            raise ValueError("at least one scheduled run must be allowed at once")


class Scheduler:
    def __init__(
        self,
        conversations: Service,
        store: ScheduleStore,
        settings: ScheduleSettings,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.conversations = conversations
        self.store = store
        self.settings = settings
        self.now = now
        self.running: dict[int, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(settings.at_once)
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None

    # ── the clock ────────────────────────────────────────────────────────

    def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="schedules")

    def wake(self) -> None:
        """Look at the schedules again now (one was made, or a platform came up)."""
        self._wake.set()

    async def close(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
        for task in list(self.running.values()):
            task.cancel()
        for task in list(self.running.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                self.tick()
            except Exception:
                log.exception("the schedules could not be looked at")
            wait = self._seconds_to_next()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()

    def _seconds_to_next(self) -> float:
        """Until the next schedule of a platform that is up is due; at most a minute, so
        that a changed wall clock is noticed."""
        posters = self.conversations.posters
        times = [s.next_due for s in self.store.due(float("inf")) if _platform(s) in posters]
        if not times:
            return 60.0
        return min(60.0, max(0.01, min(times) - self.now()))

    def tick(self) -> list[asyncio.Task[None]]:
        """Start every schedule that is due on a platform that is up; each gets its next
        time at once, so that a slow run is not started twice."""
        moment = self.now()
        started = []
        for schedule in self.store.due(moment):
            poster = self.conversations.posters.get(_platform(schedule))
            if poster is None:
                continue  # its platform is not up (yet): it runs, late, once it is
            late = moment - schedule.next_due > self.settings.late_after_s
            following = _when(schedule).next_after(_utc(moment)).timestamp()
            if not self.store.claim_due(schedule.id, schedule.next_due, following):
                continue  # another replica sharing the database runs this one
            if schedule.id in self.running:
                task = asyncio.create_task(self._skipped(poster, schedule))
            else:
                task = self._start(poster, schedule, late=late, due=schedule.next_due)
            started.append(task)
        return started

    def _start(
        self, poster: Poster, schedule: Schedule, late: bool = False, due: float | None = None
    ) -> asyncio.Task[None]:
        task = asyncio.create_task(self._fire(poster, schedule, late, due))
        self.running[schedule.id] = task
        task.add_done_callback(lambda _: self.running.pop(schedule.id, None))
        return task

    async def _skipped(self, poster: Poster, schedule: Schedule) -> None:
        key = ConversationKey.parse(schedule.conversation)
        await _safely(
            poster.say(
                key,
                f"Schedule {schedule.id} was due again while its last run still ran, so this "
                "time was skipped.",
            )
        )

    # ── a run ────────────────────────────────────────────────────────────

    async def _fire(
        self, poster: Poster, schedule: Schedule, late: bool, due: float | None
    ) -> None:
        async with self._slots:
            try:
                await self._run_once(poster, schedule, late, due)
            except Exception:
                log.exception("schedule %s failed", schedule.id)
                key = ConversationKey.parse(schedule.conversation)
                await _safely(
                    poster.say(key, f"Schedule {schedule.id} could not run: something broke.")
                )

    async def _run_once(
        self, poster: Poster, schedule: Schedule, late: bool, due: float | None
    ) -> None:
        key = ConversationKey.parse(schedule.conversation)
        person = await poster.person(schedule.owner, key)
        if not poster.door.allows(person.place):
            # The place (or its owner there) is no longer served: nothing is said there.
            log.info("schedule %s not run: %s is off the allowlist", schedule.id, key.id)
            return
        mode = self._mode(key)
        if mode == "off":
            await poster.say(key, f"Schedule {schedule.id} did not run: {OFF}")
            return
        if mode == "approve" and not schedule.approved_now:
            await poster.say(
                key,
                f"Schedule {schedule.id} did not run: code here waits for approval (policy "
                f"approve), and its code has not been approved. An approver can say "
                f"`/schedule approve {schedule.id}`.",
            )
            return
        heading = (
            f"⏰ Schedule {schedule.id} ({schedule.words}) for {poster.mention(schedule.owner)}"
        )
        if late and due is not None:
            heading += (
                f": this run is late. It was due at {_shown(due, schedule.zone)}, "
                "while the bot was not running."
            )
        await poster.say(key, heading, notify=schedule.owner)
        fresh = ConversationKey.one_off(key.platform, key.workspace, key.channel)
        executor = self.conversations.agent.executor
        source = executor.session(key.id)
        left: list[str] = []
        saved: dict[str, bytes] | None = None
        if source.active:
            copied, left = await copy_files(source.list_files, source.get_file)
        else:
            # Its workspace is saved: its files are read from there, and its one restore
            # (with the variables) is left for the conversation's next message.
            saved = await source.saved_file_contents() or {}
            copied, left = await copy_files(_listing(saved), _reading(saved))
        if copied:
            await executor.session(fresh.id).put_files(copied)

        def note(recorded: Recorded) -> str:
            parts = []
            if left:
                parts.append(f"Not copied into the run's sandbox (too large): {', '.join(left)}.")
            if schedule.runs and schedule.last_run:
                since = _shown(schedule.last_run, schedule.zone)
                found = changes(
                    schedule.last_text, recorded.output, schedule.last_images, recorded.charts
                )
                parts.append(f"Since the last run ({since}): {found}")
            else:
                parts.append("This is the schedule's first run: the next one says what changed.")
            return " ".join(parts)

        from bot.agent import UserMessage

        reply = RecordingReply(await poster.reply_in(key, schedule.owner), note)
        message = UserMessage(f"/run\n{schedule.code}", user=schedule.owner, server=schedule.server)
        await self.conversations.turn(poster.door, person, fresh, message, reply, preapproved=True)
        if reply.recorded.answered:
            self.store.ran(schedule.id, self.now(), reply.recorded.output, reply.recorded.charts)

    # ── commands ─────────────────────────────────────────────────────────

    async def command(
        self, door: Admission, person: Person, key: ConversationKey, text: str
    ) -> str:
        """/schedule on any platform: the answer for the person, a refusal included."""
        words = text.split()
        verb = words[0].lower() if words else "list"
        try:
            if verb in ("list", "ls"):
                await self.conversations.check(door, person, key)
                return self.listing(key)
            if verb in ("help", "?"):
                return USAGE
            if verb in ("cancel", "run-now", "approve", "update"):
                if len(words) < 2 or not words[1].lstrip("#").isdigit():
                    return f"Name the schedule: `/schedule {verb} N` ({USAGE})"
                number = int(words[1].lstrip("#"))
                rest = " ".join(words[2:])
                return await self._act(door, person, key, verb, number, rest)
            return await self.create(door, person, key, text)
        except Refused as exc:
            return str(exc)

    async def create(self, door: Admission, person: Person, key: ConversationKey, text: str) -> str:
        await self.conversations.check(door, person, key)
        if key.is_one_off:
            return "A one-off run has no conversation to schedule: run the code in a thread."
        when_words, _, picked = text.partition(" cells ")
        try:
            when = parse_when(when_words, self.settings.timezone)
        except BadTime as exc:
            return str(exc)
        gap = when.shortest_gap(_utc(self.now()))
        if gap < timedelta(seconds=self.settings.min_interval_s):
            return (
                f"That runs every {_duration(gap)}; schedules here run at most every "
                f"{_duration(timedelta(seconds=self.settings.min_interval_s))} "
                "(CELLMATE_SCHEDULE_MIN_INTERVAL_S)."
            )
        if self._mode(key) == "off":
            return OFF
        mine = self.store.of_owner(person.user)
        if len(mine) >= self.settings.per_person:
            return (
                f"You have {len(mine)} schedules, the most one person may have "
                f"(CELLMATE_SCHEDULES_PER_PERSON); cancel one first."
            )
        cells = await self._cells(key, picked)
        approved_by = ""
        if self._mode(key) == "approve" and await self._may_approve(person, person.user):
            approved_by = person.user
        moment = self.now()
        schedule = self.store.add(
            key.id,
            person.user,
            door_server(key),
            " ".join(when_words.split()),
            when.cron,
            when.zone,
            cells,
            moment,
            when.next_after(_utc(moment)).timestamp(),
            approved_by,
        )
        self.wake()
        log.info("schedule %s made in %s by %s: %s", schedule.id, key.id, person.user, when.text)
        lines = [
            f"Schedule {schedule.id} made: {schedule.words} (cron `{when.cron}`, {when.zone}). "
            f"Next run: {_shown(schedule.next_due, when.zone)}.",
            f"Each run takes this conversation's {_cells_text(cells)} into a fresh sandbox "
            "(with a copy of its files) and posts the result here, with what changed since the "
            "run before.",
        ]
        if self._mode(key) == "approve" and not approved_by:
            lines.append(
                "Code here waits for approval (policy approve): it runs once an approver "
                f"says `/schedule approve {schedule.id}`."
            )
        lines.append(_code_text(schedule.code))
        return "\n".join(lines)

    def listing(self, key: ConversationKey) -> str:
        found = self.store.of_conversation(key.id)
        poster = self.conversations.posters.get(key.platform)
        name = poster.mention if poster is not None else str
        if not found:
            return "No schedules in this conversation. " + USAGE
        lines = ["Schedules in this conversation:"]
        mode = self._mode(key)
        for s in found:
            state = ""
            if mode == "approve" and not s.approved_now:
                state = " (waiting for approval)"
            elif s.id in self.running:
                state = " (running now)"
            last = f", last run {_shown(s.last_run, s.zone)}" if s.last_run else ""
            lines.append(
                f"{s.id}. {s.words}: next {_shown(s.next_due, s.zone)}{last}; "
                f"{_cells_text(s.cells)}, made by {name(s.owner)}{state}"
            )
        return "\n".join(lines)

    async def _act(
        self,
        door: Admission,
        person: Person,
        key: ConversationKey,
        verb: str,
        number: int,
        rest: str,
    ) -> str:
        await self.conversations.check(door, person, key)
        schedule = self.store.get(number)
        if schedule is None or schedule.conversation != key.id:
            return NOT_HERE.format(n=number)
        owner_or_moderator = person.user == schedule.owner or await self.conversations.moderates(
            person
        )
        if verb == "cancel":
            if not owner_or_moderator:
                return NOT_OWNER.format(n=number, what="cancel")
            self.store.remove(number)
            running = self.running.get(number)
            if running is not None:
                running.cancel()
            log.info("schedule %s cancelled by %s", number, person.user)
            return f"Schedule {number} is cancelled: it will not run again."
        if verb == "run-now":
            poster = self.conversations.posters.get(key.platform)
            if poster is None:
                return "This platform cannot post a schedule's run right now."
            if number in self.running:
                return f"Schedule {number} is running now."
            self._start(poster, schedule)
            return f"Schedule {number} runs now; its result comes here."
        if verb == "approve":
            if not await self._may_approve(person, schedule.owner):
                approvers = self._approvers()
                return NOT_APPROVER[approvers].format(n=number)
            if schedule.approved_now:
                return f"The code of schedule {number} is already approved."
            self.store.approve(number, schedule.cells, person.user)
            log.info("schedule %s approved by %s", number, person.user)
            return f"Schedule {number}'s code is approved: it runs at its times."
        # update
        if not owner_or_moderator:
            return NOT_OWNER.format(n=number, what="update")
        cells = await self._cells(key, rest.partition("cells")[2])
        if cells == schedule.cells:
            return f"Schedule {number} already runs exactly this code."
        self.store.set_cells(number, cells)
        lines = [f"Schedule {number} now runs this conversation's {_cells_text(cells)}."]
        if self._mode(key) == "approve":
            if await self._may_approve(person, schedule.owner):
                self.store.approve(number, cells, person.user)
            else:
                lines.append(
                    "Its code changed, so it waits for approval again: an approver says "
                    f"`/schedule approve {number}`."
                )
        lines.append(_code_text("\n\n".join(cells)))
        return "\n".join(lines)

    # ── helpers ──────────────────────────────────────────────────────────

    async def _cells(self, key: ConversationKey, picked: str) -> list[str]:
        notebook = await self.conversations.agent.executor.session(key.id).export_notebook()
        cells = [
            _source(cell).strip("\n")
            for cell in (notebook or {}).get("cells", [])
            if cell.get("cell_type") == "code" and _source(cell).strip()
        ]
        if not cells:
            raise Refused(NOTHING_TO_SCHEDULE)
        if not picked.strip():
            return cells
        chosen: list[str] = []
        for part in picked.split(","):
            found = CELLS.match(part)
            if found is None:
                raise Refused(f"{part.strip()!r} is not a cell number or range (like 1,3-4).")
            first, last = int(found[1]), int(found[2] or found[1])
            if not 1 <= first <= last <= len(cells):
                raise Refused(
                    f"This conversation has {len(cells)} code cells: pick among 1-{len(cells)}."
                )
            chosen.extend(cells[first - 1 : last])
        return chosen

    def _mode(self, key: ConversationKey) -> str:
        policies = self.conversations.policies
        return "auto" if policies is None else policies.mode(key)

    def _approvers(self) -> str:
        policies = self.conversations.policies
        return policies.settings.approvers if policies is not None else "requester"

    async def _may_approve(self, person: Person, owner: str) -> bool:
        if self._approvers() == "requester" and person.user == owner:
            return True
        return await self.conversations.moderates(person)


def _listing(files: dict[str, bytes]) -> Callable[[], Awaitable[list[tuple[str, int]]]]:
    async def listed() -> list[tuple[str, int]]:
        return sorted((path, len(data)) for path, data in files.items())

    return listed


def _reading(files: dict[str, bytes]) -> Callable[[str], Awaitable[bytes | None]]:
    async def read(path: str) -> bytes | None:
        return files.get(path)

    return read


def door_server(key: ConversationKey) -> str:
    """The server a schedule's runs count toward (quotas per server); a DM has none."""
    return "" if key.is_dm else key.workspace


def _platform(schedule: Schedule) -> str:
    return schedule.conversation.split(":", 1)[0]


def _when(schedule: Schedule) -> When:
    return When(schedule.cron, schedule.zone)


def _utc(moment: float) -> datetime:
    return datetime.fromtimestamp(moment, UTC)


def _shown(moment: float, zone: str) -> str:
    return datetime.fromtimestamp(moment, ZoneInfo(zone)).strftime("%a %d %b %Y %H:%M %Z")


def _duration(gap: timedelta) -> str:
    seconds = int(gap.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def _cells_text(cells: list[str]) -> str:
    return "1 code cell" if len(cells) == 1 else f"{len(cells)} code cells"


def _code_text(code: str) -> str:
    shown = code if len(code) <= CODE_SHOWN_CHARS else code[:CODE_SHOWN_CHARS] + "\n# …"
    return f"```python\n{shown}\n```"


def _source(cell: dict[str, object]) -> str:
    source = cell.get("source", "")
    return "".join(str(s) for s in source) if isinstance(source, list) else str(source)


async def _safely(saying: Awaitable[None]) -> None:
    try:
        await saying
    except Exception:
        log.exception("could not post a schedule's message")
