"""Code waiting for approval on Discord: the message with Run, Edit and Cancel, the editor
modal, and each press translated into a call on the conversation service."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, cast

import discord

from bot.conversations import Refused
from bot.conversations.approval import Verdict, approvers_text, outcome
from bot.events import ApprovalDecided, ApprovalRequested
from bot.platforms.markup import code_block, head
from bot.text import human_duration

if TYPE_CHECKING:
    from bot.platforms.on_discord.client import CellmateDiscord

CODE_SHOWN = 1500
EDIT_LIMIT = 4000
"""Discord's text inputs hold at most 4,000 characters."""
TOO_LONG_TO_EDIT = (
    "This code is too long to edit here (4,000 characters at most); Run or Cancel it."
)
LOOKS = {
    "ok": ("Run", discord.ButtonStyle.success, Verdict.RUN),
    "edit": ("Edit", discord.ButtonStyle.secondary, Verdict.EDITED),
    "no": ("Cancel", discord.ButtonStyle.danger, Verdict.CANCELLED),
}


def request_text(event: ApprovalRequested) -> str:
    """The approval message: who may decide, by when, and the code (attached in full by
    `request_files` when it is longer than the message shows)."""
    who = approvers_text(event, f"<@{event.requester}>")
    whole = " The whole code is attached." if request_files(event) else ""
    return "\n".join(
        [
            "🔐 **The model wants to run this code.** "
            f"{who} can Run, Edit or Cancel it (it waits {human_duration(event.timeout_s)})."
            + whole,
            code_block(head(event.code, CODE_SHOWN), "py"),
        ]
    )


def request_files(event: ApprovalRequested) -> list[tuple[str, bytes]]:
    """Code too long to show in full goes with the message, so that nobody approves code
    they could not read."""
    return [("code.py", event.code.encode())] if len(event.code) > CODE_SHOWN else []


def decided_text(asked: ApprovalRequested, event: ApprovalDecided) -> str:
    """The approval message once decided: the code, and what became of it."""
    return "\n".join(
        [
            "🔐 **The model wanted to run this code.**",
            code_block(head(asked.code, CODE_SHOWN), "py"),
            outcome(event, f"<@{event.by}>"),
        ]
    )


def approval_view(key: str) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    for action in LOOKS:
        view.add_item(ApprovalButton(action, key))
    return view


class ApprovalButton(
    discord.ui.DynamicItem[discord.ui.Button[Any]],
    template=r"cm:(?P<action>ok|edit|no):(?P<key>\w+)",
):
    """Run, Edit or Cancel on code waiting for approval; found again by custom id."""

    def __init__(self, action: str, key: str) -> None:
        label, style, _ = LOOKS[action]
        super().__init__(
            discord.ui.Button(label=label, style=style, custom_id=f"cm:{action}:{key}")
        )
        self.action = action
        self.key = key

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str]
    ) -> ApprovalButton:
        return cls(match["action"], match["key"])

    async def callback(self, interaction: discord.Interaction) -> None:
        client = cast("CellmateDiscord", interaction.client)
        person = client.person(interaction)
        conversations = client.conversations
        try:
            if self.action == "edit":
                waiting = await conversations.approvable(client.door, person, self.key)
                if len(waiting.code) > EDIT_LIMIT:
                    raise Refused(TOO_LONG_TO_EDIT)
                await interaction.response.send_modal(EditModal(self.key, waiting.code))
                return
            await conversations.decide(client.door, person, self.key, LOOKS[self.action][2])
        except Refused as exc:
            await _tell(interaction, str(exc))
            return
        # The approval message itself says who decided, once the turn goes on.
        await interaction.response.defer()


class EditModal(discord.ui.Modal, title="Edit the code, then run it"):
    def __init__(self, key: str, code: str) -> None:
        # A modal closed without submitting is forgotten after 15 minutes.
        super().__init__(timeout=900)
        self.key = key
        self.code: discord.ui.TextInput[EditModal] = discord.ui.TextInput(
            label="Code", style=discord.TextStyle.paragraph, default=code, max_length=EDIT_LIMIT
        )
        self.add_item(self.code)

    async def on_submit(self, interaction: discord.Interaction) -> None:
        client = cast("CellmateDiscord", interaction.client)
        person = client.person(interaction)
        try:
            await client.conversations.decide(
                client.door, person, self.key, Verdict.EDITED, self.code.value
            )
        except Refused as exc:
            await _tell(interaction, str(exc))
            return
        await interaction.response.defer()


async def _tell(interaction: discord.Interaction, text: str) -> None:
    if interaction.response.is_done():
        await interaction.followup.send(text, ephemeral=True)
    else:
        await interaction.response.send_message(text, ephemeral=True)
