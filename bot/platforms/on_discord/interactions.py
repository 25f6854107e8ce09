"""What a Discord message or interaction is about, and the short answer only its person sees:
its conversation key (a thread, a DM, or the channel), its place for the allowlists, `tell`."""

from __future__ import annotations

from typing import Any

import discord

from bot.conversations import ConversationKey
from bot.conversations.access import Place


async def tell(interaction: discord.Interaction, text: str) -> None:
    """A short answer only the person sees, whether or not the interaction was answered."""
    if interaction.response.is_done():
        await interaction.followup.send(text, ephemeral=True)
    else:
        await interaction.response.send_message(text, ephemeral=True)


def thread_key(thread: discord.Thread) -> ConversationKey:
    return ConversationKey("discord", str(thread.guild.id), str(thread.parent_id), str(thread.id))


def place_key(interaction: discord.Interaction) -> ConversationKey:
    """The conversation key of where an interaction happened (its thread, DM or channel),
    for the place's settings."""
    return conversation_of(interaction) or ConversationKey(
        "discord", str(interaction.guild_id or ""), str(interaction.channel_id or "")
    )


def conversation_of(interaction: discord.Interaction) -> ConversationKey | None:
    """The conversation an interaction belongs to: its DM or its thread, else none."""
    channel = interaction.channel
    if interaction.guild is None:
        return ConversationKey("discord", "dm", str(interaction.user.id))
    if isinstance(channel, discord.Thread):
        return thread_key(channel)
    return None


def place_of(user: discord.abc.User, channel: Any, dm: bool) -> Place:
    """Where a person acts from, for the allowlists: a thread counts as its channel."""
    where: int | None = getattr(channel, "id", None)
    if isinstance(channel, discord.Thread):
        where = channel.parent_id
    guild = getattr(channel, "guild", None)
    roles = [str(role.id) for role in getattr(user, "roles", [])]
    return Place(
        user=str(user.id),
        server=str(guild.id) if guild is not None else None,
        channel=str(where) if where is not None else None,
        roles=roles,
        dm=dm,
    )
