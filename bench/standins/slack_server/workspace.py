"""What the workspace holds (channels, messages, files) and waiting for it to change."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
from aiohttp import web

from .world import (
    ADMIN,
    ALICE,
    BOB,
    BOT_USER_ID,
    BOT_USERS,
    C_GENERAL,
    C_OTHER,
    MEMBERS,
    POLL_S,
    TEAM_DOMAIN,
    TEAM_ID,
    Delivery,
    File,
    Message,
    SlackError,
    member_of,
    ts_key,
)


class Workspace:
    """The server's records, the lookups on them and the objects Slack returns."""

    def __init__(self, *, mode: Literal["socket", "http"], bot_url: str | None = None) -> None:
        self.mode = mode
        self.bot_url = bot_url
        self.port = 0
        self.messages: dict[tuple[str, str], Message] = {}  # by (channel, ts)
        self.files: list[File] = []  # uploaded by the bot
        self.views: list[dict[str, Any]] = []  # {"trigger_id", "view"} per views.open/push
        self.ephemeral: list[dict[str, Any]] = []  # chat.postEphemeral arguments + message_ts
        self.responses: list[dict[str, Any]] = []  # bodies POSTed to response_urls
        # Every Web API call with its arguments, failed calls included.
        self.calls: list[tuple[str, dict[str, Any]]] = []
        # Called with (method, arguments) as each Web API call arrives: benchmarks time the
        # bot's answers by them, without the delay of polling `calls`.
        self.call_hooks: list[Callable[[str, dict[str, Any]], None]] = []
        self.acks: dict[str, dict[str, Any] | None] = {}  # Socket Mode envelope_id -> payload
        self.deliveries: list[Delivery] = []  # every delivery that finished, in order
        self.connections = 0  # Socket Mode connections that got `hello`

        self._channels: dict[str, dict[str, Any]] = {
            C_GENERAL: {"name": "general"},
            C_OTHER: {"name": "other"},
        }
        # Who is in each channel, as conversations.members answers; tests may change it.
        self.members: dict[str, list[str]] = {
            C_GENERAL: [ALICE, ADMIN, BOT_USER_ID],
            C_OTHER: [ALICE, BOB, BOT_USER_ID],
        }
        self._all_files: dict[str, File] = {}
        self._uploads: dict[str, dict[str, Any]] = {}  # file_id -> pending external upload
        self._upload_keys: dict[str, str] = {}  # upload URL key -> file_id
        self._triggers: dict[str, float] = {}  # trigger_id -> monotonic time issued
        self._response_urls: dict[str, int] = {}  # response_url key -> uses left
        self._tickets: set[str] = set()
        self._sockets: list[web.WebSocketResponse] = []
        self.spread_sockets = False
        """Deliver each Socket Mode envelope to the next live connection in turn, as Slack
        spreads events across an app's connections (one per replica); False: the newest."""
        self._socket_turn = 0
        self._ack_waiters: dict[str, asyncio.Future[dict[str, Any] | None]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._last_ts_us = 0
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/"

    # ----------------------------------------------------------------- workspace state

    def channel_messages(
        self, channel: str, *, thread_ts: str | None = None, by_bot: bool | None = None
    ) -> list[Message]:
        """Messages of a channel, oldest first; `thread_ts` keeps one thread (parent included)."""
        found = [
            m
            for m in self.messages.values()
            if m.channel == channel
            and not m.deleted
            and (thread_ts is None or thread_ts in (m.ts, m.thread_ts))
            and (by_bot is None or (m.user == BOT_USER_ID) == by_bot)
        ]
        return sorted(found, key=lambda m: ts_key(m.ts))

    def dm_channel(self, user: str = ALICE) -> str:
        """The id of the user's direct-message conversation with the bot."""
        channel = "D" + user[1:]
        self._channels.setdefault(channel, {"name": "directmessage", "user": user})
        return channel

    def summary(self) -> str:
        """The last few messages and API calls, for failure messages."""
        recent = sorted(self.messages.values(), key=lambda m: ts_key(m.ts))[-8:]
        lines = ["recent messages:"]
        lines += [
            f"  {m.channel} {m.ts} thread={m.thread_ts} {m.user}"
            f"{' (deleted)' if m.deleted else ''}: {m.text[:120]!r}"
            for m in recent
        ] or ["  (none)"]
        lines.append("recent Web API calls: " + (", ".join(c[0] for c in self.calls[-12:]) or "-"))
        return "\n".join(lines)

    def _next_ts(self) -> str:
        # Real time, bumped by a microsecond when needed, keeps ts unique and increasing.
        micros = max(time.time_ns() // 1000, self._last_ts_us + 1)
        self._last_ts_us = micros
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}0{next(self._ids):08X}"

    def _channel_type(self, channel: str) -> str:
        return {"D": "im", "G": "group"}.get(channel[:1], "channel")

    def _resolve_channel(self, value: Any) -> str:
        """A channel id from an API argument: an id, a #name, or a user id (their DM)."""
        if not isinstance(value, str) or not value:
            raise SlackError("channel_not_found")
        if value[0] in "UW" and value in MEMBERS:
            return self.dm_channel(value)
        name = value.removeprefix("#")
        for channel, info in self._channels.items():
            if value == channel or (info["name"] == name and not channel.startswith("D")):
                return channel
        raise SlackError("channel_not_found")

    def _find(self, channel: str, ts: Any) -> Message:
        message = self.messages.get((channel, str(ts)))
        if message is None or message.deleted:
            raise SlackError("message_not_found")
        return message

    def _thread_root(self, channel: str, thread_ts: str | None) -> str | None:
        # A reply's ts names its thread too: Slack files the new reply under the parent.
        parent = self.messages.get((channel, thread_ts)) if thread_ts else None
        if parent is not None and parent.thread_ts:
            return parent.thread_ts
        return thread_ts

    def _replies(self, parent: Message) -> list[Message]:
        return sorted(
            (
                m
                for m in self.messages.values()
                if m.channel == parent.channel and m.thread_ts == parent.ts and not m.deleted
            ),
            key=lambda m: ts_key(m.ts),
        )

    def _add_message(
        self,
        channel: str,
        *,
        user: str,
        text: str,
        blocks: list[dict[str, Any]] | None = None,
        thread_ts: str | None = None,
        files: Sequence[File] = (),
        extra: dict[str, Any] | None = None,
        unfurl_links: bool | None = None,
        unfurl_media: bool | None = None,
    ) -> Message:
        message = Message(
            ts=self._next_ts(),
            channel=channel,
            user=user,
            bot_id=member_of(user).bot_id,
            text=text,
            blocks=blocks or [],
            thread_ts=thread_ts,
            files=list(files),
            unfurl_links=unfurl_links,
            unfurl_media=unfurl_media,
            extra={"team": TEAM_ID, **(extra or {})},
        )
        if files:
            message.extra.setdefault("subtype", "file_share")
        self.messages[(channel, message.ts)] = message
        self._refresh(message)
        return message

    def _refresh(self, message: Message) -> None:
        """Rebuild the stored message object (and its thread parent's reply summary)."""
        message.raw = self._message_object(message)
        parent = self.messages.get((message.channel, message.thread_ts or ""))
        if parent is not None and parent is not message:
            parent.raw = self._message_object(parent)
        self._notify()

    def _message_object(self, m: Message) -> dict[str, Any]:
        obj: dict[str, Any] = {"type": "message", **m.extra, "text": m.text, "ts": m.ts}
        if m.user:
            obj["user"] = m.user
        if m.bot_id:
            obj["bot_id"] = m.bot_id
            obj["app_id"] = member_of(BOT_USERS.get(m.bot_id, "")).app_id
            obj["bot_profile"] = self._bot_object(m.bot_id)
        if m.blocks:
            obj["blocks"] = m.blocks
        if m.files:
            obj["files"] = [self._file_object(f) for f in m.files]
            obj["upload"] = True  # the files were uploaded with this message
            obj["display_as_bot"] = False
        if m.reactions:
            obj["reactions"] = [
                {"name": n, "users": [BOT_USER_ID], "count": 1} for n in m.reactions
            ]
        if m.thread_ts and m.thread_ts != m.ts:
            obj["thread_ts"] = m.thread_ts
            parent = self.messages.get((m.channel, m.thread_ts))
            if parent is not None and parent.user:
                obj["parent_user_id"] = parent.user
        elif replies := self._replies(m):
            users = list(dict.fromkeys(r.user for r in replies if r.user))
            obj.update(
                thread_ts=m.ts,
                reply_count=len(replies),
                reply_users_count=len(users),
                latest_reply=replies[-1].ts,
                reply_users=users,
                is_locked=False,
                subscribed=False,
            )
        return obj

    def _file_object(self, f: File) -> dict[str, Any]:
        private = f"{self.base_url}/files-pri/{TEAM_ID}-{f.id}"
        name = quote(f.name)
        extension = f.name.rsplit(".", 1)[-1].lower() if "." in f.name else "binary"
        shared = f.channel is not None
        return {
            "id": f.id,
            "created": f.created,
            "timestamp": f.created,
            "name": f.name,
            "title": f.title or f.name,
            "mimetype": f.mimetype,
            "filetype": extension,
            "pretty_type": extension.upper(),
            "user": f.user,
            "user_team": TEAM_ID,
            "editable": False,
            "size": len(f.content),
            "mode": "hosted",
            "is_external": False,
            "external_type": "",
            "is_public": shared and (f.channel or "").startswith("C"),
            "public_url_shared": False,
            "display_as_bot": False,
            "username": "",
            "url_private": f.url or f"{private}/{name}",
            "url_private_download": f.url or f"{private}/download/{name}",
            "permalink": f"https://{TEAM_DOMAIN}.slack.com/files/{f.user}/{f.id}/{name}",
            "permalink_public": f"https://slack-files.com/{TEAM_ID}-{f.id}-{f.id.lower()}",
            "has_rich_preview": False,
            "file_access": "visible",
        }

    def _bot_object(self, bot_id: str) -> dict[str, Any]:
        user = BOT_USERS[bot_id]
        member = member_of(user)
        return {
            "id": bot_id,
            "deleted": False,
            "name": member.real_name,
            "updated": 1700000000,
            "app_id": member.app_id,
            "user_id": user,
            "team_id": TEAM_ID,
            "icons": {"image_36": "", "image_48": "", "image_72": ""},
        }

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(
        self,
        predicate: Callable[[], object],
        timeout: float = 30.0,  # noqa: ASYNC109 - a deadline on server state, not on one call
    ) -> object:
        """Wait until `predicate()` is truthy, re-checking on every change and every 50 ms."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            result = predicate()
            if result:
                return result
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(
                    f"timed out after {timeout:g} s waiting for {describe(predicate)}\n"
                    + self.summary()
                )
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(POLL_S, remaining))

    def _ensure_channel(self, channel: str) -> None:
        if channel in self._channels:
            return
        if channel[:1] not in ("C", "G"):
            raise AssertionError(f"unknown conversation {channel}; use dm_channel(user) for DMs")
        self._channels[channel] = {"name": channel.lower()}

    def _user_file(
        self, name: str, data: bytes, user: str, channel: str, thread_ts: str | None
    ) -> File:
        f = File(self._new_id("F"), name, data, channel, thread_ts, name, None, user=user)
        self._all_files[f.id] = f
        return f


def describe(predicate: Callable[[], object]) -> str:
    try:
        return inspect.getsource(predicate).strip()
    except (OSError, TypeError):
        return repr(predicate)


def brief(payload: dict[str, Any]) -> str:
    kind = payload.get("type") or payload.get("command")
    event = payload.get("event") or {}
    return f"{kind} {event.get('type', '')} {event.get('text', payload.get('text', ''))!r}"[:200]
