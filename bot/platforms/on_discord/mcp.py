"""`/mcp` on Discord: a token for the person's coding agent, bound to the thread or DM it is
typed in (see `bot.mcp`), their tokens, and revoking them; answered to them alone."""

from __future__ import annotations

import discord
from discord import app_commands

from bot.conversations.mcp_tokens import mcp_command
from bot.errors import NotHere, NotYours
from bot.platforms.on_discord.interactions import conversation_of, tell
from bot.platforms.on_discord.schedules import DiscordParts


def register_mcp(client: DiscordParts) -> None:
    @client.tree.command(name="mcp", description="A token for your coding agent (MCP) here")
    @app_commands.describe(what="token (a new one for this conversation), list, or revoke [N]")
    async def mcp(interaction: discord.Interaction, what: str = "list") -> None:
        person = await client.person_now(interaction)
        if not await client.admitted(interaction, person):
            return
        text = "" if what.strip() == "list" else what
        key = conversation_of(interaction)
        if key is not None and text.split()[:1] == ["token"]:
            try:
                await client.conversations.check(client.door, person, key)
            except (NotHere, NotYours) as exc:
                await tell(interaction, str(exc))
                return
        server = str(interaction.guild_id or "")
        name = interaction.user.display_name
        desk = client.conversations.mcp
        await tell(interaction, mcp_command(desk, person.user, name, key, server, text))
