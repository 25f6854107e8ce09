"""The model's words streamed into Slack as they are written (`chat.startStream`,
`chat.appendStream`, `chat.stopStream`), with the paced progress message as the fallback.

A turn still has its progress message: it carries the Stop control while the turn runs, the
code and its output as they change (edited in place, which a stream cannot do: streamed text
only grows, and a streaming message takes no buttons until it is stopped), and the run
report with Re-run at the end. What streams is the model's words: each step of the model
that writes gets a message of its own, started at its first words (so they show at once)
and appended to at most every `APPEND_INTERVAL_S`; the step's end stops it. The answer's
notices, and files that could not be attached, go in the final message's blocks (which
`chat.stopStream` renders at its bottom). A model turn whose progress message showed no code
loses that message at the end: the streamed answer is the turn's answer.

Streaming is skipped, and the progress message shows the words as before, when it is off
(`CELLMATE_SLACK_STREAM`), when the thread has no parent message, when a tier's budget is
spent, and when Slack refuses: the workspace lacks the methods (`unknown_method`, and the
like: streaming stays off until restart), a 429, a stream Slack ended
(`message_not_in_streaming_state`, `stopped_by_user`), or words past the 12,000 characters
of markdown a message takes. A stream that broke after it started is stopped and its message
rewritten with the whole answer (`chat.update`, further parts posted after it), so the final
message is complete either way.

Rate tiers: `chat.startStream` and `chat.stopStream` are Tier 2 (20+ a minute per workspace),
`chat.appendStream` Tier 4 (100+); the budgets below are shared by every turn of the app,
and the calls that may be skipped (starting a stream, one append) never wait out a 429.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.events import (
    Answer,
    AnswerDelta,
    ApprovalRequested,
    CodeStarted,
    InputRequested,
    Thinking,
    TurnEvent,
)
from bot.platforms.markup import split_message
from bot.platforms.on_slack.assistant import (
    APPROVAL,
    INPUT,
    RUNNING,
    THINKING,
    WRITING,
    ThreadStatus,
)
from bot.platforms.on_slack.mrkdwn import escape, to_mrkdwn
from bot.platforms.on_slack.render import (
    MARKS,
    MESSAGE_LIMIT,
    blocks,
    file_lines,
    notice_lines,
    progress_text,
)
from bot.platforms.on_slack.reply import SlackReply, SlackThread
from bot.platforms.progress import DONE, Pacer

log = logging.getLogger(__name__)

MARKDOWN_LIMIT = 12_000
"""Characters of markdown one streamed message takes."""
APPEND_INTERVAL_S = 0.4
"""One stream's appends are at least this far apart (its first words go at once)."""
START_PER_MINUTE, START_BURST = 20, 5
APPEND_PER_MINUTE, APPEND_BURST = 100, 20
UNSUPPORTED = frozenset(
    {
        "unknown_method",
        "method_deprecated",
        "deprecated_endpoint",
        "not_allowed_token_type",
        "missing_scope",
        "no_permission",
    }
)
"""Errors that say the workspace (or the app's token) cannot stream at all."""
SLACK_TOKENS = ("<!", "<@", "<#")
ZERO_WIDTH = "\u200b"


class Budget:
    """A rate tier's calls: `per_minute` on average, `burst` at once; none at all until a
    429's Retry-After has passed."""

    def __init__(self, per_minute: int, burst: int) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self.tokens = float(burst)
        self.at = time.monotonic()
        self.held_until = 0.0

    def take(self) -> bool:
        now = time.monotonic()
        if now < self.held_until:
            return False
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def hold(self, seconds: float) -> None:
        self.held_until = max(self.held_until, time.monotonic() + seconds)


class Streams:
    """What every turn's streams share: a client that does not wait out rate limits (a
    stream that cannot start falls back at once), the tiers' budgets, and whether the
    workspace streams at all."""

    def __init__(self, client: AsyncWebClient, enabled: bool = True) -> None:
        self.client = AsyncWebClient(token=client.token, base_url=client.base_url)
        self.patient = client
        """The app's client, which waits out a 429 (for the stop that ends a stream)."""
        self.enabled = enabled
        self.starts = Budget(START_PER_MINUTE, START_BURST)
        self.appends = Budget(APPEND_PER_MINUTE, APPEND_BURST)

    def refused(self, exc: SlackApiError, budget: Budget) -> str:
        """Slack's error, noted: a 429 holds the budget; an unsupported method turns
        streaming off."""
        error = str(exc.response.get("error") or exc.response.status_code)
        if exc.response.status_code == 429:
            budget.hold(float(exc.response.headers.get("Retry-After") or 30))
        elif error in UNSUPPORTED and self.enabled:
            log.warning("Slack refused to stream (%s): answers are edited in instead", error)
            self.enabled = False
        return error


