"""Discord's slash commands, the Run code menu, the /run editor, and the Stop, Keep running,
Run beside and Re-run buttons: each one translated into a call on the conversation
service."""

from __future__ import annotations

import json
import re
from typing import Any

import discord
from discord import app_commands

from bot.conversations import ConversationKey, Person, Refused
from bot.conversations.policy import parse_mode
from bot.fences import BOTH_FLAGS, known_tag
from bot.platforms.markup import code_blocks
from bot.platforms.on_discord.front import DiscordFront, front_of
from bot.platforms.on_discord.interactions import conversation_of, place_key, tell
from bot.platforms.on_discord.render import plain
from bot.platforms.on_discord.reply import InteractionSurface
from bot.platforms.turn_reply import ran_beside
from bot.text import files_text
from executor import wire
from executor.run_scope import TITLES

NO_CONVERSATION = (
    "There is no Cellmate conversation here: mention me in a channel to start a thread, "
    "or send me a direct message."
)
RUN_MENU = "Run with Cellmate"
"""The message command that runs a message's code (its code blocks, or all of it)."""
BUTTON_LOOKS = {
    "stop": ("Stop", discord.ButtonStyle.danger),
    "keep": ("Keep running", discord.ButtonStyle.secondary),
    "beside": ("Run beside", discord.ButtonStyle.primary),
    "rerun": ("Re-run", discord.ButtonStyle.secondary),
}


def buttons(kind: str, key: str, keep: bool = False) -> discord.ui.View:
    """A view with the turn `key`'s buttons: "stop" (Stop, and Keep running with `keep`),
    "beside" (the same and Run beside: its code waits for the run in the background) or
    "rerun"."""
    view = discord.ui.View(timeout=None)
    if kind == "rerun":
        view.add_item(TurnButton("rerun", key))
        return view
    view.add_item(TurnButton("stop", key))
    if keep:
        view.add_item(TurnButton("keep", key))
    if kind == "beside":
        view.add_item(TurnButton("beside", key))
    return view


class TurnButton(
    discord.ui.DynamicItem[discord.ui.Button[Any]],
    template=r"cm:(?P<kind>stop|keep|beside|rerun):(?P<key>\w+)",
):
    """Stop (Keep running, Run beside) on a running turn, Re-run on a finished direct run;
    found again by custom id."""

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
        client = front_of(interaction)
        person = await client.person_now(interaction)
        conversations = client.conversations
        acts = {
            "stop": conversations.stop,
            "keep": conversations.keep_running,
            "beside": conversations.run_beside,
        }
        try:
            act = acts.get(self.kind)
            if act is not None:
                why_not = await act(client.door, person, self.key)
                if why_not is None:
                    await interaction.response.defer()
                    if self.kind == "beside":
                        ran_beside(self.key)
                else:
                    await tell(interaction, why_not)
                return
            code, key = await client.conversations.rerun(client.door, person, self.key)
        except Refused as exc:
            await tell(interaction, str(exc))
            return
        await client.start_run(interaction, code, key)


class RunModal(discord.ui.Modal, title="Run Python"):
    code: discord.ui.TextInput[RunModal] = discord.ui.TextInput(
        label="Code",
        style=discord.TextStyle.paragraph,
        placeholder="import pandas as pd\n...",
        max_length=4000,
    )

    def __init__(
        self, client: DiscordFront, background: bool = False, beside: bool = False
    ) -> None:
        super().__init__(timeout=900)
        self.client = client
        self.background = background
        self.beside = beside

    async def on_submit(self, interaction: discord.Interaction) -> None:
        await self.client.start_run(
            interaction, self.code.value, background=self.background, beside=self.beside
        )


