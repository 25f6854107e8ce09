"""The console's reply to one turn: its events printed as they happen (the code being run,
its output as it streams, a spinner while the model thinks, the answer as it is written).

Everything printed passes `bot.terminal`: sandboxed code (and a model it may have steered)
chooses the output, code, answers and file names shown here.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TextIO

from bot.agent.detach import FOR_PERSON, QUEUED_BEHIND
from bot.conversations.approval import outcome
from bot.conversations.input_prompts import answered_text
from bot.events import (
    Answer,
    AnswerDelta,
    ApprovalDecided,
    ApprovalRequested,
    ArtifactsPublished,
    CodeStarted,
    ExecutionFinished,
    Failure,
    InputAnswered,
    InputRequested,
    Notice,
    OutputChunk,
    RunDetached,
    Thinking,
    TurnEvent,
)
from bot.terminal import TerminalText, clean, show_name
from bot.text import human_size, run_status

HINT_AFTER_S = 3.0
"""How long code runs before the console says how to stop it or keep it running."""
WAITS_BEHIND = (
    "This code waits for the run in the background to end. Type /beside to run it now "
    "instead, in a second kernel: with the conversation's files, not its variables."
)
"""The console's words for code that waits for the run in the background (a terminal)."""
WAITS_BEHIND_PIPED = (
    "This code waits for the run in the background to end (/run --beside CODE runs code "
    "beside it instead, in a second kernel: with the conversation's files, not its variables)."
)
"""The same, where lines are read only between turns (a pipe): /beside cannot be typed."""
WENT_ON = (
    "⏳ This run goes on in the background (up to {minutes} in all): its output is printed "
    "here as it comes, then a line saying it ended. The chat goes on meanwhile; code run here "
    "waits for it (or runs beside it, with /run --beside CODE)."
)
"""The console's words for a run that went on in the background (`detach.FOR_PERSON`)."""


def console_words(notice: str, interactive: bool) -> str:
    """A notice of the conversation layer as the console says it: without the buttons and
    mentions of the chat platforms."""
    if notice == QUEUED_BEHIND:
        return WAITS_BEHIND if interactive else WAITS_BEHIND_PIPED
    before, _, after = FOR_PERSON.partition("{minutes}")
    if notice.startswith(before) and notice.endswith(after) and len(notice) > len(before + after):
        return WENT_ON.format(minutes=notice[len(before) : len(notice) - len(after)])
    return notice


