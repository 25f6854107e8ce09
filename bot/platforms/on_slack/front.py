"""What the slash commands and buttons need of the Slack app: the `SlackFront` protocol, so
that they depend on this seam rather than on the app module that registers them."""

from __future__ import annotations

from typing import Any, Protocol

from slack_sdk.web.async_client import AsyncWebClient

from bot.conversations import Admission, ConversationKey, Conversations, Person


class SlackFront(Protocol):
    conversations: Conversations
    door: Admission
    client: AsyncWebClient
    team: str
    """The workspace the bot was installed in (events that do not name one)."""
    latest: dict[tuple[str, str, str], ConversationKey]
    """(team, channel, user) -> the user's latest conversation there, for commands."""

    async def person(self, user: str, team: str, channel: str, dm: bool = False) -> Person:
        """Who acts, from where; in a DM, with where they are (for the allowlists)."""

    async def admitted(
        self, person: Person, channel: str, thread_ts: str | None = None, respond: Any = None
    ) -> bool:
        """The admission check of every command, shortcut and button; a refused person is
        told so."""

    async def start_run(
        self,
        code: str,
        person: Person,
        key: ConversationKey | None,
        thread_ts: str | None,
        background: bool = False,
    ) -> None:
        """Run code directly in `key`'s session (None: a one-off session); `background`: it
        goes on in the background at once."""
