"""A Discord API server on loopback that the real `discord.py` client can connect to.

One aiohttp server plays Discord for one guild, a handful of users and one bot:

* the REST API (v10) under `/api/v10`: messages (JSON and multipart uploads), threads,
  DMs, reactions, application commands, interaction callbacks and interaction webhooks;
* the gateway WebSocket at `/gateway`: HELLO, IDENTIFY → READY + GUILD_CREATE,
  heartbeats, RESUME with replay of missed dispatches, `zlib-stream` compression;
* a CDN route that serves uploaded attachments.

Payloads follow Discord's documented shapes (snowflakes as strings, full message objects,
interaction callback responses, `Invalid Form Body` errors, 429s with rate-limit headers).
Discord's rules that bots trip over in production are kept: without the message content
intent, users' messages arrive without content unless they mention the bot or are DMs;
ephemeral messages never reach the gateway; the first follow-up after a deferred response
replaces the "thinking" message; interaction tokens can expire.

Tests act as the users (`post_message`, `slash`, `click`, ...) and inspect what the bot did
through `messages`, `threads`, `callbacks` and `requests`; `wait_for` waits for a condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import inspect
import json
import math
import mimetypes
import re
import secrets
import socket
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web

try:
    import zstandard
except ImportError:  # discord.py then asks for zlib-stream, which is always available
    zstandard = None

JSON = dict[str, Any]

# ── the world ─────────────────────────────────────────────────────────────────

BOT_ID = 1100000000000000001
APP_ID = 1100000000000000002  # an older application: its id differs from the bot user's
GUILD_ID = 1100000000000000100
CHANNEL_GENERAL = 1100000000000000101
CHANNEL_OTHER = 1100000000000000102
ROLE_MEMBER = 1100000000000000110
OWNER = 1100000000000000200
ALICE = 1100000000000000201
BOB = 1100000000000000202
OTHER_BOT = 1100000000000000203

TOKEN = "test-discord-token"  # noqa: S105 - the fake bot's token, known to tests

API_PREFIX = "/api/v10"
DISCORD_EPOCH_MS = 1_420_070_400_000
EVERYONE_PERMISSIONS = 2248473465835073  # Discord's default for @everyone
ALL_PERMISSIONS = (1 << 51) - 1  # what the guild owner has
MAX_UPLOAD = 10 * 1024 * 1024  # per file, in a guild without boosts
GUILD_JOINED_AT = "2024-01-15T12:00:00.000000+00:00"

# (username, global name, discriminator, bot): bots keep legacy discriminators
_USERS: dict[int, tuple[str, str | None, str, bool]] = {
    BOT_ID: ("Cellmate", None, "4821", True),
    OWNER: ("owner", "Server Owner", "0", False),
    ALICE: ("alice", "Alice", "0", False),
    BOB: ("bob", "Bob", "0", False),
    OTHER_BOT: ("Helper", None, "7310", True),
}
_MEMBER_ROLES: dict[int, tuple[int, ...]] = {
    OWNER: (),
    ALICE: (ROLE_MEMBER,),
    BOB: (),
    BOT_ID: (),
    OTHER_BOT: (),
}

# gateway intents that decide which events the bot receives
GUILDS = 1 << 0
GUILD_MESSAGES = 1 << 9
GUILD_MESSAGE_REACTIONS = 1 << 10
DIRECT_MESSAGES = 1 << 12
DIRECT_MESSAGE_REACTIONS = 1 << 13
MESSAGE_CONTENT = 1 << 15

# message flags
SUPPRESS_EMBEDS = 1 << 2
HAS_THREAD = 1 << 5
EPHEMERAL = 1 << 6
LOADING = 1 << 7
SUPPRESS_NOTIFICATIONS = 1 << 12
IS_COMPONENTS_V2 = 1 << 15
_SENDABLE_FLAGS = SUPPRESS_EMBEDS | SUPPRESS_NOTIFICATIONS | IS_COMPONENTS_V2
_INTERACTION_FLAGS = _SENDABLE_FLAGS | EPHEMERAL

# channel types
GUILD_TEXT = 0
DM = 1
PUBLIC_THREAD = 11
PRIVATE_THREAD = 12
_THREAD_TYPES = (10, PUBLIC_THREAD, PRIVATE_THREAD)

# interaction types and callback types
APPLICATION_COMMAND = 2
MESSAGE_COMPONENT = 3
AUTOCOMPLETE = 4
MODAL_SUBMIT = 5
_CALLBACKS_ALLOWED = {
    APPLICATION_COMMAND: {4, 5, 9},
    MESSAGE_COMPONENT: {4, 5, 6, 7, 9},
    AUTOCOMPLETE: {8},
    MODAL_SUBMIT: {4, 5, 6, 7},
}

_SELECT_TYPES = {3, 5, 6, 7, 8}
_USER_MENTION = re.compile(r"<@!?(\d+)>")
_ROLE_MENTION = re.compile(r"<@&(\d+)>")


# ── what the server records ───────────────────────────────────────────────────


@dataclass
class Attachment:
    name: str
    content: bytes
    content_type: str | None
    id: int = 0
    description: str | None = None


@dataclass
class Message:
    """A message that exists on the server, posted by a user or by the bot."""

    id: int
    channel_id: int
    author_id: int
    content: str
    attachments: list[Attachment] = field(default_factory=list)
    embeds: list[dict[str, Any]] = field(default_factory=list)
    components: list[dict[str, Any]] = field(default_factory=list)
    flags: int = 0
    allowed_mentions: dict[str, Any] | None = None
    edits: list[str] = field(default_factory=list)
    interaction_id: int | None = None
    reference_id: int | None = None
    deleted: bool = False
    raw: dict[str, Any] = field(default_factory=dict)
    type: int = 0
    mentions: list[int] = field(default_factory=list)
    reactions: list[str] = field(default_factory=list)
    """Emoji the bot reacted with ("👍", or "name:id" for custom emoji)."""
    thread_id: int | None = None
    """The thread started from this message, if any (it has the message's id)."""
    _meta: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Interaction:
    id: int
    token: str
    channel_id: int
    raw: dict[str, Any]
    """The INTERACTION_CREATE payload as dispatched."""

    def responses(self, server: DiscordServer) -> list[Message]:
        return server.interaction_messages(self)


@dataclass
class _InteractionState:
    interaction: Interaction
    kind: int
    user: int
    name: str | None = None
    command_type: int | None = None
    source_message: int | None = None
    """The message the component was on (components, and modals opened from them)."""
    acked: int | None = None
    original_id: int | None = None
    loading: bool = False
    created: list[int] = field(default_factory=list)
    expired: bool = False


@dataclass
class _Upload:
    index: int
    filename: str
    content: bytes


@dataclass
class _RateLimitRule:
    method: str
    path_contains: str
    retry_after: float


@dataclass
class _Session:
    id: str
    seq: int = 0
    log: list[tuple[int, str]] = field(default_factory=list)
    """Every dispatch of the session as (seq, JSON text), for replay on RESUME."""
    invalid: bool = False


class _Connection:
    """One gateway WebSocket; with zlib-stream, one compression context for its lifetime."""

    def __init__(self, ws: web.WebSocketResponse, compress: str | None) -> None:
        self.ws = ws
        self.session: _Session | None = None
        self._zlib = zlib.compressobj() if compress == "zlib-stream" else None
        self._zstd = (
            zstandard.ZstdCompressor().compressobj()
            if compress == "zstd-stream" and zstandard is not None
            else None
        )
        self._lock = asyncio.Lock()

    async def send(self, payload: JSON | str) -> bool:
        text = payload if isinstance(payload, str) else _dumps(payload)
        # The compression context is shared by every frame, so frames go out in order.
        async with self._lock:
            if self.ws.closed:
                return False
            try:
                if self._zlib is not None:
                    data = self._zlib.compress(text.encode()) + self._zlib.flush(zlib.Z_SYNC_FLUSH)
                    await self.ws.send_bytes(data)
                elif self._zstd is not None:
                    data = self._zstd.compress(text.encode())
                    data += self._zstd.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
                    await self.ws.send_bytes(data)
                else:
                    await self.ws.send_str(text)
            except (ConnectionError, RuntimeError):
                return False
            return True


# ── errors ────────────────────────────────────────────────────────────────────


class DiscordError(Exception):
    """An error answered the way Discord answers it: a status and a JSON error body."""

    def __init__(
        self, status: int, code: int, message: str, errors: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{status} {code} {message}")
        self.status = status
        self.code = code
        self.message = message
        self.errors = errors

    def response(self) -> web.Response:
        body: JSON = {"message": self.message, "code": self.code}
        if self.errors is not None:
            body["errors"] = self.errors
        return _json_response(body, status=self.status)


def _form_error(path: Sequence[str | int], code: str, message: str) -> DiscordError:
    node: dict[str, Any] = {"_errors": [{"code": code, "message": message}]}
    for key in reversed(path):
        node = {str(key): node}
    return DiscordError(400, 50035, "Invalid Form Body", node)


def _too_long(path: Sequence[str | int], limit: int) -> DiscordError:
    return _form_error(path, "BASE_TYPE_MAX_LENGTH", f"Must be {limit} or fewer in length.")


UNKNOWN_CHANNEL = (404, 10003, "Unknown Channel")
UNKNOWN_MESSAGE = (404, 10008, "Unknown Message")
UNKNOWN_WEBHOOK = (404, 10015, "Unknown Webhook")
UNKNOWN_INTERACTION = (404, 10062, "Unknown interaction")
MISSING_PERMISSIONS = (403, 50013, "Missing Permissions")


def _error(kind: tuple[int, int, str]) -> DiscordError:
    return DiscordError(*kind)


# ── small helpers ─────────────────────────────────────────────────────────────


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _json_response(
    data: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    # exactly "application/json", without a charset: discord.py parses nothing else as JSON
    headers = {**(headers or {}), "Content-Type": "application/json"}
    return web.Response(body=_dumps(data).encode(), status=status, headers=headers)


def _iso(epoch_s: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if epoch_s is None else epoch_s, UTC)
    return moment.isoformat(timespec="microseconds")


def _snowflake_time(snowflake: int) -> str:
    return _iso(((snowflake >> 22) + DISCORD_EPOCH_MS) / 1000)


class _Snowflakes:
    """Increasing snowflakes carrying the current time, like Discord's."""

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        now_ms = int(time.time() * 1000) - DISCORD_EPOCH_MS
        self._last = max((now_ms << 22) | (1 << 17), self._last + 1)
        return self._last


def _content_type(filename: str) -> str | None:
    guessed, _ = mimetypes.guess_type(filename)
    if guessed is not None and guessed.startswith("text/"):
        return f"{guessed}; charset=utf-8"
    return guessed


def _truthy_query(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true")


def _children(component: JSON) -> Iterator[tuple[str | int, JSON]]:
    """A component's nested components with their key in the payload (rows, labels, ...)."""
    yield from enumerate(component.get("components") or [])
    for key in ("component", "accessory"):
        if isinstance(component.get(key), dict):
            yield key, component[key]


def _walk(components: list[JSON], path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, JSON]]:
    """Every component in document order, with its path inside `components`."""
    for index, component in enumerate(components):
        here = (*path, index)
        yield here, component
        yield from _walk_inside(component, here)


def _walk_inside(parent: JSON, where: tuple[Any, ...]) -> Iterator[tuple[Any, JSON]]:
    for key, child in _children(parent):
        here = (*where, "components", key) if isinstance(key, int) else (*where, key)
        yield here, child
        yield from _walk_inside(child, here)


def _with_ids(components: list[JSON]) -> list[JSON]:
    """A copy with every component numbered, as Discord numbers those sent without an id."""
    numbered = copy.deepcopy(components)
    used = {c["id"] for _, c in _walk(numbered) if isinstance(c.get("id"), int)}
    counter = 0
    for _, component in _walk(numbered):
        if "id" not in component:
            counter += 1
            while counter in used:
                counter += 1
            component["id"] = counter
    return numbered


def _check_components(components: Any, flags: int) -> None:
    if not isinstance(components, list):
        raise _form_error(["components"], "LIST_TYPE_CONVERT", "Must be an array.")
    v2 = bool(flags & IS_COMPONENTS_V2)
    if not v2 and len(components) > 5:
        raise _too_long(["components"], 5)
    seen: set[str] = set()
    for path, component in _walk(components):
        where = ["components", *path]
        kind = component.get("type")
        if not v2 and len(path) == 1 and kind != 1:
            raise _form_error([*where, "type"], "UNION_TYPE_CHOICES", "Value must be one of {1}.")
        if kind == 1 and not 1 <= len(component.get("components") or []) <= 5:
            raise _form_error(
                [*where, "components"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 5 in length."
            )
        if kind == 2:
            _check_button(component, where)
        custom_id = component.get("custom_id")
        if custom_id is not None:
            if len(str(custom_id)) > 100:
                raise _too_long([*where, "custom_id"], 100)
            if custom_id in seen:
                raise _form_error(
                    [*where, "custom_id"],
                    "COMPONENT_CUSTOM_ID_DUPLICATED",
                    "Component custom id cannot be duplicated",
                )
            seen.add(custom_id)


def _check_button(button: JSON, where: list[Any]) -> None:
    if len(button.get("label") or "") > 80:
        raise _too_long([*where, "label"], 80)
    style = button.get("style")
    if style == 5 and not button.get("url"):
        raise _form_error([*where, "url"], "BASE_TYPE_REQUIRED", "This field is required")
    if style in (1, 2, 3, 4) and not button.get("custom_id"):
        raise _form_error([*where, "custom_id"], "BASE_TYPE_REQUIRED", "This field is required")


_EMBED_LIMITS = (("title", 256), ("description", 4096))


def _check_embeds(embeds: Any) -> None:
    if not isinstance(embeds, list):
        raise _form_error(["embeds"], "LIST_TYPE_CONVERT", "Must be an array.")
    if len(embeds) > 10:
        raise _too_long(["embeds"], 10)
    total = 0
    for index, embed in enumerate(embeds):
        for key, limit in _EMBED_LIMITS:
            text = embed.get(key) or ""
            if len(text) > limit:
                raise _too_long(["embeds", index, key], limit)
            total += len(text)
        fields = embed.get("fields") or []
        if len(fields) > 25:
            raise _too_long(["embeds", index, "fields"], 25)
        for number, item in enumerate(fields):
            for key, limit in (("name", 256), ("value", 1024)):
                text = item.get(key) or ""
                if len(text) > limit:
                    raise _too_long(["embeds", index, "fields", number, key], limit)
                total += len(text)
        for key, inner, limit in (("footer", "text", 2048), ("author", "name", 256)):
            text = (embed.get(key) or {}).get(inner) or ""
            if len(text) > limit:
                raise _too_long(["embeds", index, key, inner], limit)
            total += len(text)
    if total > 6000:
        raise _form_error(
            ["embeds"], "MAX_EMBED_SIZE_EXCEEDED", "Embed size exceeds maximum size of 6000"
        )


def _check_message_fields(payload: JSON, flags: int) -> None:
    """The limits Discord enforces on a message's fields (create, edit, interaction data)."""
    content = payload.get("content")
    if content is not None:
        if not isinstance(content, str):
            raise _form_error(["content"], "STRING_TYPE_CONVERT", "Must be a string.")
        if len(content) > 2000:
            raise _too_long(["content"], 2000)
    if payload.get("embeds") is not None:
        _check_embeds(payload["embeds"])
    if payload.get("components") is not None:
        _check_components(payload["components"], flags)
    if flags & IS_COMPONENTS_V2:
        for key in ("content", "embeds"):
            if payload.get(key):
                raise _form_error(
                    [key],
                    "MESSAGE_CANNOT_USE_LEGACY_FIELDS_WITH_COMPONENTS_V2",
                    f"The '{key}' field cannot be used when using MessageFlags.IS_COMPONENTS_V2",
                )
    if len(payload.get("attachments") or []) > 10:
        raise _too_long(["attachments"], 10)


def _embed_json(embed: JSON) -> JSON:
    return {"type": "rich", **embed, "content_scan_version": 0}


# ── the server ────────────────────────────────────────────────────────────────


class DiscordServer:
    """Discord for one guild, its users and one bot; see the module docstring."""

    def __init__(self, *, heartbeat_interval_ms: int = 41250) -> None:
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.port = 0
        self.messages: dict[int, Message] = {}
        self.threads: dict[int, JSON] = {}
        self.commands: dict[int | None, list[JSON]] = {}
        self.callbacks: list[JSON] = []
        self.identify_count = 0
        self.resume_count = 0
        self.intents: int | None = None
        self.rate_limited = 0
        self.requests: list[tuple[str, str]] = []
        """(method, path below /api/v10) of every REST request, in order."""
        self.interactions: dict[int, Interaction] = {}
        self._ids = _Snowflakes()
        self._channels: dict[int, JSON] = {
            CHANNEL_GENERAL: self._text_channel(CHANNEL_GENERAL, "general", 0),
            CHANNEL_OTHER: self._text_channel(CHANNEL_OTHER, "other", 1),
        }
        self._dms: dict[int, int] = {}
        self._files: dict[int, Attachment] = {}
        self._states: dict[int, _InteractionState] = {}
        self._by_token: dict[str, _InteractionState] = {}
        self._rate_limits: list[_RateLimitRule] = []
        self._session: _Session | None = None
        self._conn: _Connection | None = None
        self._sockets: set[web.WebSocketResponse] = set()
        self._ready_sent = False
        self._dispatch_lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None

    # ── lifecycle ─────────────────────────────────────────────────────────

    async def start(self) -> None:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{channel_id}/{attachment_id}/{filename}", self._cdn)
        for method, path, handler in self._routes():
            app.router.add_route(method, API_PREFIX + path, handler)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def close(self) -> None:
        for ws in list(self._sockets):
            await ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return self.base_url + API_PREFIX

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    # ── looking at what happened ──────────────────────────────────────────

    def channel_messages(self, channel_id: int, *, by_bot: bool | None = None) -> list[Message]:
        """The channel's messages that were not deleted, oldest first."""
        found = [
            message
            for message in self.messages.values()
            if message.channel_id == channel_id
            and not message.deleted
            and (by_bot is None or (message.author_id == BOT_ID) == by_bot)
        ]
        return sorted(found, key=lambda message: message.id)

    def interaction_messages(self, interaction: Interaction) -> list[Message]:
        """Messages an interaction's response made: the original response, then follow-ups."""
        state = self._states[interaction.id]
        found = (self.messages[message_id] for message_id in state.created)
        return [message for message in found if not message.deleted]

    async def wait_for(
        self,
        predicate: Callable[[], object],
        timeout: float = 30.0,  # noqa: ASYNC109 - a deadline on server state, not on one call
    ) -> object:
        """Wait until `predicate()` is truthy and return its value. A LookupError from the
        predicate (an index or key that is not there yet) counts as not yet."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            changed = self._changed
            try:
                value = predicate()
            except LookupError:
                value = None
            if value:
                return value
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(
                    f"timed out after {timeout:g}s waiting for {_describe(predicate)}\n"
                    + self.summary()
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(0.05, remaining))

    async def wait_ready(self, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        """Until the bot identified, got READY and GUILD_CREATE, and is connected."""
        await self.wait_for(lambda: self._ready_sent and self._conn is not None, timeout)

    def summary(self) -> str:
        """What the server saw lately, for failure messages."""
        lines = [
            f"gateway: {'connected' if self._conn else 'not connected'}, "
            f"identify={self.identify_count} resume={self.resume_count} intents={self.intents}"
        ]
        recent = sorted(self.messages.values(), key=lambda message: message.id)[-12:]
        lines.append("last messages:")
        for message in recent:
            who = "bot" if message.author_id == BOT_ID else str(message.author_id)
            state = " (deleted)" if message.deleted else ""
            lines.append(
                f"  {message.id} in {message.channel_id} by {who}{state}: {message.content[:100]!r}"
                f" files={[a.name for a in message.attachments]}"
            )
        lines.append(
            f"last callbacks: {[(c['type'], c['interaction_id']) for c in self.callbacks[-5:]]}"
        )
        lines.append(f"last requests: {self.requests[-10:]}")
        return "\n".join(lines)

    # ── what users do ─────────────────────────────────────────────────────

    async def post_message(
        self,
        channel_id: int,
        content: str,
        *,
        author: int = ALICE,
        mention_bot: bool = False,
        attachments: Sequence[tuple[str, bytes]] = (),
        reply_to: int | Message | None = None,
    ) -> Message:
        """A user posts a message (in a channel, thread or DM); the bot gets MESSAGE_CREATE."""
        self._require_channel(channel_id)
        if mention_bot:
            content = f"<@{BOT_ID}> {content}"
        reference = self._require_message(reply_to) if reply_to is not None else None
        users, roles, everyone = self._parse_mentions(content, None, author, reference)
        message = Message(
            id=self._ids.next(),
            channel_id=channel_id,
            author_id=author,
            content=content,
            attachments=[self._store_file(name, data) for name, data in attachments],
            reference_id=reference.id if reference else None,
            type=19 if reference else 0,
            mentions=users,
        )
        message._meta.update(mention_roles=roles, mention_everyone=everyone)
        await self._publish(message)
        return message

    async def dm_channel(self, user: int = ALICE) -> int:
        """The id of the user's DM channel with the bot, opened if need be."""
        return int(self._open_dm_channel(user)["id"])

    async def edit_message(self, message_id: int, content: str) -> None:
        """The author edits their message; the bot gets MESSAGE_UPDATE."""
        message = self._require_message(message_id)
        reference = self.messages.get(message.reference_id or 0)
        if content != message.content:
            message.edits.append(message.content)
            message.content = content
        users, roles, everyone = self._parse_mentions(content, None, message.author_id, reference)
        message.mentions = users
        message._meta.update(mention_roles=roles, mention_everyone=everyone, edited=_iso())
        await self._updated(message)

    async def delete_message(self, message_id: int) -> None:
        """The author deletes their message; the bot gets MESSAGE_DELETE."""
        await self._delete(self._require_message(message_id))

    async def slash(
        self,
        name: str,
        options: dict[str, object] | None = None,
        *,
        channel_id: int = CHANNEL_GENERAL,
        user: int = ALICE,
    ) -> Interaction:
        """A user runs a synced slash command; "group sub" names a subcommand. Option values
        are plain values; users, channels and roles by id; attachments as (filename, bytes)."""
        top, *path = name.split()
        command = self._find_command(top, 1, channel_id)
        data: JSON = {"id": command["id"], "name": top, "type": 1}
        if "guild_id" in command:
            data["guild_id"] = command["guild_id"]
        container, definitions = data, command.get("options") or []
        for part in path:
            sub = next((o for o in definitions if o["name"] == part and o["type"] in (1, 2)), None)
            if sub is None:
                raise AssertionError(f"/{top} has no subcommand {part!r}")
            node: JSON = {"type": sub["type"], "name": part}
            container.setdefault("options", []).append(node)
            container, definitions = node, sub.get("options") or []
        resolved: JSON = {}
        values = self._command_options(name, definitions, options or {}, resolved, channel_id)
        if values:
            container["options"] = values
        if resolved:
            data["resolved"] = resolved
        return await self._interact(
            APPLICATION_COMMAND, data, channel_id, user, name=name, command_type=1
        )

    async def context_menu(self, name: str, message: Message, *, user: int = ALICE) -> Interaction:
        """A user runs a message context-menu command (Apps → name) on `message`."""
        target = self._require_message(message)
        command = self._find_command(name, 3, target.channel_id)
        data: JSON = {
            "id": command["id"],
            "name": name,
            "type": 3,
            "target_id": str(target.id),
            # message commands see the target's content even without the content intent
            "resolved": {"messages": {str(target.id): self._message_json(target)}},
        }
        if "guild_id" in command:
            data["guild_id"] = command["guild_id"]
        return await self._interact(
            APPLICATION_COMMAND, data, target.channel_id, user, name=name, command_type=3
        )

    async def click(
        self,
        message: Message,
        custom_id: str,
        *,
        user: int = ALICE,
        values: Sequence[str] | None = None,
    ) -> Interaction:
        """A user clicks a button (or picks `values` in a select menu) on the message as it
        is now on the server."""
        current = self._require_message(message)
        component = next(
            (
                c
                for _, c in _walk(current._meta.get("components", []))
                if c.get("custom_id") == custom_id
            ),
            None,
        )
        if component is None:
            present = [c.get("custom_id") for _, c in _walk(current._meta.get("components", []))]
            raise AssertionError(f"message {current.id} has no component {custom_id!r}: {present}")
        if component.get("disabled"):
            raise AssertionError(f"component {custom_id!r} is disabled")
        data: JSON = {
            "custom_id": custom_id,
            "component_type": component["type"],
            "id": component["id"],
        }
        if component["type"] in _SELECT_TYPES:
            data["values"] = list(values or [])
        return await self._interact(
            MESSAGE_COMPONENT, data, current.channel_id, user, source=current
        )

    async def submit_modal(
        self,
        opened: dict[str, Any],
        values: dict[str, Any],
        *,
        channel_id: int,
        user: int = ALICE,
    ) -> Interaction:
        """A user fills in and submits the modal the bot opened (`opened` is the data of its
        type 9 callback); `values` by text input custom_id (a list for select menus)."""
        origin = self._modal_origin(opened)
        answered: set[str] = set()
        components = [
            self._modal_answer(component, values, answered)
            for component in _with_ids(opened.get("components") or [])
        ]
        unknown = set(values) - answered
        if unknown:
            raise AssertionError(f"the modal has no inputs {sorted(unknown)}")
        data: JSON = {"custom_id": opened["custom_id"], "components": components}
        source = None
        if origin is not None and origin.source_message is not None:
            source = self.messages[origin.source_message]
        return await self._interact(MODAL_SUBMIT, data, channel_id, user, source=source)

    def expire(self, interaction: Interaction) -> None:
        """The interaction's token stops working, as after Discord's 3 s / 15 min limits."""
        self._states[interaction.id].expired = True
        self._touch()

    def rate_limit_next(self, method: str, path_contains: str, retry_after: float = 0.3) -> None:
        """The next REST request with this method whose path contains the text gets a 429."""
        self._rate_limits.append(_RateLimitRule(method.upper(), path_contains, retry_after))

    async def drop_gateway(self, code: int = 4000) -> None:
        """Close the bot's gateway connection; later dispatches wait for its RESUME.
        4007 and 4009 also end the session, so the RESUME is refused."""
        async with self._dispatch_lock:
            conn, self._conn = self._conn, None
        if code in (4007, 4009) and self._session is not None:
            self._session.invalid = True
        if conn is not None:
            await conn.ws.close(code=code, message=b"dropped by the test")
        self._touch()

    # ── users, members, channels ──────────────────────────────────────────

    @staticmethod
    def _user(user_id: int) -> JSON:
        username, global_name, discriminator, bot = _USERS.get(
            user_id, (f"user{user_id % 10000}", None, "0", False)
        )
        data: JSON = {
            "id": str(user_id),
            "username": username,
            "global_name": global_name,
            "discriminator": discriminator,
            "avatar": None,
            "avatar_decoration_data": None,
            "public_flags": 0,
        }
        if bot:
            data["bot"] = True
        return data

    @staticmethod
    def _permissions(user_id: int) -> int:
        return ALL_PERMISSIONS if user_id == OWNER else EVERYONE_PERMISSIONS

    def _member(self, user_id: int, *, with_user: bool = True, permissions: bool = False) -> JSON:
        data: JSON = {
            "roles": [str(role) for role in _MEMBER_ROLES.get(user_id, ())],
            "nick": None,
            "avatar": None,
            "banner": None,
            "joined_at": GUILD_JOINED_AT,
            "premium_since": None,
            "deaf": False,
            "mute": False,
            "flags": 0,
            "pending": False,
            "communication_disabled_until": None,
        }
        if with_user:
            data["user"] = self._user(user_id)
        if permissions:
            data["permissions"] = str(self._permissions(user_id))
        return data

    @staticmethod
    def _role(role_id: int) -> JSON:
        everyone = role_id == GUILD_ID
        return {
            "id": str(role_id),
            "name": "@everyone" if everyone else "member",
            "color": 0,
            "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
            "hoist": False,
            "icon": None,
            "unicode_emoji": None,
            "position": 0 if everyone else 1,
            "permissions": str(EVERYONE_PERMISSIONS if everyone else 0),
            "managed": False,
            "mentionable": False,
            "flags": 0,
            "description": None,
        }

    @staticmethod
    def _text_channel(channel_id: int, name: str, position: int) -> JSON:
        return {
            "id": str(channel_id),
            "type": GUILD_TEXT,
            "guild_id": str(GUILD_ID),
            "name": name,
            "position": position,
            "permission_overwrites": [],
            "parent_id": None,
            "topic": None,
            "nsfw": False,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "default_thread_rate_limit_per_user": 0,
            "flags": 0,
        }

    def _open_dm_channel(self, user_id: int) -> JSON:
        if user_id not in self._dms:
            channel_id = self._ids.next()
            self._channels[channel_id] = {
                "id": str(channel_id),
                "type": DM,
                "last_message_id": None,
                "flags": 0,
                "recipients": [self._user(user_id)],
            }
            self._dms[user_id] = channel_id
            self._touch()
        return self._channels[self._dms[user_id]]

    def _require_channel(self, channel_id: int) -> JSON:
        channel = self._channels.get(channel_id)
        if channel is None:
            raise AssertionError(f"no channel {channel_id} on the server")
        return channel

    def _require_message(self, message: int | Message) -> Message:
        message_id = message if isinstance(message, int) else message.id
        found = self.messages.get(message_id)
        if found is None or found.deleted:
            raise AssertionError(f"no message {message_id} on the server")
        return found

    def _guild_create(self) -> JSON:
        members = [self._member(user_id) for user_id in _MEMBER_ROLES]
        channels = [
            {key: value for key, value in channel.items() if key != "guild_id"}
            for channel in self._channels.values()
            if channel["type"] == GUILD_TEXT
        ]
        active_threads = [
            thread for thread in self.threads.values() if not thread["thread_metadata"]["archived"]
        ]
        return {
            "id": str(GUILD_ID),
            "name": "Cellmate Test Server",
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "banner": None,
            "description": None,
            "owner_id": str(OWNER),
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 1,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "premium_tier": 0,
            "premium_subscription_count": 0,
            "premium_progress_bar_enabled": False,
            "preferred_locale": "en-US",
            "system_channel_id": str(CHANNEL_GENERAL),
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "public_updates_channel_id": None,
            "safety_alerts_channel_id": None,
            "application_id": None,
            "vanity_url_code": None,
            "max_members": 500000,
            "max_presences": None,
            "max_video_channel_users": 25,
            "max_stage_video_channel_users": 50,
            "incidents_data": None,
            "features": [],
            "roles": [self._role(GUILD_ID), self._role(ROLE_MEMBER)],
            "emojis": [],
            "stickers": [],
            # the GUILD_CREATE extras
            "joined_at": GUILD_JOINED_AT,
            "large": False,
            "unavailable": False,
            "lazy": True,
            "member_count": len(members),
            "members": members,
            "channels": channels,
            "threads": active_threads,
            "presences": [],
            "voice_states": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }

    def _application(self) -> JSON:
        return {
            "id": str(APP_ID),
            "name": "Cellmate",
            "icon": None,
            "description": "",
            "summary": "",
            "type": None,
            "hook": True,
            "bot_public": True,
            "bot_require_code_grant": False,
            "verify_key": "0" * 64,
            "flags": 0,
            "owner": self._user(OWNER),
            "team": None,
            "bot": self._user(BOT_ID),
            "redirect_uris": [],
            "interactions_endpoint_url": None,
            "approximate_guild_count": 1,
            "tags": [],
            "integration_types_config": {"0": {}},
        }

    def _me(self) -> JSON:
        return {
            **self._user(BOT_ID),
            "verified": True,
            "mfa_enabled": False,
            "email": None,
            "flags": 0,
            "locale": "en-US",
            "premium_type": 0,
            "banner": None,
            "accent_color": None,
        }

    # ── messages ──────────────────────────────────────────────────────────

    def _store_file(
        self, filename: str, content: bytes, description: str | None = None
    ) -> Attachment:
        attachment = Attachment(
            name=filename,
            content=content,
            content_type=_content_type(filename),
            id=self._ids.next(),
            description=description,
        )
        self._files[attachment.id] = attachment
        return attachment

    def _attachment_json(self, attachment: Attachment, channel_id: int, *, ephemeral: bool) -> JSON:
        now = int(time.time())
        # Discord signs CDN links and lets them expire; the server serves them regardless.
        signature = hashlib.sha256(f"{attachment.id}".encode()).hexdigest()
        url = (
            f"{self.base_url}/attachments/{channel_id}/{attachment.id}/{attachment.name}"
            f"?ex={now + 86400:x}&is={now:x}&hm={signature}&"
        )
        data: JSON = {
            "id": str(attachment.id),
            "filename": attachment.name,
            "size": len(attachment.content),
            "url": url,
            "proxy_url": url,
        }
        if attachment.content_type is not None:
            data["content_type"] = attachment.content_type
        if attachment.description is not None:
            data["description"] = attachment.description
        if ephemeral:
            data["ephemeral"] = True
        return data

    def _message_json(self, message: Message, *, nested: bool = False) -> JSON:
        """The message object as the REST API returns it."""
        meta = message._meta
        channel = self._channels.get(message.channel_id, {})
        ephemeral = bool(message.flags & EPHEMERAL)
        data: JSON = {
            "type": message.type,
            "content": message.content,
            "mentions": [self._user(user_id) for user_id in message.mentions],
            "mention_roles": [str(role) for role in meta.get("mention_roles", [])],
            "attachments": [
                self._attachment_json(a, message.channel_id, ephemeral=ephemeral)
                for a in message.attachments
            ],
            "embeds": [_embed_json(embed) for embed in message.embeds],
            "timestamp": _snowflake_time(message.id),
            "edited_timestamp": meta.get("edited"),
            "flags": message.flags,
            "components": meta.get("components", []),
            "id": str(message.id),
            "channel_id": str(message.channel_id),
            "author": self._user(message.author_id),
            "pinned": False,
            "mention_everyone": meta.get("mention_everyone", False),
            "tts": meta.get("tts", False),
        }
        if "guild_id" in channel:
            data["guild_id"] = channel["guild_id"]
        if meta.get("nonce") is not None:
            data["nonce"] = meta["nonce"]
        if message.interaction_id is not None:
            data["webhook_id"] = str(APP_ID)
            data["application_id"] = str(APP_ID)
            data.update(meta.get("interaction", {}))
        if message.reactions:
            data["reactions"] = [self._reaction_json(emoji) for emoji in message.reactions]
        if message.thread_id is not None and message.thread_id in self.threads:
            data["thread"] = self.threads[message.thread_id]
        if message.reference_id is not None:
            data["message_reference"] = self._reference_json(message.reference_id)
            if not nested:
                referenced = self.messages.get(message.reference_id)
                data["referenced_message"] = (
                    None
                    if referenced is None or referenced.deleted
                    else self._message_json(referenced, nested=True)
                )
        return data

    def _reference_json(self, message_id: int) -> JSON:
        referenced = self.messages[message_id]
        data: JSON = {
            "type": 0,
            "message_id": str(message_id),
            "channel_id": str(referenced.channel_id),
        }
        guild_id = self._channels.get(referenced.channel_id, {}).get("guild_id")
        if guild_id is not None:
            data["guild_id"] = guild_id
        return data

    @staticmethod
    def _emoji_json(emoji: str) -> JSON:
        name, _, emoji_id = emoji.partition(":")
        return {"id": emoji_id or None, "name": name}

    def _reaction_json(self, emoji: str) -> JSON:
        return {
            "count": 1,
            "count_details": {"burst": 0, "normal": 1},
            "me": True,
            "me_burst": False,
            "burst_colors": [],
            "emoji": self._emoji_json(emoji),
        }

    def _bot_can_read(self, message: Message) -> bool:
        """Discord's message content rule: without the intent, only the bot's own messages,
        DMs and messages that mention the bot carry their content."""
        if self.intents is not None and self.intents & MESSAGE_CONTENT:
            return True
        channel = self._channels.get(message.channel_id, {})
        return (
            message.author_id == BOT_ID or channel.get("type") == DM or BOT_ID in message.mentions
        )

    def _as_seen_by_bot(self, message: Message, data: JSON) -> JSON:
        if not self._bot_can_read(message):
            data = {**data, "content": "", "embeds": [], "attachments": [], "components": []}
            data.pop("poll", None)
        referenced = data.get("referenced_message")
        if referenced is not None and message.reference_id in self.messages:
            data["referenced_message"] = self._as_seen_by_bot(
                self.messages[message.reference_id], referenced
            )
        return data

    def _gateway_message(self, message: Message) -> JSON:
        """The message as MESSAGE_CREATE / MESSAGE_UPDATE carry it: content rules applied,
        and members alongside users in guilds."""
        data = self._as_seen_by_bot(message, self._message_json(message))
        if "guild_id" in data:
            if message.interaction_id is None and message.author_id in _MEMBER_ROLES:
                data["member"] = self._member(message.author_id, with_user=False)
            data["mentions"] = [
                {**self._user(user_id), "member": self._member(user_id, with_user=False)}
                if user_id in _MEMBER_ROLES
                else self._user(user_id)
                for user_id in message.mentions
            ]
        return data

    @staticmethod
    def _message_intent(channel: JSON) -> int:
        return DIRECT_MESSAGES if channel.get("type") == DM else GUILD_MESSAGES

    async def _publish(self, message: Message) -> None:
        """Store a new message and tell the bot, as Discord does for every visible message."""
        self.messages[message.id] = message
        channel = self._channels[message.channel_id]
        channel["last_message_id"] = str(message.id)
        if channel["type"] in _THREAD_TYPES:
            channel["message_count"] += 1
            channel["total_message_sent"] += 1
        message.raw = self._message_json(message)
        if message.flags & EPHEMERAL:
            self._touch()  # only the user sees ephemeral messages: no gateway event
            return
        await self._dispatch(
            "MESSAGE_CREATE",
            self._gateway_message(message),
            intent=self._message_intent(channel),
        )

    async def _updated(self, message: Message) -> None:
        message.raw = self._message_json(message)
        if message.flags & EPHEMERAL:
            self._touch()
            return
        channel = self._channels[message.channel_id]
        await self._dispatch(
            "MESSAGE_UPDATE",
            self._gateway_message(message),
            intent=self._message_intent(channel),
        )

    async def _delete(self, message: Message) -> None:
        message.deleted = True
        if message.flags & EPHEMERAL:
            self._touch()
            return
        channel = self._channels[message.channel_id]
        data: JSON = {"id": str(message.id), "channel_id": str(message.channel_id)}
        if "guild_id" in channel:
            data["guild_id"] = channel["guild_id"]
        await self._dispatch("MESSAGE_DELETE", data, intent=self._message_intent(channel))

    def _parse_mentions(
        self,
        content: str,
        allowed: JSON | None,
        author: int,
        reference: Message | None,
    ) -> tuple[list[int], list[int], bool]:
        """Users and roles a message pings, after `allowed_mentions`."""
        users = list(dict.fromkeys(int(m) for m in _USER_MENTION.findall(content)))
        users = [user for user in users if user in _USERS]
        roles = list(dict.fromkeys(int(m) for m in _ROLE_MENTION.findall(content)))
        roles = [role for role in roles if role == ROLE_MEMBER]
        everyone = "@everyone" in content or "@here" in content
        replied_user = True
        if allowed is not None:
            parse = allowed.get("parse") or []
            listed_users = {str(user) for user in allowed.get("users") or []}
            listed_roles = {str(role) for role in allowed.get("roles") or []}
            users = [u for u in users if "users" in parse or str(u) in listed_users]
            roles = [r for r in roles if "roles" in parse or str(r) in listed_roles]
            everyone = everyone and "everyone" in parse
            replied_user = bool(allowed.get("replied_user", False))
        if (
            reference is not None
            and replied_user
            and reference.author_id != author
            and reference.author_id not in users
        ):
            users.append(reference.author_id)
        return users, roles, everyone

    def _resolve_attachments(
        self, payload: JSON, uploads: list[_Upload], existing: list[Attachment]
    ) -> list[Attachment] | None:
        """The attachments after a create or edit; None when an edit leaves them alone.
        In v10 `attachments` lists every attachment to keep: existing ones by their id and
        new uploads by their `files[n]` index."""
        listed = payload.get("attachments")
        if listed is None:
            if not uploads:
                return None
            return existing + [self._store_file(u.filename, u.content) for u in uploads]
        by_index = {upload.index: upload for upload in uploads}
        kept = {attachment.id: attachment for attachment in existing}
        result = []
        for position, entry in enumerate(listed):
            try:
                ident = int(entry["id"])
            except (KeyError, TypeError, ValueError):
                raise _form_error(
                    ["attachments", position, "id"], "BASE_TYPE_REQUIRED", "This field is required"
                ) from None
            if ident in kept:
                result.append(kept[ident])
            elif ident in by_index:
                upload = by_index[ident]
                name = entry.get("filename") or upload.filename
                result.append(self._store_file(name, upload.content, entry.get("description")))
            else:
                raise _form_error(
                    ["attachments", position],
                    "ATTACHMENT_NOT_FOUND",
                    f"Attachment data not found for id {ident}",
                )
        return result

    def _compose(
        self,
        channel_id: int,
        payload: JSON,
        uploads: list[_Upload],
        *,
        allowed_flags: int = _SENDABLE_FLAGS,
    ) -> Message:
        """A new bot message from a create payload (channel message, interaction response or
        follow-up), checked like Discord checks it."""
        flags = int(payload.get("flags") or 0) & allowed_flags
        _check_message_fields(payload, flags)
        attachments = self._resolve_attachments(payload, uploads, []) or []
        content = payload.get("content") or ""
        embeds = payload.get("embeds") or []
        components = payload.get("components") or []
        if not (
            content.strip()
            or embeds
            or attachments
            or components
            or payload.get("sticker_ids")
            or payload.get("poll")
        ):
            raise DiscordError(400, 50006, "Cannot send an empty message")
        reference = self._reference(payload.get("message_reference"))
        allowed = payload.get("allowed_mentions")
        users, roles, everyone = self._parse_mentions(content, allowed, BOT_ID, reference)
        message = Message(
            id=self._ids.next(),
            channel_id=channel_id,
            author_id=BOT_ID,
            content=content,
            attachments=attachments,
            embeds=embeds,
            components=components,
            flags=flags,
            allowed_mentions=allowed,
            reference_id=reference.id if reference else None,
            type=19 if reference else 0,
            mentions=users,
        )
        message._meta.update(
            mention_roles=roles,
            mention_everyone=everyone,
            tts=bool(payload.get("tts")),
            nonce=payload.get("nonce"),
            components=_with_ids(components),
        )
        return message

    def _reference(self, reference: JSON | None) -> Message | None:
        if not reference or reference.get("type", 0) != 0:
            return None
        found = self.messages.get(int(reference.get("message_id") or 0))
        if found is not None and not found.deleted:
            return found
        if reference.get("fail_if_not_exists", True):
            raise _form_error(
                ["message_reference"], "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message"
            )
        return None

    def _edit(self, message: Message, payload: JSON, uploads: list[_Upload]) -> None:
        """Apply an edit payload (REST edit, webhook edit, UPDATE_MESSAGE callback)."""
        flags = message.flags
        if "flags" in payload:
            # only SUPPRESS_EMBEDS can be changed by an edit, and components v2 turned on
            requested = int(payload["flags"] or 0)
            flags = (flags & ~SUPPRESS_EMBEDS) | (requested & (SUPPRESS_EMBEDS | IS_COMPONENTS_V2))
        _check_message_fields(payload, flags)
        content = message.content
        if "content" in payload:
            content = payload["content"] or ""
        embeds = message.embeds if "embeds" not in payload else payload["embeds"] or []
        components = (
            message.components if "components" not in payload else payload["components"] or []
        )
        attachments = self._resolve_attachments(payload, uploads, message.attachments)
        if attachments is None:
            attachments = message.attachments
        if not (content.strip() or embeds or attachments or components):
            raise DiscordError(400, 50006, "Cannot send an empty message")
        was_loading = bool(message.flags & LOADING)
        if content != message.content:
            message.edits.append(message.content)
            message.content = content
        message.embeds = embeds
        if components is not message.components:
            message.components = components
            message._meta["components"] = _with_ids(components)
        message.attachments = attachments
        message.flags = flags & ~LOADING
        if "allowed_mentions" in payload:
            message.allowed_mentions = payload["allowed_mentions"]
        reference = self.messages.get(message.reference_id or 0)
        users, roles, everyone = self._parse_mentions(
            content, message.allowed_mentions, BOT_ID, reference
        )
        message.mentions = users
        message._meta.update(mention_roles=roles, mention_everyone=everyone)
        if not was_loading:  # the deferred response's first edit is its first version
            message._meta["edited"] = _iso()

    # ── threads ───────────────────────────────────────────────────────────

    def _new_thread(self, parent: JSON, thread_id: int, payload: JSON, kind: int) -> JSON:
        name = payload.get("name")
        if not isinstance(name, str) or not 1 <= len(name) <= 100:
            raise _form_error(
                ["name"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
            )
        duration = payload.get("auto_archive_duration", 4320)
        if duration not in (60, 1440, 4320, 10080):
            raise _form_error(
                ["auto_archive_duration"],
                "BASE_TYPE_CHOICES",
                "Value must be one of {60, 1440, 4320, 10080}.",
            )
        now = _iso()
        thread: JSON = {
            "id": str(thread_id),
            "type": kind,
            "guild_id": str(GUILD_ID),
            "parent_id": parent["id"],
            "owner_id": str(BOT_ID),
            "name": name,
            "last_message_id": None,
            "message_count": 0,
            "member_count": 1,
            "total_message_sent": 0,
            "rate_limit_per_user": int(payload.get("rate_limit_per_user") or 0),
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": duration,
                "archive_timestamp": now,
                "locked": False,
                "create_timestamp": now,
            },
        }
        if kind == PRIVATE_THREAD:
            thread["thread_metadata"]["invitable"] = bool(payload.get("invitable", True))
        self.threads[thread_id] = thread
        self._channels[thread_id] = thread
        return thread

    def _thread_member(self, thread_id: int) -> JSON:
        return {
            "id": str(thread_id),
            "user_id": str(BOT_ID),
            "join_timestamp": self.threads[thread_id]["thread_metadata"]["create_timestamp"],
            "flags": 1,
        }

    async def _thread_created(self, thread_id: int) -> JSON:
        """THREAD_CREATE to the bot, which owns (and so is a member of) the new thread;
        returns the thread as the REST API answers its creation."""
        thread = {**self.threads[thread_id], "member": self._thread_member(thread_id)}
        await self._dispatch("THREAD_CREATE", {**thread, "newly_created": True}, intent=GUILDS)
        return thread

    # ── interactions ──────────────────────────────────────────────────────

    def _find_command(self, name: str, kind: int, channel_id: int) -> JSON:
        channel = self._require_channel(channel_id)
        in_guild = "guild_id" in channel
        places = [(GUILD_ID, 0), (None, 0)] if in_guild else [(None, 1)]
        for key, context in places:
            for command in self.commands.get(key, []):
                if command["name"] != name or command.get("type", 1) != kind:
                    continue
                contexts = command.get("contexts")
                if contexts is not None and context not in contexts:
                    continue
                if context == 1 and command.get("dm_permission") is False:
                    continue
                return command
        synced = {key: [c["name"] for c in value] for key, value in self.commands.items()}
        raise AssertionError(
            f"no command {name!r} (type {kind}) usable in channel {channel_id}; synced: {synced}"
        )

    def _command_options(
        self,
        command: str,
        definitions: list[JSON],
        values: dict[str, object],
        resolved: JSON,
        channel_id: int,
    ) -> list[JSON]:
        known = {definition["name"]: definition for definition in definitions}
        for key in values:
            if key not in known:
                raise AssertionError(f"/{command} has no option {key!r}; it has {list(known)}")
        for definition in definitions:
            if definition.get("required") and definition["name"] not in values:
                raise AssertionError(f"/{command} needs option {definition['name']!r}")
        options = []
        for key, value in values.items():
            definition = known[key]
            choices = definition.get("choices")
            if choices and value not in [choice["value"] for choice in choices]:
                raise AssertionError(f"{value!r} is not a choice of /{command} {key}: {choices}")
            kind = definition["type"]
            options.append(
                {
                    "name": key,
                    "type": kind,
                    "value": self._option_value(kind, value, resolved, channel_id),
                }
            )
        return options

    def _option_value(self, kind: int, value: Any, resolved: JSON, channel_id: int) -> Any:
        in_guild = "guild_id" in self._channels[channel_id]
        simple: dict[int, Callable[[Any], Any]] = {3: str, 4: int, 5: bool, 10: float}
        if kind in simple:
            return simple[kind](value)
        if kind == 11:
            filename, content = value
            attachment = self._store_file(filename, content)
            resolved.setdefault("attachments", {})[str(attachment.id)] = self._attachment_json(
                attachment, channel_id, ephemeral=True
            )
            return str(attachment.id)
        ident = int(value)
        if kind == 6 or (kind == 9 and ident in _USERS):
            resolved.setdefault("users", {})[str(ident)] = self._user(ident)
            if in_guild and ident in _MEMBER_ROLES:
                member = self._member(ident, with_user=False, permissions=True)
                resolved.setdefault("members", {})[str(ident)] = member
        elif kind in (8, 9):
            resolved.setdefault("roles", {})[str(ident)] = self._role(ident)
        elif kind == 7:
            channel = self._require_channel(ident)
            resolved.setdefault("channels", {})[str(ident)] = {
                key: channel[key]
                for key in ("id", "type", "name", "parent_id", "thread_metadata")
                if key in channel
            } | {"permissions": str(EVERYONE_PERMISSIONS)}
        return str(ident)

    def _modal_origin(self, opened: JSON) -> _InteractionState | None:
        for callback in reversed(self.callbacks):
            if callback["type"] == 9 and callback["data"] == opened:
                return self._states.get(callback["interaction_id"])
        return None

    def _modal_answer(self, component: JSON, values: dict[str, Any], answered: set[str]) -> JSON:
        """What the client sends back for one modal component, mirroring its layout."""
        kind = component["type"]
        answer: JSON = {"type": kind, "id": component["id"]}
        if kind == 1:
            answer["components"] = [
                self._modal_answer(child, values, answered)
                for child in component.get("components") or []
            ]
        elif kind == 18:
            answer["component"] = self._modal_answer(component["component"], values, answered)
        elif kind == 4:
            custom_id = component["custom_id"]
            value = str(values.get(custom_id, component.get("value") or ""))
            _check_text_input(component, value)
            answered.add(custom_id)
            answer.update(custom_id=custom_id, value=value)
        elif kind in _SELECT_TYPES:
            custom_id = component["custom_id"]
            chosen = values.get(custom_id, [])
            answered.add(custom_id)
            answer.update(
                custom_id=custom_id, values=[chosen] if isinstance(chosen, str) else list(chosen)
            )
        return answer

    def _interaction_channel(self, channel: JSON, user: int) -> JSON:
        return {**channel, "permissions": str(self._permissions(user))}

    async def _interact(
        self,
        kind: int,
        data: JSON,
        channel_id: int,
        user: int,
        *,
        name: str | None = None,
        command_type: int | None = None,
        source: Message | None = None,
    ) -> Interaction:
        """Create an interaction and dispatch INTERACTION_CREATE."""
        channel = self._require_channel(channel_id)
        interaction_id = self._ids.next()
        token = f"aW50ZXJhY3Rpb246{interaction_id}:{secrets.token_urlsafe(48)}"
        payload: JSON = {
            "id": str(interaction_id),
            "application_id": str(APP_ID),
            "type": kind,
            "data": data,
            "channel_id": str(channel_id),
            "channel": self._interaction_channel(channel, user),
            "token": token,
            "version": 1,
            "app_permissions": str(EVERYONE_PERMISSIONS),
            "locale": "en-US",
            "entitlements": [],
            "attachment_size_limit": MAX_UPLOAD,
        }
        if "guild_id" in channel:
            payload.update(
                guild_id=str(GUILD_ID),
                guild={"id": str(GUILD_ID), "locale": "en-US", "features": []},
                guild_locale="en-US",
                member=self._member(user, permissions=True),
                authorizing_integration_owners={"0": str(GUILD_ID)},
                context=0,
            )
        else:
            payload.update(
                user=self._user(user), authorizing_integration_owners={"0": "0"}, context=1
            )
        if source is not None:
            payload["message"] = self._message_json(source)
        interaction = Interaction(interaction_id, token, channel_id, payload)
        state = _InteractionState(
            interaction,
            kind,
            user,
            name=name,
            command_type=command_type,
            source_message=source.id if source else None,
        )
        self.interactions[interaction_id] = interaction
        self._states[interaction_id] = state
        self._by_token[token] = state
        await self._dispatch("INTERACTION_CREATE", payload)
        return interaction

    def _stamp(self, message: Message, state: _InteractionState, *, followup: bool) -> None:
        """Mark a message as made by an interaction, as Discord's message objects do."""
        interaction = state.interaction
        message.interaction_id = interaction.id
        guild = "guild_id" in self._channels[message.channel_id]
        metadata: JSON = {
            "id": str(interaction.id),
            "type": state.kind,
            "user": self._user(state.user),
            "authorizing_integration_owners": {"0": str(GUILD_ID) if guild else "0"},
        }
        extra: JSON = {"interaction_metadata": metadata}
        if state.kind == APPLICATION_COMMAND:
            message.type = 23 if state.command_type == 3 else 20
            if state.command_type == 3:
                metadata["target_message_id"] = interaction.raw["data"]["target_id"]
            legacy: JSON = {
                "id": str(interaction.id),
                "type": state.kind,
                "name": state.name,
                "user": self._user(state.user),
            }
            if guild:
                legacy["member"] = self._member(state.user, with_user=False)
            extra["interaction"] = legacy
        elif state.source_message is not None:
            # answers to a component (or a modal opened from one) reply to its message
            message.type = 19
            message.reference_id = state.source_message
            metadata["interacted_message_id"] = str(state.source_message)
        else:
            message.type = 20
        if followup and state.original_id is not None:
            metadata["original_response_message_id"] = str(state.original_id)
        message._meta["interaction"] = extra

    def _callback_json(self, state: _InteractionState, kind: int, message: Message | None) -> JSON:
        interaction: JSON = {"id": str(state.interaction.id), "type": state.kind}
        resource: JSON = {"type": kind}
        if message is not None:
            interaction["response_message_id"] = str(message.id)
            interaction["response_message_loading"] = bool(message.flags & LOADING)
            interaction["response_message_ephemeral"] = bool(message.flags & EPHEMERAL)
            if kind in (4, 7):
                resource["message"] = message.raw
        return {"interaction": interaction, "resource": resource}

    async def _respond(
        self, state: _InteractionState, kind: int, data: JSON, uploads: list[_Upload]
    ) -> Message | None:
        """Carry out an interaction callback; returns the message it made or changed."""
        channel_id = state.interaction.channel_id
        if kind in (4, 5):
            if kind == 4:
                message = self._compose(channel_id, data, uploads, allowed_flags=_INTERACTION_FLAGS)
            else:
                # "<bot> is thinking...": a placeholder the first edit or follow-up fills in
                flags = LOADING | (int(data.get("flags") or 0) & EPHEMERAL)
                message = Message(
                    id=self._ids.next(),
                    channel_id=channel_id,
                    author_id=BOT_ID,
                    content="",
                    flags=flags,
                )
                state.loading = True
            self._stamp(message, state, followup=False)
            state.original_id = message.id
            state.created.append(message.id)
            await self._publish(message)
            return message
        if kind == 6 and state.source_message is None:
            return None  # a modal opened by a command: the ACK has no message to update
        if kind in (6, 7):
            if state.source_message is None:
                raise _form_error(
                    ["type"],
                    "INTERACTION_RESPONSE_TYPE_INVALID",
                    "Invalid interaction response type",
                )
            state.original_id = state.source_message
            message = self.messages[state.source_message]
            if kind == 7:
                self._edit(message, data, uploads)
                await self._updated(message)
            return message
        if kind == 9:
            _check_modal(data)
        return None

    # ── the gateway ───────────────────────────────────────────────────────

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(timeout=2.0, compress=False, max_msg_size=16 * 1024 * 1024)
        await ws.prepare(request)
        if request.query.get("v", "10") != "10":
            await ws.close(code=4012, message=b"Invalid API version")
            return ws
        if request.query.get("encoding", "json") != "json":
            await ws.close(code=4002, message=b"Error while decoding payload.")
            return ws
        conn = _Connection(ws, request.query.get("compress"))
        self._sockets.add(ws)
        try:
            await conn.send(
                {
                    "op": 10,
                    "s": None,
                    "t": None,
                    "d": {
                        "heartbeat_interval": self.heartbeat_interval_ms,
                        "_trace": ['["gateway-prd-test",{"micros":0}]'],
                    },
                }
            )
            async for frame in ws:
                if frame.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    await self._on_gateway_frame(conn, frame.data)
        finally:
            self._sockets.discard(ws)
            if self._conn is conn:
                self._conn = None
            self._touch()
        return ws

    async def _on_gateway_frame(self, conn: _Connection, raw: str | bytes) -> None:
        try:
            payload = json.loads(raw)
            op, data = payload["op"], payload.get("d")
        except (ValueError, KeyError, TypeError):
            await conn.ws.close(code=4002, message=b"Error while decoding payload.")
            return
        if op == 1:
            await conn.send({"op": 11, "s": None, "t": None, "d": None})
        elif op == 2:
            await self._identify(conn, data or {})
        elif op == 6:
            await self._resume(conn, data or {})
        elif conn.session is None:
            await conn.ws.close(code=4003, message=b"Not authenticated.")
        elif op == 8:
            await self._request_members(data or {})
        elif op not in (3, 4):  # presence and voice state updates change nothing here
            await conn.ws.close(code=4001, message=b"Unknown opcode.")
        self._touch()

    async def _identify(self, conn: _Connection, data: JSON) -> None:
        if conn.session is not None:
            await conn.ws.close(code=4005, message=b"Already authenticated.")
            return
        if data.get("token") != TOKEN:
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return
        intents = data.get("intents")
        if not isinstance(intents, int) or intents < 0:
            await conn.ws.close(code=4013, message=b"Invalid intent(s).")
            return
        self.identify_count += 1
        self.intents = intents
        session = _Session(id=secrets.token_hex(16))
        ready: JSON = {
            "v": 10,
            "user": self._me(),
            "user_settings": {},
            "guilds": [{"id": str(GUILD_ID), "unavailable": True}],
            "session_id": session.id,
            "session_type": "normal",
            "resume_gateway_url": self.gateway_url,
            "application": {"id": str(APP_ID), "flags": 0},
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": ["local"],
            "_trace": ['["gateway-prd-test",{"micros":0}]'],
        }
        if "shard" in data:
            ready["shard"] = data["shard"]
        async with self._dispatch_lock:
            if self._session is not None:
                self._session.invalid = True
            self._session = session
            conn.session = session
            self._conn = conn
            self._ready_sent = False
            await self._emit(session, "READY", ready)
            await self._emit(session, "GUILD_CREATE", self._guild_create())
            self._ready_sent = True

    async def _resume(self, conn: _Connection, data: JSON) -> None:
        if conn.session is not None:
            await conn.ws.close(code=4005, message=b"Already authenticated.")
            return
        if data.get("token") != TOKEN:
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return
        session = self._session
        if session is None or session.invalid or data.get("session_id") != session.id:
            await conn.send({"op": 9, "s": None, "t": None, "d": False})
            return
        seen = data.get("seq") or 0
        if seen > session.seq:
            await conn.ws.close(code=4007, message=b"Invalid seq.")
            return
        self.resume_count += 1
        async with self._dispatch_lock:
            # replay what the bot missed, in order, before anything new
            for seq, text in session.log:
                if seq > seen:
                    await conn.send(text)
            conn.session = session
            self._conn = conn
            await self._emit(session, "RESUMED", {"_trace": ['["gateway-prd-test",{"micros":0}]']})

    async def _request_members(self, data: JSON) -> None:
        wanted = {int(user) for user in data.get("user_ids") or []}
        members = [
            self._member(user_id) for user_id in _MEMBER_ROLES if not wanted or user_id in wanted
        ]
        chunk: JSON = {
            "guild_id": str(GUILD_ID),
            "members": members,
            "chunk_index": 0,
            "chunk_count": 1,
            "not_found": [str(user) for user in wanted - set(_MEMBER_ROLES)],
        }
        if data.get("nonce") is not None:
            chunk["nonce"] = data["nonce"]
        await self._dispatch("GUILD_MEMBERS_CHUNK", chunk)

    async def _dispatch(self, event: str, data: JSON, *, intent: int | None = None) -> None:
        """Send an event to the bot, or keep it for the RESUME when it is disconnected."""
        session = self._session
        if session is None:
            print(f"discord_server: {event} before the bot identified, dropped", file=sys.stderr)
            self._touch()
            return
        if intent is not None and not (self.intents or 0) & intent:
            self._touch()
            return
        async with self._dispatch_lock:
            await self._emit(session, event, data)
        self._touch()

    async def _emit(self, session: _Session, event: str, data: JSON) -> None:
        """Number, record and (if connected) send one dispatch; the dispatch lock is held."""
        session.seq += 1
        text = _dumps({"op": 0, "s": session.seq, "t": event, "d": data})
        session.log.append((session.seq, text))
        conn = self._conn
        if conn is not None and conn.session is session:
            await conn.send(text)

    def _touch(self) -> None:
        """Wake everything waiting in `wait_for`."""
        self._changed.set()
        self._changed = asyncio.Event()

    # ── REST plumbing ─────────────────────────────────────────────────────

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        if not request.path.startswith(API_PREFIX + "/"):
            return await self._plain(request, handler)
        route = request.path[len(API_PREFIX) :]
        self.requests.append((request.method, route))
        try:
            limited = self._take_rate_limit(request.method, request.path)
            if limited is not None:
                return limited
            token_in_url = route.startswith(("/interactions/", "/webhooks/"))
            if not token_in_url and request.headers.get("Authorization") != f"Bot {TOKEN}":
                raise DiscordError(401, 0, "401: Unauthorized")
            response: web.StreamResponse = await handler(request)
        except DiscordError as exc:
            response = exc.response()
        except ValueError:  # an id in the path or body that is not a snowflake
            response = DiscordError(400, 50035, "Invalid Form Body").response()
        except web.HTTPNotFound:
            print(f"discord_server: no route for {request.method} {route}", file=sys.stderr)
            response = DiscordError(404, 0, "404: Not Found").response()
        except web.HTTPMethodNotAllowed:
            print(f"discord_server: no route for {request.method} {route}", file=sys.stderr)
            response = DiscordError(405, 0, "405: Method Not Allowed").response()
        finally:
            self._touch()
        response.headers["Via"] = "1.1 google"
        return response

    @staticmethod
    async def _plain(
        request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        try:
            result: web.StreamResponse = await handler(request)
        except web.HTTPNotFound:
            print(f"discord_server: no route for {request.method} {request.path}", file=sys.stderr)
            raise
        return result

    def _take_rate_limit(self, method: str, path: str) -> web.Response | None:
        rule = next(
            (r for r in self._rate_limits if r.method == method and r.path_contains in path),
            None,
        )
        if rule is None:
            return None
        self._rate_limits.remove(rule)
        self.rate_limited += 1
        reset = time.time() + rule.retry_after
        bucket = hashlib.sha256(f"{method} {path}".encode()).hexdigest()[:32]
        headers = {
            # discord.py only trusts a 429 that came through Discord's proxy (Via)
            "Via": "1.1 google",
            "Retry-After": str(max(1, math.ceil(rule.retry_after))),
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": f"{reset:.3f}",
            "X-RateLimit-Reset-After": f"{rule.retry_after:.3f}",
            "X-RateLimit-Bucket": bucket,
            "X-RateLimit-Scope": "user",
        }
        body = {
            "message": "You are being rate limited.",
            "retry_after": rule.retry_after,
            "global": False,
        }
        return _json_response(body, status=429, headers=headers)

    @staticmethod
    async def _read_body(request: web.Request) -> tuple[JSON, list[_Upload]]:
        """The JSON payload and uploaded files of a request (JSON or multipart)."""
        if request.content_type == "multipart/form-data":
            form = await request.post()
            payload = json.loads(str(form.get("payload_json") or "{}"))
            uploads = []
            for key, value in form.items():
                if not isinstance(value, web.FileField):
                    continue
                match = re.fullmatch(r"files\[(\d+)\]", key)
                index = int(match.group(1)) if match else len(uploads)
                content = value.file.read()
                if len(content) > MAX_UPLOAD:
                    raise DiscordError(413, 40005, "Request entity too large")
                uploads.append(_Upload(index, value.filename, content))
            return payload, uploads
        raw = await request.read()
        if not raw:
            return {}, []
        try:
            return json.loads(raw), []
        except ValueError:
            raise DiscordError(400, 50109, "The request body contains invalid JSON.") from None

    @staticmethod
    def _json(data: Any, status: int = 200) -> web.Response:
        return _json_response(data, status=status)

    def _channel(self, request: web.Request) -> JSON:
        channel = self._channels.get(int(request.match_info["channel_id"]))
        if channel is None:
            raise _error(UNKNOWN_CHANNEL)
        return channel

    def _channel_message(self, request: web.Request) -> Message:
        channel = self._channel(request)
        message = self.messages.get(int(request.match_info["message_id"]))
        if (
            message is None
            or message.deleted
            or message.flags & EPHEMERAL  # only reachable through the interaction webhook
            or str(message.channel_id) != channel["id"]
        ):
            raise _error(UNKNOWN_MESSAGE)
        return message

    def _routes(self) -> list[tuple[str, str, Callable[[web.Request], Any]]]:
        commands = "/applications/{application_id}/commands"
        guild_commands = "/applications/{application_id}/guilds/{guild_id}/commands"
        message = "/channels/{channel_id}/messages/{message_id}"
        webhook_message = "/webhooks/{application_id}/{token}/messages/{message_id}"
        return [
            ("GET", "/gateway", self._get_gateway),
            ("GET", "/gateway/bot", self._get_gateway_bot),
            ("GET", "/users/@me", self._get_me),
            ("POST", "/users/@me/channels", self._post_dm),
            ("GET", "/users/{user_id}", self._get_user),
            ("GET", "/applications/@me", self._get_application),
            ("GET", "/oauth2/applications/@me", self._get_application),
            ("GET", commands, self._list_commands),
            ("PUT", commands, self._put_commands),
            ("POST", commands, self._post_command),
            ("GET", commands + "/{command_id}", self._get_command),
            ("PATCH", commands + "/{command_id}", self._patch_command),
            ("DELETE", commands + "/{command_id}", self._delete_command),
            ("GET", guild_commands, self._list_commands),
            ("PUT", guild_commands, self._put_commands),
            ("POST", guild_commands, self._post_command),
            ("GET", guild_commands + "/{command_id}", self._get_command),
            ("PATCH", guild_commands + "/{command_id}", self._patch_command),
            ("DELETE", guild_commands + "/{command_id}", self._delete_command),
            ("GET", "/guilds/{guild_id}", self._get_guild),
            ("GET", "/guilds/{guild_id}/channels", self._get_guild_channels),
            ("GET", "/guilds/{guild_id}/roles", self._get_roles),
            ("GET", "/guilds/{guild_id}/members/{user_id}", self._get_member),
            ("GET", "/channels/{channel_id}", self._get_channel),
            ("PATCH", "/channels/{channel_id}", self._patch_channel),
            ("GET", "/channels/{channel_id}/messages", self._get_messages),
            ("POST", "/channels/{channel_id}/messages", self._post_message),
            ("GET", message, self._get_message),
            ("PATCH", message, self._patch_message),
            ("DELETE", message, self._delete_message),
            ("POST", "/channels/{channel_id}/typing", self._typing),
            ("POST", message + "/threads", self._post_message_thread),
            ("POST", "/channels/{channel_id}/threads", self._post_thread),
            ("PUT", message + "/reactions/{emoji}/@me", self._put_reaction),
            ("DELETE", message + "/reactions/{emoji}/@me", self._delete_reaction),
            ("PUT", "/channels/{channel_id}/thread-members/{user_id}", self._no_content),
            ("DELETE", "/channels/{channel_id}/thread-members/{user_id}", self._no_content),
            ("POST", "/interactions/{interaction_id}/{token}/callback", self._callback),
            ("POST", "/webhooks/{application_id}/{token}", self._post_followup),
            ("GET", webhook_message, self._get_webhook_message),
            ("PATCH", webhook_message, self._patch_webhook_message),
            ("DELETE", webhook_message, self._delete_webhook_message),
        ]

    # ── REST: gateway, users, application, guild ──────────────────────────

    async def _get_gateway(self, request: web.Request) -> web.Response:
        return self._json({"url": self.gateway_url})

    async def _get_gateway_bot(self, request: web.Request) -> web.Response:
        limit = {"total": 1000, "remaining": 999, "reset_after": 14_400_000, "max_concurrency": 1}
        return self._json({"url": self.gateway_url, "shards": 1, "session_start_limit": limit})

    async def _get_me(self, request: web.Request) -> web.Response:
        return self._json(self._me())

    async def _get_user(self, request: web.Request) -> web.Response:
        user_id = int(request.match_info["user_id"])
        if user_id not in _USERS:
            raise DiscordError(404, 10013, "Unknown User")
        return self._json(self._user(user_id))

    async def _post_dm(self, request: web.Request) -> web.Response:
        payload, _ = await self._read_body(request)
        try:
            user_id = int(payload["recipient_id"])
        except (KeyError, TypeError, ValueError):
            raise _form_error(
                ["recipient_id"], "BASE_TYPE_REQUIRED", "This field is required"
            ) from None
        if user_id not in _USERS or user_id == BOT_ID:
            raise DiscordError(400, 50033, "Invalid Recipient(s)")
        return self._json(self._open_dm_channel(user_id))

    async def _get_application(self, request: web.Request) -> web.Response:
        return self._json(self._application())

    @staticmethod
    def _check_guild(request: web.Request) -> None:
        if request.match_info["guild_id"] != str(GUILD_ID):
            raise DiscordError(403, 50001, "Missing Access")

    async def _get_guild(self, request: web.Request) -> web.Response:
        self._check_guild(request)
        guild = self._guild_create()
        for key in ("members", "channels", "threads", "presences", "voice_states", "joined_at"):
            guild.pop(key)
        return self._json(guild)

    async def _get_guild_channels(self, request: web.Request) -> web.Response:
        self._check_guild(request)
        channels = [c for c in self._channels.values() if c["type"] == GUILD_TEXT]
        return self._json(channels)

    async def _get_roles(self, request: web.Request) -> web.Response:
        self._check_guild(request)
        return self._json([self._role(GUILD_ID), self._role(ROLE_MEMBER)])

    async def _get_member(self, request: web.Request) -> web.Response:
        self._check_guild(request)
        user_id = int(request.match_info["user_id"])
        if user_id not in _MEMBER_ROLES:
            raise DiscordError(404, 10007, "Unknown Member")
        return self._json(self._member(user_id))

    # ── REST: application commands ───────────────────────────────────────

    def _command_key(self, request: web.Request) -> int | None:
        if request.match_info["application_id"] != str(APP_ID):
            raise DiscordError(403, 50001, "Missing Access")
        if "guild_id" in request.match_info:
            self._check_guild(request)
            return GUILD_ID
        return None

    def _normalize_command(self, body: JSON, key: int | None, existing: JSON | None) -> JSON:
        kind = body.get("type", 1)
        name = body.get("name")
        pattern = r"[-_'\w]{1,32}" if kind == 1 else r".{1,32}"
        if (
            not isinstance(name, str)
            or not re.fullmatch(pattern, name)
            or (kind == 1 and name != name.lower())
        ):
            raise _form_error(
                ["name"], "APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid"
            )
        description = body.get("description") or ""
        if kind == 1 and not 1 <= len(description) <= 100:
            raise _form_error(
                ["description"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
            )
        command: JSON = {
            "id": existing["id"] if existing else str(self._ids.next()),
            "application_id": str(APP_ID),
            "version": str(self._ids.next()),
            "default_member_permissions": body.get("default_member_permissions"),
            "type": kind,
            "name": name,
            "name_localizations": body.get("name_localizations"),
            "description": description if kind == 1 else "",
            "description_localizations": body.get("description_localizations"),
            "contexts": body.get("contexts"),
            "integration_types": body.get("integration_types") or [0],
            "nsfw": bool(body.get("nsfw", False)),
        }
        if body.get("options"):
            command["options"] = body["options"]
        if key is None:
            command["dm_permission"] = body.get("dm_permission", True)
        else:
            command["guild_id"] = str(key)
        return command

    def _existing_command(self, key: int | None, body: JSON) -> JSON | None:
        return next(
            (
                c
                for c in self.commands.get(key, [])
                if c["name"] == body.get("name") and c["type"] == body.get("type", 1)
            ),
            None,
        )

    def _require_command(self, request: web.Request, key: int | None) -> JSON:
        command_id = request.match_info["command_id"]
        found = next((c for c in self.commands.get(key, []) if c["id"] == command_id), None)
        if found is None:
            raise DiscordError(404, 10063, "Unknown application command")
        return found

    async def _list_commands(self, request: web.Request) -> web.Response:
        return self._json(self.commands.get(self._command_key(request), []))

    async def _put_commands(self, request: web.Request) -> web.Response:
        key = self._command_key(request)
        body, _ = await self._read_body(request)
        if not isinstance(body, list):
            raise _form_error([], "LIST_TYPE_CONVERT", "Must be an array.")
        # bulk overwrite keeps the id of a command that keeps its name and type
        self.commands[key] = [
            self._normalize_command(item, key, self._existing_command(key, item)) for item in body
        ]
        return self._json(self.commands[key])

    async def _post_command(self, request: web.Request) -> web.Response:
        key = self._command_key(request)
        body, _ = await self._read_body(request)
        existing = self._existing_command(key, body)
        command = self._normalize_command(body, key, existing)
        listed = [c for c in self.commands.get(key, []) if c is not existing]
        self.commands[key] = [*listed, command]
        return self._json(command, status=200 if existing else 201)

    async def _get_command(self, request: web.Request) -> web.Response:
        return self._json(self._require_command(request, self._command_key(request)))

    async def _patch_command(self, request: web.Request) -> web.Response:
        key = self._command_key(request)
        current = self._require_command(request, key)
        body, _ = await self._read_body(request)
        command = self._normalize_command({**current, **body}, key, current)
        self.commands[key] = [command if c is current else c for c in self.commands[key]]
        return self._json(command)

    async def _delete_command(self, request: web.Request) -> web.Response:
        key = self._command_key(request)
        current = self._require_command(request, key)
        self.commands[key] = [c for c in self.commands[key] if c is not current]
        return web.Response(status=204)

    # ── REST: channels and messages ──────────────────────────────────────

    async def _get_channel(self, request: web.Request) -> web.Response:
        return self._json(self._channel(request))

    async def _patch_channel(self, request: web.Request) -> web.Response:
        channel = self._channel(request)
        if channel["type"] not in _THREAD_TYPES:
            raise _error(MISSING_PERMISSIONS)  # the bot cannot manage channels
        payload, _ = await self._read_body(request)
        metadata = channel["thread_metadata"]
        if payload.get("locked"):
            raise _error(MISSING_PERMISSIONS)  # locking needs Manage Threads
        if "name" in payload:
            name = payload["name"]
            if not isinstance(name, str) or not 1 <= len(name) <= 100:
                raise _form_error(
                    ["name"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
                )
            channel["name"] = name
        if "archived" in payload:
            metadata["archived"] = bool(payload["archived"])
            metadata["archive_timestamp"] = _iso()
        if "auto_archive_duration" in payload:
            metadata["auto_archive_duration"] = payload["auto_archive_duration"]
        await self._dispatch("THREAD_UPDATE", channel, intent=GUILDS)
        return self._json(channel)

    async def _get_messages(self, request: web.Request) -> web.Response:
        channel = self._channel(request)
        limit = max(1, min(100, int(request.query.get("limit", "50"))))
        found = [m for m in self.channel_messages(int(channel["id"])) if not m.flags & EPHEMERAL]
        if "before" in request.query:
            found = [m for m in found if m.id < int(request.query["before"])][-limit:]
        elif "after" in request.query:
            found = [m for m in found if m.id > int(request.query["after"])][:limit]
        elif "around" in request.query:
            around = int(request.query["around"])
            older = [m for m in found if m.id <= around][-(limit - limit // 2) :]
            newer = [m for m in found if m.id > around][: limit // 2]
            found = older + newer
        else:
            found = found[-limit:]
        # newest first, as Discord lists them
        return self._json([self._as_seen_by_bot(m, m.raw) for m in reversed(found)])

    async def _post_message(self, request: web.Request) -> web.Response:
        channel = self._channel(request)
        payload, uploads = await self._read_body(request)
        if channel["type"] == DM and channel["recipients"][0].get("bot"):
            raise DiscordError(403, 50007, "Cannot send messages to this user")
        await self._reopen_thread(channel)
        message = self._compose(int(channel["id"]), payload, uploads)
        await self._publish(message)
        return self._json(message.raw)

    async def _reopen_thread(self, channel: JSON) -> None:
        """Sending to an archived thread unarchives it, unless it is locked."""
        metadata = channel.get("thread_metadata")
        if metadata is None or not metadata["archived"]:
            return
        if metadata["locked"]:
            raise DiscordError(400, 50083, "Thread is archived")
        metadata["archived"] = False
        metadata["archive_timestamp"] = _iso()
        await self._dispatch("THREAD_UPDATE", channel, intent=GUILDS)

    async def _get_message(self, request: web.Request) -> web.Response:
        message = self._channel_message(request)
        return self._json(self._as_seen_by_bot(message, message.raw))

    async def _patch_message(self, request: web.Request) -> web.Response:
        message = self._channel_message(request)
        if message.author_id != BOT_ID:
            raise DiscordError(403, 50005, "Cannot edit a message authored by another user")
        payload, uploads = await self._read_body(request)
        self._edit(message, payload, uploads)
        await self._updated(message)
        return self._json(message.raw)

    async def _delete_message(self, request: web.Request) -> web.Response:
        message = self._channel_message(request)
        channel = self._channels[message.channel_id]
        if message.author_id != BOT_ID and channel["type"] != DM:
            raise _error(MISSING_PERMISSIONS)  # deleting others' messages needs Manage Messages
        if message.author_id != BOT_ID:
            raise DiscordError(403, 50003, "Cannot execute action on a DM channel")
        await self._delete(message)
        return web.Response(status=204)

    async def _typing(self, request: web.Request) -> web.Response:
        self._channel(request)
        return web.Response(status=204)

    async def _no_content(self, request: web.Request) -> web.Response:
        self._channel(request)
        return web.Response(status=204)

    async def _post_message_thread(self, request: web.Request) -> web.Response:
        message = self._channel_message(request)
        parent = self._channels[message.channel_id]
        if parent["type"] != GUILD_TEXT:
            raise DiscordError(400, 50024, "Cannot execute action on this channel type")
        if message.thread_id is not None:
            raise DiscordError(400, 160004, "A thread has already been created for this message")
        payload, _ = await self._read_body(request)
        # a thread started from a message has the message's id
        self._new_thread(parent, message.id, payload, PUBLIC_THREAD)
        message.thread_id = message.id
        message.flags |= HAS_THREAD
        created = await self._thread_created(message.id)
        await self._updated(message)
        return self._json(created, status=201)

    async def _post_thread(self, request: web.Request) -> web.Response:
        parent = self._channel(request)
        if parent["type"] != GUILD_TEXT:
            raise DiscordError(400, 50024, "Cannot execute action on this channel type")
        payload, _ = await self._read_body(request)
        kind = payload.get("type", PRIVATE_THREAD)  # v10's default is a private thread
        if kind not in (PUBLIC_THREAD, PRIVATE_THREAD):
            raise _form_error(["type"], "BASE_TYPE_CHOICES", "Value must be one of {11, 12}.")
        thread_id = self._ids.next()
        self._new_thread(parent, thread_id, payload, kind)
        return self._json(await self._thread_created(thread_id), status=201)

    async def _put_reaction(self, request: web.Request) -> web.Response:
        message = self._channel_message(request)
        emoji = request.match_info["emoji"]
        if emoji not in message.reactions:
            message.reactions.append(emoji)
            await self._reacted(message, emoji, "MESSAGE_REACTION_ADD")
        return web.Response(status=204)

    async def _delete_reaction(self, request: web.Request) -> web.Response:
        message = self._channel_message(request)
        emoji = request.match_info["emoji"]
        if emoji in message.reactions:
            message.reactions.remove(emoji)
            await self._reacted(message, emoji, "MESSAGE_REACTION_REMOVE")
        return web.Response(status=204)

    async def _reacted(self, message: Message, emoji: str, event: str) -> None:
        message.raw = self._message_json(message)
        channel = self._channels[message.channel_id]
        data: JSON = {
            "user_id": str(BOT_ID),
            "channel_id": str(message.channel_id),
            "message_id": str(message.id),
            "emoji": self._emoji_json(emoji),
            "burst": False,
            "type": 0,
        }
        intent = DIRECT_MESSAGE_REACTIONS
        if "guild_id" in channel:
            intent = GUILD_MESSAGE_REACTIONS
            data["guild_id"] = channel["guild_id"]
            if event == "MESSAGE_REACTION_ADD":
                data["member"] = self._member(BOT_ID)
                data["message_author_id"] = str(message.author_id)
                data["burst_colors"] = []
        await self._dispatch(event, data, intent=intent)

    async def _cdn(self, request: web.Request) -> web.Response:
        attachment = self._files.get(int(request.match_info["attachment_id"]))
        if attachment is None or attachment.name != request.match_info["filename"]:
            return web.Response(status=404, text="This content is no longer available.")
        return web.Response(
            body=attachment.content,
            content_type=(attachment.content_type or "application/octet-stream").split(";")[0],
        )

    # ── REST: interaction callbacks and webhooks ──────────────────────────

    async def _callback(self, request: web.Request) -> web.Response:
        interaction_id = int(request.match_info["interaction_id"])
        payload, uploads = await self._read_body(request)
        kind = payload.get("type")
        data = payload.get("data") or {}
        self.callbacks.append({"interaction_id": interaction_id, "type": kind, "data": data})
        state = self._states.get(interaction_id)
        if state is None or state.expired or state.interaction.token != request.match_info["token"]:
            raise _error(UNKNOWN_INTERACTION)
        if state.acked is not None:
            raise DiscordError(400, 40060, "Interaction has already been acknowledged.")
        allowed = _CALLBACKS_ALLOWED[state.kind]
        if kind not in allowed:
            raise _form_error(
                ["type"], "BASE_TYPE_CHOICES", f"Value must be one of {sorted(allowed)}."
            )
        message = await self._respond(state, kind, data, uploads)
        state.acked = kind
        if not _truthy_query(request.query.get("with_response")):
            return web.Response(status=204)
        return self._json(self._callback_json(state, kind, message))

    def _webhook_state(self, request: web.Request) -> _InteractionState:
        state = self._by_token.get(request.match_info["token"])
        if request.match_info["application_id"] != str(APP_ID) or state is None:
            raise _error(UNKNOWN_WEBHOOK)
        if state.expired:
            raise DiscordError(401, 50027, "Invalid Webhook Token")
        if state.acked is None:
            raise _error(UNKNOWN_WEBHOOK)  # the webhook exists once the interaction is answered
        return state

    def _webhook_message(self, request: web.Request, state: _InteractionState) -> Message:
        wanted = request.match_info["message_id"]
        if wanted == "@original":
            message_id = state.original_id
        else:
            message_id = int(wanted)
            if message_id not in state.created and message_id != state.original_id:
                message_id = None
        message = self.messages.get(message_id or 0)
        if message is None or message.deleted:
            raise _error(UNKNOWN_MESSAGE)
        return message

    async def _post_followup(self, request: web.Request) -> web.Response:
        state = self._webhook_state(request)
        payload, uploads = await self._read_body(request)
        if state.loading and state.original_id is not None:
            # the first follow-up after a deferred response replaces the "thinking" message
            message = self.messages[state.original_id]
            self._edit(message, {k: v for k, v in payload.items() if k != "flags"}, uploads)
            state.loading = False
            await self._updated(message)
        else:
            message = self._compose(
                state.interaction.channel_id, payload, uploads, allowed_flags=_INTERACTION_FLAGS
            )
            self._stamp(message, state, followup=True)
            state.created.append(message.id)
            await self._publish(message)
        if not _truthy_query(request.query.get("wait")):
            return web.Response(status=204)
        return self._json(message.raw)

    async def _get_webhook_message(self, request: web.Request) -> web.Response:
        state = self._webhook_state(request)
        return self._json(self._webhook_message(request, state).raw)

    async def _patch_webhook_message(self, request: web.Request) -> web.Response:
        state = self._webhook_state(request)
        message = self._webhook_message(request, state)
        payload, uploads = await self._read_body(request)
        self._edit(message, payload, uploads)
        if message.id == state.original_id:
            state.loading = False
        await self._updated(message)
        return self._json(message.raw)

    async def _delete_webhook_message(self, request: web.Request) -> web.Response:
        state = self._webhook_state(request)
        await self._delete(self._webhook_message(request, state))
        return web.Response(status=204)


def _check_text_input(component: JSON, value: str) -> None:
    """What Discord's client enforces before it lets a user submit a modal."""
    custom_id = component["custom_id"]
    if component.get("required", True) and not value:
        raise AssertionError(f"text input {custom_id!r} is required")
    if value and len(value) < component.get("min_length", 0):
        raise AssertionError(f"text input {custom_id!r} needs {component['min_length']}+ chars")
    if len(value) > component.get("max_length", 4000):
        raise AssertionError(f"text input {custom_id!r} takes at most {component['max_length']}")


def _check_modal(data: JSON) -> None:
    if not 1 <= len(str(data.get("custom_id") or "")) <= 100:
        raise _form_error(
            ["data", "custom_id"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
        )
    if not 1 <= len(str(data.get("title") or "")) <= 45:
        raise _form_error(
            ["data", "title"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 45 in length."
        )
    components = data.get("components") or []
    if not 1 <= len(components) <= 5:
        raise _form_error(
            ["data", "components"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 5 in length."
        )
    for index, component in enumerate(components):
        label = (component.get("label") if component.get("type") == 18 else None) or ""
        if len(label) > 45:
            raise _too_long(["data", "components", index, "label"], 45)


def _describe(predicate: Callable[[], object]) -> str:
    try:
        return inspect.getsource(predicate).strip()
    except (OSError, TypeError):
        return repr(predicate)
