"""Schedules on Discord: `/schedule` in a thread or DM, and how a schedule's run is posted in
its thread (the heading's mention of its owner notifies them, and nobody else)."""

from __future__ import annotations

from typing import Any, Protocol

import discord
from discord import app_commands

from bot.conversations import Admission, ConversationKey, Conversations, Person, Place
from bot.conversations.presence import Presence
from bot.conversations.reply import Reply
from bot.platforms.on_discord.interactions import conversation_of, tell
from bot.platforms.on_discord.render import plain
from bot.platforms.on_discord.reply import ChannelSurface


class DiscordParts(Protocol):
    """What schedules need of the Discord client."""

    conversations: Conversations
    door: Admission
    tree: app_commands.CommandTree[Any]
    presence: Presence

    async def person_now(
        self, interaction: discord.Interaction, server_wide: bool = False
    ) -> Person: ...

    async def admitted(self, interaction: discord.Interaction, person: Person) -> bool: ...

    def reply(self, surface: ChannelSurface, keep: bool = True) -> Reply: ...

    async def member_of(self, guild: discord.Guild, user: int) -> discord.Member | None: ...


NO_THREAD = (
    "Schedules run a conversation's code again: use /schedule in a thread I started, or in our DM."
)


def register_schedules(client: DiscordParts) -> None:
    """The /schedule command."""

    @client.tree.command(
        name="schedule", description="Run this conversation's code again at set times"
    )
    @app_commands.describe(
        what="when (every monday 09:00 Europe/Berlin, daily, hourly, a cron line), "
        "or list, cancel N, run-now N, update N, approve N"
    )
    async def schedule(interaction: discord.Interaction, what: str = "list") -> None:
        person = await client.person_now(interaction)
        if not await client.admitted(interaction, person):
            return
        key = conversation_of(interaction)
        if key is None:
            await tell(interaction, NO_THREAD)
            return
        # Said to the person who asked, as Slack's answers are; the runs are posted for all.
        await interaction.response.defer(thinking=True, ephemeral=True)
        answer = await client.conversations.schedule_command(client.door, person, key, what)
        # The answer's code block and times are the bot's markdown; the client notifies
        # nobody a command's answer names.
        await interaction.followup.send(answer, ephemeral=True)


class DiscordPoster:
    """A schedule's run, posted in its conversation's thread or DM."""

    def __init__(self, client: DiscordParts, bot: discord.Client) -> None:
        self.client = client
        self.bot = bot
        self.door = client.door

    async def person(self, user: str, key: ConversationKey) -> Person:
        if key.is_dm:
            place = await self.client.presence.place(Place(user, dm=True))
            return Person(user, place)
        guild = self.bot.get_guild(int(key.workspace))
        member = None if guild is None else await self.client.member_of(guild, int(user))
        roles = [str(role.id) for role in member.roles] if member is not None else []
        return Person(user, Place(user, key.workspace, key.channel, roles))

    def mention(self, user: str) -> str:
        return f"<@{user}>"

    async def reply_in(self, key: ConversationKey, owner: str) -> Reply:
        return self.client.reply(ChannelSurface(await where(self.bot, key)), keep=False)

    async def say(self, key: ConversationKey, text: str, notify: str = "") -> None:
        target = await where(self.bot, key)
        body = plain(text)
        users: Any = False
        if notify:
            # The text is escaped (its words are people's); the owner's own mention is put
            # back whole, and only it notifies.
            body = body.replace(plain(self.mention(notify)), self.mention(notify))
            users = [discord.Object(int(notify))]
        mentions = discord.AllowedMentions(everyone=False, roles=False, users=users)
        await target.send(body, allowed_mentions=mentions)


async def where(client: discord.Client, key: ConversationKey) -> Any:
    """The channel a conversation's messages go to: its thread, DM or channel."""
    if key.is_dm:
        user = await client.fetch_user(int(key.channel))
        return user.dm_channel or await user.create_dm()
    # A one-off run has no thread of its own: its messages go to the channel.
    target = int(key.channel if key.is_one_off or not key.thread else key.thread)
    return client.get_channel(target) or await client.fetch_channel(target)
