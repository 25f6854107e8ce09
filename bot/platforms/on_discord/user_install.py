"""Cellmate installed to a person's Discord account (a "user install"): `/run` and the Run
with Cellmate message command in any DM, group DM or server, the bot a member or not.

Where the bot is a member of the server, nothing changes, whoever's install authorized the
command: the server's own allowlists, code policy and conversations apply, as to any
interaction there. Elsewhere
(a DM or group DM between people, or a server the app is not installed in) the bot can
neither read nor post in the channel, nor start a thread:

- the answer is the interaction's own response (deferred, then edited) and its follow-ups,
  charts and files included; Discord allows five follow-ups an interaction there
  (`FOLLOWUPS`), and the answer is fitted to them; nothing is ever sent as a channel
  message, not even after the interaction's 15 minutes;
- each run is a one-off conversation of its own (`PLATFORM`): what is printed there is seen
  by people the person chose to show it to, so it must not carry the variables and files of
  their DM with the bot; and no run there goes on in the background, posts a network card or
  a schedule, because those are posted in the channel later;
- a person is admitted as a DM to the bot would admit them (`CELLMATE_DISCORD_USERS`, and
  with place allowlists, being a member of an allowed server), and only with
  `CELLMATE_DISCORD_USER_INSTALL` on and within `CELLMATE_DISCORD_USER_INSTALL_USERS` when
  that is set; quotas count per person (no server's), the operator's default code policy
  applies; Stop and Re-run work as buttons on the answer.
"""

from __future__ import annotations

import io
import logging
import time
from typing import Any, Protocol

import discord
from discord import app_commands

from bot.agent import UserMessage
from bot.conversations import Admission, ConversationKey, Conversations, Person, Refused
from bot.fences import runnable_again, with_language
from bot.platforms.on_discord.commands import RUN_MENU, buttons
from bot.platforms.on_discord.interactions import tell
from bot.platforms.on_discord.render import MESSAGE_LIMIT, Outgoing
from bot.platforms.on_discord.reply import EXPIRED_TOKEN_CODES, TOKEN_LIFETIME_S, Reply
from bot.settings import DiscordSettings

log = logging.getLogger(__name__)

PLATFORM = "discord-user"
"""The conversations of runs where the bot is not: no front end posts anything there later
(background runs, network cards, schedules need a channel to post in)."""
FOLLOWUPS = 5
"""Follow-up messages Discord allows an interaction that only a user install authorized."""
MAX_FOLLOWUPS_CODE = 40094
NO_BACKGROUND_HERE = (
    "Runs cannot go on in the background here: Cellmate is not in this place, so it can "
    "only answer within Discord's 15 minutes for this command. Run it without `background`, "
    "or in a server Cellmate is in, or in a DM with Cellmate."
)
NOT_ALL_SHOWN = (
    "{count} more part(s) of this answer were not shown: Discord allows an app five "
    "follow-up messages where it is not installed. Run it in a DM with Cellmate for all of it."
)


class InstallFront(Protocol):
    """What a run outside the bot's places needs of the Discord client."""

    conversations: Conversations
    door: Admission
    settings: DiscordSettings
    upload_limit: int

    async def person_now(
        self, interaction: discord.Interaction, server_wide: bool = False
    ) -> Person: ...

    async def admitted(self, interaction: discord.Interaction, person: Person) -> bool: ...


def allow_user_installs(tree: app_commands.CommandTree[Any], settings: DiscordSettings) -> None:
    """Every command is for servers the app is installed in (and the DM with the bot), even
    when the app allows user installs in the Developer Portal; with `user_install`, /run and
    Run with Cellmate may also be installed to an account and used in DMs, group DMs and
    any server. Only for global commands: commands synced to a test server are the
    server's."""
    if settings.test_guild:
        if settings.user_install:
            log.warning(
                "CELLMATE_DISCORD_USER_INSTALL needs global commands; with "
                "CELLMATE_DISCORD_TEST_GUILD they are synced to one server only"
            )
        return
    tree.allowed_installs = app_commands.AppInstallationType(guild=True)
    if not settings.user_install:
        return
    anywhere = app_commands.AppCommandContext(guild=True, dm_channel=True, private_channel=True)
    run = tree.get_command("run")
    menu = tree.get_command(RUN_MENU, type=discord.AppCommandType.message)
    for command in (run, menu):
        if command is None:
            raise RuntimeError("the commands a user install offers were not registered")
        command.allowed_installs = app_commands.AppInstallationType(guild=True, user=True)
        command.allowed_contexts = anywhere


def elsewhere(interaction: discord.Interaction) -> bool:
    """Whether an interaction comes from a place the bot is not in: a DM or group DM between
    people, or a server the bot is not a member of (only a person's install reaches it).
    A server the bot is in is its own, whoever's install authorized the command: its rules
    apply (the bot's membership, not the interaction's say, decides)."""
    if interaction.context.private_channel:
        return True
    if interaction.guild_id is None:
        return False  # the DM with the bot
    return interaction.client.get_guild(interaction.guild_id) is None


def admits(settings: DiscordSettings, interaction: discord.Interaction) -> bool:
    """The user-install gate: everything where the bot is; elsewhere, only with user installs
    on, and for the people `user_install_users` names (when it names any)."""
    if not elsewhere(interaction):
        return True
    users = settings.user_install_users
    return settings.user_install and (not users or str(interaction.user.id) in users)


