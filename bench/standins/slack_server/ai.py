"""Slack's surface for AI apps: assistant threads (their events, status, title and suggested
prompts), streamed messages (`chat.startStream`, `chat.appendStream`, `chat.stopStream`),
`chat.delete`, and the rate tiers of these methods.

Written from Slack's method reference and slack_sdk's request shapes:

* `chat.startStream` (Tier 2) takes `channel`, `thread_ts`, `markdown_text` (or `chunks`)
  and, outside a DM, `recipient_user_id` and `recipient_team_id`; it answers with the new
  message's `ts`. `chat.appendStream` (Tier 4) adds `markdown_text` to it, `chat.stopStream`
  (Tier 2) adds the last of it and `blocks` rendered at the bottom of the final message.
  A message no longer streaming answers `message_not_in_streaming_state`; one the user
  stopped, `stopped_by_user`; markdown past 12,000 characters, `msg_too_long`.
* `assistant.threads.setStatus` (cleared by the app's next message in the thread, or by an
  empty status), `setTitle` and `setSuggestedPrompts` (at most four prompts, each with a
  title and a message) in a thread of the app's DM.
* A method past its tier's calls per minute answers HTTP 429 `ratelimited` with
  `Retry-After`, as Slack does.

A workspace without the streaming methods (`streaming = False`, the default, so that a bot
must fall back) answers `unknown_method` for the three of them.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from typing import Any

from .payloads import message_blocks, opt_str
from .web_api import WebApi
from .world import ALICE, BOT_USER_ID, TEAM_ID, Delivery, Message, RateLimited, SlackError

MARKDOWN_LIMIT = 12_000
"""Characters of markdown one streamed message holds (and one markdown_text argument)."""
MAX_PROMPTS = 4
TIERS = {"t1": 1, "t2": 20, "t3": 50, "t4": 100}
"""Calls per minute of each rate tier (Slack allows short bursts past them; this stand-in
does not)."""
METHOD_TIERS = {
    "chat.startStream": "t2",
    "chat.appendStream": "t4",
    "chat.stopStream": "t2",
    "assistant.threads.setTitle": "t4",
    "assistant.threads.setSuggestedPrompts": "t4",
}
STREAM_METHODS = ("chat.startStream", "chat.appendStream", "chat.stopStream")


class AiApps(WebApi):
    """Assistant threads and streamed messages."""

    streaming: bool = False
    """Whether the workspace has the chat.*Stream methods."""

    def _ai_init(self) -> None:
        self.streaming = False
        self.statuses: list[tuple[str, str, str]] = []
        """Every setStatus: (channel, thread_ts, status)."""
        self.status: dict[tuple[str, str], str] = {}
        """The status shown now under each thread (gone once the app posts there)."""
        self.titles: dict[tuple[str, str], str] = {}
        self.prompts: dict[tuple[str, str], dict[str, Any]] = {}
        """Suggested prompts by thread: {"title": ..., "prompts": [{title, message}]}."""
        self.streams: dict[tuple[str, str], str] = {}
        """Streamed messages by (channel, ts): "streaming", "stopped" or "stopped_by_user"."""
        self.stream_calls: list[tuple[float, str, dict[str, Any]]] = []
        """Every call of a stream method as it arrived (perf_counter, method, arguments)."""
        self.rate_limits: dict[str, int] = {m: TIERS[t] for m, t in METHOD_TIERS.items()}
        """Calls per minute each method takes; tests may lower one to see a 429."""
        self._recent: dict[str, deque[float]] = defaultdict(deque)

    def ai_methods(self) -> dict[str, Any]:
        return {
            "chat.startStream": self._chat_start_stream,
            "chat.appendStream": self._chat_append_stream,
            "chat.stopStream": self._chat_stop_stream,
            "chat.delete": self._chat_delete,
            "assistant.threads.setStatus": self._set_status,
            "assistant.threads.setTitle": self._set_title,
            "assistant.threads.setSuggestedPrompts": self._set_suggested_prompts,
        }

    def check_rate(self, method: str) -> None:
        """Raise `RateLimited` when `method` has had its tier's calls in the last minute."""
        limit = self.rate_limits.get(method)
        if limit is None:
            return
        now = time.monotonic()
        recent = self._recent[method]
        while recent and now - recent[0] >= 60:
            recent.popleft()
        if len(recent) >= limit:
            raise RateLimited(max(1, int(60 - (now - recent[0])) + 1))
        recent.append(now)

    # ----------------------------------------------------------------- what people do

    async def open_assistant_thread(
        self, *, user: str = ALICE, viewing: str | None = None
    ) -> tuple[str, str, Delivery]:
        """The user opens a new thread in the app's assistant view (while looking at channel
        `viewing`): Slack makes the thread in their DM with the app and sends
        `assistant_thread_started`. Returns the DM, the thread's ts and the delivery."""
        dm = self.dm_channel(user)
        root = self._add_message(
            dm, user=user, text="", extra={"subtype": "assistant_app_thread", "team": TEAM_ID}
        )
        event = {
            "type": "assistant_thread_started",
            "assistant_thread": self._assistant_thread(user, dm, root.ts, viewing),
            "event_ts": self._next_ts(),
        }
        delivery = await self._deliver("events_api", self._event_callback(event))
        return dm, root.ts, delivery

    async def view_channel(
        self, dm: str, thread_ts: str, channel: str, *, user: str = ALICE
    ) -> Delivery:
        """The user, with the assistant thread open, moves to another channel: Slack sends
        `assistant_thread_context_changed`."""
        event = {
            "type": "assistant_thread_context_changed",
            "assistant_thread": self._assistant_thread(user, dm, thread_ts, channel),
            "event_ts": self._next_ts(),
        }
        return await self._deliver("events_api", self._event_callback(event))

    def stop_stream_as_user(self, message: Message) -> None:
        """The user stops a streaming message in Slack's own UI: no more text is taken."""
        self.streams[(message.channel, message.ts)] = "stopped_by_user"
        self._notify()

    def expire_stream(self, message: Message) -> None:
        """Slack ends a stream on its side (as it does after some minutes)."""
        self.streams[(message.channel, message.ts)] = "stopped"
        self._notify()

    def _assistant_thread(
        self, user: str, dm: str, thread_ts: str, viewing: str | None
    ) -> dict[str, Any]:
        context: dict[str, Any] = {}
        if viewing is not None:
            self._ensure_channel(viewing)
            context = {"channel_id": viewing, "team_id": TEAM_ID, "enterprise_id": None}
        return {"user_id": user, "context": context, "channel_id": dm, "thread_ts": thread_ts}

    # ----------------------------------------------------------------- streams

    def _stream_method(self, method: str, args: dict[str, Any]) -> None:
        self.stream_calls.append((time.perf_counter(), method, dict(args)))
        if not self.streaming:
            raise SlackError("unknown_method", req_method=method)
        self.check_rate(method)

    def _markdown(self, args: dict[str, Any], required: bool) -> str:
        text = args.get("markdown_text")
        chunks = args.get("chunks") or []
        if text is not None and chunks:
            raise SlackError("invalid_arguments")
        if text is None:
            if not isinstance(chunks, list):
                raise SlackError("invalid_chunks")
            parts = []
            for chunk in chunks:
                if not isinstance(chunk, dict) or chunk.get("type") != "markdown_text":
                    raise SlackError("invalid_chunks")
                parts.append(str(chunk.get("text") or ""))
            text = "".join(parts)
        text = str(text)
        if required and not text:
            raise SlackError("no_text")
        if len(text) > MARKDOWN_LIMIT:
            raise SlackError("msg_too_long")
        return text

    def _streaming(self, args: dict[str, Any]) -> Message:
        channel = self._resolve_channel(args.get("channel"))
        message = self._find(channel, args.get("ts"))
        if message.user != BOT_USER_ID:
            raise SlackError("message_not_owned_by_app")
        state = self.streams.get((channel, message.ts))
        if state == "stopped_by_user":
            raise SlackError("stopped_by_user")
        if state != "streaming":
            raise SlackError("message_not_in_streaming_state")
        return message

    def _grow(self, message: Message, text: str) -> None:
        if len(message.text) + len(text) > MARKDOWN_LIMIT:
            raise SlackError("msg_too_long")
        previous = dict(message.raw)
        message.edits.append(message.text)
        message.text += text
        self._refresh(message)
        self._echo(self._change_event("message_changed", message, previous, message=message.raw))

    def _chat_start_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        self._stream_method("chat.startStream", args)
        channel = self._resolve_channel(args.get("channel"))
        if not channel.startswith("D"):
            if not args.get("recipient_user_id"):
                raise SlackError("missing_recipient_user_id")
            if not args.get("recipient_team_id"):
                raise SlackError("missing_recipient_team_id")
        text = self._markdown(args, required=False)
        thread_ts = self._thread_root(channel, opt_str(args.get("thread_ts")))
        message = self._add_message(channel, user=BOT_USER_ID, text=text, thread_ts=thread_ts)
        self.streams[(channel, message.ts)] = "streaming"
        self._posted(channel, thread_ts)
        self._echo(self._message_event(message))
        return {"ok": True, "channel": channel, "ts": message.ts}

    def _chat_append_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        self._stream_method("chat.appendStream", args)
        message = self._streaming(args)
        self._grow(message, self._markdown(args, required=True))
        return {"ok": True, "channel": message.channel, "ts": message.ts}

    def _chat_stop_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        self._stream_method("chat.stopStream", args)
        message = self._streaming(args)
        text = self._markdown(args, required=False)
        blocks = message_blocks(args.get("blocks")) if args.get("blocks") else []
        if text:
            self._grow(message, text)
        if blocks:
            message.blocks = blocks
            self._refresh(message)
        self.streams[(message.channel, message.ts)] = "stopped"
        self._notify()
        return {"ok": True, "channel": message.channel, "ts": message.ts, "message": message.raw}

    def _chat_post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        posted = super()._chat_post_message(args)
        self._posted(posted["channel"], self.messages[(posted["channel"], posted["ts"])].thread_ts)
        return posted

    def _chat_delete(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(args.get("channel"))
        message = self._find(channel, args.get("ts"))
        if message.user != BOT_USER_ID:
            raise SlackError("cant_delete_message")
        previous = dict(message.raw)
        message.deleted = True
        self._refresh(message)
        self._echo(self._change_event("message_deleted", message, previous, deleted_ts=message.ts))
        return {"ok": True, "channel": channel, "ts": message.ts}

    # ----------------------------------------------------------------- assistant threads

    def _assistant_thread_of(self, args: dict[str, Any], required: bool = True) -> tuple[str, str]:
        channel = self._resolve_channel(args.get("channel_id"))
        thread_ts = str(args.get("thread_ts") or "")
        if not thread_ts and not required:
            return channel, ""
        root = self.messages.get((channel, thread_ts))
        if not channel.startswith("D") or root is None or root.thread_ts:
            raise SlackError("invalid_thread_ts")
        return channel, thread_ts

    def _posted(self, channel: str, thread_ts: str | None) -> None:
        """The app's message in a thread clears the thread's status."""
        if thread_ts:
            self.status.pop((channel, thread_ts), None)

    def _set_status(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, thread_ts = self._assistant_thread_of(args)
        status = args.get("status")
        if status is None:
            raise SlackError("invalid_arguments")
        self.statuses.append((channel, thread_ts, str(status)))
        if status:
            self.status[(channel, thread_ts)] = str(status)
        else:
            self.status.pop((channel, thread_ts), None)
        return {"ok": True}

    def _set_title(self, args: dict[str, Any]) -> dict[str, Any]:
        self.check_rate("assistant.threads.setTitle")
        channel, thread_ts = self._assistant_thread_of(args)
        title = str(args.get("title") or "")
        if not title:
            raise SlackError("invalid_arguments")
        self.titles[(channel, thread_ts)] = title
        return {"ok": True}

    def _set_suggested_prompts(self, args: dict[str, Any]) -> dict[str, Any]:
        self.check_rate("assistant.threads.setSuggestedPrompts")
        channel, thread_ts = self._assistant_thread_of(args, required=False)
        prompts = args.get("prompts")
        if (
            not isinstance(prompts, list)
            or not 1 <= len(prompts) <= MAX_PROMPTS
            or not all(isinstance(p, dict) and p.get("title") and p.get("message") for p in prompts)
        ):
            raise SlackError("invalid_arguments")
        self.prompts[(channel, thread_ts)] = {"title": args.get("title"), "prompts": prompts}
        return {"ok": True}
