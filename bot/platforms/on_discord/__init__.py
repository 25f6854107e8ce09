"""Cellmate on Discord (discord.py)."""

from __future__ import annotations

import discord

from bot.conversations import Conversations
from bot.platforms.on_discord.client import CellmateDiscord
from bot.settings import DiscordSettings

__all__ = ["CellmateDiscord", "build_client", "run_discord"]


def build_client(
    conversations: Conversations,
    settings: DiscordSettings,
    connected: dict[str, bool] | None = None,
) -> CellmateDiscord:
    if settings.api_url:
        # discord.py keeps its REST base in a class attribute: one Discord API per process.
        discord.http.Route.BASE = settings.api_url.rstrip("/")
    return CellmateDiscord(conversations, settings, connected)


async def run_discord(client: CellmateDiscord) -> None:
    """Connect and handle events until the client is closed; reconnects are discord.py's."""
    async with client:
        await client.start(client.settings.token, reconnect=True)