async def run_elsewhere(
    client: InstallFront,
    interaction: discord.Interaction,
    code: str,
    background: bool,
    language: str = "",
) -> None:
    """A direct run where the bot is not: a one-off conversation, answered through the
    interaction only."""
    person = await client.person_now(interaction)
    if not await client.admitted(interaction, person):
        return
    if background:
        await tell(interaction, NO_BACKGROUND_HERE)
        return
    server = str(interaction.guild_id or "")
    key = ConversationKey.one_off(PLATFORM, server or "private", str(interaction.channel_id or ""))
    try:
        client.conversations.admit(client.door, person, "")
    except Refused as exc:
        await tell(interaction, str(exc))
        return
    await interaction.response.defer(thinking=True)
    # Quotas count per person: the server is not one the operator runs Cellmate for.
    message = UserMessage(f"/run{with_language('', language)}\n{code}", user=person.user, server="")
    reply = AnswerOnlyReply(
        ResponseOnly(interaction),
        client.upload_limit,
        _buttons,
        max_files=client.settings.files_per_answer,
    )
    again = runnable_again(code, language)
    await client.conversations.turn(client.door, person, key, message, reply, rerun_code=again)


def _buttons(kind: str, key: str) -> discord.ui.View:
    return buttons(kind, key, keep=False)


class ResponseOnly:
    """An interaction's answer where the bot cannot post: the deferred response, then
    follow-ups while Discord allows them, until the interaction's token expires; never a
    channel message (what cannot be shown any more is logged)."""

    def __init__(self, interaction: discord.Interaction, followups: int = FOLLOWUPS) -> None:
        self.interaction = interaction
        self.started = time.monotonic()
        self.left = followups
        """Follow-ups still allowed."""
        self._original_used = False
        self._gone = False

    @property
    def expired(self) -> bool:
        return self._gone or time.monotonic() - self.started > TOKEN_LIFETIME_S

    async def send(
        self, content: str, files: list[tuple[str, bytes]] | None = None, view: Any = None
    ) -> Any:
        if self.expired:
            log.info("the interaction's time is over; not shown: %.80r", content)
            return None
        extra: dict[str, Any] = {} if view is None else {"view": view}
        try:
            if not self._original_used:
                self._original_used = True
                return await self.interaction.edit_original_response(
                    content=content, attachments=_files(files), **extra
                )
            if self.left <= 0:
                log.info("no follow-up left for this interaction; not shown: %.80r", content)
                return None
            self.left -= 1
            return await self.interaction.followup.send(
                content, files=_files(files), wait=True, **extra
            )
        except discord.HTTPException as exc:
            self._give_up(exc)
            return None

    async def edit(self, message: Any, content: str, view: Any = None) -> Any:
        if message is None or self.expired:
            return message
        try:
            return await message.edit(content=content, view=view)
        except discord.HTTPException as exc:
            self._give_up(exc)
            return message

    async def notify(self, content: str) -> None:
        # A note only the person sees; the last follow-up is kept for the answer.
        if self.expired or (self._original_used and self.left <= 1):
            log.info("a note not shown (no follow-up to spare): %.80r", content)
            return
        if self._original_used:
            self.left -= 1
        try:
            await self.interaction.followup.send(content, ephemeral=True)
        except discord.HTTPException as exc:
            self._give_up(exc)

    def _give_up(self, exc: discord.HTTPException) -> None:
        if exc.code == MAX_FOLLOWUPS_CODE:
            self.left = 0
        elif exc.status == 401 or exc.code in EXPIRED_TOKEN_CODES:
            self._gone = True
        else:
            raise exc
        log.info("the interaction can show no more here: %s", exc)


class AnswerOnlyReply(Reply):
    """A turn's reply through `ResponseOnly`: its answer fitted to the follow-ups left."""

    surface: ResponseOnly

    def __init__(
        self,
        surface: ResponseOnly,
        upload_limit: int,
        buttons: Any,
        max_files: int = 10,
    ) -> None:
        super().__init__(surface, upload_limit, buttons, max_files=max_files)

    async def _send_answer(self, messages: list[Outgoing]) -> None:
        await super()._send_answer(fitted(messages, self.surface.left))


def fitted(messages: list[Outgoing], room: int) -> list[Outgoing]:
    """The answer's messages in at most `room` messages: consecutive texts joined where they
    fit one message, and past that the rest counted in a note on the last one shown."""
    joined: list[Outgoing] = []
    for message in messages:
        last = joined[-1] if joined else None
        if (
            last is not None
            and not message.files
            and len(last.content) + 1 + len(message.content) <= MESSAGE_LIMIT
        ):
            last.content = f"{last.content}\n{message.content}"
        else:
            joined.append(Outgoing(message.content, list(message.files)))
    if len(joined) <= room:
        return joined
    if room <= 0:
        return []
    kept = joined[:room]
    last = kept[-1]
    note = "ℹ️ " + NOT_ALL_SHOWN.format(count=len(joined) - room)
    if len(last.content) + 2 + len(note) > MESSAGE_LIMIT:
        # No room for the note: it takes the text's place (which is counted in it).
        note = "ℹ️ " + NOT_ALL_SHOWN.format(count=len(joined) - room + 1)
        kept[-1] = Outgoing(note, last.files)
    else:
        kept[-1] = Outgoing(f"{last.content}\n\n{note}".strip(), last.files)
    return kept


def _files(files: list[tuple[str, bytes]] | None) -> list[discord.File]:
    return [discord.File(io.BytesIO(content), filename=name) for name, content in files or ()]
