"""A turn as the agent sees it: a way to stop it, and two questions it asks before each run
of code, whether the code runs (and which code) and whether the person may run more now.

The conversation layer answers them (its policies, approvals and quotas) by filling in
`approve` and `allowance`; the agent only asks, so it knows nothing of who decides.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from executor import InputAsked
from executor.session import Restore

if TYPE_CHECKING:
    from bot.agent.detach import Background


class Verdict(enum.Enum):
    RUN = "run"
    EDITED = "edited"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed out"
    STOPPED = "stopped"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    code: str = ""
    """The code that runs (edited, perhaps)."""
    by: str = ""
    """Who decided (a user id); '' when nobody did."""
    restore: Restore = Restore.VARIABLES
    """Whether saved variables may be loaded before the code (only where they were shown)."""

    @property
    def runs(self) -> bool:
        return self.verdict in (Verdict.RUN, Verdict.EDITED)

    def for_model(self) -> str:
        """What the model is told before the run's result (or instead of it)."""
        if self.verdict is Verdict.RUN:
            return ""
        if self.verdict is Verdict.EDITED:
            return (
                "Before it ran, a person edited your code. This is the code that ran instead:\n"
                f"```python\n{self.code}\n```\nIts result:\n"
            )
        why = {
            Verdict.CANCELLED: "The person reviewing your code declined to run it.",
            Verdict.TIMED_OUT: "Nobody approved your code in time, so it was not run.",
            Verdict.STOPPED: "The turn was stopped before your code was approved.",
            Verdict.OFF: "Running code is turned off in this channel, so it was not run.",
        }[self.verdict]
        return (
            f"{why} Do not try to run code again in this turn: answer the person in plain "
            "words, saying briefly what you would have run and that it was not run."
        )


@dataclass(slots=True)
class Turn:
    """A running turn; `stop()` ends it early (the kernel keeps its state where it can).

    The turn's runs watch `stop_requested` (the executor interrupts the kernel once it is
    set, even while the run still waits for a sandbox), so stopping needs nothing else."""

    conversation: str
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)
    model_call: asyncio.Task[Any] | None = None
    budget_started: float | None = None
    """When (time.monotonic) the turn's time budget started: once it holds the conversation,
    not when it was admitted (it may have waited behind another turn)."""
    allowance: Callable[[], None] | None = None
    """Raises a `Refused` when the person may not run more code now (a quota)."""
    approve: Callable[[str], Awaitable[Decision]] | None = None
    """Decides whether code the model wrote runs (the place's approval policy)."""
    ask_input: Callable[[InputAsked], Awaitable[str | None]] | None = None
    """Asks the person whose turn it is when the running code calls `input()` or
    `getpass()`; their answer, or None (none came). None: the code cannot ask."""
    background: Background | None = None
    """Takes a run that outlasts the turn (its limit, Keep running, `/run --background`);
    None: a run ends at its time limit."""
    beside: asyncio.Event = field(default_factory=asyncio.Event)
    """Set (Run beside, `/run --beside`): the turn's code that waits for a run in the
    background runs in a second kernel beside it instead."""

    async def approval(self, code: str) -> Decision:
        """Before each run of code the model wrote: whether it runs, and which code."""
        if self.approve is None:
            return Decision(Verdict.RUN, code)
        return await self.approve(code)

    def may_run(self) -> None:
        """Before each run of the turn: raise a `Refused` saying why it may not start."""
        if self.allowance is not None:
            self.allowance()

    def stop(self) -> None:
        self.stop_requested.set()
        if self.model_call is not None:
            self.model_call.cancel()
