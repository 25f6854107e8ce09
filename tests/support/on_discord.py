"""A Cellmate bot on the Discord stand-in, as the Discord tests drive it, and what they read
off its messages: buttons, modals, what a user was shown."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import discord
import yarl

from bench.standins.discord_server import TOKEN, DiscordServer, Interaction, Message
from bot.agent import Agent
from bot.conversations import Conversations
from bot.platforms.on_discord import CellmateDiscord, build_client, run_discord
from bot.settings import DiscordSettings
from tests.support.platforms import turns_ended


@dataclasses.dataclass
class Bot:
    server: DiscordServer
    client: CellmateDiscord
    agent: Agent

    def bot_messages(self, channel: int) -> list[Message]:
        """What everyone sees from the bot in a channel (ephemeral replies left out)."""
        return [m for m in self.server.channel_messages(channel, by_bot=True) if not m.flags & 64]

    async def answer_in(self, channel: int, count: int = 1, within: float = 60) -> list[Message]:
        """Wait until `count` turns in `channel` are finished (no Stop button left anywhere,
        as many answers, and the bot idle), and return the bot's messages there."""

        def finished() -> list[Message] | None:
            messages = self.bot_messages(channel)
            if any(has_button(m, "Stop") for m in messages):
                return None
            idle = not self.client.conversations.turns and not self.client.door.lines.busy
            shown = [(m.content, has_button(m, "Re-run")) for m in messages]
            ended = turns_ended(shown, "**Code**")
            return messages if ended >= count and idle else None

        return await self.server.wait_for(finished, within)  # type: ignore[return-value]


def has_button(message: Message, label: str) -> bool:
    return any(
        part.get("label") == label for row in message.components for part in row["components"]
    )


def button_id(message: Message, label: str) -> str:
    for row in message.components:
        for part in row["components"]:
            if part.get("label") == label:
                return str(part["custom_id"])
    raise AssertionError(f"no {label} button on {message.content[:80]!r}")


def text_input_id(data: dict[str, Any]) -> str:
    stack = list(data.get("components", []))
    while stack:
        part = stack.pop()
        if part.get("type") == 4:
            return str(part["custom_id"])
        stack += part.get("components", [])
        if "component" in part:
            stack.append(part["component"])
    raise AssertionError(f"no text input in the modal: {data}")


async def interaction_reply(bot: Bot, interaction: Interaction) -> str:
    """What the user who started an interaction was shown: an immediate reply, or the
    first message after a deferral."""

    def shown() -> str | None:
        for callback in bot.server.callbacks:
            if callback["interaction_id"] == interaction.id and callback["type"] == 4:
                return str(callback["data"].get("content", ""))
        messages = bot.server.interaction_messages(interaction)
        return messages[0].content if messages and messages[0].content else None

    return await bot.server.wait_for(shown)  # type: ignore[return-value]


@contextlib.asynccontextmanager
async def running_bot(
    agent: Agent, conversations: Conversations, **settings: Any
) -> AsyncIterator[Bot]:
    """The real discord.py client of `conversations` on a Discord stand-in of its own, from
    its first gateway connection until it and the stand-in are closed again; `settings`
    change the client's `DiscordSettings`."""
    base, gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    server = DiscordServer()
    await server.start()
    chosen = DiscordSettings(token=TOKEN, api_url=server.api_url, cooldown_s=0)
    client = build_client(conversations, dataclasses.replace(chosen, **settings))
    client._connection.guild_ready_timeout = 0.05
    task = asyncio.create_task(run_discord(client))
    try:
        await server.wait_ready()
        await asyncio.wait_for(client.connected.wait(), 10)
        yield Bot(server, client, agent)
    finally:
        await client.close()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 10)
        await server.close()
        discord.http.Route.BASE = base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(str(gateway))