def safe_markdown(text: str) -> str:
    """The model's markdown, with Slack's special sequences (`<!channel>`, `<@U…>`, `<#C…>`)
    broken so that nothing in it pings or links anyone. Each prefix of a text maps to a
    prefix of the whole text's result, so what was streamed stays a prefix."""
    for token in SLACK_TOKENS:
        text = text.replace(token, token[0] + ZERO_WIDTH + token[1])
    return text


@dataclass
class Words:
    """The streamed message of one step of the model."""

    ts: str | None = None
    sent: str = ""
    """The markdown Slack has."""
    broken: str = ""
    """Why it stopped taking words ('' while it streams)."""


class StreamingSlackReply(SlackReply):
    """A `SlackReply` whose model's words are streamed (see the module), and which keeps an
    assistant thread's status line (`status`) up to date."""

    def __init__(
        self,
        thread: SlackThread,
        owner: str,
        streams: Streams,
        team: str,
        status: ThreadStatus | None = None,
        **options: Any,
    ) -> None:
        super().__init__(thread, owner, **options)
        self.streams = streams
        self.team = team
        self.status = status
        self.words: Words | None = None
        """The current step's streamed message."""
        self.streaming = False
        """The current step's words go to a stream, not to the progress message."""
        self.draft = ""
        """The current step's words so far."""
        self.lock = asyncio.Lock()
        self.stream_pacer = Pacer(self._stream, APPEND_INTERVAL_S)

    # ── events ───────────────────────────────────────────────────────────

    def __call__(self, event: TurnEvent) -> Awaitable[None] | None:
        if isinstance(event, AnswerDelta | Answer):
            self.draft = event.text
            if isinstance(event, AnswerDelta) and self._may_stream():
                self.streaming = True
                self.stream_pacer.poke()
        step_over = isinstance(event, Thinking | CodeStarted | ApprovalRequested | InputRequested)
        shown = super().__call__(event)
        status = self._status_of(event)
        if not step_over and status is None:
            return shown
        return self._after(shown, step_over, status)

    async def _after(
        self, shown: Awaitable[None] | None, step_over: bool, status: str | None
    ) -> None:
        if step_over:
            await self._end_step()
        if shown is not None:
            await shown
        if status is not None and self.status is not None:
            await self.status.show(status)

    def _status_of(self, event: TurnEvent) -> str | None:
        if self.status is None:
            return None
        if isinstance(event, Thinking):
            return THINKING
        if isinstance(event, CodeStarted):
            return RUNNING
        if isinstance(event, ApprovalRequested):
            return APPROVAL
        if isinstance(event, InputRequested):
            return INPUT
        if isinstance(event, AnswerDelta) and not self.streaming:
            return WRITING
        return None

    def _may_stream(self) -> bool:
        if self.streaming:
            return True
        return (
            self.streams.enabled
            and self.words is None
            and self.thread.thread_ts is not None
            and bool(self.draft.strip())
        )

    def progress_text(self) -> str:
        return progress_text(self.view, draft=not self.streaming)

    # ── posts (Slack clears an assistant thread's status on each) ───────

    async def post(self, text: str, controls: Any = None) -> str:
        ts = await super().post(text, controls)
        await self._posted()
        return ts

    async def ask(self, event: ApprovalRequested) -> str:
        ts = await super().ask(event)
        await self._posted()
        return ts

    async def ask_input(self, event: InputRequested) -> str:
        ts = await super().ask_input(event)
        await self._posted()
        return ts

    async def start(self, stop: str) -> None:
        await super().start(stop)
        if self.status is not None:
            await self.status.show(THINKING)

    async def _posted(self) -> None:
        if self.status is not None:
            self.status.posted()
            await self.status.again()

    # ── the stream ───────────────────────────────────────────────────────

    async def _stream(self) -> None:
        """The pacer's draw: start the step's stream with its first words, or append."""
        async with self.lock:
            if not self.streaming:
                return
            text = safe_markdown(self.draft)
            if self.words is None:
                self.words = Words()
                await self._start(self.words, text)
            elif self.words.ts is not None and not self.words.broken:
                await self._append(self.words, text)

    async def _start(self, words: Words, text: str) -> None:
        if not self.streams.starts.take():
            self._broke(words, "the tier's budget is spent")
            return
        first = text[:MARKDOWN_LIMIT]
        try:
            started = await self.streams.client.chat_startStream(
                channel=self.thread.channel,
                thread_ts=str(self.thread.thread_ts),
                markdown_text=first,
                recipient_user_id=self.owner,
                recipient_team_id=self.team,
            )
        except SlackApiError as exc:
            self._broke(words, self.streams.refused(exc, self.streams.starts))
            return
        words.ts, words.sent = str(started["ts"]), first
        if self.status is not None:
            self.status.posted()

    async def _append(self, words: Words, text: str) -> None:
        if not text.startswith(words.sent):
            self._broke(words, "the words changed")
            return
        if len(text) > MARKDOWN_LIMIT:
            self._broke(words, "past the markdown limit")
            return
        rest = text[len(words.sent) :]
        if not rest or not self.streams.appends.take():
            return  # the next words (or the stop) take it
        try:
            await self.streams.client.chat_appendStream(
                channel=self.thread.channel, ts=str(words.ts), markdown_text=rest
            )
        except SlackApiError as exc:
            self._broke(words, self.streams.refused(exc, self.streams.appends))
            return
        words.sent = text

    def _broke(self, words: Words, why: str) -> None:
        """The step's words go back to the progress message."""
        log.info("streaming the answer stopped: %s", why)
        words.broken = why or "refused"
        self.streaming = False
        self.pacer.poke()

    async def _end_step(self) -> None:
        """The model's step ended (it runs code, or waits for a person): its words so far
        are its message's whole text. The next step's stream starts with its first words
        again, however soon they come."""
        await self.stream_pacer.finish()
        self.stream_pacer = Pacer(self._stream, APPEND_INTERVAL_S)
        async with self.lock:
            words, draft = self.words, self.draft
            self.words, self.streaming, self.draft = None, False, ""
            if words is not None and words.ts is not None:
                await self._settle(words, draft, [])

    async def _settle(self, words: Words, draft: str, extras: list[str]) -> None:
        """End the streamed message `words` as the model's `draft` with `extras` (mrkdwn
        lines) under it: by stopping the stream, or, when it broke, by rewriting it."""
        assert words.ts is not None
        text = safe_markdown(draft)
        if not words.broken and not text.startswith(words.sent):
            words.broken = "the words changed"
        if not words.broken and len(text) > MARKDOWN_LIMIT:
            words.broken = "past the markdown limit"
        rest = text[len(words.sent) :] if not words.broken else ""
        shown = [block for part in _parts(extras) for block in blocks(part)]
        if not words.broken:
            try:
                await self.streams.patient.chat_stopStream(
                    channel=self.thread.channel,
                    ts=words.ts,
                    markdown_text=rest or None,
                    blocks=shown or None,
                )
                return
            except SlackApiError as exc:
                words.broken = str(exc.response.get("error"))
        with contextlib.suppress(SlackApiError):  # it may still stream
            await self.streams.patient.chat_stopStream(channel=self.thread.channel, ts=words.ts)
        parts = _parts([to_mrkdwn(draft.strip()), *extras]) or [DONE]
        try:
            await self.thread.update(words.ts, parts[0], blocks(parts[0]))
            parts = parts[1:]
        except SlackApiError:
            log.warning("could not rewrite a streamed message", exc_info=True)
        for part in parts:
            await self.thread.post(part)

    # ── the end ──────────────────────────────────────────────────────────

    async def answer(self, rerun: Any) -> None:
        await self.stream_pacer.finish()
        async with self.lock:
            words, draft = self.words, self.draft
            self.words, self.streaming = None, False
            if words is None or words.ts is None:
                await super().answer(rerun)
            else:
                await self._streamed_answer(words, draft, rerun)
        if self.status is not None:
            await self.status.clear()

    async def _streamed_answer(self, words: Words, draft: str, rerun: Any) -> None:
        """The answer when its words were streamed: files, the progress message's last
        state (or none, when it showed no code), then the stream's end with the notes."""
        not_uploaded = await self.upload_files()
        await self._last_progress(rerun)
        extras = notice_lines(self.view)
        ending = self.view.ending()
        if ending is not None and ending.failed:
            extras.append(f"{MARKS['failed']} {escape(ending.text)}")
        extras += file_lines(self.view, not_uploaded, self.max_files)
        words_text = self.view.answer if self.view.answer is not None else draft
        await self._settle(words, words_text, extras)

    async def _last_progress(self, rerun: Any) -> None:
        if self.progress is None:
            return
        final = progress_text(self.view)
        try:
            if final:
                await self.edit(self.progress, final, rerun)
            else:
                await self.thread.client.chat_delete(channel=self.thread.channel, ts=self.progress)
                self.progress = None
        except SlackApiError:
            log.warning("could not update the progress message", exc_info=True)

    async def failed(self, text: str) -> None:
        await self.stream_pacer.finish()
        async with self.lock:
            words, draft = self.words, self.draft
            self.words, self.streaming = None, False
            if words is not None and words.ts is not None:
                with contextlib.suppress(SlackApiError):
                    await self._settle(words, draft, [])
        await super().failed(text)
        if self.status is not None:
            await self.status.clear()

    async def refused(self, text: str) -> None:
        await super().refused(text)
        if self.status is not None:
            await self.status.clear()


def _parts(lines: Sequence[str]) -> list[str]:
    """`lines` as messages (sections) of at most `MESSAGE_LIMIT` characters; none for none."""
    joined = "\n".join(lines).strip("\n")
    return split_message(joined, MESSAGE_LIMIT) if joined.strip() else []
