"""A turn's events folded into what a chat message shows, and edits paced to a rate.

Chat platforms cannot take an edit per output line, so front ends keep one `TurnView`, let
each event update it, and ask a `Pacer` to redraw at most once per interval; the last state
is always drawn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from bot.agent.detach import QUEUED_BEHIND
from bot.events import (
    Answer,
    AnswerDelta,
    ApprovalDecided,
    ApprovalRequested,
    ArtifactsPublished,
    CodeStarted,
    ExecutionFinished,
    Failure,
    Notice,
    OutputChunk,
    RunDetached,
    Thinking,
    TurnEvent,
)
from bot.platforms.markup import head
from bot.text import human_size, run_status
from executor import Status
from storage.artifacts import Artifact

log = logging.getLogger(__name__)

OUTPUT_KEPT = 1_000_000
"""Characters of output kept per run for the attached output file; the rest is counted."""
WORKING = "Working on it…"
"""The progress message of a turn that has just started."""
DONE = "Done."
"""The answer of a turn whose model said nothing (a direct run says nothing: its run report
is the answer)."""
NO_ANSWER = "The turn ended without an answer."
WAITING_BEHIND = (
    "⏳ waiting for the run in the background here to end (Stop on its message ends it "
    "sooner). Run beside runs this code now instead, in a second kernel: with the "
    "conversation's files, not its variables."
)
"""A run's line while its code waits for the conversation's run in the background."""

DoingKind = Literal["thinking", "writing", "approval"]


@dataclass(frozen=True, slots=True)
class Doing:
    """What a turn is doing now, in words; front ends put their own mark before it."""

    kind: DoingKind
    text: str


@dataclass(frozen=True, slots=True)
class Ending:
    """The last words of an answer: the model's answer (or `DONE`), or why the turn failed."""

    text: str
    failed: bool = False


@dataclass(slots=True)
class RunView:
    code: str
    language: str = "python"
    output: list[str] = field(default_factory=list)
    output_size: int = 0
    dropped: int = 0
    status: Status | None = None
    duration_ms: int = 0
    message: str = ""
    started: float = field(default_factory=time.monotonic)
    detached: bool = False
    """It went on in the background: its end is shown in a message of its own."""
    waiting: bool = False
    """Its code waits for the conversation's run in the background (Run beside is offered)."""

    @property
    def text(self) -> str:
        shown = "".join(self.output)
        if self.dropped:
            shown += f"\n… {self.dropped:,} more characters of output were not kept"
        return shown

    def add(self, text: str) -> None:
        room = OUTPUT_KEPT - self.output_size
        if room <= 0:
            self.dropped += len(text)
            return
        self.output.append(text[:room])
        self.output_size += min(len(text), room)
        self.dropped += max(0, len(text) - room)

    def stop_waiting(self) -> None:
        """Its code no longer waits: it runs (beside the run in the background, or after it)."""
        if self.waiting:
            self.waiting = False
            self.started = time.monotonic()

    def summary(self) -> str:
        if self.detached:
            return "⏩ went on in the background"
        if self.waiting:
            return WAITING_BEHIND
        if self.status is None:
            return f"⏳ running for {time.monotonic() - self.started:.0f} s"
        return run_status(self.status, self.duration_ms, self.message)


