"""What the tests of work that comes later share (schedules, runs in the background): a
clock the test moves, a fake report whose numbers the test changes, slow and hanging fake
runs, and a poster that prints where the console does."""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import UTC, datetime

from bot.conversations import ConversationKey, Person, Place
from bot.conversations.access import AccessRules
from bot.conversations.people import Admission
from bot.platforms.console_reply import Renderer
from executor.fake_backend import FakeBackend, FakeRun, stdout

START = datetime(2026, 11, 26, 12, 0, tzinfo=UTC).timestamp()
"""Thursday 26 November 2026, 12:00 UTC: when the tests' clocks start."""
MONDAY_9_BERLIN = datetime(2026, 11, 30, 8, 0, tzinfo=UTC).timestamp()
WEEK = 7 * 86400.0
REPORT = "report()"
"""Prints `total: N` and `rows N` from `Totals`."""
SLOW = "slow()"
"""Prints five lines, 0.4 s apart: longer than a 1 s foreground limit."""
HANG = "hang()"
"""Prints one line, then runs until it is stopped."""
QUICK = "print(6 * 7)"


class Clock:
    """The scheduler's clock (`now=`), moved by the test."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@dataclass
class Totals:
    """What the fake's `report()` prints next: the data a real report would read."""

    total: int = 1200
    rows: int = 30

    def run(self, code: str) -> FakeRun | None:
        if code.strip().endswith(REPORT):
            return FakeRun(outputs=[stdout(f"total: {self.total:,}\nrows {self.rows}\n")])
        return None


def slow_backend() -> FakeBackend:
    """SLOW, HANG and QUICK, for runs that reach a 1 s limit, or do not."""
    return FakeBackend(
        {
            SLOW: FakeRun(outputs=[stdout(f"step {n}\n") for n in range(5)], delay_s=0.4),
            HANG: FakeRun(outputs=[stdout("waiting\n")], hang=True),
            QUICK: FakeRun(outputs=[stdout("42\n")]),
        }
    )


class Posting:
    """A platform's poster for the test's own conversations, printing where the console does."""

    def __init__(self, out: io.StringIO) -> None:
        self.out = out
        self.door = Admission(AccessRules())

    async def person(self, user: str, key: ConversationKey) -> Person:
        return Person(user, Place(user, key.workspace, key.channel))

    def mention(self, user: str) -> str:
        return f"@{user}"

    async def reply_in(self, key: ConversationKey, owner: str) -> Renderer:
        return Renderer(self.out, False)

    async def say(self, key: ConversationKey, text: str, notify: str = "") -> None:
        self.out.write(text + "\n")
