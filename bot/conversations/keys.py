"""Which conversation a message belongs to, as one value instead of strings built per front end."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

ONE_OFF = "run-"


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """Where a conversation lives, in platform ids. Its `id` keys its history, its Python
    session and its stored artifacts; it is built here and nowhere else.

    - Discord: a thread (workspace = guild, channel = parent channel, thread = thread id);
      a DM (workspace "dm", channel = the person's user id: one DM conversation a person);
      a channel without threads (thread "").
    - Slack: workspace = team, channel, thread = the thread's root ts.
    - the console: one conversation.
    """

    platform: str
    workspace: str = ""
    channel: str = ""
    thread: str = ""

    def __post_init__(self) -> None:
        for part in (self.platform, self.workspace, self.channel, self.thread):
            if ":" in part or "\n" in part:
                raise ValueError(f"a conversation key part may not hold ':' ({part!r})")

    @property
    def id(self) -> str:
        return f"{self.platform}:{self.workspace}:{self.channel}:{self.thread}"

    @classmethod
    def parse(cls, text: str) -> ConversationKey:
        platform, workspace, channel, thread = text.split(":")
        return cls(platform, workspace, channel, thread)

    @classmethod
    def one_off(cls, platform: str, workspace: str, channel: str) -> ConversationKey:
        """A conversation of its own for one direct run: its session ends with the turn."""
        return cls(platform, workspace, channel, ONE_OFF + secrets.token_hex(8))

    @property
    def is_one_off(self) -> bool:
        return self.thread.startswith(ONE_OFF)

    @property
    def is_dm(self) -> bool:
        return self.workspace == "dm"
