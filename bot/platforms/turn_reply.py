"""One turn's reply, the same on every chat platform (the conversation service's `Reply`).

    queued?  a progress message with a Stop control ("⏳ Waiting for …")
    start    the progress message says the turn began ("⏳ Working on it…")
    behind?  while the turn's code waits for the conversation's run in the background, the
             progress message says so and offers Run beside too (until the code runs)
    events   folded into a `TurnView`; the progress message redrawn at most once per
             interval; code waiting for approval, and the code's `input()` prompts, get a
             message of their own, edited once decided or answered
    finish   the last progress state and the answer (the platform's `answer`)
    refused  instead: why the turn did not start (on the progress message, or to the asker)
    failed   instead: what broke

A platform's reply is a `TurnReply` that supplies only its API calls: posting and editing a
message with its controls (Stop, Run beside, Re-run), the approval messages, a note only the
asker sees, and the answer with its files.
"""

from __future__ import annotations

import logging
import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from bot.events import (
    ApprovalDecided,
    ApprovalRequested,
    InputAnswered,
    InputRequested,
    TurnEvent,
)
from bot.platforms.progress import WORKING, Pacer, TurnView

log = logging.getLogger(__name__)

Message = TypeVar("Message")
"""What a platform returns for a posted message, and takes to edit it."""

_RUNNING: weakref.WeakValueDictionary[str, TurnReply[Any]] = weakref.WeakValueDictionary()
"""The replies of the turns running now, by their Stop key (for `ran_beside`)."""


def ran_beside(stop_key: str) -> None:
    """Run beside was pressed, and done, for the turn `stop_key`: its reply no longer says
    that its code waits, nor offers Run beside."""
    reply = _RUNNING.get(stop_key)
    run = None if reply is None else reply.view.current
    if reply is not None and run is not None and run.waiting:
        run.stop_waiting()
        reply.pacer.poke()


class TurnReply(ABC, Generic[Message]):
    marks: ClassVar[Mapping[str, str]]
    """The platform's mark for "waiting" and "failed" (see the render modules)."""
    api_error: ClassVar[type[Exception]] = Exception
    """What the platform's API raises; an approval message that cannot be updated is
    logged, not fatal."""

    def __init__(self, interval: float) -> None:
        self.view = TurnView()
        self.progress: Message | None = None
        self.stop_key: str | None = None
        """The key of the progress message's controls, while the turn runs."""
        self.pacer = Pacer(self._draw, interval)
        self.approvals: dict[str, tuple[ApprovalRequested, Message]] = {}
        """Approval messages by key, with what they asked."""
        self.prompts: dict[str, tuple[InputRequested, Message]] = {}
        """The code's prompt messages by key, with what they asked."""

    # ── what each platform supplies ──────────────────────────────────────

    @abstractmethod
    def controls(self, kind: str, key: str) -> Any:
        """The platform's controls for a turn, named by `key`: "stop" (a running turn),
        "beside" (a running turn whose code waits for the run in the background: Stop and
        Run beside) or "rerun" (a finished direct run)."""

    @abstractmethod
    def progress_text(self) -> str:
        """The progress message for the current state of `view` ('' when it shows nothing)."""

    @abstractmethod
    async def post(self, text: str, controls: Any = None) -> Message:
        """Post the progress message with its controls."""

    @abstractmethod
    async def edit(self, message: Message, text: str, controls: Any = None) -> Message:
        """Change a posted message's text and controls (None: no controls)."""

    @abstractmethod
    async def say(self, text: str) -> None:
        """A plain message in the conversation."""

    @abstractmethod
    async def tell(self, text: str) -> None:
        """A message for the asker only, where the platform allows it."""

    @abstractmethod
    async def ask(self, event: ApprovalRequested) -> Message:
        """Post the message that asks for approval, with its Run, Edit and Cancel controls."""

    @abstractmethod
    async def decided(
        self, message: Message, asked: ApprovalRequested, event: ApprovalDecided
    ) -> None:
        """Turn the approval message into what became of the code (no controls)."""

    @abstractmethod
    async def ask_input(self, event: InputRequested) -> Message:
        """Post the code's prompt for the person whose turn it is, with its Answer control."""

    @abstractmethod
    async def input_answered(
        self, message: Message, asked: InputRequested, event: InputAnswered
    ) -> None:
        """Turn the prompt message into what became of it (no controls)."""

    @abstractmethod
    async def answer(self, rerun: Any) -> None:
        """The last progress state (with `rerun`, the Re-run control, or None) and the
        answer; exactly one answer, whatever fails."""

    # ── the lifecycle ────────────────────────────────────────────────────

    async def queued(self, stop: str, text: str) -> None:
        self._running(stop)
        await self._show(f"{self.marks['waiting']} {text}")

    async def start(self, stop: str) -> None:
        self._running(stop)
        await self._show(f"{self.marks['waiting']} {WORKING}")

    def _running(self, stop: str) -> None:
        self.stop_key = stop
        _RUNNING[stop] = self

    def _ended(self) -> None:
        if self.stop_key is not None and _RUNNING.get(self.stop_key) is self:
            del _RUNNING[self.stop_key]
        self.stop_key = None

    def _controls(self) -> Any:
        """The progress message's controls now (None once the turn is over)."""
        if self.stop_key is None:
            return None
        return self.controls("beside" if self.view.waiting else "stop", self.stop_key)

    async def _show(self, text: str) -> None:
        if self.progress is None:
            self.progress = await self.post(text, self._controls())
        else:
            self.progress = await self.edit(self.progress, text, self._controls())

    def __call__(self, event: TurnEvent) -> Awaitable[None] | None:
        self.view.apply(event)
        self.pacer.poke()
        if isinstance(event, ApprovalRequested):
            return self._ask(event)
        if isinstance(event, ApprovalDecided):
            return self._decided(event)
        if isinstance(event, InputRequested):
            return self._ask_input(event)
        if isinstance(event, InputAnswered):
            return self._input_answered(event)
        return None

    async def _ask_input(self, event: InputRequested) -> None:
        self.prompts[event.key] = (event, await self.ask_input(event))

    async def _input_answered(self, event: InputAnswered) -> None:
        found = self.prompts.pop(event.key, None)
        if found is None:
            return
        asked, message = found
        try:
            await self.input_answered(message, asked, event)
        except self.api_error:
            log.warning("could not update the prompt message", exc_info=True)

    async def _ask(self, event: ApprovalRequested) -> None:
        self.approvals[event.key] = (event, await self.ask(event))

    async def _decided(self, event: ApprovalDecided) -> None:
        found = self.approvals.pop(event.key, None)
        if found is None:
            return
        asked, message = found
        try:
            await self.decided(message, asked, event)
        except self.api_error:
            log.warning("could not update the approval message", exc_info=True)

    async def _draw(self) -> None:
        if self.view.done or self.progress is None:
            return
        text = self.progress_text()
        if text:
            self.progress = await self.edit(self.progress, text, self._controls())

    async def finish(self, rerun: str | None, notices: Sequence[str]) -> None:
        await self.pacer.finish()
        self._ended()
        self.view.notices.extend(notices)
        await self.answer(None if rerun is None else self.controls("rerun", rerun))

    async def refused(self, text: str) -> None:
        self._ended()
        if self.progress is not None:
            await self.edit(self.progress, text, None)
        else:
            await self.tell(text)

    async def failed(self, text: str) -> None:
        self._ended()
        await self.say(f"{self.marks['failed']} {text}")