def register_commands(client: DiscordFront) -> None:
    tree = client.tree
    conversations = client.conversations

    async def conversation(
        interaction: discord.Interaction,
    ) -> tuple[Person, ConversationKey] | None:
        """Who acts, and the conversation a command acts on, for a person who may act on it
        (the interaction then deferred); None, with the person told why, otherwise."""
        person = await client.person_now(interaction)
        if not await client.admitted(interaction, person):
            return None
        key = conversation_of(interaction)
        if key is None:
            await tell(interaction, NO_CONVERSATION)
            return None
        try:
            await conversations.check(client.door, person, key)
        except Refused as exc:
            await tell(interaction, str(exc))
            return None
        await interaction.response.defer(thinking=True)
        return person, key

    @tree.command(name="run", description="Run code in the sandbox, without the model")
    @app_commands.describe(
        code="the code; leave it out for a multi-line editor",
        background="go on in the background at once (the answer comes when it ends)",
        beside="run now beside the run in the background here: its files, not its variables",
        language="the code's language (Python unless a ```r block or this says otherwise)",
    )
    @app_commands.choices(
        language=[app_commands.Choice(name=TITLES[name], value=name) for name in wire.LANGUAGES]
    )
    async def run(
        interaction: discord.Interaction,
        code: str | None = None,
        background: bool = False,
        beside: bool = False,
        language: str = "",
    ) -> None:
        if background and beside:
            if await client.admitted(interaction, await client.person_now(interaction)):
                await tell(interaction, BOTH_FLAGS)
            return
        if code is None or not code.strip():
            if await client.admitted(interaction, await client.person_now(interaction)):
                await interaction.response.send_modal(RunModal(client, background, beside))
            return
        await client.start_run(
            interaction,
            code_blocks(code) or code,
            background=background,
            beside=beside,
            language=language or known_tag(code),
        )

    @tree.context_menu(name=RUN_MENU)
    async def run_code(interaction: discord.Interaction, message: discord.Message) -> None:
        code = code_blocks(message.content)
        if code is None:
            if await client.admitted(interaction, await client.person_now(interaction)):
                await tell(interaction, "That message has no code.")
            return
        await client.start_run(interaction, code, language=known_tag(message.content))

    @tree.command(name="reset", description="Forget this conversation and restart its Python")
    async def reset(interaction: discord.Interaction) -> None:
        found = await conversation(interaction)
        if found is None:
            return
        await conversations.reset(client.door, *found)
        await interaction.followup.send(
            "Forgot this conversation and restarted its Python session: "
            "its variables and its files in /mnt/data are gone."
        )

    @tree.command(name="restore", description="Bring back this conversation's saved workspace")
    async def restore(interaction: discord.Interaction) -> None:
        found = await conversation(interaction)
        if found is None:
            return
        note = await conversations.restore(client.door, *found)
        await interaction.followup.send(plain(note))

    @tree.command(name="export", description="This conversation's code and output as a notebook")
    async def export(interaction: discord.Interaction) -> None:
        found = await conversation(interaction)
        if found is None:
            return
        notebook = await conversations.export(client.door, *found)
        if notebook is None:
            await interaction.followup.send("Nothing to export yet: no code has run here.")
            return
        data = json.dumps(notebook, indent=1).encode()
        await InteractionSurface(interaction).send(
            "The session as a Jupyter notebook:", [("session.ipynb", data)]
        )

    @tree.command(name="files", description="The files in this conversation's /mnt/data")
    async def files(interaction: discord.Interaction) -> None:
        found = await conversation(interaction)
        if found is None:
            return
        listed = await conversations.files(client.door, *found)
        await interaction.followup.send(files_text(listed.files, listed.heading))

    @tree.command(name="policy", description="Show or set whether the model's code needs approval")
    @app_commands.describe(
        mode="auto: runs at once; approve: waits for Run, Edit or Cancel; off: never runs",
        scope="this channel (the default) or the whole server",
    )
    @app_commands.choices(
        mode=[app_commands.Choice(name=name, value=name) for name in ("auto", "approve", "off")],
        scope=[app_commands.Choice(name=name, value=name) for name in ("channel", "server")],
    )
    async def policy(
        interaction: discord.Interaction, mode: str | None = None, scope: str = "channel"
    ) -> None:
        whole = scope == "server"
        person = await client.person_now(interaction, server_wide=whole)
        if not await client.admitted(interaction, person):
            return
        chosen = parse_mode(mode or "")
        answer = await conversations.policy_command(
            client.door, person, place_key(interaction), chosen, whole
        )
        await tell(interaction, answer)

    @tree.command(name="usage", description="Who used Cellmate most in the last day (admins)")
    @app_commands.default_permissions(manage_guild=True)
    async def usage(interaction: discord.Interaction) -> None:
        # Usage is for those who manage the whole server.
        person = await client.person_now(interaction, server_wide=True)
        if not await client.admitted(interaction, person):
            return
        server = str(interaction.guild_id) if interaction.guild_id else None
        try:
            answer = await conversations.usage_for(client.door, person, server)
        except Refused as exc:
            answer = str(exc)
        await tell(interaction, answer)
