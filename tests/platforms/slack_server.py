"""A Slack workspace on loopback that speaks Slack's wire protocols to a real Bolt app.

`SlackServer` plays Slack for protocol-level tests of the Slack bot:

* the Web API under `api_url` (the bot passes it as `AsyncWebClient(base_url=...)`), keeping
  the workspace's messages, files, reactions, views and ephemeral messages in memory;
* Socket Mode: `apps.connections.open` hands out a WebSocket URL on this server, which greets
  with `hello` and then sends envelopes the app must acknowledge within three seconds;
* HTTP mode: the same payloads POSTed to the bot's own request URL, signed with
  `SIGNING_SECRET` the way Slack signs them (`v0=` HMAC-SHA256 of `v0:{timestamp}:{body}`);
* the edges around both: the upload URLs of `files.getUploadURLExternal`, `url_private`
  downloads (which need the bot token, as on Slack) and `response_url` endpoints.

Tests act as people: `post`, `slash`, `click`, `submit_view` and `shortcut` build the payload
Slack documents for that action, deliver it in the server's mode and return what the bot
answered. The bot's own messages come back to it as `message` events, as they do on Slack, so
a bot that does not ignore itself shows it. Slack's limits that real bots trip over (block
text lengths, trigger_id lifetime, response_url uses, rate limits) are enforced with Slack's
error codes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import inspect
import itertools
import json
import mimetypes
import re
import secrets
import sys
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, urlencode

import aiohttp
from aiohttp import web

TEAM_ID = "T0TEAM"
OTHER_TEAM = "T0OTHER"
TEAM_DOMAIN = "cellmate-test"
BOT_USER_ID = "U0BOT"
BOT_ID = "B0BOT"
APP_ID = "A0APP"
OTHER_APP_ID = "A0OTHERAPP"
ALICE = "U0ALICE"
BOB = "U0BOB"
OTHER_BOT_USER = "U0OTHERBOT"
OTHER_BOT_ID = "B0OTHER"
C_GENERAL = "C0GENERAL"
C_OTHER = "C0OTHER"
BOT_TOKEN = "xoxb-test"  # noqa: S105
APP_TOKEN = "xapp-test"  # noqa: S105
SIGNING_SECRET = "test-signing-secret"  # noqa: S105
# Slack still puts the deprecated verification token in every payload; apps must not trust it.
VERIFICATION_TOKEN = "deprecated-verification-token"  # noqa: S105

ACK_TIMEOUT_S = 3.0  # Slack's deadline for acknowledging an envelope or answering a request
TRIGGER_TTL_S = 3.0  # a trigger_id opens a view only within three seconds of the interaction
RESPONSE_URL_USES = 5  # a response_url accepts five messages
CONNECT_TIMEOUT_S = 10.0  # how long a delivery waits for the app to (re)connect in Socket Mode
MAX_MESSAGE_TEXT = 40_000
MAX_MESSAGE_BLOCKS = 50
MAX_VIEW_BLOCKS = 100
_POLL_S = 0.05

# Keys of a thread parent that describe its replies; events about a new message carry none.
_THREAD_SUMMARY = ("reply_count", "reply_users_count", "latest_reply", "reply_users")


@dataclass(frozen=True)
class _Member:
    name: str
    real_name: str
    bot_id: str | None = None
    app_id: str | None = None


_MEMBERS = {
    ALICE: _Member("alice", "Alice Adams"),
    BOB: _Member("bob", "Bob Brown"),
    BOT_USER_ID: _Member("cellmate", "Cellmate", BOT_ID, APP_ID),
    OTHER_BOT_USER: _Member("otherbot", "Other Bot", OTHER_BOT_ID, OTHER_APP_ID),
}
_BOT_USERS = {member.bot_id: user for user, member in _MEMBERS.items() if member.bot_id}


def _member(user: str) -> _Member:
    return _MEMBERS.get(user) or _Member(user.lower(), user)


@dataclass
class File:
    id: str
    name: str
    content: bytes
    channel: str | None
    thread_ts: str | None
    title: str | None
    initial_comment: str | None
    user: str = BOT_USER_ID
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def mimetype(self) -> str:
        return mimetypes.guess_type(self.name)[0] or "application/octet-stream"


@dataclass
class Message:
    """A message in the workspace, whoever posted it.

    `thread_ts` is the thread the message was posted into (None for a top-level message, even
    once it has replies; `raw` then carries Slack's `thread_ts` and reply summary).
    """

    ts: str
    channel: str
    user: str | None
    bot_id: str | None
    text: str
    blocks: list[dict[str, Any]]
    thread_ts: str | None = None
    files: list[File] = field(default_factory=list)
    unfurl_links: bool | None = None
    unfurl_media: bool | None = None
    edits: list[str] = field(default_factory=list)  # previous texts, oldest first
    deleted: bool = False
    raw: dict[str, Any] = field(default_factory=dict)  # the message object Slack would return
    reactions: list[str] = field(default_factory=list)  # reaction names the bot added
    # Fields of Slack's message object this class does not model (subtype, client_msg_id, ...).
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Delivery:
    """One payload delivered to the bot, and what the bot answered."""

    status: int  # HTTP status of the bot's answer; 200 once a socket-mode envelope is acked
    body: str  # the answer's body; in Socket Mode the ack's payload as JSON, or ""
    ack: dict[str, Any] | None  # the answer as Bolt means it: JSON, {"text": ...}, or None
    payload: dict[str, Any]  # what Slack sent
    kind: str = "events_api"  # the Socket Mode envelope type: events_api, slash_commands, ...
    envelope_id: str | None = None


class SlackError(Exception):
    """A Web API call that Slack answers with `{"ok": false, "error": ...}`."""

    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra


class SlackServer:
    """Slack's side of one workspace with the bot installed, for one connection mode."""

    def __init__(self, *, mode: Literal["socket", "http"], bot_url: str | None = None) -> None:
        self.mode = mode
        self.bot_url = bot_url
        self.port = 0
        self.messages: dict[tuple[str, str], Message] = {}  # by (channel, ts)
        self.files: list[File] = []  # uploaded by the bot
        self.views: list[dict[str, Any]] = []  # {"trigger_id", "view"} per views.open/push
        self.ephemeral: list[dict[str, Any]] = []  # chat.postEphemeral arguments + message_ts
        self.responses: list[dict[str, Any]] = []  # bodies POSTed to response_urls
        # Every Web API call with its arguments, rate-limited and failed calls included.
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.acks: dict[str, dict[str, Any] | None] = {}  # Socket Mode envelope_id -> payload
        self.deliveries: list[Delivery] = []  # every delivery that finished, in order
        self.connections = 0  # Socket Mode connections that got `hello`
        self.rate_limited = 0  # calls answered with HTTP 429

        self._channels: dict[str, dict[str, Any]] = {
            C_GENERAL: {"name": "general"},
            C_OTHER: {"name": "other"},
        }
        self._all_files: dict[str, File] = {}
        self._uploads: dict[str, dict[str, Any]] = {}  # file_id -> pending external upload
        self._upload_keys: dict[str, str] = {}  # upload URL key -> file_id
        self._triggers: dict[str, float] = {}  # trigger_id -> monotonic time issued
        self._response_urls: dict[str, int] = {}  # response_url key -> uses left
        self._tickets: set[str] = set()
        self._sockets: list[web.WebSocketResponse] = []
        self._ack_waiters: dict[str, asyncio.Future[dict[str, Any] | None]] = {}
        self._rate_limits: defaultdict[str, deque[int]] = defaultdict(deque)
        self._background: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._last_ts_us = 0
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._methods: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "auth.test": self._auth_test,
            "apps.connections.open": self._apps_connections_open,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.delete": self._chat_delete,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "chat.getPermalink": self._chat_get_permalink,
            "reactions.add": self._reactions_add,
            "reactions.remove": self._reactions_remove,
            "views.open": self._views_open,
            "views.push": self._views_push,
            "views.update": self._views_update,
            "files.getUploadURLExternal": self._files_get_upload_url_external,
            "files.completeUploadExternal": self._files_complete_upload_external,
            "files.info": self._files_info,
            "files.upload": self._files_upload,
            "conversations.replies": self._conversations_replies,
            "conversations.history": self._conversations_history,
            "conversations.info": self._conversations_info,
            "conversations.open": self._conversations_open,
            "users.info": self._users_info,
            "bots.info": self._bots_info,
        }

    # ----------------------------------------------------------------- lifecycle

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/"

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self._socket_mode)
        app.router.add_route("*", "/upload/v1/{key}", self._upload)
        app.router.add_get("/files-pri/{ref}/download/{name}", self._download)
        app.router.add_get("/files-pri/{ref}/{name}", self._download)
        app.router.add_get("/signin", self._signin)
        app.router.add_post("/commands/{team}/{n}/{key}", self._response_url)
        app.router.add_post("/actions/{team}/{n}/{key}", self._response_url)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        self._session = aiohttp.ClientSession()

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(code=aiohttp.WSCloseCode.GOING_AWAY), 1.0)
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

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
        return sorted(found, key=lambda m: _ts_key(m.ts))

    def dm_channel(self, user: str = ALICE) -> str:
        """The id of the user's direct-message conversation with the bot."""
        channel = "D" + user[1:]
        self._channels.setdefault(channel, {"name": "directmessage", "user": user})
        return channel

    def summary(self) -> str:
        """The last few messages and API calls, for failure messages."""
        recent = sorted(self.messages.values(), key=lambda m: _ts_key(m.ts))[-8:]
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
        if value[0] in "UW" and value in _MEMBERS:
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
            key=lambda m: _ts_key(m.ts),
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
            bot_id=_member(user).bot_id,
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
            obj["app_id"] = _member(_BOT_USERS.get(m.bot_id, "")).app_id
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
            "url_private": f"{private}/{name}",
            "url_private_download": f"{private}/download/{name}",
            "permalink": f"https://{TEAM_DOMAIN}.slack.com/files/{f.user}/{f.id}/{name}",
            "permalink_public": f"https://slack-files.com/{TEAM_ID}-{f.id}-{f.id.lower()}",
            "has_rich_preview": False,
            "file_access": "visible",
        }

    def _bot_object(self, bot_id: str) -> dict[str, Any]:
        user = _BOT_USERS[bot_id]
        member = _member(user)
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

    # ----------------------------------------------------------------- waiting

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
                    f"timed out after {timeout:g} s waiting for {_describe(predicate)}\n"
                    + self.summary()
                )
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(_POLL_S, remaining))

    async def wait_connected(self, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        """Wait until a Socket Mode client is connected and has been sent `hello`."""
        if self.mode != "socket":
            raise AssertionError("wait_connected is for Socket Mode")
        await self.wait_for(self._live_sockets, timeout)

    def _live_sockets(self) -> list[web.WebSocketResponse]:
        return [ws for ws in self._sockets if not ws.closed]

    # ----------------------------------------------------------------- what users do

    async def post(
        self,
        channel: str,
        text: str,
        *,
        user: str = ALICE,
        thread_ts: str | None = None,
        mention_bot: bool = False,
        files: Sequence[tuple[str, bytes]] = (),
        team: str = TEAM_ID,
    ) -> tuple[Message, list[Delivery]]:
        """A user posts a message; the bot gets `message` (and in channels `app_mention`)."""
        self._ensure_channel(channel)
        if thread_ts is not None and (channel, thread_ts) not in self.messages:
            raise AssertionError(f"no message {thread_ts} in {channel} to reply to")
        thread_ts = self._thread_root(channel, thread_ts)
        if mention_bot:
            text = f"<@{BOT_USER_ID}> {text}"
        stored_files = [
            self._user_file(name, data, user, channel, thread_ts) for name, data in files
        ]
        extra: dict[str, Any] = {"team": team}
        if _member(user).bot_id is None:
            extra["client_msg_id"] = str(uuid.uuid4())
        message = self._add_message(
            channel,
            user=user,
            text=text,
            blocks=_rich_text(text) if text and _member(user).bot_id is None else None,
            thread_ts=thread_ts,
            files=stored_files,
            extra=extra,
        )
        events = [self._message_event(message)]
        # Slack sends no app_mention for direct messages: those arrive only as message.im.
        if mention_bot and not channel.startswith("D"):
            events.append(self._app_mention_event(message))
        # Slack sends the two events independently; neither waits for the other's ack.
        deliveries = await asyncio.gather(
            *(self._deliver("events_api", self._event_callback(e, team)) for e in events)
        )
        return message, list(deliveries)

    async def slash(
        self,
        command: str,
        text: str = "",
        *,
        channel: str = C_GENERAL,
        user: str = ALICE,
        thread_ts: str | None = None,
    ) -> Delivery:
        """A user runs a slash command.

        Slack's payload does not say which thread a command was typed in, so `thread_ts` only
        documents the test's intent; it is not sent.
        """
        del thread_ts
        self._ensure_channel(channel)
        payload = {
            "token": VERIFICATION_TOKEN,
            "team_id": TEAM_ID,
            "team_domain": TEAM_DOMAIN,
            "channel_id": channel,
            "channel_name": self._channels[channel]["name"],
            "user_id": user,
            "user_name": _member(user).name,
            "command": command,
            "text": text,
            "api_app_id": APP_ID,
            "is_enterprise_install": "false",
            "response_url": self._new_response_url("commands"),
            "trigger_id": self._new_trigger(),
        }
        return await self._deliver("slash_commands", payload)

    async def click(self, message: Message, action_id: str, *, user: str = ALICE) -> Delivery:
        """A user clicks the button with `action_id` in one of the message's blocks."""
        if message.deleted:
            raise AssertionError(f"message {message.ts} was deleted; nobody can click it")
        found = _find_element(message.blocks, action_id)
        if found is None:
            raise AssertionError(
                f"no element with action_id {action_id!r} in message {message.ts}; "
                f"it has {sorted(_action_ids(message.blocks))}"
            )
        block_id, element = found
        container: dict[str, Any] = {
            "type": "message",
            "message_ts": message.ts,
            "channel_id": message.channel,
            "is_ephemeral": False,
        }
        if message.thread_ts:
            container["thread_ts"] = message.thread_ts
        action = {
            "action_id": action_id,
            "block_id": block_id,
            "type": element.get("type", "button"),
            "action_ts": self._action_ts(),
        }
        for key in ("text", "value", "style"):
            if key in element:
                action[key] = element[key]
        payload = {
            "type": "block_actions",
            **self._interaction_common(user),
            "container": container,
            "trigger_id": self._new_trigger(),
            "channel": self._channel_ref(message.channel),
            "message": message.raw,
            "state": {"values": {}},
            "response_url": self._new_response_url("actions"),
            "actions": [action],
        }
        return await self._deliver("interactive", payload)

    async def submit_view(
        self, opened: dict[str, Any], values: dict[str, str], *, user: str = ALICE
    ) -> Delivery:
        """A user fills in a modal the bot opened (values by action_id) and submits it."""
        view = opened["view"]
        state = _view_state(view, values)
        payload = {
            "type": "view_submission",
            **self._interaction_common(user),
            "trigger_id": self._new_trigger(),
            "view": {**view, "state": {"values": state}},
            "response_urls": [],
        }
        delivery = await self._deliver("interactive", payload)
        self._apply_response_action(opened, delivery.ack)
        return delivery

    async def shortcut(
        self, callback_id: str, message: Message, *, user: str = ALICE, channel: str | None = None
    ) -> Delivery:
        """A user runs the app's message shortcut `callback_id` on a message."""
        payload = {
            "type": "message_action",
            **self._interaction_common(user),
            "action_ts": self._action_ts(),
            "callback_id": callback_id,
            "trigger_id": self._new_trigger(),
            "response_url": self._new_response_url("actions"),
            "channel": self._channel_ref(channel or message.channel),
            "message_ts": message.ts,
            "message": message.raw,
        }
        return await self._deliver("interactive", payload)

    async def url_verification(self) -> Delivery:
        """Slack's check of a new request URL: the app must echo the challenge."""
        if self.mode != "http":
            raise AssertionError("url_verification happens only in HTTP mode")
        payload = {
            "token": VERIFICATION_TOKEN,
            "challenge": secrets.token_urlsafe(24),
            "type": "url_verification",
        }
        return await self._deliver("events_api", payload)

    async def redeliver(
        self, delivery: Delivery, attempt: int = 1, reason: str = "http_timeout"
    ) -> Delivery:
        """Slack's retry of a delivery: the same payload (and event_id), marked as a retry."""
        return await self._deliver(delivery.kind, delivery.payload, retry=(attempt, reason))

    async def send_signed(
        self,
        body: bytes,
        content_type: str,
        *,
        timestamp: int | None = None,
        bad_signature: bool = False,
    ) -> Delivery:
        """POST raw bytes to the bot's request URL, signed (or mis-signed) like Slack."""
        secret = "not-" + SIGNING_SECRET if bad_signature else SIGNING_SECRET
        headers = _signed_headers(body, content_type, timestamp or int(time.time()), secret)
        return await self._post_to_bot(body, headers, {}, "raw")

    def rate_limit_next(self, method: str, retry_after: int = 1) -> None:
        """Answer the next call of `method` with HTTP 429, as Slack's rate limiter does."""
        self._rate_limits[method].append(retry_after)

    async def drop_socket(self, *, reason: str | None = None) -> None:
        """Close the Socket Mode connection; the client should reconnect.

        With a reason ("refresh_requested", "warning", "link_disabled"), first send the
        `disconnect` message Slack sends before it closes a connection on purpose.
        """
        sockets = self._live_sockets()
        if not sockets:
            raise AssertionError("no Socket Mode connection to drop")
        for ws in sockets:
            if reason is not None:
                await ws.send_json(
                    {"type": "disconnect", "reason": reason, "debug_info": _debug_info()}
                )
            await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY)

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

    def _interaction_common(self, user: str) -> dict[str, Any]:
        return {
            "user": {
                "id": user,
                "username": _member(user).name,
                "name": _member(user).name,
                "team_id": TEAM_ID,
            },
            "api_app_id": APP_ID,
            "token": VERIFICATION_TOKEN,
            "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
            "enterprise": None,
            "is_enterprise_install": False,
        }

    def _channel_ref(self, channel: str) -> dict[str, str]:
        self._ensure_channel(channel)
        return {"id": channel, "name": self._channels[channel]["name"]}

    def _action_ts(self) -> str:
        return f"{time.time():.6f}"

    def _new_trigger(self) -> str:
        trigger = f"{next(self._ids)}.{int(time.time())}.{secrets.token_hex(16)}"
        self._triggers[trigger] = time.monotonic()
        return trigger

    def _new_response_url(self, kind: str) -> str:
        key = secrets.token_urlsafe(18)
        self._response_urls[key] = RESPONSE_URL_USES
        return f"{self.base_url}/{kind}/{TEAM_ID}/{next(self._ids)}/{key}"

    def _apply_response_action(self, opened: dict[str, Any], ack: dict[str, Any] | None) -> None:
        # An ack may replace the submitted modal or push a new one onto its stack.
        action = (ack or {}).get("response_action")
        if ack is None or action not in ("update", "push"):
            return
        try:
            view = self._make_view(ack.get("view"), previous=opened["view"])
        except SlackError as error:
            raise AssertionError(f"Slack rejects the {action} view: {error.extra}") from None
        if action == "update":
            opened["view"] = view
        else:
            self.views.append({"trigger_id": None, "view": {**view, "id": self._new_id("V")}})
        self._notify()

    # ----------------------------------------------------------------- events

    def _message_event(self, message: Message) -> dict[str, Any]:
        event = {k: v for k, v in message.raw.items() if k not in _THREAD_SUMMARY}
        if not message.thread_ts:
            event.pop("thread_ts", None)
        event.update(
            channel=message.channel,
            event_ts=message.ts,
            channel_type=self._channel_type(message.channel),
        )
        return event

    def _app_mention_event(self, message: Message) -> dict[str, Any]:
        event = self._message_event(message)
        del event["channel_type"]
        event.pop("subtype", None)
        return {**event, "type": "app_mention"}

    def _event_callback(self, event: dict[str, Any], team: str = TEAM_ID) -> dict[str, Any]:
        return {
            "token": VERIFICATION_TOKEN,
            "team_id": team,
            "context_team_id": team,
            "context_enterprise_id": None,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": self._new_id("Ev"),
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": team,
                    "user_id": BOT_USER_ID,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": f"4-{event['type']}-{team}-{event.get('channel', '')}",
        }

    def _echo(self, event: dict[str, Any]) -> None:
        """Deliver an event caused by the bot's own API call, without blocking that call."""
        task = asyncio.get_running_loop().create_task(self._deliver_quietly(event))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _deliver_quietly(self, event: dict[str, Any]) -> None:
        payload = self._event_callback(event)
        try:
            await self._deliver("events_api", payload)
        except (AssertionError, ConnectionError, aiohttp.ClientError) as failure:
            # Unacknowledged echoes are the bot's business; record them like any delivery.
            self.deliveries.append(Delivery(0, str(failure), None, payload))
            self._notify()

    # ----------------------------------------------------------------- delivery

    async def _deliver(
        self, kind: str, payload: dict[str, Any], *, retry: tuple[int, str] | None = None
    ) -> Delivery:
        if self.mode == "socket":
            delivery = await self._deliver_socket(kind, payload, retry)
        else:
            delivery = await self._deliver_http(kind, payload, retry)
        self.deliveries.append(delivery)
        self._notify()
        return delivery

    async def _deliver_socket(
        self, kind: str, payload: dict[str, Any], retry: tuple[int, str] | None
    ) -> Delivery:
        try:
            sockets = await self.wait_for(self._live_sockets, CONNECT_TIMEOUT_S)
        except AssertionError:
            raise AssertionError(
                f"no Socket Mode connection to deliver {kind} within {CONNECT_TIMEOUT_S:g} s"
            ) from None
        assert isinstance(sockets, list)
        envelope_id = str(uuid.uuid4())
        # Only payloads whose ack can change what the user sees accept a response payload.
        envelope: dict[str, Any] = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": kind,
            "accepts_response_payload": kind == "slash_commands"
            or payload.get("type") in ("view_submission", "block_suggestion"),
        }
        if kind == "events_api" or retry is not None:
            attempt, reason = retry or (0, "")
            envelope.update(retry_attempt=attempt, retry_reason=reason)
        waiter: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        self._ack_waiters[envelope_id] = waiter
        try:
            await sockets[-1].send_str(json.dumps(envelope))
            ack = await asyncio.wait_for(waiter, ACK_TIMEOUT_S)
        except ConnectionError as error:
            raise AssertionError(
                f"the connection closed while delivering {kind}: {error}"
            ) from None
        except TimeoutError:
            raise AssertionError(
                f"the app did not ack {kind} envelope {envelope_id} within {ACK_TIMEOUT_S:g} s "
                f"(Slack shows the user an error and retries events): {_brief(payload)}"
            ) from None
        finally:
            self._ack_waiters.pop(envelope_id, None)
        body = json.dumps(ack) if ack is not None else ""
        return Delivery(200, body, ack, payload, kind, envelope_id)

    async def _deliver_http(
        self, kind: str, payload: dict[str, Any], retry: tuple[int, str] | None
    ) -> Delivery:
        if kind == "events_api":
            body, content_type = json.dumps(payload).encode(), "application/json"
        elif kind == "slash_commands":
            body, content_type = urlencode(payload).encode(), "application/x-www-form-urlencoded"
        else:
            body = urlencode({"payload": json.dumps(payload)}).encode()
            content_type = "application/x-www-form-urlencoded"
        headers = _signed_headers(body, content_type, int(time.time()), SIGNING_SECRET)
        if retry is not None:
            headers["X-Slack-Retry-Num"] = str(retry[0])
            headers["X-Slack-Retry-Reason"] = retry[1]
        return await self._post_to_bot(body, headers, payload, kind)

    async def _post_to_bot(
        self, body: bytes, headers: dict[str, str], payload: dict[str, Any], kind: str
    ) -> Delivery:
        if not self.bot_url:
            raise AssertionError("HTTP mode needs bot_url: the app's request URL")
        assert self._session is not None, "start() the server first"
        timeout = aiohttp.ClientTimeout(total=ACK_TIMEOUT_S)
        try:
            async with self._session.post(
                self.bot_url, data=body, headers=headers, timeout=timeout
            ) as response:
                text = await response.text()
                status, content_type = response.status, response.content_type
        except TimeoutError:
            raise AssertionError(
                f"the app did not answer {kind} within {ACK_TIMEOUT_S:g} s: {_brief(payload)}"
            ) from None
        except aiohttp.ClientConnectionError as error:
            raise AssertionError(f"could not reach the app at {self.bot_url}: {error}") from None
        ack: dict[str, Any] | None = None
        if status == 200 and text:
            ack = json.loads(text) if content_type == "application/json" else {"text": text}
        return Delivery(status, text, ack, payload, kind)

    # ----------------------------------------------------------------- Socket Mode

    async def _socket_mode(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid ticket")
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(self._live_sockets()) + 1,
                "debug_info": _debug_info(),
                "connection_info": {"app_id": APP_ID},
            }
        )
        self.connections += 1
        self._sockets.append(ws)
        self._notify()
        try:
            async for frame in ws:
                if frame.type == aiohttp.WSMsgType.TEXT:
                    self._on_socket_text(frame.data)
        finally:
            self._sockets.remove(ws)
            self._notify()
        return ws

    def _on_socket_text(self, data: str) -> None:
        try:
            message = json.loads(data)
        except json.JSONDecodeError:
            print(f"slack_server: unparsable Socket Mode message {data!r}", file=sys.stderr)
            return
        envelope_id = message.get("envelope_id") if isinstance(message, dict) else None
        if not isinstance(envelope_id, str):
            print(
                f"slack_server: Socket Mode message without envelope_id {data!r}", file=sys.stderr
            )
            return
        payload = message.get("payload")
        self.acks[envelope_id] = payload
        waiter = self._ack_waiters.get(envelope_id)
        if waiter is not None and not waiter.done():
            waiter.set_result(payload)
        self._notify()

    # ----------------------------------------------------------------- Web API plumbing

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args = await _read_args(request)
        token = _bearer(request) or args.pop("token", None)
        args.pop("token", None)
        args = _decode_json_arguments(args)
        self.calls.append((method, args))
        self._notify()
        if self._rate_limits.get(method):
            retry_after = self._rate_limits[method].popleft()
            self.rate_limited += 1
            return web.json_response(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": str(retry_after)},
            )
        handler = self._methods.get(method)
        if handler is None:
            print(f"slack_server: unimplemented Web API method {method} {args}", file=sys.stderr)
            return web.json_response({"ok": False, "error": "unknown_method", "req_method": method})
        try:
            _check_token(method, token)
            result = handler(args)
        except SlackError as error:
            result = {"ok": False, "error": error.error, **error.extra}
        self._notify()
        return web.json_response(result)

    # ----------------------------------------------------------------- Web API methods

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": f"https://{TEAM_DOMAIN}.slack.com/",
            "team": "Cellmate Test",
            "user": _member(BOT_USER_ID).name,
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        ticket = secrets.token_urlsafe(16)
        self._tickets.add(ticket)
        url = f"ws://127.0.0.1:{self.port}/link/?ticket={ticket}&app_id={APP_ID}"
        return {"ok": True, "url": url}

    def _chat_post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(args.get("channel"))
        text = str(args.get("text") or "")
        blocks = _message_blocks(args.get("blocks"))
        if not text and not blocks and not args.get("attachments"):
            raise SlackError("no_text")
        if len(text) > MAX_MESSAGE_TEXT:
            raise SlackError("msg_too_long")
        extra = {k: args[k] for k in ("attachments", "metadata") if args.get(k)}
        message = self._add_message(
            channel,
            user=BOT_USER_ID,
            text=text,
            blocks=blocks,
            thread_ts=self._thread_root(channel, _opt_str(args.get("thread_ts"))),
            extra=extra,
            unfurl_links=_flag(args.get("unfurl_links")),
            unfurl_media=_flag(args.get("unfurl_media")),
        )
        self._echo(self._message_event(message))
        return {"ok": True, "channel": channel, "ts": message.ts, "message": message.raw}

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(args.get("channel"))
        message = self._find(channel, args.get("ts"))
        if message.user != BOT_USER_ID:
            raise SlackError("cant_update_message")
        previous = dict(message.raw)
        text = str(args["text"]) if args.get("text") is not None else message.text
        if len(text) > MAX_MESSAGE_TEXT:
            raise SlackError("msg_too_long")
        # Slack keeps a message's blocks when chat.update leaves the argument out.
        blocks = (
            _message_blocks(args["blocks"]) if args.get("blocks") is not None else message.blocks
        )
        if not text and not blocks:
            raise SlackError("no_text")
        message.edits.append(message.text)
        message.text, message.blocks = text, blocks
        message.extra["edited"] = {"user": BOT_USER_ID, "ts": self._next_ts()}
        self._refresh(message)
        self._echo(self._change_event("message_changed", message, previous, message=message.raw))
        return {
            "ok": True,
            "channel": channel,
            "ts": message.ts,
            "text": message.text,
            "message": message.raw,
        }

    def _chat_delete(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(args.get("channel"))
        message = self._find(channel, args.get("ts"))
        if message.user != BOT_USER_ID:
            raise SlackError("cant_delete_message")
        message.deleted = True
        self._refresh(message)
        self._echo(
            self._change_event("message_deleted", message, message.raw, deleted_ts=message.ts)
        )
        return {"ok": True, "channel": channel, "ts": message.ts}

    def _change_event(
        self, subtype: str, changed: Message, previous: dict[str, Any], **fields: Any
    ) -> dict[str, Any]:
        """The hidden `message` event Slack sends when a message is edited or deleted."""
        ts = self._next_ts()
        return {
            "type": "message",
            "subtype": subtype,
            "hidden": True,
            "channel": changed.channel,
            "ts": ts,
            "event_ts": ts,
            "previous_message": previous,
            "channel_type": self._channel_type(changed.channel),
            **fields,
        }

    def _chat_post_ephemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(args.get("channel"))
        if not args.get("user"):
            raise SlackError("user_not_found")
        blocks = _message_blocks(args.get("blocks"))
        if not args.get("text") and not blocks and not args.get("attachments"):
            raise SlackError("no_text")
        message_ts = self._next_ts()
        self.ephemeral.append({**args, "channel": channel, "message_ts": message_ts})
        return {"ok": True, "message_ts": message_ts}

    def _chat_get_permalink(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(args.get("channel"))
        message = self._find(channel, args.get("message_ts"))
        link = f"https://{TEAM_DOMAIN}.slack.com/archives/{channel}/p{message.ts.replace('.', '')}"
        if message.thread_ts:
            link += f"?thread_ts={message.thread_ts}&cid={channel}"
        return {"ok": True, "channel": channel, "permalink": link}

    def _reactions_add(self, args: dict[str, Any]) -> dict[str, Any]:
        message, name = self._reaction_target(args)
        if name in message.reactions:
            raise SlackError("already_reacted")
        message.reactions.append(name)
        self._refresh(message)
        return {"ok": True}

    def _reactions_remove(self, args: dict[str, Any]) -> dict[str, Any]:
        message, name = self._reaction_target(args)
        if name not in message.reactions:
            raise SlackError("no_reaction")
        message.reactions.remove(name)
        self._refresh(message)
        return {"ok": True}

    def _reaction_target(self, args: dict[str, Any]) -> tuple[Message, str]:
        name = str(args.get("name") or "")
        # Slack wants the bare name: "eyes", not ":eyes:".
        if not name or ":" in name or " " in name:
            raise SlackError("invalid_name")
        channel = self._resolve_channel(args.get("channel"))
        return self._find(channel, args.get("timestamp")), name

    def _views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        trigger_id = self._use_trigger(args.get("trigger_id"))
        view = self._make_view(_json_arg(args.get("view"), "view"))
        self.views.append({"trigger_id": trigger_id, "view": view})
        return {"ok": True, "view": view}

    def _views_push(self, args: dict[str, Any]) -> dict[str, Any]:
        trigger_id = self._use_trigger(args.get("trigger_id"))
        view = self._make_view(_json_arg(args.get("view"), "view"))
        self.views.append({"trigger_id": trigger_id, "view": view})
        return {"ok": True, "view": view}

    def _views_update(self, args: dict[str, Any]) -> dict[str, Any]:
        wanted = args.get("view_id") or args.get("external_id")
        for opened in self.views:
            current = opened["view"]
            if wanted and wanted in (current["id"], current.get("external_id")):
                if args.get("hash") and args["hash"] != current["hash"]:
                    raise SlackError("hash_conflict")
                opened["view"] = self._make_view(
                    _json_arg(args.get("view"), "view"), previous=current
                )
                return {"ok": True, "view": opened["view"]}
        raise SlackError("not_found")

    def _use_trigger(self, trigger_id: Any) -> str:
        issued = self._triggers.get(str(trigger_id))
        if issued is None:
            raise SlackError("invalid_trigger_id")
        if time.monotonic() - issued > TRIGGER_TTL_S:
            raise SlackError("expired_trigger_id")
        return str(trigger_id)

    def _make_view(
        self, view: dict[str, Any], previous: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The view object Slack stores and returns for a view the app sent."""
        problems = _view_problems(view)
        if problems:
            raise SlackError("invalid_arguments", response_metadata={"messages": problems})
        view_id = previous["id"] if previous else self._new_id("V")
        return {
            **view,
            "id": view_id,
            "team_id": TEAM_ID,
            "blocks": _with_ids(view.get("blocks", [])),
            "private_metadata": view.get("private_metadata", ""),
            "callback_id": view.get("callback_id", ""),
            "external_id": view.get("external_id", ""),
            "state": {"values": {}},
            "hash": f"{int(time.time())}.{secrets.token_hex(4)}",
            "clear_on_close": bool(view.get("clear_on_close", False)),
            "notify_on_close": bool(view.get("notify_on_close", False)),
            "root_view_id": previous["root_view_id"] if previous else view_id,
            "previous_view_id": None,
            "app_id": APP_ID,
            "app_installed_team_id": TEAM_ID,
            "bot_id": BOT_ID,
        }

    def _files_get_upload_url_external(self, args: dict[str, Any]) -> dict[str, Any]:
        filename, length = args.get("filename"), args.get("length")
        if not filename or length is None or not str(length).isdigit():
            raise SlackError("invalid_arguments")
        file_id = self._new_id("F")
        key = secrets.token_urlsafe(18)
        self._uploads[file_id] = {"filename": str(filename), "length": int(length), "data": None}
        self._upload_keys[key] = file_id
        return {"ok": True, "upload_url": f"{self.base_url}/upload/v1/{key}", "file_id": file_id}

    def _files_complete_upload_external(self, args: dict[str, Any]) -> dict[str, Any]:
        entries = _json_arg(args.get("files"), "files")
        if not isinstance(entries, list) or not entries:
            raise SlackError("invalid_arguments")
        channels = [str(args["channel_id"])] if args.get("channel_id") else []
        channels += [c for c in str(args.get("channels") or "").split(",") if c]
        channels = [self._resolve_channel(c) for c in channels]
        if args.get("thread_ts") and len(channels) > 1:
            raise SlackError("invalid_arguments")
        comment = _opt_str(args.get("initial_comment"))
        uploaded = [self._finish_upload(entry, channels, args, comment) for entry in entries]
        for channel in channels:
            self._share_files(channel, uploaded, args, comment)
        return {"ok": True, "files": [self._file_object(f) for f in uploaded]}

    def _finish_upload(
        self, entry: Any, channels: list[str], args: dict[str, Any], comment: str | None
    ) -> File:
        file_id = entry.get("id") if isinstance(entry, dict) else None
        pending = self._uploads.pop(str(file_id), None)
        if pending is None or pending["data"] is None:
            raise SlackError("file_not_found", file_id=file_id)
        channel = channels[0] if channels else None
        thread_ts = self._thread_root(channel, _opt_str(args.get("thread_ts"))) if channel else None
        f = File(
            id=str(file_id),
            name=pending["filename"],
            content=pending["data"],
            channel=channel,
            thread_ts=thread_ts,
            title=entry.get("title") or pending["filename"],
            initial_comment=comment,
        )
        self.files.append(f)
        self._all_files[f.id] = f
        return f

    def _share_files(
        self, channel: str, files: list[File], args: dict[str, Any], comment: str | None
    ) -> None:
        # Without initial_comment Slack shows the blocks given (if any) above the files.
        blocks = _message_blocks(args.get("blocks")) if comment is None else []
        message = self._add_message(
            channel,
            user=BOT_USER_ID,
            text=comment or "",
            blocks=blocks,
            thread_ts=self._thread_root(channel, _opt_str(args.get("thread_ts"))),
            files=files,
        )
        self._echo(self._message_event(message))

    def _files_info(self, args: dict[str, Any]) -> dict[str, Any]:
        f = self._all_files.get(str(args.get("file")))
        if f is None:
            raise SlackError("file_not_found")
        return {"ok": True, "file": self._file_object(f), "comments": [], "response_metadata": {}}

    def _files_upload(self, args: dict[str, Any]) -> dict[str, Any]:
        # files.upload is retired; apps must use the getUploadURLExternal flow.
        raise SlackError("method_deprecated")

    def _conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(args.get("channel"))
        parent = self.messages.get((channel, str(args.get("ts"))))
        if parent is None or parent.deleted:
            raise SlackError("thread_not_found")
        thread = [parent] if parent.thread_ts else [parent, *self._replies(parent)]
        return self._page([m.raw for m in thread], args, default_limit=1000)

    def _conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(args.get("channel"))
        oldest, latest = args.get("oldest"), args.get("latest")
        inclusive = bool(_flag(args.get("inclusive")))

        def in_range(ts: str) -> bool:
            after = (
                oldest is None
                or _ts_key(ts) > _ts_key(str(oldest))
                or (inclusive and ts == str(oldest))
            )
            before = (
                latest is None
                or _ts_key(ts) < _ts_key(str(latest))
                or (inclusive and ts == str(latest))
            )
            return after and before

        top_level = [m for m in self.channel_messages(channel) if not m.thread_ts]
        newest_first = [m.raw for m in reversed(top_level) if in_range(m.ts)]
        return self._page(newest_first, args, default_limit=100)

    def _page(
        self, items: list[dict[str, Any]], args: dict[str, Any], *, default_limit: int
    ) -> dict[str, Any]:
        start = int(args["cursor"]) if str(args.get("cursor") or "").isdigit() else 0
        limit = int(args.get("limit") or default_limit)
        page = items[start : start + limit]
        has_more = start + limit < len(items)
        return {
            "ok": True,
            "messages": page,
            "has_more": has_more,
            "response_metadata": {"next_cursor": str(start + limit) if has_more else ""},
        }

    def _conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(args.get("channel"))
        info = self._channels[channel]
        if channel.startswith("D"):
            return {
                "ok": True,
                "channel": {
                    "id": channel,
                    "created": 1700000000,
                    "is_im": True,
                    "is_org_shared": False,
                    "user": info["user"],
                    "is_user_deleted": False,
                    "priority": 0,
                },
            }
        return {
            "ok": True,
            "channel": {
                "id": channel,
                "name": info["name"],
                "name_normalized": info["name"],
                "is_channel": channel.startswith("C"),
                "is_group": channel.startswith("G"),
                "is_im": False,
                "is_mpim": False,
                "is_private": channel.startswith("G"),
                "is_archived": False,
                "is_general": info["name"] == "general",
                "is_member": True,
                "is_shared": False,
                "is_ext_shared": False,
                "is_org_shared": False,
                "created": 1700000000,
                "creator": ALICE,
                "context_team_id": TEAM_ID,
            },
        }

    def _conversations_open(self, args: dict[str, Any]) -> dict[str, Any]:
        users = [u for u in str(args.get("users") or "").split(",") if u]
        if len(users) != 1 or users[0] not in _MEMBERS:
            raise SlackError("user_not_found")
        return {"ok": True, "channel": {"id": self.dm_channel(users[0])}}

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = str(args.get("user"))
        if user not in _MEMBERS:
            raise SlackError("user_not_found")
        member = _MEMBERS[user]
        profile: dict[str, Any] = {
            "real_name": member.real_name,
            "display_name": member.name,
            "team": TEAM_ID,
        }
        if member.bot_id:
            profile["bot_id"] = member.bot_id
            profile["api_app_id"] = member.app_id
        return {
            "ok": True,
            "user": {
                "id": user,
                "team_id": TEAM_ID,
                "name": member.name,
                "real_name": member.real_name,
                "deleted": False,
                "is_bot": member.bot_id is not None,
                "is_app_user": False,
                "is_admin": False,
                "is_owner": False,
                "tz": "Europe/Berlin",
                "profile": profile,
            },
        }

    def _bots_info(self, args: dict[str, Any]) -> dict[str, Any]:
        bot = str(args.get("bot"))
        if bot not in _BOT_USERS:
            raise SlackError("bot_not_found")
        return {"ok": True, "bot": self._bot_object(bot)}

    # ----------------------------------------------------------------- files and hooks

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        file_id = self._upload_keys.pop(request.match_info["key"], None)
        if file_id is None or file_id not in self._uploads or request.method not in ("POST", "PUT"):
            return web.Response(status=404, text="upload URL not found")
        if request.content_type == "multipart/form-data":
            form = await request.post()
            parts = [v.file.read() for v in form.values() if isinstance(v, web.FileField)]
            data = parts[0] if parts else b""
        else:
            data = await request.read()
        self._uploads[file_id]["data"] = data
        self._notify()
        return web.Response(text=f"OK - {len(data)}", content_type="text/plain")

    async def _download(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["ref"].removeprefix(f"{TEAM_ID}-")
        f = self._all_files.get(file_id)
        if f is None:
            return web.Response(status=404, text="file not found")
        if request.headers.get("Authorization") != f"Bearer {BOT_TOKEN}":
            # Slack answers a file request without the bot token with its sign-in page, so a
            # careless client saves HTML where it expected the file.
            raise web.HTTPFound(f"/signin?redir={quote(request.path)}")
        headers = {}
        if "/download/" in request.path:
            headers["Content-Disposition"] = f'attachment; filename="{f.name}"'
        return web.Response(body=f.content, content_type=f.mimetype, headers=headers)

    async def _signin(self, request: web.Request) -> web.StreamResponse:
        html = (
            "<!DOCTYPE html><html><head><title>Slack</title></head>"
            f"<body><h1>Sign in to {TEAM_DOMAIN}</h1><form method='post'></form></body></html>"
        )
        return web.Response(text=html, content_type="text/html")

    async def _response_url(self, request: web.Request) -> web.StreamResponse:
        key = request.match_info["key"]
        uses_left = self._response_urls.get(key)
        if uses_left is None:
            return web.Response(status=404, text="invalid_url")
        if uses_left <= 0:
            return web.Response(status=404, text="used_url")
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.Response(status=400, text="invalid_payload")
        self._response_urls[key] = uses_left - 1
        self.responses.append(body)
        self._notify()
        return web.json_response({"ok": True})


# --------------------------------------------------------------------- helpers


def _ts_key(ts: str) -> tuple[int, int]:
    seconds, _, micros = ts.partition(".")
    return int(seconds or 0), int((micros or "0").ljust(6, "0")[:6])


def _describe(predicate: Callable[[], object]) -> str:
    try:
        return inspect.getsource(predicate).strip()
    except (OSError, TypeError):
        return repr(predicate)


def _brief(payload: dict[str, Any]) -> str:
    kind = payload.get("type") or payload.get("command")
    event = payload.get("event") or {}
    return f"{kind} {event.get('type', '')} {event.get('text', payload.get('text', ''))!r}"[:200]


def _debug_info() -> dict[str, Any]:
    return {"host": "applink-loopback", "build_number": 1, "approximate_connection_time": 18060}


def _signed_headers(body: bytes, content_type: str, timestamp: int, secret: str) -> dict[str, str]:
    basestring = f"v0:{timestamp}:".encode() + body
    digest = hmac.new(secret.encode(), basestring, hashlib.sha256).hexdigest()
    return {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": str(timestamp),
        "X-Slack-Signature": f"v0={digest}",
        "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
    }


def _bearer(request: web.Request) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def _check_token(method: str, token: Any) -> None:
    if not token:
        raise SlackError("not_authed")
    if token not in (BOT_TOKEN, APP_TOKEN):
        raise SlackError("invalid_auth")
    # apps.connections.open takes only the app-level token, everything else only the bot's.
    if (token == APP_TOKEN) != (method == "apps.connections.open"):
        raise SlackError("not_allowed_token_type")


async def _read_args(request: web.Request) -> dict[str, Any]:
    """A method's arguments from the query string and a form or JSON body, as Slack reads them."""
    args: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        with contextlib.suppress(json.JSONDecodeError):
            body = await request.json()
            if isinstance(body, dict):
                args.update(body)
    elif request.method == "POST":
        form = await request.post()
        for key, value in form.items():
            args[key] = value.file.read() if isinstance(value, web.FileField) else value
    return args


def _decode_json_arguments(args: dict[str, Any]) -> dict[str, Any]:
    """Form posts carry structured arguments as JSON strings; decode the ones that parse."""
    decoded = dict(args)
    for key in ("blocks", "attachments", "view", "files", "metadata"):
        if isinstance(decoded.get(key), str):
            with contextlib.suppress(json.JSONDecodeError):
                decoded[key] = json.loads(decoded[key])
    return decoded


def _flag(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    return str(value).lower() in ("1", "true")


def _opt_str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _json_arg(value: Any, name: str) -> Any:
    """An argument that form posts carry as a JSON string and JSON posts as a value."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise SlackError("invalid_json", argument=name) from None
    if value is None:
        raise SlackError("invalid_arguments", argument=name)
    return value


def _message_blocks(value: Any) -> list[dict[str, Any]]:
    if value in (None, ""):
        return []
    try:
        blocks = _json_arg(value, "blocks")
    except SlackError:
        raise SlackError("invalid_blocks_format") from None
    problems = _block_problems(blocks, limit=MAX_MESSAGE_BLOCKS, pointer="/blocks")
    if problems:
        raise SlackError(
            "invalid_blocks",
            errors=[p.removeprefix("[ERROR] ") for p in problems],
            response_metadata={"messages": problems},
        )
    return _with_ids(blocks)


def _with_ids(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blocks as Slack stores them: every block and interactive element gets an id."""
    stored: list[dict[str, Any]] = json.loads(json.dumps(blocks))
    for block in stored:
        block.setdefault("block_id", secrets.token_urlsafe(3))
        for element in _interactive_elements(block):
            element.setdefault("action_id", secrets.token_urlsafe(4))
    return stored


def _interactive_elements(block: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if block.get("type") == "actions":
        yield from (e for e in block.get("elements", []) if isinstance(e, dict))
    for key in ("accessory", "element"):
        if isinstance(block.get(key), dict):
            yield block[key]


def _find_element(
    blocks: list[dict[str, Any]], action_id: str
) -> tuple[str, dict[str, Any]] | None:
    for block in blocks:
        for element in _interactive_elements(block):
            if element.get("action_id") == action_id:
                return block["block_id"], element
    return None


def _action_ids(blocks: list[dict[str, Any]]) -> set[str]:
    return {e.get("action_id", "") for b in blocks for e in _interactive_elements(b)}


def _rich_text(text: str) -> list[dict[str, Any]]:
    """The rich_text block Slack's clients attach to what a person types."""
    elements: list[dict[str, Any]] = []
    for i, piece in enumerate(re.split(r"<@([UW][A-Z0-9]+)>", text)):
        if i % 2:
            elements.append({"type": "user", "user_id": piece})
        elif piece:
            elements.append({"type": "text", "text": piece})
    section = {"type": "rich_text_section", "elements": elements}
    return [{"type": "rich_text", "block_id": secrets.token_urlsafe(3), "elements": [section]}]


def _view_state(view: dict[str, Any], values: dict[str, str]) -> dict[str, Any]:
    """`state.values` of a submitted modal: block_id -> action_id -> element state."""
    inputs = [
        (block, block["element"])
        for block in view.get("blocks", [])
        if block.get("type") == "input" and isinstance(block.get("element"), dict)
    ]
    known = {element["action_id"] for _, element in inputs}
    if unknown := set(values) - known:
        raise AssertionError(f"the view has no inputs {sorted(unknown)}; it has {sorted(known)}")
    state: dict[str, Any] = {}
    for block, element in inputs:
        action_id = element["action_id"]
        value = values.get(action_id)
        if value is None and not block.get("optional"):
            # Slack's client refuses to submit a modal with an empty required input.
            raise AssertionError(f"required input {action_id!r} has no value")
        state[block["block_id"]] = {action_id: {"type": element.get("type"), "value": value}}
    return state


def _text(obj: Any) -> str:
    return str(obj.get("text", "")) if isinstance(obj, dict) else ""


def _view_problems(view: Any) -> list[str]:
    """What Slack's views.* methods reject, as `response_metadata.messages`."""
    if not isinstance(view, dict):
        return ["[ERROR] must be an object [json-pointer:/view]"]
    problems = []
    if view.get("type") not in ("modal", "home"):
        problems.append("[ERROR] must be one of modal, home [json-pointer:/view/type]")
    if view.get("type") == "modal":
        title = _text(view.get("title"))
        if not title:
            problems.append("[ERROR] missing required field: title [json-pointer:/view]")
        for key in ("title", "submit", "close"):
            if len(_text(view.get(key))) > 24:
                problems.append(
                    f"[ERROR] must be less than 25 characters [json-pointer:/view/{key}/text]"
                )
        has_inputs = any(
            b.get("type") == "input" for b in view.get("blocks", []) if isinstance(b, dict)
        )
        if has_inputs and not view.get("submit"):
            problems.append(
                "[ERROR] must provide a submit property when using input blocks"
                " [json-pointer:/view]"
            )
    if len(str(view.get("private_metadata") or "")) > 3000:
        problems.append(
            "[ERROR] must be less than 3001 characters [json-pointer:/view/private_metadata]"
        )
    if len(str(view.get("callback_id") or "")) > 255:
        problems.append("[ERROR] must be less than 256 characters [json-pointer:/view/callback_id]")
    return problems + _block_problems(
        view.get("blocks", []), limit=MAX_VIEW_BLOCKS, pointer="/view/blocks"
    )


def _block_problems(blocks: Any, *, limit: int, pointer: str) -> list[str]:
    """Block Kit limits that Slack enforces, phrased as Slack phrases them."""
    if not isinstance(blocks, list):
        return [f"[ERROR] must be an array [json-pointer:{pointer}]"]
    problems = []
    if len(blocks) > limit:
        problems.append(f"[ERROR] no more than {limit} items allowed [json-pointer:{pointer}]")
    block_ids: set[str] = set()
    for i, block in enumerate(blocks):
        at = f"{pointer}/{i}"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            problems.append(f"[ERROR] missing required field: type [json-pointer:{at}]")
            continue
        block_id = block.get("block_id")
        if block_id is not None:
            if block_id in block_ids:
                problems.append(f"[ERROR] duplicate block_id [json-pointer:{at}/block_id]")
            block_ids.add(block_id)
        problems += _one_block_problems(block, at)
    return problems


def _too_long(value: str, limit: int, at: str) -> list[str]:
    if len(value) > limit:
        return [f"[ERROR] must be less than {limit + 1} characters [json-pointer:{at}]"]
    return []


def _one_block_problems(block: dict[str, Any], at: str) -> list[str]:
    kind = block["type"]
    problems = _too_long(str(block.get("block_id") or ""), 255, f"{at}/block_id")
    if kind == "section":
        if not block.get("text") and not block.get("fields"):
            problems.append(f"[ERROR] must provide either text or fields [json-pointer:{at}]")
        problems += _too_long(_text(block.get("text")), 3000, f"{at}/text/text")
        fields = block.get("fields") or []
        if len(fields) > 10:
            problems.append(f"[ERROR] no more than 10 items allowed [json-pointer:{at}/fields]")
        for j, f in enumerate(fields):
            problems += _too_long(_text(f), 2000, f"{at}/fields/{j}/text")
    elif kind == "header":
        problems += _too_long(_text(block.get("text")), 150, f"{at}/text/text")
    elif kind == "context":
        if not 1 <= len(block.get("elements") or []) <= 10:
            problems.append(f"[ERROR] must have 1 to 10 items [json-pointer:{at}/elements]")
    elif kind == "actions":
        if not 1 <= len(block.get("elements") or []) <= 25:
            problems.append(f"[ERROR] must have 1 to 25 items [json-pointer:{at}/elements]")
    elif kind == "input":
        if not isinstance(block.get("element"), dict):
            problems.append(f"[ERROR] missing required field: element [json-pointer:{at}]")
        problems += _too_long(_text(block.get("label")), 2000, f"{at}/label/text")
    elif kind == "markdown":
        problems += _too_long(str(block.get("text") or ""), 12000, f"{at}/text")
    action_ids: set[str] = set()
    for element in _interactive_elements(block):
        action_id = str(element.get("action_id") or "")
        if action_id and action_id in action_ids:
            problems.append(f"[ERROR] duplicate action_id {action_id!r} [json-pointer:{at}]")
        action_ids.add(action_id)
        problems += _too_long(action_id, 255, f"{at}/action_id")
        if element.get("type") == "button":
            problems += _too_long(_text(element.get("text")), 75, f"{at}/text/text")
            problems += _too_long(str(element.get("value") or ""), 2000, f"{at}/value")
            problems += _too_long(str(element.get("url") or ""), 3000, f"{at}/url")
    return problems
