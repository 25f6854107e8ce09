"""Each place's approval policy for code the model writes, kept in the bot's database so
that it survives restarts.

    auto     the model's code runs at once (as without a policy)
    approve  the code is shown with Run, Edit and Cancel, and waits for a person
    off      no code runs; the model answers without it, and direct runs are refused

A channel's policy (a DM counts as a channel) overrides its workspace's (Discord server,
Slack workspace), which overrides the operator's default. Direct runs (/run, a message of
only code) are their author's own decision and never wait for approval.
"""

from __future__ import annotations

import time
import typing
from dataclasses import dataclass

from bot.conversations.keys import ConversationKey
from bot.database import Databases, Migrations, open_store

Mode = typing.Literal["auto", "approve", "off"]
MODES: tuple[Mode, ...] = ("auto", "approve", "off")
MEANING: dict[Mode, str] = {
    "auto": "code the model writes runs at once.",
    "approve": "code the model writes waits for a person to press Run, Edit or Cancel.",
    "off": "no code runs; the model answers without it, and /run is refused.",
}
MIGRATIONS = Migrations(
    "policies",
    "policies",
    (
        """
        CREATE TABLE IF NOT EXISTS policies (
            platform TEXT NOT NULL,
            workspace TEXT NOT NULL,
            channel TEXT NOT NULL,
            mode TEXT NOT NULL,
            set_by TEXT NOT NULL,
            set_at {real} NOT NULL,
            PRIMARY KEY (platform, workspace, channel)
        );
        """,
    ),
)


@dataclass(frozen=True, slots=True)
class PolicySettings:
    default: Mode = "auto"
    """The policy of places no one has set one for."""
    approvers: typing.Literal["requester", "moderators"] = "requester"
    """Who may approve: the person who asked (or a moderator), or only moderators."""
    timeout_s: float = 240.0
    """How long code waits for approval before the turn ends without running it (less when
    the turn's time budget would run out first)."""

    def __post_init__(self) -> None:
        if self.default not in MODES:
            raise ValueError(f"the default policy must be one of {', '.join(MODES)}")
        if self.approvers not in ("requester", "moderators"):
            raise ValueError("approvers must be requester or moderators")
        if self.timeout_s <= 0:
            raise ValueError("the approval timeout must be positive")


@dataclass(frozen=True, slots=True)
class Scope:
    """A place a policy is set for: a channel (or DM), or a whole workspace (channel '')."""

    platform: str
    workspace: str
    channel: str = ""

    @classmethod
    def channel_of(cls, key: ConversationKey) -> Scope:
        return cls(key.platform, key.workspace, key.channel)

    @classmethod
    def workspace_of(cls, key: ConversationKey) -> Scope:
        return cls(key.platform, key.workspace)

    @property
    def name(self) -> str:
        if self.platform == "console":
            return "the console"
        if self.workspace == "dm":
            return "this direct message"
        return "this channel" if self.channel else "this workspace"


@dataclass(frozen=True, slots=True)
class Effective:
    mode: Mode
    source: str
    """Where it comes from: 'this channel', 'this workspace', 'the default', ..."""


class Policies:
    def __init__(self, where: Databases, settings: PolicySettings) -> None:
        self.settings = settings
        self._db = open_store(where, MIGRATIONS)

    def close(self) -> None:
        self._db.close()

    def effective(self, key: ConversationKey) -> Effective:
        """The policy that applies to a conversation, and where it was set."""
        scopes = [Scope.channel_of(key)]
        if not key.is_dm:
            scopes.append(Scope.workspace_of(key))
        for scope in scopes:
            mode = self._get(scope)
            if mode is not None:
                return Effective(mode, scope.name)
        return Effective(self.settings.default, "the default")

    def mode(self, key: ConversationKey) -> Mode:
        return self.effective(key).mode

    def set(self, scope: Scope, mode: Mode, by: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown policy {mode!r}")
        self._db.execute(
            "INSERT INTO policies (platform, workspace, channel, mode, set_by, set_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (platform, workspace, channel) DO UPDATE "
            "SET mode = excluded.mode, set_by = excluded.set_by, set_at = excluded.set_at",
            (scope.platform, scope.workspace, scope.channel, mode, by, time.time()),
        )

    def _get(self, scope: Scope) -> Mode | None:
        row = self._db.execute(
            "SELECT mode FROM policies WHERE platform = ? AND workspace = ? AND channel = ?",
            (scope.platform, scope.workspace, scope.channel),
        ).one()
        if row is None or row[0] not in MODES:
            return None
        return typing.cast(Mode, row[0])


def parse_mode(text: str) -> Mode | None:
    """A policy named by a person (any case), or None."""
    word = text.strip().lower()
    return word if word in MODES else None


@dataclass(frozen=True, slots=True)
class PolicyCommand:
    """`/policy` as typed: `mode` None shows the policy; `whole` sets it for the server."""

    mode: Mode | None = None
    whole: bool = False


def parse_command(text: str, whole_word: str = "") -> PolicyCommand | None:
    """`/policy` typed as text: nothing (show it), a mode, or a mode and `whole_word` (where
    the platform names one); None for anything else, which deserves the usage."""
    words = text.split()
    if not words:
        return PolicyCommand()
    mode = parse_mode(words[0])
    if mode is None or words[1:] not in ([], [whole_word] if whole_word else []):
        return None
    return PolicyCommand(mode, whole=len(words) == 2)


def described(found: Effective) -> str:
    return f"The code policy here is {found.mode} (from {found.source}): {MEANING[found.mode]}"


def now_set(scope: Scope, mode: Mode) -> str:
    return f"The code policy of {scope.name} is now {mode}: {MEANING[mode]}"
