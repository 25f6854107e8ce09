"""What the slash commands and buttons need of the Discord client: the `DiscordFront`
protocol. They find the client through the interaction they handle (`interaction.client`),
so they depend on this seam rather than on the client module that registers them."""

from __future__ import annotations

from typing import Any, Protocol, cast

import discord
from discord import app_commands

from bot.conversations import Admission, ConversationKey, Conversations, Person


class DiscordFront(Protocol):
    conversations: Conversations
    door: Admission
    tree: app_commands.CommandTree[Any]

    async def person_now(
        self, interaction: discord.Interaction, server_wide: bool = False
    ) -> Person:
        """Who acts in an interaction, with where they are now (in a DM)."""

    async def admitted(self, interaction: discord.Interaction, person: Person) -> bool:
        """The admission check of every interaction; a refused person is told so."""

    async def start_run(
        self,
        interaction: discord.Interaction,
        code: str,
        key: ConversationKey | None = None,
        background: bool = False,
        beside: bool = False,
        language: str = "",
    ) -> None:
        """Run code directly in the interaction's conversation (or a one-off session);
        `background`: it goes on in the background at once; `beside`: it runs beside the
        conversation's run in the background rather than wait for it."""


def front_of(interaction: discord.Interaction) -> DiscordFront:
    """The client that received an interaction."""
    return cast(DiscordFront, interaction.client)
