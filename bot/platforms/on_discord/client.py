"""The Discord front end: conversations in threads and DMs, slash commands, buttons.

A mention in a channel starts a thread on the message, and the thread is the conversation;
a DM is one conversation until /reset. Messages are handled once even when the gateway
replays them after a resume. Everything the bot sends pings nobody.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any

import discord
import yarl
from discord import app_commands

from bot.agent import UserMessage, direct_code
from bot.platforms.access import NOT_HERE, NOT_YOURS, AccessRules, Gate, Place, Refused, Seen
from bot.platforms.hub import Hub
from bot.platforms.markup import code_blocks
from bot.platforms.on_discord.render import thread_name
from bot.platforms.on_discord.reply import ChannelSurface, InteractionSurface, Reply, Surface
from bot.platforms.turns import SHUTDOWN_NOTICE, RerunSpec, Running
from bot.settings import DiscordSettings
from storage.intake import DISCORD_FILE_HOSTS, IncomingFile, http_fetcher

log = logging.getLogger(__name__)

HELP = (
    "Ask me anything that Python can answer (attach CSV or Excel files to analyse them), "
    "or send code in a ``` block. In a thread I started, just keep talking. "
    "`/run` runs code directly; `/reset` starts over; `/export` gives the notebook."
)
NO_CONVERSATION = (
    "There is no Cellmate conversation here: mention me in a channel to start a thread, "
    "or send me a direct message."
)
MENTION = re.compile(r"<@!?(\d+)>")
BUTTON_LOOKS = {
    "stop": ("Stop", discord.ButtonStyle.danger),
    "rerun": ("Re-run", discord.ButtonStyle.secondary),
}


class CellmateDiscord(discord.Client):
    def __init__(self, hub: Hub, settings: DiscordSettings) -> None:
        intents = discord.Intents.default()
        intents.message_content = settings.message_content
        intents.presences = False
        intents.members = False
        super().__init__(intents=intents, allowed_mentions=discord.AllowedMentions.none())
        self.hub = hub
        self.agent = hub.agent
        self.settings = settings
        self.gate = Gate(
            AccessRules(
                servers=frozenset(settings.guilds),
                channels=frozenset(settings.channels),
                roles=frozenset(settings.roles),
                users=frozenset(settings.users),
                dms=settings.dms,
                cooldown_s=settings.cooldown_s,
            )
        )
        self.seen = Seen()
        self.code_messages: dict[int, str] = {}
        """Messages that were code run directly, by id -> conversation, for re-run on edit."""
        self.upload_limit = int(settings.upload_limit_mb * 1e6)
        self.fetch = http_fetcher(file_hosts(settings), where="Discord's file servers")
        self.tree = app_commands.CommandTree(self)
        register_commands(self)
        self.add_dynamic_items(TurnButton)
        self.connected = asyncio.Event()

    async def setup_hook(self) -> None:
        if self.settings.api_url:
            # Discord's client connects to its default gateway; a custom API names its own.
            _shards, url, _limits = await self.http.get_bot_gateway()
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
        if self.settings.test_guild:
            guild = discord.Object(id=int(self.settings.test_guild))
            self.tree.copy_global_to(guild=guild)
            await self.tree.sync(guild=guild)
        else:
            await self.tree.sync()

    async def on_connect(self) -> None:
        # Connected to the gateway; `connected` (ready, with the servers loaded) comes later.
        self.hub.connected["discord"] = True

    async def on_ready(self) -> None:
        self._up(True)
        log.info("connected to Discord as %s", self.user)

    async def on_disconnect(self) -> None:
        self._up(False)

    async def on_resumed(self) -> None:
        self._up(True)

    def _up(self, connected: bool) -> None:
        self.hub.connected["discord"] = connected
        if connected:
            self.connected.set()
        else:
            self.connected.clear()

    # ── messages ──────────────────────────────────────────────────────────

    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot or self.user is None:
            return
        if not self.seen.first_time(f"message:{message.id}"):
            return
        await self._handle_message(message, message.content)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """Editing a message of code that was run runs it again."""
        conversation = self.code_messages.get(payload.message_id)
        message = payload.message
        if conversation is None or message.author.bot or "content" not in payload.data:
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
        if not self.gate.allows(_place(message.author, channel, dm)):
            return
        me = self.user.id
        text = MENTION.sub(lambda m: "" if int(m.group(1)) == me else m.group(), content).strip()
        if not text and not message.attachments:
            if mentioned or dm:
                await message.reply(HELP, mention_author=False)
            return
        surface: Surface
        if dm:
            conversation = f"discord:dm:{message.author.id}"
            surface = ChannelSurface(channel)
        elif isinstance(channel, discord.Thread):
            conversation = f"discord:thread:{channel.id}"
            surface = ChannelSurface(channel, reference=message if edited else None)
        else:
            conversation, surface = await self._start_thread(message, text)
        if direct_code(text) is not None:
            self.code_messages[message.id] = conversation
        attachments = [
            IncomingFile(item.filename, item.size, url=item.url) for item in message.attachments
        ]
        await self.run_turn(
            surface,
            conversation,
            UserMessage(
                text,
                attachments,
                user=str(message.author.id),
                server=str(message.guild.id) if message.guild else "",
                fetch=self.fetch,
            ),
            owner=message.author.id,
        )

    async def _start_thread(self, message: discord.Message, text: str) -> tuple[str, Surface]:
        try:
            thread = await message.create_thread(name=thread_name(text), auto_archive_duration=1440)
        except discord.HTTPException as exc:
            # No permission to create threads here: answer in the channel instead.
            log.info("could not start a thread (%s); replying in the channel", exc)
            return f"discord:channel:{message.channel.id}", ChannelSurface(
                message.channel, reference=message
            )
        return f"discord:thread:{thread.id}", ChannelSurface(thread)

    # ── turns ─────────────────────────────────────────────────────────────

    async def run_turn(
        self,
        surface: Surface,
        conversation: str,
        message: UserMessage,
        owner: int,
        rerun: RerunSpec | None = None,
    ) -> None:
        """One turn with its reply, or one message saying why it cannot start."""
        try:
            with self.hub.starting(self.gate, str(owner), message.server, conversation) as entry:
                await self._turn(surface, message, entry, rerun)
        except Refused as exc:
            await surface.notify(str(exc))

    async def _turn(
        self, surface: Surface, message: UserMessage, entry: Running, rerun: RerunSpec | None
    ) -> None:
        done_view = None
        if rerun is not None:
            self.hub.turns.remember(entry.key, rerun)
            done_view = _buttons(TurnButton("rerun", entry.key))
        stop_view = _buttons(TurnButton("stop", entry.key))
        reply = Reply(
            surface,
            self.upload_limit,
            stop_view,
            done_view,
            max_files=self.settings.files_per_answer,
        )
        try:
            await reply.start()
            await self.agent.turn(entry.turn.conversation, message, reply, entry.turn)
            if entry.shutdown:
                reply.view.notices.append(SHUTDOWN_NOTICE)
            await reply.finish()
        except Exception as exc:
            log.exception("turn failed in %s", entry.turn.conversation)
            try:
                await surface.send(f"❌ Something went wrong while answering: {exc}")
            except discord.HTTPException:
                log.exception("could not tell the user about the failure")

    async def start_run(
        self, interaction: discord.Interaction, code: str, conversation: str | None = None
    ) -> None:
        """/run, the Run code menu and Re-run: run code directly, no model involved."""
        if not await self._check(interaction):
            return
        if conversation is None:
            conversation = conversation_of(interaction)
        key = conversation or f"discord:run:{interaction.id}"
        user, server = str(interaction.user.id), str(interaction.guild_id or "")
        try:
            with self.hub.starting(self.gate, user, server, key) as entry:
                await interaction.response.defer(thinking=True)
                message = UserMessage(f"/run\n{code}", user=user, server=server)
                rerun = RerunSpec(code, conversation, server, user)
                await self._turn(InteractionSurface(interaction), message, entry, rerun)
        except Refused as exc:
            await interaction.response.send_message(str(exc), ephemeral=True)
        finally:
            if conversation is None:  # a one-off run: its session goes once the turn is over
                await self.agent.reset(key)

    async def _check(self, interaction: discord.Interaction) -> bool:
        """The admission check every interaction passes; refused ones are told so."""
        dm = interaction.guild is None
        channel = interaction.channel
        if self.gate.allows(_place(interaction.user, channel, dm)):
            return True
        await interaction.response.send_message(NOT_HERE, ephemeral=True)
        return False

    async def may_act(
        self, interaction: discord.Interaction, conversation: str | None, owner: str = ""
    ) -> bool:
        """Admission, then whether this person may act on `conversation`: a participant, the
        `owner` of a one-off run, or a moderator. Refused ones are told why."""
        if not await self._check(interaction):
            return False
        user = str(interaction.user.id)
        if (
            user == owner
            or conversation == f"discord:dm:{user}"
            or self.gate.may_act(conversation or "", user, self.moderator(interaction))
            or await self._started(interaction, conversation)
        ):
            return True
        await interaction.response.send_message(NOT_YOURS, ephemeral=True)
        return False

    async def _started(self, interaction: discord.Interaction, conversation: str | None) -> bool:
        """Whether this person wrote the message the conversation's thread was started on.
        Participants are not kept across restarts; the thread's first message is."""
        channel = interaction.channel
        if (
            not isinstance(channel, discord.Thread)
            or conversation != f"discord:thread:{channel.id}"
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
        if starter.author.id != interaction.user.id:
            return False
        self.gate.participants.add(conversation, str(interaction.user.id))
        return True

    def moderator(self, interaction: discord.Interaction) -> bool:
        """Moderators (Manage Messages in the channel, or a configured admin) may act on any
        conversation where the bot is enabled."""
        if str(interaction.user.id) in self.hub.admins:
            return True
        return interaction.guild is not None and interaction.permissions.manage_messages


def file_hosts(settings: DiscordSettings) -> tuple[str, ...]:
    """Where attachments may be downloaded from: the setting, else Discord's CDN (and a
    custom API's own server, which serves the attachments it hands out)."""
    if settings.file_hosts:
        return settings.file_hosts
    extra = (str(yarl.URL(settings.api_url).origin()),) if settings.api_url else ()
    return (*DISCORD_FILE_HOSTS, *extra)


def conversation_of(interaction: discord.Interaction) -> str | None:
    """The conversation an interaction belongs to: its DM or its thread, else none."""
    channel = interaction.channel
    if interaction.guild is None:
        return f"discord:dm:{interaction.user.id}"
    if isinstance(channel, discord.Thread):
        return f"discord:thread:{channel.id}"
    return None


def _place(user: discord.abc.User, channel: Any, dm: bool) -> Place:
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


def _buttons(*items: discord.ui.Item[Any]) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    for item in items:
        view.add_item(item)
    return view


class TurnButton(
    discord.ui.DynamicItem[discord.ui.Button[Any]], template=r"cm:(?P<kind>stop|rerun):(?P<key>\w+)"
):
    """Stop on a running turn, Re-run on a finished /run; found again by custom id."""

    def __init__(self, kind: str, key: str) -> None:
        label, style = BUTTON_LOOKS[kind]
        super().__init__(discord.ui.Button(label=label, style=style, custom_id=f"cm:{kind}:{key}"))
        self.kind = kind
        self.key = key

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str]
    ) -> TurnButton:
        return cls(match["kind"], match["key"])

    async def callback(self, interaction: discord.Interaction) -> None:
        client = interaction.client
        assert isinstance(client, CellmateDiscord)
        if self.kind == "stop":
            await self._stop(client, interaction)
        else:
            await self._rerun(client, interaction)

    async def _stop(self, client: CellmateDiscord, interaction: discord.Interaction) -> None:
        running = client.hub.turns.get(self.key)
        if running is None:
            if await client._check(interaction):
                await interaction.response.send_message(
                    "That has already finished.", ephemeral=True
                )
            return
        if not await client.may_act(interaction, running.turn.conversation, running.owner):
            return
        running.turn.stop(client.agent)
        await interaction.response.defer()

    async def _rerun(self, client: CellmateDiscord, interaction: discord.Interaction) -> None:
        spec = client.hub.turns.rerun(self.key)
        if spec is None:
            if not await client._check(interaction):
                return
            await interaction.response.send_message(
                "I no longer have that code (the bot restarted since); use /run again.",
                ephemeral=True,
            )
            return
        if await client.may_act(interaction, spec.conversation, spec.owner):
            await client.start_run(interaction, spec.code, spec.conversation)