@dataclass(slots=True)
class TurnView:
    """Everything a front end shows about one turn, updated event by event."""

    step: int = 0
    runs: list[RunView] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    answer: str | None = None
    failure: str | None = None
    draft: str = ""
    """The model's reply so far, while it is being written (streaming); cleared when the
    model is asked again or runs code, and no longer shown once the answer is there."""
    awaiting_approval: bool = False
    """The model's code waits for a person's Run, Edit or Cancel (shown in its own message)."""

    @property
    def done(self) -> bool:
        return self.answer is not None or self.failure is not None

    @property
    def current(self) -> RunView | None:
        return self.runs[-1] if self.runs else None

    @property
    def waiting(self) -> bool:
        """The turn's code waits for the conversation's run in the background."""
        run = self.current
        return run is not None and run.waiting and not self.done

    def doing(self) -> Doing | None:
        """What the turn is doing while no run is going on (None once it is done): waiting
        for a person's approval, writing its answer (`draft`), or thinking."""
        if self.done:
            return None
        if self.awaiting_approval:
            return Doing(
                "approval", "Waiting for someone to Run, Edit or Cancel the model's code (below)…"
            )
        if self.draft.strip():
            return Doing("writing", "Writing…")
        return Doing("thinking", f"Thinking{f' (step {self.step})' if self.step > 1 else ''}…")

    def ending(self) -> Ending | None:
        """How the answer ends; None for a direct run that succeeded (its empty answer: its
        run report is the whole answer)."""
        if self.answer is None:
            return Ending(self.failure or NO_ANSWER, failed=True)
        if self.answer.strip() or not self.runs:
            return Ending(self.answer.strip() or DONE)
        return None

    def apply(self, event: TurnEvent) -> None:
        if isinstance(event, Thinking):
            self.step = event.step
            self.draft = ""
        elif isinstance(event, AnswerDelta):
            self.draft = event.text
        elif isinstance(event, ApprovalRequested | ApprovalDecided):
            self.awaiting_approval = isinstance(event, ApprovalRequested)
        elif isinstance(event, CodeStarted):
            self.draft = ""
            self.runs.append(RunView(event.code, event.language))
        elif isinstance(event, OutputChunk) and self.current is not None:
            self.current.stop_waiting()
            self.current.add(output_text(event))
        elif isinstance(event, ExecutionFinished) and self.current is not None:
            self.current.waiting = False
            self.current.status = event.status
            self.current.duration_ms = event.duration_ms
            self.current.message = event.message
            if event.session_restarted and event.workspace:
                self.notices.append(
                    f"The session was restarted: this run had a new Python. {event.workspace}"
                )
            elif event.session_restarted:
                self.notices.append(
                    "The session was restarted: this run had a new Python, without the "
                    "earlier variables or the files in /mnt/data."
                )
            elif event.workspace:
                self.notices.append(event.workspace)
        elif isinstance(event, RunDetached):
            if self.current is not None:
                self.current.waiting = False
                self.current.detached = True
            self.notices.append(event.text)
        elif isinstance(event, ArtifactsPublished):
            self.artifacts.extend(event.artifacts)
        elif isinstance(event, Notice):
            if event.text == QUEUED_BEHIND and self.current is not None:
                self.current.waiting = True
            self.notices.append(event.text)
        elif isinstance(event, Answer):
            self.answer = event.text
        elif isinstance(event, Failure):
            self.failure = event.message


def status_line(view: TurnView, marks: Mapping[str, str], draft: Callable[[str], str]) -> str:
    """The line saying what the turn is doing, with the platform's mark ('' once done); while
    the model writes, after its answer so far (shown by `draft`: the final answer message
    replaces it)."""
    doing = view.doing()
    if doing is None:
        return ""
    line = f"{marks[doing.kind]} {doing.text}"
    if doing.kind == "writing":
        return f"{draft(view.draft.strip())}\n\n{line}"
    return line


def fit_progress(
    draw: Callable[[int, int], str], code_room: int, output_room: int, limit: int, cut: int
) -> str:
    """A progress message drawn by `draw(code_room, output_room)` in at most `limit`
    characters: escapes can make shown text longer than its source, so code and output are
    shown shorter until it fits; then only the status line is left to shorten (it is
    capped, but be sure), to `cut` characters."""
    while True:
        text = draw(code_room, output_room)
        if len(text) <= limit:
            return text
        if not code_room and not output_room:
            return head(text, cut)
        code_room, output_room = code_room // 2, output_room // 2


def output_text(chunk: OutputChunk) -> str:
    """One output event as the text a chat shows (charts become a placeholder line)."""
    event = chunk.output
    if event.kind in ("stdout", "stderr"):
        return event.text
    if event.kind == "result" and event.result is not None:
        if event.result.image_types:
            return f"[chart: {event.result.image_types[0]}]\n"
        if event.result.text:
            prefix = "Out: " if event.result.is_main_result else ""
            return f"{prefix}{event.result.text}\n"
        return ""
    if event.kind == "error" and event.error is not None:
        error = event.error
        return ("\n".join(error.traceback) or f"{error.name}: {error.value}") + "\n"
    return ""


