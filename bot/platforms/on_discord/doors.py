"""The network on Discord: `/network`, and the card posted in a conversation's thread when
its code hits a closed door, with Allow once, Allow in this channel and Deny; each press
translated into a call on the conversation service, which decides."""

from __future__ import annotations

import re
from typing import Any

import discord
from discord import app_commands

from bot.conversations import Refused
from bot.conversations.doors import Doorbell, DoorCard, DoorChoice
from bot.conversations.network import NetworkCommand
from bot.platforms.on_discord.front import DiscordFront, front_of
from bot.platforms.on_discord.interactions import place_key, tell
from bot.platforms.on_discord.render import plain

LOOKS = {
    DoorChoice.ONCE: ("Allow once", discord.ButtonStyle.success),
    DoorChoice.CHANNEL: ("Allow in this channel", discord.ButtonStyle.primary),
    DoorChoice.DENY: ("Deny", discord.ButtonStyle.danger),
}
NEEDS_HOST = "Name the host: /network action:allow host:example.com (or deny)."


def card_text(card: DoorCard) -> str:
    return f"🚪 {plain(card.text)}"


def card_view(key: str) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    for choice in LOOKS:
        view.add_item(DoorButton(choice.value, key))
    return view


def doorbell(bot: discord.Client) -> Doorbell:
    """How cards are posted: in the conversation's thread (its DM, or its channel)."""

    async def ring(card: DoorCard) -> None:
        key = card.conversation
        if key.is_dm:
            user = await bot.fetch_user(int(key.channel))
            target: Any = user.dm_channel or await user.create_dm()
        else:
            # A one-off run has no thread of its own: its card goes to the channel.
            where = int(key.channel if key.is_one_off or not key.thread else key.thread)
            target = bot.get_channel(where) or await bot.fetch_channel(where)
        await target.send(card_text(card), view=card_view(card.key))

    return ring


def register_network(client: DiscordFront) -> None:
    """The /network command."""
    conversations = client.conversations

    @client.tree.command(name="network", description="What code here may reach on the network")
    @app_commands.describe(
        action="list what is open (anyone); allow or deny a host (admins and moderators)",
        host="a host name, *.suffix or address, with :PORT if not 443 and 80",
        scope="allow for the next run here only (once), or in this channel",
    )
    @app_commands.choices(
        action=[app_commands.Choice(name=name, value=name) for name in ("list", "allow", "deny")],
        scope=[app_commands.Choice(name=name, value=name) for name in ("channel", "once")],
    )
    async def network(
        interaction: discord.Interaction,
        action: str = "list",
        host: str | None = None,
        scope: str = "channel",
    ) -> None:
        person = await client.person_now(interaction)
        if not await client.admitted(interaction, person):
            return
        if action != "list" and not (host or "").strip():
            await tell(interaction, NEEDS_HOST)
            return
        command = NetworkCommand(
            "allow" if action == "allow" else "deny" if action == "deny" else "list",
            (host or "").strip(),
            once=scope == "once",
        )
        answer = await conversations.network_command(
            client.door, person, place_key(interaction), command
        )
        await tell(interaction, plain(answer))


class DoorButton(
    discord.ui.DynamicItem[discord.ui.Button[Any]],
    template=r"cm:door:(?P<choice>once|channel|deny):(?P<key>\w+)",
):
    """Allow once, Allow in this channel or Deny on a closed door; found again by custom id."""

    def __init__(self, choice: str, key: str) -> None:
        label, style = LOOKS[DoorChoice(choice)]
        super().__init__(
            discord.ui.Button(label=label, style=style, custom_id=f"cm:door:{choice}:{key}")
        )
        self.choice = DoorChoice(choice)
        self.key = key

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str]
    ) -> DoorButton:
        return cls(match["choice"], match["key"])

    async def callback(self, interaction: discord.Interaction) -> None:
        client = front_of(interaction)
        person = await client.person_now(interaction)
        try:
            answer = await client.conversations.answer_door(
                client.door, person, self.key, self.choice
            )
        except Refused as exc:
            await tell(interaction, str(exc))
            return
        if interaction.message is not None:
            outcome = answer.outcome(f"<@{person.user}>")
            await interaction.message.edit(
                content=f"{card_text(answer.card)}\n{outcome}", view=None
            )
        if answer.rerun is None:
            await interaction.response.defer()
            return
        await client.start_run(interaction, answer.rerun, answer.card.conversation)
