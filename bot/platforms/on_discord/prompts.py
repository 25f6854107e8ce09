"""The code's `input()` and `getpass()` on Discord: the prompt message with Answer, the modal
that takes the answer, and the message once answered."""

from __future__ import annotations

import re
from typing import Any

import discord

from bot.conversations import Refused
from bot.conversations.input_prompts import (
    ANSWERED,
    MAX_ANSWER_CHARS,
    answer_label,
    asking_heading,
    outcome_line,
)
from bot.events import InputAnswered, InputRequested
from bot.platforms.markup import code_block, head
from bot.platforms.on_discord.front import front_of
from bot.platforms.on_discord.interactions import tell
from bot.text import human_duration

PROMPT_SHOWN = 1200
LABEL_CHARS = 45
"""Discord's text input labels hold at most 45 characters."""


def prompt_text(event: InputRequested) -> str:
    """The prompt message: whom the code asks, and its prompt, quoted as it is."""
    who = f"<@{event.person}>"
    lines = [asking_heading(event, who, human_duration(event.timeout_s))]
    if event.prompt.strip():
        lines.append(code_block(head(event.prompt, PROMPT_SHOWN)))
    return "\n".join(lines)


def answered_text(asked: InputRequested, event: InputAnswered) -> str:
    lines = [outcome_line(asked, event, f"<@{event.by}>")]
    if asked.prompt.strip():
        lines.insert(0, code_block(head(asked.prompt, PROMPT_SHOWN)))
    if event.outcome == ANSWERED and not asked.password:
        lines.append(code_block(head(event.shown, PROMPT_SHOWN)))
    return "\n".join(lines)


def input_view(key: str) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    view.add_item(InputButton(key))
    return view


class InputButton(
    discord.ui.DynamicItem[discord.ui.Button[Any]],
    template=r"cm:in:(?P<key>\w+)",
):
    """Answer, on a prompt of the running code; found again by custom id."""

    def __init__(self, key: str) -> None:
        super().__init__(
            discord.ui.Button(
                label="Answer", style=discord.ButtonStyle.primary, custom_id=f"cm:in:{key}"
            )
        )
        self.key = key

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str]
    ) -> InputButton:
        return cls(match["key"])

    async def callback(self, interaction: discord.Interaction) -> None:
        client = front_of(interaction)
        person = await client.person_now(interaction)
        try:
            waiting = client.conversations.answerable(client.door, person, self.key)
        except Refused as exc:
            await tell(interaction, str(exc))
            return
        label = answer_label(waiting.password, waiting.prompt, LABEL_CHARS)
        await interaction.response.send_modal(InputModal(self.key, label))


class InputModal(discord.ui.Modal, title="Answer the code"):
    def __init__(self, key: str, label: str) -> None:
        # A modal closed without submitting is forgotten after 15 minutes.
        super().__init__(timeout=900)
        self.key = key
        self.answer: discord.ui.TextInput[InputModal] = discord.ui.TextInput(
            label=label, style=discord.TextStyle.short, max_length=MAX_ANSWER_CHARS, required=False
        )
        self.add_item(self.answer)

    async def on_submit(self, interaction: discord.Interaction) -> None:
        client = front_of(interaction)
        person = await client.person_now(interaction)
        try:
            await client.conversations.answer_input(
                client.door, person, self.key, self.answer.value
            )
        except Refused as exc:
            await tell(interaction, str(exc))
            return
        # The prompt message itself says that it was answered, once the code goes on.
        await interaction.response.defer()
