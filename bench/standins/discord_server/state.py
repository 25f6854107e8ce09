"""What the server holds (channels, messages, files, interactions) and waiting on it."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable

from aiohttp import web

from .connection import Link
from .payloads import places_elsewhere, text_channel_json, user_json
from .world import (
    API_PREFIX,
    BOT_ID,
    CHANNEL_GENERAL,
    CHANNEL_OTHER,
    DAVE,
    DM,
    GUILD_ID,
    JSON,
    MEMBER_ROLES,
    OTHER_GUILD,
    OTHER_ROLE,
    Attachment,
    Interaction,
    InteractionState,
    Message,
    RateLimitRule,
    Snowflakes,
    guess_content_type,
)


class ServerState:
    """The server's records, the lookups on them and waiting for them to change."""

    def __init__(self, *, heartbeat_interval_ms: int = 41250, other_guild: bool = False) -> None:
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.other_guild = other_guild
        """Whether the bot is also in OTHER_GUILD."""
        self.guild_members: dict[int, dict[int, tuple[int, ...]]] = {
            GUILD_ID: dict(MEMBER_ROLES),
            OTHER_GUILD: {DAVE: (OTHER_ROLE,), BOT_ID: ()},
        }
        """Guild -> member -> roles, as member look-ups answer them; tests may change them
        (the gateway and guild interactions show the starting roles)."""
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
        # Called as each REST request arrives (method, path below /api/v10), and as each
        # message is created or edited: benchmarks time the bot's answers by them, without
        # the delay of polling `requests` and `messages`.
        self.request_hooks: list[Callable[[str, str], None]] = []
        self.message_hooks: list[Callable[[Message], None]] = []
        self._ids = Snowflakes()
        self._channels: dict[int, JSON] = {
            CHANNEL_GENERAL: text_channel_json(CHANNEL_GENERAL, "general", 0),
            CHANNEL_OTHER: text_channel_json(CHANNEL_OTHER, "other", 1),
            **places_elsewhere(),
        }
        self.user_installs: set[int] = set()
        """People who installed the app to their account (`install_app`)."""
        self._dms: dict[int, int] = {}
        self._files: dict[int, Attachment] = {}
        self._states: dict[int, InteractionState] = {}
        self._by_token: dict[str, InteractionState] = {}
        self._rate_limits: list[RateLimitRule] = []
        self._links: dict[int, Link] = {0: Link()}
        """Shard -> its gateway session and connection (one shard, 0, when not sharded)."""
        self.shard_count = 1
        """As the bot identified (IDENTIFY's `shard`); every link must agree."""
        self._sockets: set[web.WebSocketResponse] = set()
        self._dispatch_lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None

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
                    f"timed out after {timeout:g}s waiting for {describe(predicate)}\n"
                    + self.summary()
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(0.05, remaining))

    def summary(self) -> str:
        """What the server saw lately, for failure messages."""
        lines = [
            f"gateway: {sum(link.conn is not None for link in self._links.values())} "
            f"of {self.shard_count} shard(s) connected, "
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

    def _open_dm_channel(self, user_id: int) -> JSON:
        if user_id not in self._dms:
            channel_id = self._ids.next()
            self._channels[channel_id] = {
                "id": str(channel_id),
                "type": DM,
                "last_message_id": None,
                "flags": 0,
                "recipients": [user_json(user_id)],
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

    def _store_file(
        self,
        filename: str,
        content: bytes,
        description: str | None = None,
        url: str | None = None,
    ) -> Attachment:
        attachment = Attachment(
            name=filename,
            content=content,
            content_type=guess_content_type(filename),
            id=self._ids.next(),
            description=description,
            url=url,
        )
        self._files[attachment.id] = attachment
        return attachment

    def _touch(self) -> None:
        """Wake everything waiting in `wait_for`."""
        self._changed.set()
        self._changed = asyncio.Event()


def describe(predicate: Callable[[], object]) -> str:
    try:
        return inspect.getsource(predicate).strip()
    except (OSError, TypeError):
        return repr(predicate)
