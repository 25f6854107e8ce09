"""The code's `input()` and `getpass()`, asked in the chat of the person whose turn it is.

    executor run ──> Turn.ask_input(asked) ──> InputAsker (one per turn)
        InputRequested ──> the front end shows the prompt with Answer (a modal on Discord
                           and Slack, the terminal's prompt in the console)
        the person's answer ──> Conversations.answer_input ──> WaitingInput.settle
        (or the timeout, or Stop: no answer, and the code's input() raises EOFError)
        InputAnswered ──> the front end shows what was answered (`••••` for getpass)
    executor run <── the answer, or None

A `getpass()` answer goes to the code and nowhere else: not into an event, the log, the
model's view of the run or the history (the runner masks it in later outputs, and leaves
variables that hold it out of saved workspaces).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bot.conversations.keys import ConversationKey
from bot.events import InputAnswered, InputRequested, TurnEvent
from executor import InputAsked, wire

log = logging.getLogger(__name__)

MASK = wire.MASKED
ANSWERED, TIMED_OUT, STOPPED = "answered", "timed out", "stopped"
NOT_WAITING = "That prompt has already been answered, or it is no longer waiting."
NOT_YOURS = "Only the person whose turn it is can answer the code's prompt."
ELSEWHERE = "That prompt waits in another conversation; it can only be answered there."
TOO_LONG = "That answer is too long (at most {limit:,} characters); the prompt still waits."
MAX_ANSWER_CHARS = wire.MAX_INPUT_CHARS

Emit = Callable[[TurnEvent], Awaitable[None] | None]


@dataclass(slots=True)
class WaitingInput:
    """A prompt of the running code, waiting for its answer."""

    conversation: ConversationKey
    person: str
    prompt: str
    password: bool
    answer: asyncio.Future[tuple[str, str] | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    """(the answer, who gave it), or None when none will come."""

    def settle(self, answer: tuple[str, str] | None) -> bool:
        """Record the first answer; False when one was recorded already."""
        if self.answer.done():
            return False
        self.answer.set_result(answer)
        return True


class InputAsker:
    """The input seam of one turn (`Turn.ask_input`)."""

    def __init__(
        self,
        waiting: dict[str, WaitingInput],
        key: ConversationKey,
        person: str,
        emit: Emit,
        stop: asyncio.Event,
        timeout_s: float,
        deadline: Callable[[], float | None] | None = None,
    ) -> None:
        self.waiting = waiting
        self.key = key
        self.person = person
        self.emit = emit
        self.stop = stop
        self.timeout_s = timeout_s
        self.deadline = deadline
        """When (time.monotonic) waiting must end so that the turn can still answer within
        its time budget (None: no limit)."""

    async def __call__(self, asked: InputAsked) -> str | None:
        timeout_s = self.timeout_s
        deadline = self.deadline() if self.deadline is not None else None
        if deadline is not None:
            timeout_s = max(0.0, min(timeout_s, deadline - time.monotonic()))
        key = secrets.token_hex(8)
        waiting = WaitingInput(self.key, self.person, asked.prompt, asked.password)
        self.waiting[key] = waiting
        event = InputRequested(key, asked.prompt, asked.password, self.person, timeout_s)
        try:
            await _call(self.emit, event)
            outcome = await self._wait(waiting, timeout_s)
        except asyncio.CancelledError:
            # The run ended around the wait (Stop, its end, the turn's budget).
            waiting.settle(None)
            await _call(self.emit, InputAnswered(key, STOPPED))
            raise
        finally:
            self.waiting.pop(key, None)
        if outcome is None:
            why = STOPPED if self.stop.is_set() else TIMED_OUT
            await _call(self.emit, InputAnswered(key, why))
            return None
        answer, by = outcome
        shown = MASK if asked.password else answer
        await _call(self.emit, InputAnswered(key, ANSWERED, shown, by))
        return answer

    async def _wait(self, waiting: WaitingInput, timeout_s: float) -> tuple[str, str] | None:
        stopped = asyncio.ensure_future(self.stop.wait())
        watched: set[asyncio.Future[Any]] = {waiting.answer, stopped}
        try:
            await asyncio.wait(watched, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopped
        waiting.settle(None)  # a late answer finds it settled
        return waiting.answer.result()


def asking_heading(event: InputRequested, who: str, wait: str) -> str:
    """The first line of a prompt's message: whom the code asks, for what, for how long
    (`wait`, as the platform phrases durations); the prompt follows it, quoted."""
    how = "a password (getpass)" if event.password else "input"
    hidden = " The answer is hidden: it goes to the code only." if event.password else ""
    return f"⌨️ The code asks {who} for {how}; press Answer (it waits {wait}).{hidden}"


def outcome_line(asked: InputRequested, event: InputAnswered, who: str) -> str:
    """What became of a prompt; `who` names the person who answered. An answer to
    `input()` follows this line, quoted by the platform; a getpass() one never does."""
    how = "getpass()" if asked.password else "input()"
    if event.outcome == ANSWERED:
        return f"⌨️ {who} answered: {MASK}" if asked.password else f"⌨️ {who} answered:"
    if event.outcome == TIMED_OUT:
        return f"⌛ Nobody answered in time; the code's {how} got no answer (EOFError)."
    return f"⏹️ The run ended before an answer came to the code's {how}."


def answer_label(password: bool, prompt: str, limit: int) -> str:
    """The label of the box the answer is typed in: the code's prompt where it fits in
    `limit` characters (a platform's), else what is asked."""
    prompt = " ".join(prompt.split()).removesuffix(":").strip()
    if 0 < len(prompt) <= limit:
        return prompt
    return "Password (goes to the code only)" if password else "Your answer"


def answered_text(asked: InputRequested, event: InputAnswered, who: str) -> str:
    """What became of a prompt, in one plain line (the console's, right below the prompt)."""
    line = outcome_line(asked, event, who)
    if event.outcome == ANSWERED and not asked.password:
        line = f"{line} {event.shown}"
    return line


async def _call(emit: Emit, event: TurnEvent) -> None:
    returned = emit(event)
    if inspect.isawaitable(returned):
        await returned
