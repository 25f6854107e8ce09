"""Slack's assistant view (the split view for AI apps): bolt's `Assistant` middleware for
its threads, a greeting and suggested prompts when one starts, its title from the first
question, the status line while the model thinks or code runs, and the channel the person
is looking at, passed to the model as context.

An assistant thread is a thread of the person's DM with the app, so its messages go through
the app's message handler like any DM thread: the same admission, turns, approval, Stop,
Re-run, files and workspaces. This module adds what only the assistant view has.

Context is facts about where the person is, handed to the model beside the system prompt
(`UserMessage.context`) as a note marked as context, never as the person's words nor as
instructions, with each question (it is not kept in the history). Which
threads are assistant threads, their titles and their context are kept in memory (the
latest `THREADS_KEPT`): after a restart a thread goes on as a DM thread until its context
changes.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from slack_bolt.async_app import AsyncApp
from slack_bolt.middleware.assistant.async_assistant import AsyncAssistant
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.request.payload_utils import is_other_message_sub_event_in_assistant_thread
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.conversations import Admission, Person
from bot.settings import SlackSettings

log = logging.getLogger(__name__)

THREADS_KEPT = 10_000
TITLE_MAX = 80
PROMPTS_TITLE = "Try asking"
THINKING = "is thinking…"
RUNNING = "is running code…"
APPROVAL = "is waiting for someone to approve the code…"
INPUT = "is waiting for an answer to the code's question…"
WRITING = "is writing…"


class AssistantFront(Protocol):
    client: AsyncWebClient
    door: Admission
    team: str
    threads: dict[tuple[str, str], bool]

    async def person(self, user: str, team: str, channel: str, dm: bool = False) -> Person: ...


class ThreadStatus:
    """The status line under one assistant thread ("Cellmate is thinking…"). Slack clears it
    when the app posts in the thread (`posted`), so it is set again after each post."""

    def __init__(self, client: AsyncWebClient, channel: str, thread_ts: str) -> None:
        self.client = client
        self.channel = channel
        self.thread_ts = thread_ts
        self.wanted = ""
        """What the line should say ('' for nothing)."""
        self.shown = ""
        """What Slack shows now, as far as the bot knows."""

    async def show(self, status: str) -> None:
        self.wanted = status
        await self._set()

    def posted(self) -> None:
        """The app posted in the thread: Slack took the status away."""
        self.shown = ""

    async def again(self) -> None:
        """After a post: the status the thread should still show."""
        await self._set()

    async def clear(self) -> None:
        self.wanted = ""
        await self._set()

    async def _set(self) -> None:
        if self.wanted == self.shown:
            return
        try:
            await self.client.assistant_threads_setStatus(
                channel_id=self.channel, thread_ts=self.thread_ts, status=self.wanted
            )
            self.shown = self.wanted
        except SlackApiError as exc:  # a status is a nicety: never the turn's failure
            log.info("assistant status not set: %s", exc.response.get("error"))


@dataclass
class ThreadState:
    viewing: str = ""
    """The channel the person has open beside the thread ('' when none)."""
    titled: bool = False


class AssistantThreads:
    """The assistant threads the bot has seen, and what the assistant view adds to them."""

    def __init__(self, client: AsyncWebClient, settings: SlackSettings) -> None:
        self.client = client
        self.greeting = settings.greeting()
        self.prompts = settings.suggested_prompts()
        self.threads: OrderedDict[tuple[str, str], ThreadState] = OrderedDict()

    def state(self, channel: str, thread_ts: str) -> ThreadState:
        key = (channel, thread_ts)
        found = self.threads.get(key)
        if found is None:
            found = self.threads[key] = ThreadState()
            while len(self.threads) > THREADS_KEPT:
                self.threads.popitem(last=False)
        self.threads.move_to_end(key)
        return found

    def status_for(self, channel: str, thread_ts: str | None) -> ThreadStatus | None:
        """The status line of an assistant thread; None for any other thread."""
        if thread_ts is None or (channel, thread_ts) not in self.threads:
            return None
        return ThreadStatus(self.client, channel, thread_ts)

    async def asked(self, channel: str, thread_ts: str, text: str, for_model: bool) -> str:
        """A question in a thread: the first one in an assistant thread becomes its title.
        The context to give the model with it (`UserMessage.context`; "" for none): where
        the person is now, on every question, since it is not kept in the history."""
        state = self.threads.get((channel, thread_ts))
        if state is None:
            return ""
        if not state.titled and text.strip():
            state.titled = True
            await self._title(channel, thread_ts, text)
        if not for_model or not state.viewing:
            return ""
        return context_note(state.viewing)

    async def _title(self, channel: str, thread_ts: str, text: str) -> None:
        title = " ".join(text.split())
        if len(title) > TITLE_MAX:
            title = title[: TITLE_MAX - 1].rstrip() + "…"
        try:
            await self.client.assistant_threads_setTitle(
                channel_id=channel, thread_ts=thread_ts, title=title
            )
        except SlackApiError as exc:
            log.info("assistant thread title not set: %s", exc.response.get("error"))


def context_note(channel: str) -> str:
    """What the model is told about where the person is: a fact, marked as context."""
    return (
        "[Context from Slack, not part of the request and not an instruction: the person "
        f"has the channel <#{channel}> open beside this conversation.]"
    )


class CellmateAssistant(AsyncAssistant):
    """Bolt's `Assistant` middleware, except that edits in assistant threads reach the app's
    message handler (an edited message of code runs again, as in any thread)."""

    async def async_process(
        self,
        *,
        req: AsyncBoltRequest,
        resp: BoltResponse,
        next: Callable[[], Awaitable[BoltResponse]],
    ) -> BoltResponse | None:
        if is_other_message_sub_event_in_assistant_thread(req.body):
            return await next()
        return await super().async_process(req=req, resp=resp, next=next)


def register_assistant(app: AsyncApp, front: AssistantFront, threads: AssistantThreads) -> None:
    assistant = CellmateAssistant()

    async def started(event: dict[str, Any], body: dict[str, Any]) -> None:
        thread = event.get("assistant_thread") or {}
        channel, thread_ts = str(thread.get("channel_id")), str(thread.get("thread_ts"))
        user = str(thread.get("user_id") or "")
        context = thread.get("context") or {}
        team = str(body.get("team_id") or context.get("team_id") or front.team)
        person = await front.person(user, team, channel, dm=True)
        if not front.door.allows(person.place):
            return  # as a DM from them would be: ignored
        state = threads.state(channel, thread_ts)
        state.viewing = str(context.get("channel_id") or "")
        front.threads[(channel, thread_ts)] = True
        try:
            if threads.greeting:
                await front.client.chat_postMessage(
                    channel=channel, thread_ts=thread_ts, text=threads.greeting
                )
            if threads.prompts:
                await front.client.assistant_threads_setSuggestedPrompts(
                    channel_id=channel,
                    thread_ts=thread_ts,
                    title=PROMPTS_TITLE,
                    prompts=[{"title": t, "message": m} for t, m in threads.prompts],
                )
        except SlackApiError as exc:
            log.warning("assistant thread greeting failed: %s", exc.response.get("error"))

    async def context_changed(event: dict[str, Any]) -> None:
        thread = event.get("assistant_thread") or {}
        context = thread.get("context") or {}
        key = (str(thread.get("channel_id")), str(thread.get("thread_ts")))
        known = key in threads.threads
        state = threads.state(*key)
        if not known:
            state.titled = True  # a thread from before a restart: it has its title
        state.viewing = str(context.get("channel_id") or "")

    assistant.thread_started(started)
    assistant.thread_context_changed(context_changed)
    app.assistant(assistant)
