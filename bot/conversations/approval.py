"""Approval of code the model wants to run, where the place's policy asks for it.

    Agent._tool ──> Turn.approval(code) ──> Approver (one per turn) asks the policy:
      auto     run it
      off      never run it (a Notice says so; the model is told)
      approve  ApprovalRequested ──> the front end shows Run / Edit / Cancel
               a press ──> Conversations.decide ──> Pending.settle
               (or the timeout, or Stop) ──> ApprovalDecided ──> the front end updates
    Agent._tool <── Decision: run, run edited code, or why not

Once a turn's code was declined (cancelled, timed out, stopped, or the policy is off), the
turn asks nobody again: later code of the same turn is declined the same way, and the model
is told to answer without running code.

Loading a saved workspace's variables runs code too (unpickling calls what the pickle names),
so it passes the same gate: under auto it happens, under off only the files come back, and
under approve the variables are named on the card of the code they load before, or on a card
of their own (a direct run, /restore), and nothing is loaded before a person says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.agent.turn import Decision as Decision
from bot.agent.turn import Verdict as Verdict
from bot.conversations.keys import ConversationKey
from bot.conversations.policy import Mode, Policies
from bot.events import ApprovalDecided, ApprovalRequested, Notice, TurnEvent
from bot.fences import as_run
from bot.text import short_name
from executor.session import Restore

ALREADY_DECIDED = "That code has already been decided on, or it is no longer waiting."
OFF_NOTICE = (
    "Running code is turned off here (policy off), so the model's code was not run. "
    "An admin can change this with /policy."
)
OFF_REFUSAL = (
    "Running code is turned off here (policy off), so this code was not run. "
    "An admin can change this with /policy."
)
OFF_RESTORE = (
    "Running code is turned off here (policy off), and loading saved variables runs code, so "
    "they were not loaded."
)
APPROVE_RESTORE = (
    "Code here waits for approval (policy approve), and loading saved variables runs code, so "
    "they were not loaded; they are named for approval with the next code that runs here."
)
NOTHING_TO_EDIT = "Only a restore waits here, with no code to edit: Run or Cancel it."
NAMES_SHOWN = 12


@dataclass(frozen=True, slots=True)
class RestoreRequested(ApprovalRequested):
    """An approval that also loads a saved workspace's variables before the code (`code`
    is '' when only the restore waits: a direct run, /restore)."""

    restoring: tuple[str, ...] = ()
    """The saved variables' names, as the workspace lists them."""


def restoring_of(event: ApprovalRequested) -> tuple[str, ...]:
    return event.restoring if isinstance(event, RestoreRequested) else ()


def restore_heading(event: ApprovalRequested) -> str:
    """What the card asks about, for its first line."""
    if not restoring_of(event):
        return "The model wants to run this code."
    if not event.code:
        return "This conversation's saved variables are to be loaded, which runs code."
    return "The model wants to run this code, after loading saved variables (which runs code)."


def restore_text(event: ApprovalRequested) -> str:
    """The card's line about the variables a Run loads ('' when none): their names, which
    the code block after it shows as they are."""
    names = restoring_of(event)
    if not names:
        return ""
    return (
        f"Run first loads {len(names)} saved variable{'s' if len(names) != 1 else ''} of this "
        "conversation's workspace; unpickling them runs whatever code was saved with them "
        "(Cancel: they are not loaded):"
    )


def shown_names(names: Sequence[str]) -> str:
    """Variable names for a card, one a line: the first few, each cut short, made visible
    (a name can be any string), and how many more."""
    lines = [short_name(as_run(name).replace("\n", "\\n")) for name in names[:NAMES_SHOWN]]
    if len(names) > NAMES_SHOWN:
        lines.append(f"… and {len(names) - NAMES_SHOWN} more")
    return "\n".join(lines)


def outcome(event: ApprovalDecided, who: str, restore_only: bool = False) -> str:
    """One line saying what became of code that waited for approval (or of a restore alone:
    `restore_only`); `who` names the person (as the platform shows people)."""
    if restore_only:
        if event.verdict == Verdict.RUN.value:
            return f"✅ Approved by {who}; the saved variables are loaded."
        if event.verdict == Verdict.CANCELLED.value:
            return f"🚫 Cancelled by {who}; the saved variables were not loaded."
        if event.verdict == Verdict.TIMED_OUT.value:
            return "⌛ Nobody approved it in time; the saved variables were not loaded."
        return "⏹️ The turn was stopped; the saved variables were not loaded."
    if event.verdict == Verdict.RUN.value:
        return f"✅ Approved by {who}; it runs."
    if event.verdict == Verdict.EDITED.value:
        return f"✏️ Edited by {who}; the edited code runs."
    if event.verdict == Verdict.CANCELLED.value:
        return f"🚫 Cancelled by {who}; it was not run."
    if event.verdict == Verdict.TIMED_OUT.value:
        return "⌛ Nobody approved it in time; it was not run."
    return "⏹️ The turn was stopped; it was not run."


def approvers_text(event: ApprovalRequested, requester: str) -> str:
    """Who may decide, for the approval message; `requester` names the person who asked."""
    if event.approvers == "moderators":
        return "A moderator"
    return f"{requester} or a moderator"