def extra_files(view: TurnView, code_shown: int, output_shown: int) -> list[tuple[str, bytes]]:
    """Code and output that a progress message could not show in full, as files."""
    extras: list[tuple[str, bytes]] = []
    codes = [run.code for run in view.runs]
    if len(codes) > 1 or any(len(code) > code_shown for code in codes):
        joined = "\n\n".join(f"# ── run {i} ──\n{code}" for i, code in enumerate(codes, 1))
        extras.append(("code.py", (joined if len(codes) > 1 else codes[0]).encode()))
    outputs = [run.text for run in view.runs]
    if any(len(output) > output_shown for output in outputs):
        joined = "\n\n".join(
            f"── run {i} ──\n{output}" if len(outputs) > 1 else output
            for i, output in enumerate(outputs, 1)
        )
        extras.append(("output.txt", joined.encode("utf-8", "replace")))
    return extras


def shown_artifacts(view: TurnView, limit: int) -> tuple[list[Artifact], str]:
    """The charts and files one answer shows (at most `limit`: a run can make thousands, and
    each costs a message or an upload), and a note counting the others ('' when none)."""
    limit = max(0, limit)
    hidden = len(view.artifacts) - limit
    if hidden <= 0:
        return list(view.artifacts), ""
    what = "chart or file was" if hidden == 1 else "charts and files were"
    return view.artifacts[:limit], (
        f"{hidden:,} more {what} not shown (at most {limit} per answer)."
    )


NOTICE_MIN_ROOM = 120
"""A notice is never cut shorter than this while room is left: past it, the rest are counted."""


def fit_notices(notices: Sequence[str], limit: int, render: Callable[[str], str]) -> list[str]:
    """The answer's notices as lines drawn by `render` (escaped, with their mark), at most
    `limit` characters in all with the newlines between them, so that they take one
    message at most: each notice gets a fair share of the room (a long one is cut, saying
    how long it was), and notices past the room are counted in a last line."""
    lines: list[str] = []
    used = 0
    for index, notice in enumerate(notices):
        left = len(notices) - index
        reserve = len(render(_more_notices(left))) + 1 if left > 1 else 0
        room = limit - used - reserve - 1
        share = max(room // left, NOTICE_MIN_ROOM)
        if room < NOTICE_MIN_ROOM:
            lines.append(render(_more_notices(left)))
            return lines
        line = _fitted(notice, min(room, share), render)
        lines.append(line)
        used += len(line) + 1
    return lines


def _more_notices(count: int) -> str:
    return f"{count:,} more notice{'s were' if count > 1 else ' was'} not shown."


def _fitted(notice: str, room: int, render: Callable[[str], str]) -> str:
    """`notice` drawn by `render` in at most `room` characters, cut where needed."""
    # Drawing never makes text shorter, so no more than `room` characters need drawing (some
    # escapes take time that grows faster than the text).
    drawn = render(notice[: room + 1])
    if len(notice) <= room and len(drawn) <= room:
        return drawn

    def cut(keep: int) -> str:
        return render(f"{notice[:keep]}… ({len(notice) - keep:,} more characters)")

    low, high = 0, min(len(notice), room)  # drawing never makes text shorter
    while low < high:
        middle = (low + high + 1) // 2
        if len(cut(middle)) <= room:
            low = middle
        else:
            high = middle - 1
    return cut(low)


def link_line(artifact: Artifact, linked: str) -> str:
    """A line for an artifact that is not attached: `linked` formats one with a link."""
    size = human_size(artifact.size)
    if artifact.link:
        return linked.format(name=artifact.name, link=artifact.link, size=size)
    return f"📎 {artifact.name} ({size}): not available ({artifact.reason or artifact.status})"


class Pacer:
    """Calls `draw` at most once per `interval` while poked, until `finish`."""

    def __init__(self, draw: Callable[[], Awaitable[None]], interval: float = 1.0) -> None:
        self._draw = draw
        self._interval = interval
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = asyncio.Event()
        self._last = 0.0

    def poke(self) -> None:
        if self._closing:
            return
        self._dirty.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def finish(self) -> None:
        """Stop pacing, letting a draw in flight complete; the caller draws the final state."""
        self._closing = True
        self._closed.set()
        self._dirty.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            await self._dirty.wait()
            wait = self._last + self._interval - time.monotonic()
            if wait > 0 and not self._closing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closed.wait(), wait)
            if self._closing:
                return
            self._dirty.clear()
            self._last = time.monotonic()
            await self._safe_draw()

    async def _safe_draw(self) -> None:
        # A failed progress edit must not end the turn; the final answer is sent separately.
        try:
            await self._draw()
        except Exception:
            log.warning("progress update failed", exc_info=True)
