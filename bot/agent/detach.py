"""Runs that outlast their turn: what the agent hands to the conversation layer when a run
goes to the background (at its foreground limit, on Keep running, or `/run --background`),
and where its output goes meanwhile.

The run itself never stops for this: its clock's limit is raised to the background limit,
its output is held while it changes hands, then goes to the background run's own reply.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from bot.events import OutputChunk, TurnEvent
from executor import ExecutionResult, OutputEvent, RunClock
from storage.artifacts import Artifact

Emit = Callable[[TurnEvent], Awaitable[None] | None]

FOR_MODEL = (
    "The code is still running: it went on in the background, where it may run for up to "
    "{minutes} in all. Its output will be posted in the conversation when it ends, and the "
    "user will be mentioned then. Tell the user this in one or two sentences; do not wait "
    "for it and do not run it again. Code you run now waits until it has ended."
)
FOR_PERSON = (
    "⏳ This run goes on in the background (up to {minutes} in all): its output follows in a "
    "message of its own here, and you will be mentioned when it ends. The conversation can "
    "go on meanwhile; code run here waits for it."
)
QUEUED_BEHIND = (
    "This code waits for the background run in this conversation to end (Stop on the "
    "background run's message ends it sooner). Run beside runs it now instead, in a second "
    "kernel: with the conversation's files, not its variables."
)


class OutputSink:
    """Where a run's output goes: the turn's reply, then (once the run is detached) held,
    then the background run's reply, in order."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self._held: list[OutputEvent] | None = None

    async def __call__(self, event: OutputEvent) -> None:
        if self._held is not None:
            self._held.append(event)
            return
        await call(self.emit, OutputChunk(event))

    def hold(self) -> None:
        if self._held is None:
            self._held = []

    async def send_to(self, emit: Emit) -> None:
        """From now on, output goes to `emit`, starting with what was held."""
        self.emit = emit
        while self._held:
            await call(emit, OutputChunk(self._held.pop(0)))
        self._held = None


@dataclass(eq=False, slots=True)
class DetachedRun:
    """A run that went on without its turn."""

    conversation: str
    code: str
    task: asyncio.Task[ExecutionResult]
    sink: OutputSink
    clock: RunClock
    stop: asyncio.Event
    finish: Callable[[ExecutionResult, Emit], Awaitable[tuple[ExecutionResult, list[Artifact]]]]
    """Reports the ended run (its status, then its published files) to an emit."""
    run_id: str = ""
    """Its name in the session (executor `Session.keep`, `Session.follow`)."""
    started: float = field(default_factory=time.monotonic)


class Background(Protocol):
    """The conversation layer's side: whether a run may go on without its turn, and taking
    it when it does."""

    max_s: float
    """The longest a run may take in all once it is in the background."""
    keep_running: asyncio.Event
    """Set when a person asked for the turn's run to go to the background."""

    def refusal(self) -> str | None:
        """Why a run may not go to the background now (the person's quota); None: it may."""

    def busy(self) -> bool:
        """Whether a background run holds the conversation's session."""

    async def take(self, run: DetachedRun) -> None:
        """The run is the conversation layer's from now on."""


def minutes(seconds: float) -> str:
    whole = round(seconds / 60)
    return f"{whole} min" if whole >= 1 else f"{seconds:g} s"


async def call(emit: Emit, event: TurnEvent) -> None:
    """Give `event` to `emit`, awaiting it when it returns an awaitable."""
    returned = emit(event)
    if returned is not None:
        await returned