class Renderer:
    """Prints a turn's events as they happen.

    Everything printed passes `bot.terminal`: sandboxed code (and a model it may have
    steered) chooses the output, code, answers and file names shown here. Each output stream
    is cleaned as one text across its chunks, so a sequence split between two chunks is
    removed too.
    """

    def __init__(self, out: TextIO, interactive: bool) -> None:
        self.out = out
        self.interactive = interactive
        self.stop_key: str | None = None
        self.approve: Callable[[ApprovalRequested], Awaitable[None]] | None = None
        """Asks whether code the model wrote may run (the place's policy is approve)."""
        self._asked: dict[str, ApprovalRequested] = {}
        self.answer_input: Callable[[InputRequested], Awaitable[None]] | None = None
        """Asks in the terminal when the running code calls `input()` or `getpass()`."""
        self._prompts: dict[str, InputRequested] = {}
        self.hint = ""
        """Said once a run has gone on for `hint_after_s` (how to stop it, or keep it
        running); nothing when empty."""
        self.hint_after_s = HINT_AFTER_S
        self.waiting_hint = ""
        """Said instead of `hint` while the code waits for the run in the background."""
        self.running = False
        """Code is running now (from its start to its end, or to the background)."""
        self.waiting = False
        """The code waits for the run in the background (until it runs, beside it or after)."""
        self._at_line_start = True
        self._spinner: asyncio.Task[None] | None = None
        self._hinting: asyncio.Task[None] | None = None
        self._streams = {"stdout": TerminalText(), "stderr": TerminalText()}
        self._answer = TerminalText()
        self._drafted = ""

    async def queued(self, stop: str, text: str) -> None:
        self.stop_key = stop
        self._line(text)

    async def start(self, stop: str) -> None:
        self.stop_key = stop

    async def finish(self, rerun: str | None, notices: Sequence[str]) -> None:
        self._stop_spinner()
        self._ran()
        for notice in notices:
            self._line(f"note: {console_words(notice, self.interactive)}")
        self.out.flush()

    async def refused(self, text: str) -> None:
        self._line(f"✗ {text}")

    async def failed(self, text: str) -> None:
        self._ran()
        self._line(f"✗ {text}")

    def __call__(self, event: TurnEvent) -> Awaitable[None] | None:
        if isinstance(event, ApprovalRequested | InputRequested):
            self._quiet()  # the person is asked something: no hint over the question
        if isinstance(event, ApprovalRequested) and self.approve is not None:
            self._stop_spinner()
            self._asked[event.key] = event
            return self.approve(event)
        if isinstance(event, InputRequested) and self.answer_input is not None:
            self._stop_spinner()
            if not self._at_line_start:
                self._write("\n")
            self._prompts[event.key] = event
            return self.answer_input(event)
        if isinstance(event, InputAnswered):
            prompt = self._prompts.pop(event.key, None)
            if prompt is not None:
                self._line(answered_text(prompt, event, "you"))
            return None
        if isinstance(event, ApprovalDecided):
            asked = self._asked.pop(event.key, None)
            self._line(outcome(event, "you", restore_only=asked is not None and not asked.code))
            return None
        self._stop_spinner()
        if not isinstance(event, AnswerDelta | Answer):
            self._end_draft()
        if isinstance(event, AnswerDelta):
            self._draft(event.text)
        elif isinstance(event, Thinking):
            if self.interactive:
                self._spinner = asyncio.get_running_loop().create_task(self._spin(event.step))
        elif isinstance(event, CodeStarted):
            self._end_streams()
            self._line("── running ─────────────────────────")
            self._write(event.code if event.code.endswith("\n") else event.code + "\n")
            self._line("── output ──────────────────────────")
            self.running = True
            if self.hint and self.interactive:
                self._quiet()
                self._hinting = asyncio.get_running_loop().create_task(self._hint_later())
        elif isinstance(event, OutputChunk):
            self.waiting = False
            self._output(event)
        elif isinstance(event, ExecutionFinished):
            self._ran()
            self._end_streams()
            self._line(run_status(event.status, event.duration_ms, event.message, chat=False))
        elif isinstance(event, RunDetached):
            self._ran()
            self._end_streams()
            self._line("⏩ went on in the background")
            self._line(f"note: {console_words(event.text, self.interactive)}")
        elif isinstance(event, ArtifactsPublished):
            for item in event.artifacts:
                where = item.link if item.status == "published" else f"not uploaded ({item.reason})"
                self._line(f"📎 {show_name(item.name)} ({human_size(item.size)}): {where}")
        elif isinstance(event, Notice):
            self.waiting = self.waiting or event.text == QUEUED_BEHIND
            self._line(f"note: {console_words(event.text, self.interactive)}")
        elif isinstance(event, Answer):
            if self._drafted and event.text.startswith(self._drafted):
                self._draft(event.text)
            else:
                self._end_draft()
                if event.text:
                    self._line(event.text)
            self._end_draft()
        elif isinstance(event, Failure):
            self._line(f"✗ {event.message}")
        self.out.flush()
        return None

    async def _spin(self, step: int) -> None:
        """A spinner on its own line while the model thinks; erased by the next event."""
        frames = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
        if not self._at_line_start:
            self._write("\n")
        started = time.monotonic()
        for tick in itertools.count():
            waited = time.monotonic() - started
            self.out.write(f"\r{frames[tick % len(frames)]} thinking (step {step}) {waited:.0f} s")
            self.out.flush()
            await asyncio.sleep(0.1)

    async def _hint_later(self) -> None:
        await asyncio.sleep(self.hint_after_s)
        self._hinting = None
        self._line(self.waiting_hint if self.waiting and self.waiting_hint else self.hint)
        self.out.flush()

    def _ran(self) -> None:
        """The run ended, or went to the background."""
        self.running = False
        self.waiting = False
        self._quiet()

    def _quiet(self) -> None:
        if self._hinting is not None:
            self._hinting.cancel()
            self._hinting = None

    def _stop_spinner(self) -> None:
        if self._spinner is not None:
            self._spinner.cancel()
            self._spinner = None
            self.out.write("\r\x1b[K")

    def _output(self, chunk: OutputChunk) -> None:
        event = chunk.output
        if event.kind in ("stdout", "stderr"):
            self._show(self._streams[event.kind].feed(event.text))
        elif event.kind == "result" and event.result is not None:
            if event.result.image_types:
                self._line(f"[{show_name(event.result.image_types[0])} chart]")
            elif event.result.text:
                self._line(("Out: " if event.result.is_main_result else "") + event.result.text)
        elif event.kind == "error" and event.error is not None:
            self._line(
                "\n".join(event.error.traceback) or f"{event.error.name}: {event.error.value}"
            )

    def _draft(self, text: str) -> None:
        """The answer as the model writes it: only what is new since the last part."""
        if not text.startswith(self._drafted):
            self._end_draft()
        if not self._drafted and not self._at_line_start:
            self._show("\n")
        self._show(self._answer.feed(text[len(self._drafted) :]))
        self._drafted = text

    def _end_draft(self) -> None:
        if self._drafted:
            self._show(self._answer.finish())
            if not self._at_line_start:
                self._show("\n")
        self._drafted = ""

    def _end_streams(self) -> None:
        for stream in self._streams.values():
            self._show(stream.finish())

    def _write(self, text: str) -> None:
        self._show(clean(text))

    def _show(self, shown: str) -> None:
        """Write text that is already clean."""
        if shown:
            self.out.write(shown)
            self._at_line_start = shown.endswith("\n")

    def _line(self, text: str) -> None:
        if not self._at_line_start:
            self.out.write("\n")
        self._write(text + "\n")