class RunModal(discord.ui.Modal, title="Run Python"):
    code: discord.ui.TextInput[RunModal] = discord.ui.TextInput(
        label="Code",
        style=discord.TextStyle.paragraph,
        placeholder="import pandas as pd\n...",
        max_length=4000,
    )

    def __init__(self, client: CellmateDiscord) -> None:
        super().__init__(timeout=900)
        self.client = client

    async def on_submit(self, interaction: discord.Interaction) -> None:
        await self.client.start_run(interaction, self.code.value)


async def _conversation_command(
    client: CellmateDiscord, interaction: discord.Interaction
) -> str | None:
    """The conversation a command acts on, acknowledged (deferred); None, with the user told
    why, where there is none or it is not theirs to act on."""
    if not await client._check(interaction):
        return None
    conversation = conversation_of(interaction)
    if conversation is None:
        await interaction.response.send_message(NO_CONVERSATION, ephemeral=True)
        return None
    if not await client.may_act(interaction, conversation):
        return None
    await interaction.response.defer(thinking=True)
    return conversation


def register_commands(client: CellmateDiscord) -> None:
    tree = client.tree

    @tree.command(name="run", description="Run Python in the sandbox, without the model")
    @app_commands.describe(code="Python code; leave it out for a multi-line editor")
    async def run(interaction: discord.Interaction, code: str | None = None) -> None:
        if code is None or not code.strip():
            if await client._check(interaction):
                await interaction.response.send_modal(RunModal(client))
            return
        await client.start_run(interaction, code)

    @tree.context_menu(name="Run code")
    async def run_code(interaction: discord.Interaction, message: discord.Message) -> None:
        code = code_blocks(message.content)
        if code is None:
            if await client._check(interaction):
                await interaction.response.send_message("That message has no code.", ephemeral=True)
            return
        await client.start_run(interaction, code)

    @tree.command(name="reset", description="Forget this conversation and restart its Python")
    async def reset(interaction: discord.Interaction) -> None:
        conversation = await _conversation_command(client, interaction)
        if conversation is None:
            return
        await client.agent.reset(conversation)
        await interaction.followup.send(
            "Forgot this conversation and restarted its Python session."
        )

    @tree.command(name="export", description="This conversation's code and output as a notebook")
    async def export(interaction: discord.Interaction) -> None:
        conversation = await _conversation_command(client, interaction)
        if conversation is None:
            return
        notebook = await client.agent.executor.session(conversation).export_notebook()
        if notebook is None:
            await interaction.followup.send("Nothing to export yet: no code has run here.")
            return
        data = json.dumps(notebook, indent=1).encode()
        await InteractionSurface(interaction).send(
            "The session as a Jupyter notebook:", [("session.ipynb", data)]
        )

    @tree.command(name="usage", description="Who used Cellmate most in the last day (admins)")
    @app_commands.default_permissions(manage_guild=True)
    async def usage(interaction: discord.Interaction) -> None:
        if not await client._check(interaction):
            return
        admin = str(interaction.user.id) in client.hub.admins
        if not admin and not interaction.permissions.manage_guild:
            await interaction.response.send_message("Only admins can see usage.", ephemeral=True)
            return
        server = str(interaction.guild_id) if interaction.guild_id else None
        await interaction.response.send_message(client.hub.usage(server), ephemeral=True)

    @tree.command(name="files", description="The files in this conversation's /mnt/data")
    async def files(interaction: discord.Interaction) -> None:
        conversation = await _conversation_command(client, interaction)
        if conversation is None:
            return
        found = await client.agent.executor.session(conversation).list_files()
        lines = [f"`{path}` ({size:,} bytes)" for path, size in found[:50]]
        if len(found) > 50:
            lines.append(f"… and {len(found) - 50} more")
        await interaction.followup.send("\n".join(lines) or "No files in /mnt/data yet.")
