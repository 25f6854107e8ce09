"""The guild: its ids, users, flags and types, and the records the server keeps."""

from __future__ import annotations

import mimetypes
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]

BOT_ID = 1100000000000000001
APP_ID = 1100000000000000002  # an older application: its id differs from the bot user's
GUILD_ID = 1100000000000000100
CHANNEL_GENERAL = 1100000000000000101
CHANNEL_OTHER = 1100000000000000102
ROLE_MEMBER = 1100000000000000110
OWNER = 1100000000000000200
ALICE = 1100000000000000201
BOB = 1100000000000000202
CAROL = 1100000000000000204  # a member the bot's allowlists can leave out
# A second guild (announced when the server is made with `other_guild=True`), whose role has
# the same name as ROLE_MEMBER; Dave is a member there only.
OTHER_GUILD = 1100000000000000300
OTHER_ROLE = 1100000000000000310
DAVE = 1100000000000000301
OTHER_BOT = 1100000000000000203
# Places the bot is not in, which a person's own install of the app reaches: a server the app
# is not installed in (Alice, Bob and Carol are members; Owner moderates it), a group DM of
# Alice, Bob and Carol, and a DM between Alice and Bob.
FOREIGN_GUILD = 1100000000000000500
FOREIGN_CHANNEL = 1100000000000000501
GROUP_DM = 1100000000000000510
PEOPLE_DM = 1100000000000000511

TOKEN = "test-discord-token"  # noqa: S105 - the fake bot's token, known to tests

API_PREFIX = "/api/v10"
DISCORD_EPOCH_MS = 1_420_070_400_000
EVERYONE_PERMISSIONS = 2248473465835073  # Discord's default for @everyone
ALL_PERMISSIONS = (1 << 51) - 1  # what the guild owner has
MAX_UPLOAD = 10 * 1024 * 1024  # per file, in a guild without boosts
GUILD_JOINED_AT = "2024-01-15T12:00:00.000000+00:00"

# (username, global name, discriminator, bot): bots keep legacy discriminators
USERS: dict[int, tuple[str, str | None, str, bool]] = {
    BOT_ID: ("Cellmate", None, "4821", True),
    OWNER: ("owner", "Server Owner", "0", False),
    ALICE: ("alice", "Alice", "0", False),
    BOB: ("bob", "Bob", "0", False),
    CAROL: ("carol", "Carol", "0", False),
    DAVE: ("dave", "Dave", "0", False),
    OTHER_BOT: ("Helper", None, "7310", True),
}
MEMBER_ROLES: dict[int, tuple[int, ...]] = {
    OWNER: (),
    ALICE: (ROLE_MEMBER,),
    BOB: (),
    CAROL: (),
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
SENDABLE_FLAGS = SUPPRESS_EMBEDS | SUPPRESS_NOTIFICATIONS | IS_COMPONENTS_V2
INTERACTION_FLAGS = SENDABLE_FLAGS | EPHEMERAL

# channel types
GUILD_TEXT = 0
DM = 1
GROUP_DM_TYPE = 3
PUBLIC_THREAD = 11
PRIVATE_THREAD = 12
THREAD_TYPES = (10, PUBLIC_THREAD, PRIVATE_THREAD)

# interaction types and callback types
APPLICATION_COMMAND = 2
MESSAGE_COMPONENT = 3
AUTOCOMPLETE = 4
MODAL_SUBMIT = 5
CALLBACKS_ALLOWED = {
    APPLICATION_COMMAND: {4, 5, 9},
    MESSAGE_COMPONENT: {4, 5, 6, 7, 9},
    AUTOCOMPLETE: {8},
    MODAL_SUBMIT: {4, 5, 6, 7},
}

# installation contexts (authorizing_integration_owners keys) and interaction contexts
GUILD_INSTALL = 0
USER_INSTALL = 1
GUILD_CONTEXT = 0
BOT_DM_CONTEXT = 1
PRIVATE_CHANNEL_CONTEXT = 2
MAX_USER_INSTALL_FOLLOWUPS = 5
"""Follow-ups an interaction that only a user install authorized may send."""
# permissions
EMBED_LINKS = 1 << 14
ATTACH_FILES = 1 << 15
MENTION_EVERYONE = 1 << 17
USE_EXTERNAL_APPS = 1 << 50
APP_PERMISSIONS_ELSEWHERE = ATTACH_FILES | EMBED_LINKS | MENTION_EVERYONE
"""What Discord says the app may do in (group) DMs between people, and here in servers the
app is not installed in."""

SELECT_TYPES = {3, 5, 6, 7, 8}
USER_MENTION = re.compile(r"<@!?(\d+)>")
ROLE_MENTION = re.compile(r"<@&(\d+)>")


# ── what the server records ───────────────────────────────────────────────────


@dataclass
class Attachment:
    name: str
    content: bytes
    content_type: str | None
    id: int = 0
    description: str | None = None
    url: str | None = None
    """Where the attachment says it is, instead of this server's CDN route (for a file
    that claims to be somewhere else)."""


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


@dataclass
class InteractionState:
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
    owners: dict[str, str] = field(default_factory=dict)
    """Its authorizing integration owners: "0" the server (or "0" in the DM with the bot)
    where the app is installed, "1" the person whose own install authorized it."""
    followups: int = 0
    """Follow-up messages it created."""


@dataclass
class Upload:
    index: int
    filename: str
    content: bytes


@dataclass
class RateLimitRule:
    method: str
    path_contains: str
    retry_after: float


def iso(epoch_s: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if epoch_s is None else epoch_s, UTC)
    return moment.isoformat(timespec="microseconds")


def snowflake_time(snowflake: int) -> str:
    return iso(((snowflake >> 22) + DISCORD_EPOCH_MS) / 1000)


class Snowflakes:
    """Increasing snowflakes carrying the current time, like Discord's."""

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        now_ms = int(time.time() * 1000) - DISCORD_EPOCH_MS
        self._last = max((now_ms << 22) | (1 << 17), self._last + 1)
        return self._last


def guess_content_type(filename: str) -> str | None:
    guessed, _ = mimetypes.guess_type(filename)
    if guessed is not None and guessed.startswith("text/"):
        return f"{guessed}; charset=utf-8"
    return guessed
