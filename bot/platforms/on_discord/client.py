"""The Discord front end: conversations in threads and DMs, translated into calls on the
conversation service.

A mention in a channel starts a thread on the message, and the thread is the conversation;
a DM is one conversation until /reset. Messages are handled once even when the gateway
replays them after a resume. Everything the bot sends pings nobody.

A DM is admitted by the conversation layer's rules from where its sender is: this module
looks them up in the servers the rules name (by REST: without the privileged members intent
the gateway does not report role changes, so its cached members may hold removed roles).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re

import discord
import yarl
from discord import app_commands

from bot.agent import UserMessage
from bot.conversations import Admission, ConversationKey, Conversations, Person, Refused
from bot.conversations.access import AccessRules, Place
from bot.conversations.presence import Expiring, Presence
from bot.errors import NOT_HERE
from bot.fences import (
    BACKGROUND_FLAG,
    BESIDE_FLAG,
    direct_code,
    direct_rerun,
    runnable_again,
    with_language,
)
from bot.platforms.file_hosts import file_hosts as shared_hosts
from bot.platforms.on_discord.approval import ApprovalButton
from bot.platforms.on_discord.commands import TurnButton, buttons, register_commands
from bot.platforms.on_discord.doors import DoorButton, doorbell, register_network
from bot.platforms.on_discord.interactions import conversation_of, place_of, tell, thread_key
from bot.platforms.on_discord.mcp import register_mcp
from bot.platforms.on_discord.prompts import InputButton
from bot.platforms.on_discord.render import thread_name
from bot.platforms.on_discord.reply import ChannelSurface, InteractionSurface, Reply, Surface
from bot.platforms.on_discord.schedules import DiscordPoster, register_schedules
from bot.platforms.on_discord.user_install import (
    admits,
    allow_user_installs,
    elsewhere,
    run_elsewhere,
)
from bot.settings import DiscordSettings
from storage.intake import DISCORD_FILE_HOSTS, IncomingFile, http_fetcher

log = logging.getLogger(__name__)

HELP = (
    "Ask me anything that Python can answer (attach CSV or Excel files to analyse them), "
    "or send code in a ``` block. In a thread I started, just keep talking. "
    "`/run` runs code directly; `/reset` starts over; `/export` gives the notebook; "
    "`/policy` shows whether code needs approval here."
)
MENTION = re.compile(r"<@!?(\d+)>")


class CellmateDiscord(discord.Client):
    def __init__(
        self,
        conversations: Conversations,
        settings: DiscordSettings,
        connected: dict[str, bool] | None = None,
    ) -> None:
        intents = discord.Intents.default()
        intents.message_content = settings.message_content
        intents.presences = False
        intents.members = False
        self.shard = settings.shard()
        """This replica's shard of the gateway (None: the whole gateway, unsharded)."""
        super().__init__(
            intents=intents,
            allowed_mentions=discord.AllowedMentions.none(),
            shard_id=self.shard,
            shard_count=settings.shard_count if self.shard is not None else None,
        )
        self.conversations = conversations
        self.settings = settings
        self.connected_state = connected if connected is not None else {}
        """Platform name -> whether its connection is up, for /healthz."""
        self.door = Admission(
            AccessRules(
                servers=frozenset(settings.guilds),
                channels=frozenset(settings.channels),
                roles=frozenset(settings.roles),
                users=frozenset(settings.users),
                dms=settings.dms,
                dm_users=frozenset(settings.dm_users),
                cooldown_s=settings.cooldown_s,
            ),
            shared=conversations.shared_events,
        )
        self.presence = Presence(self.door.rules, self.whereabouts)
        self.members: Expiring[tuple[int, int], discord.Member | None] = Expiring(
            settings.membership_ttl_s
        )
        """(server, user) -> the user's membership there (None: not a member), for DMs."""
        self.code_messages: dict[int, ConversationKey] = {}
        """Messages that were code run directly, by id, for a re-run on edit."""
        self.upload_limit = int(settings.upload_limit_mb * 1e6)
        self.fetch = http_fetcher(file_hosts(settings), where="Discord's file servers")
        self.tree = app_commands.CommandTree(self)
        register_commands(self)
        register_network(self)
        register_schedules(self)
        register_mcp(self)
        allow_user_installs(self.tree, settings)
        self.add_dynamic_items(TurnButton, ApprovalButton, DoorButton, InputButton)
        conversations.doorbells["discord"] = doorbell(self)
        self.connected = asyncio.Event()

    async def setup_hook(self) -> None:
        if self.settings.api_url:
            # Discord's client connects to its default gateway; a custom API names its own.
            _shards, url, _limits = await self.http.get_bot_gateway()
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
        if self.shard:
            return  # shard 0's replica registers the commands, for every shard
        if self.settings.test_guild:
            guild = discord.Object(id=int(self.settings.test_guild))
            self.tree.copy_global_to(guild=guild)
            await self.tree.sync(guild=guild)
        else:
            await self.tree.sync()

    async def on_connect(self) -> None:
        # Connected to the gateway; `connected` (ready, with the servers loaded) comes later.
        self.connected_state["discord"] = True

    async def on_ready(self) -> None:
        self._up(True)
        # Schedules' runs are posted once the servers are loaded (a missed one runs now).
        self.conversations.post_with("discord", DiscordPoster(self, self))
        log.info("connected to Discord as %s", self.user)

    async def on_disconnect(self) -> None:
        self._up(False)

    async def on_resumed(self) -> None:
        self._up(True)

    def _up(self, connected: bool) -> None:
        self.connected_state["discord"] = connected
        if connected:
            self.connected.set()
        else:
            self.connected.clear()

    # ── messages ──────────────────────────────────────────────────────────

    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot or self.user is None:
            return
        if not self.door.seen.first_time(f"message:{message.id}"):
            return
        with self.conversations.turns.arriving():
            await self._handle_message(message, message.content)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """Editing a message of code that was run runs it again."""
        message = payload.message
        if payload.message_id not in self.code_messages or message.author.bot:
            return
        if "content" not in payload.data:
            return
        before = payload.cached_message.content if payload.cached_message else None
        if before == message.content:
            return
        await self._handle_message(message, message.content, edited=True)

    async def _handle_message(
        self, message: discord.Message, content: str, edited: bool = False
    ) -> None:
        assert self.user is not None
        channel = message.channel
        dm = message.guild is None
        mentioned = self.user in message.mentions
        ours = isinstance(channel, discord.Thread) and channel.owner_id == self.user.id
        if not (dm or mentioned or ours):
            return
        place = await self.presence.place(place_of(message.author, channel, dm))
        person = Person(str(message.author.id), place)
        if not self.door.allows(person.place):
            return  # ignored silently, as in a channel off the allowlist
        me = self.user.id
        text = MENTION.sub(lambda m: "" if int(m.group(1)) == me else m.group(), content).strip()
        if not text and not message.attachments:
            if mentioned or dm:
                await message.reply(HELP, mention_author=False)
            return
        surface: Surface
        if dm:
            key = ConversationKey("discord", "dm", person.user)
            surface = ChannelSurface(channel)
        elif isinstance(channel, discord.Thread):
            key = thread_key(channel)
            surface = ChannelSurface(channel, reference=message if edited else None)
        else:
            key, surface = await self._start_thread(message, text)
        code = direct_code(text)
        if code is not None:
            self.code_messages[message.id] = key
        attachments = [
            IncomingFile(item.filename, item.size, url=item.url) for item in message.attachments
        ]
        server = str(message.guild.id) if message.guild else ""
        user_message = UserMessage(
            text, attachments, user=person.user, server=server, fetch=self.fetch
        )
        await self.conversations.turn(
            self.door,
            person,
            key,
            user_message,
            self.reply(surface),
            rerun_code=direct_rerun(text),
            quiet=True,
        )

    async def _start_thread(
        self, message: discord.Message, text: str
    ) -> tuple[ConversationKey, Surface]:
        guild = str(message.guild.id) if message.guild else ""
        try:
            thread = await message.create_thread(name=thread_name(text), auto_archive_duration=1440)
        except discord.HTTPException as exc:
            # No permission to create threads here: answer in the channel instead.
            log.info("could not start a thread (%s); replying in the channel", exc)
            key = ConversationKey("discord", guild, str(message.channel.id))
            return key, ChannelSurface(message.channel, reference=message)
        return thread_key(thread), ChannelSurface(thread)

    def reply(self, surface: Surface, keep: bool = True) -> Reply:
        """A turn's reply on `surface`; `keep`: with Keep running beside Stop (where runs may
        go on in the background). Run beside joins them while the turn's code waits for the
        run in the background."""
        keep = keep and self.conversations.background.max_s > 0

        def controls(kind: str, key: str) -> discord.ui.View:
            return buttons(kind, key, keep)

        return Reply(surface, self.upload_limit, controls, max_files=self.settings.files_per_answer)

    # ── direct runs and people ────────────────────────────────────────────

    async def start_run(
        self,
        interaction: discord.Interaction,
        code: str,
        key: ConversationKey | None = None,
        background: bool = False,
        beside: bool = False,
        language: str = "",
    ) -> None:
        """/run, the Run code menu and Re-run: run code directly, no model involved, in the
        conversation it was asked in (or in a one-off session); `background`: it goes on in
        the background at once; `beside`: it runs beside the conversation's run in the
        background rather than wait for it."""
        if elsewhere(interaction):  # a user install where the bot is not: a one-off run,
            # with nothing in the background to run beside
            await run_elsewhere(self, interaction, code, background, language)
            return
        person = await self.person_now(interaction)
        if not await self.admitted(interaction, person):
            return
        key = (
            key
            or conversation_of(interaction)
            or ConversationKey.one_off(
                "discord", str(interaction.guild_id or ""), str(interaction.channel_id or "")
            )
        )
        server = str(interaction.guild_id or "")
        try:
            self.conversations.admit(self.door, person, server)
        except Refused as exc:
            await tell(interaction, str(exc))
            return
        await interaction.response.defer(thinking=True)
        flag = f" {BACKGROUND_FLAG}" if background else f" {BESIDE_FLAG}" if beside else ""
        flag = with_language(flag, language)
        message = UserMessage(f"/run{flag}\n{code}", user=person.user, server=server)
        reply = self.reply(InteractionSurface(interaction))
        again = runnable_again(code, language)
        await self.conversations.turn(self.door, person, key, message, reply, rerun_code=again)

    async def admitted(self, interaction: discord.Interaction, person: Person) -> bool:
        """The admission check of every interaction; a refused person is told so."""
        if self.door.allows(person.place) and admits(self.settings, interaction):
            return True
        await tell(interaction, NOT_HERE)
        return False

    async def person_now(
        self, interaction: discord.Interaction, server_wide: bool = False
    ) -> Person:
        """Who acts in an interaction, in a DM with where they are now (see `person`)."""
        person = self.person(interaction, server_wide)
        return dataclasses.replace(person, place=await self.presence.place(person.place))

    def person(self, interaction: discord.Interaction, server_wide: bool = False) -> Person:
        """Who acts in an interaction. `server_wide`: they moderate only with Manage Server
        (for settings of the whole server). In a DM, where they were last found
        (`person_now` looks again)."""

        async def vouched() -> bool:
            return self.moderator(interaction) or await self._started(interaction)

        async def moderates() -> bool:
            if server_wide:
                return interaction.guild is not None and interaction.permissions.manage_guild
            return self.moderator(interaction)

        # Where the bot is not (a user install), a person is admitted as by a DM.
        dm = interaction.guild is None or elsewhere(interaction)
        place = self.presence.known(place_of(interaction.user, interaction.channel, dm))
        return Person(str(interaction.user.id), place, vouched, moderates)

    async def whereabouts(self, dm: Place) -> list[Place]:
        """Where a DM's sender is among the places the rules name: each server they are a
        member of, with their roles there and the allowed channels they can see."""
        rules, user = self.door.rules, dm.user
        found: list[Place] = []
        for guild in self._servers_to_ask():
            member = await self._member(guild, int(user))
            if member is None:
                continue
            roles = [str(role.id) for role in member.roles]
            if not rules.channels:
                found.append(Place(user, str(guild.id), None, roles))
                continue
            for channel_id in rules.channels:
                channel = guild.get_channel(_snowflake(channel_id))
                if channel is not None and channel.permissions_for(member).view_channel:
                    found.append(Place(user, str(guild.id), channel_id, roles))
        return found

    def _servers_to_ask(self) -> list[discord.Guild]:
        """The servers the rules name, else those holding an allowed channel or role (role
        and channel ids are unique across servers, so a same-named role elsewhere is not
        one of them)."""
        rules = self.door.rules
        if rules.servers:
            named = {_snowflake(server) for server in rules.servers}
        else:
            named = {
                guild.id
                for guild in self.guilds
                if any(guild.get_channel(_snowflake(c)) for c in rules.channels)
                or any(guild.get_role(_snowflake(r)) for r in rules.roles)
            }
        return [guild for guild in self.guilds if guild.id in named]

    async def member_of(self, guild: discord.Guild, user: int) -> discord.Member | None:
        """`user` as a member of `guild` now (None: not a member, or Discord would not say)."""
        return await self._member(guild, user)

    async def _member(self, guild: discord.Guild, user: int) -> discord.Member | None:
        """`user` as a member of `guild` (None: not a member, or Discord would not say)."""
        try:
            return self.members.fresh((guild.id, user))
        except KeyError:
            pass
        try:
            member: discord.Member | None = await guild.fetch_member(user)
        except discord.NotFound:
            member = None
        except discord.HTTPException as exc:
            log.warning("could not look up %s in server %s for a DM: %s", user, guild.id, exc)
            return None  # not kept: the next DM asks again
        self.members.put((guild.id, user), member)
        return member

    async def _started(self, interaction: discord.Interaction) -> bool:
        """Whether this person wrote the message the interaction's thread was started on:
        participants are not kept across restarts; the thread's first message is."""
        channel = interaction.channel
        if (
            not isinstance(channel, discord.Thread)
            or self.user is None
            or channel.owner_id != self.user.id
            or not isinstance(channel.parent, discord.TextChannel)
        ):
            return False
        try:
            # A thread started on a message has that message's id.
            starter = await channel.parent.fetch_message(channel.id)
        except discord.HTTPException:
            return False
        return starter.author.id == interaction.user.id

    def moderator(self, interaction: discord.Interaction) -> bool:
        """Moderators (Manage Messages in the channel, or a configured admin) may act on any
        conversation where the bot is enabled."""
        if str(interaction.user.id) in self.conversations.admins:
            return True
        return interaction.guild is not None and interaction.permissions.manage_messages


def file_hosts(settings: DiscordSettings) -> tuple[str, ...]:
    """Where attachments may be downloaded from (see `bot.platforms.file_hosts`)."""
    return shared_hosts(settings.file_hosts, DISCORD_FILE_HOSTS, settings.api_url)


def _snowflake(text: str) -> int:
    """A configured id as Discord's number (0, which matches nothing, when it is not one)."""
    return int(text) if text.isdigit() else 0