@dataclass(slots=True)
class Pending:
    """Code waiting for a person's decision."""

    conversation: ConversationKey
    requester: str
    code: str
    """'' when only a restore waits."""
    decided: asyncio.Future[Decision] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def settle(self, decision: Decision) -> bool:
        """Record the first decision; False when one was recorded already."""
        if self.decided.done():
            return False
        self.decided.set_result(decision)
        return True


Emit = Callable[[TurnEvent], Awaitable[None] | None]


class Approver:
    """The approval seam of one turn (`Turn.approve`): asks the policy, and a person where
    the policy says so."""

    def __init__(
        self,
        policies: Policies,
        pending: dict[str, Pending],
        key: ConversationKey,
        requester: str,
        emit: Emit,
        stop: asyncio.Event,
        deadline: Callable[[], float | None] | None = None,
        restorable: Callable[[bool], Awaitable[tuple[str, ...]]] | None = None,
    ) -> None:
        self.policies = policies
        self.pending = pending
        self.key = key
        self.requester = requester
        self.emit = emit
        self.stop = stop
        self.deadline = deadline
        """When (time.monotonic) waiting must end so that the turn, within its time budget,
        can still answer politely; asked when code waits, since the budget starts only once
        the turn holds its conversation (None: no limit)."""
        self.restorable = restorable
        """The saved variables that loading would unpickle now (for a run: True), to name
        on the card; None: none are kept."""
        self.declined: Decision | None = None

    async def __call__(self, code: str) -> Decision:
        if self.declined is not None:
            return self.declined
        mode = self.policies.mode(self.key)
        if mode == "auto":
            return Decision(Verdict.RUN, code)
        if mode == "off":
            self.declined = Decision(Verdict.OFF)
            await _call(self.emit, Notice(OFF_NOTICE))
            return self.declined
        restoring = await self._restorable(True)
        decision = await self._ask(code, restoring)
        if not decision.runs:
            self.declined = decision
            return decision
        # Variables load only where the card named them: a Run of a card without them
        # leaves any that turn up later unloaded.
        return decision if restoring else dataclasses.replace(decision, restore=Restore.FILES)

    def unasked(self) -> tuple[Restore, str]:
        """How saved variables may load with nobody asked (a message with only files), and
        why not, for the person, when they may not."""
        return _unasked(self.policies.mode(self.key))

    async def restore(self, by_run: bool = True) -> Restore:
        """Whether saved variables may be loaded for a run with no card of its own (a
        direct run: `by_run`) or for /restore; under approve, a person decides on a card
        that names them (a declined card loads nothing, and the run goes on without them)."""
        mode = self.policies.mode(self.key)
        if mode != "approve":
            return _unasked(mode)[0]
        restoring = await self._restorable(by_run)
        if not restoring:
            return Restore.FILES
        decision = await self._ask("", restoring)
        return Restore.VARIABLES if decision.runs else Restore.FILES

    async def _restorable(self, by_run: bool) -> tuple[str, ...]:
        return await self.restorable(by_run) if self.restorable is not None else ()

    async def _ask(self, code: str, restoring: tuple[str, ...] = ()) -> Decision:
        settings = self.policies.settings
        timeout_s = settings.timeout_s
        deadline = self.deadline() if self.deadline is not None else None
        if deadline is not None:
            timeout_s = max(0.0, min(timeout_s, deadline - time.monotonic()))
        key = secrets.token_hex(8)
        waiting = Pending(self.key, self.requester, code)
        self.pending[key] = waiting
        asking: ApprovalRequested = (
            RestoreRequested(key, code, self.requester, settings.approvers, timeout_s, restoring)
            if restoring
            else ApprovalRequested(key, code, self.requester, settings.approvers, timeout_s)
        )
        try:
            await _call(self.emit, asking)
            decision = await self._wait(waiting, timeout_s)
        except asyncio.CancelledError:
            # The turn ended around the wait (its time budget, shutdown): the buttons go.
            waiting.settle(Decision(Verdict.STOPPED))
            await _call(self.emit, ApprovalDecided(key, Verdict.STOPPED.value))
            raise
        finally:
            self.pending.pop(key, None)
        await _call(self.emit, ApprovalDecided(key, decision.verdict.value, decision.by))
        return decision

    async def _wait(self, waiting: Pending, timeout_s: float) -> Decision:
        stopped = asyncio.ensure_future(self.stop.wait())
        watched: set[asyncio.Future[Any]] = {waiting.decided, stopped}
        try:
            done, _ = await asyncio.wait(
                watched, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stopped.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopped
        if waiting.decided in done:
            return waiting.decided.result()
        verdict = Verdict.STOPPED if self.stop.is_set() else Verdict.TIMED_OUT
        waiting.settle(Decision(verdict))
        return waiting.decided.result()


def _unasked(mode: Mode) -> tuple[Restore, str]:
    if mode == "auto":
        return Restore.VARIABLES, ""
    return Restore.FILES, OFF_RESTORE if mode == "off" else APPROVE_RESTORE


async def _call(emit: Emit, event: TurnEvent) -> None:
    returned = emit(event)
    if inspect.isawaitable(returned):
        await returned
