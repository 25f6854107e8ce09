"""The workspace: its ids, people and tokens, Slack's limits, and the records kept."""

from __future__ import annotations

import mimetypes
import time
from dataclasses import dataclass, field
from typing import Any

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
ADMIN = "U0ADMIN"  # a workspace admin
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
POLL_S = 0.05

# Keys of a thread parent that describe its replies; events about a new message carry none.
THREAD_SUMMARY = ("reply_count", "reply_users_count", "latest_reply", "reply_users")


@dataclass(frozen=True)
class Member:
    name: str
    real_name: str
    bot_id: str | None = None
    app_id: str | None = None
    admin: bool = False


MEMBERS = {
    ALICE: Member("alice", "Alice Adams"),
    BOB: Member("bob", "Bob Brown"),
    ADMIN: Member("admin", "Ada Admin", admin=True),
    BOT_USER_ID: Member("cellmate", "Cellmate", BOT_ID, APP_ID),
    OTHER_BOT_USER: Member("otherbot", "Other Bot", OTHER_BOT_ID, OTHER_APP_ID),
}
BOT_USERS = {member.bot_id: user for user, member in MEMBERS.items() if member.bot_id}


def member_of(user: str) -> Member:
    return MEMBERS.get(user) or Member(user.lower(), user)


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
    url: str | None = None
    """Where the file object says the file is, instead of this server (for a file that
    claims to be somewhere else)."""

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


class RateLimited(SlackError):
    """A call past its method's rate tier: HTTP 429 `ratelimited` with Retry-After."""

    def __init__(self, retry_after: int) -> None:
        super().__init__("ratelimited")
        self.retry_after = retry_after


def ts_key(ts: str) -> tuple[int, int]:
    seconds, _, micros = ts.partition(".")
    return int(seconds or 0), int((micros or "0").ljust(6, "0")[:6])
