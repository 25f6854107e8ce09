"""The approval seam of a turn on its own (`Approver`): what it emits and decides when the
turn's time budget leaves no time to wait, when the turn is cancelled around the wait, and
when a person decides."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bot.conversations.approval import Approver, Decision, Pending, Verdict
from bot.conversations.keys import ConversationKey
from bot.conversations.policy import Policies, PolicySettings
from bot.database import Databases
from bot.events import ApprovalDecided, ApprovalRequested, TurnEvent
from executor.session import Restore

KEY = ConversationKey("slack", "T1", "C1", "1.0")


class Seam:
    """An approver over a fresh policy store, recording what it emits."""

    def __init__(self, tmp_path: Path, deadline: Callable[[], float | None] | None = None) -> None:
        self.policies = Policies(Databases.sqlite(tmp_path), PolicySettings(default="approve"))
        self.events: list[TurnEvent] = []
        self.pending: dict[str, Pending] = {}
        self.stop = asyncio.Event()
        self.asked = asyncio.Event()
        self.approver = Approver(
            self.policies, self.pending, KEY, "U1", self.emit, self.stop, deadline
        )

    def emit(self, event: TurnEvent) -> None:
        self.events.append(event)
        if isinstance(event, ApprovalRequested):
            self.asked.set()


@pytest.fixture
def make_seam(tmp_path: Path) -> Iterator[Callable[..., Seam]]:
    made: list[Seam] = []

    def make(deadline: Callable[[], float | None] | None = None) -> Seam:
        made.append(Seam(tmp_path, deadline))
        return made[-1]

    yield make
    for seam in made:
        seam.policies.close()


async def test_a_spent_time_budget_declines_at_once_with_nobody_asked_to_wait(
    make_seam: Callable[..., Seam],
) -> None:
    spent = time.monotonic() - 1
    seam = make_seam(deadline=lambda: spent)
    approver, events, pending = seam.approver, seam.events, seam.pending
    decision = await approver("print(1)")
    assert decision == Decision(Verdict.TIMED_OUT)
    asked, decided = events
    assert isinstance(asked, ApprovalRequested)
    assert asked.timeout_s == 0
    assert decided == ApprovalDecided(asked.key, "timed out")
    assert pending == {}
    assert await approver("print(2)") == decision  # the turn asks nobody again
    assert len(events) == 2


async def test_a_turn_cancelled_while_code_waits_takes_the_buttons_away(
    make_seam: Callable[..., Seam],
) -> None:
    seam = make_seam()
    approver, events, pending = seam.approver, seam.events, seam.pending
    waiting = asyncio.create_task(approver("print(1)"))
    await seam.asked.wait()
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert waiting.cancelled()
    asked, decided = events
    assert isinstance(asked, ApprovalRequested)
    assert decided == ApprovalDecided(asked.key, "stopped")
    assert pending == {}


async def test_an_edit_decides_what_runs_and_stop_ends_the_next_wait(
    make_seam: Callable[..., Seam],
) -> None:
    seam = make_seam()
    approver, events, pending, stop = seam.approver, seam.events, seam.pending, seam.stop
    waiting = asyncio.create_task(approver("print(1)"))
    await seam.asked.wait()
    (entry,) = pending.values()
    assert entry.settle(Decision(Verdict.EDITED, "print(2)", "U2"))
    assert not entry.settle(Decision(Verdict.RUN, "print(1)", "U1"))  # the first one counts
    # No saved variables were named on the card, so none may load before the edited code.
    assert await waiting == Decision(Verdict.EDITED, "print(2)", "U2", Restore.FILES)
    assert events[-1] == ApprovalDecided(events[0].key, "edited", "U2")  # type: ignore[union-attr]

    stop.set()
    assert await approver("print(3)") == Decision(Verdict.STOPPED)
    assert events[-1] == ApprovalDecided(events[-2].key, "stopped")  # type: ignore[union-attr]
