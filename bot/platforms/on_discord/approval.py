"""Code waiting for approval on Discord: the message with Run, Edit and Cancel, the editor
modal, and each press translated into a call on the conversation service."""

from __future__ import annotations

import re
from typing import Any

import discord

from bot.conversations import Refused
from bot.conversations.approval import (
    NOTHING_TO_EDIT,
    Verdict,
    approvers_text,
    outcome,
    restore_heading,
    restore_text,
    restoring_of,
    shown_names,
)
from bot.events import ApprovalDecided, ApprovalRequested
from bot.platforms.markup import code_block, head
from bot.platforms.on_discord.front import front_of
from bot.platforms.on_discord.interactions import tell
from bot.text import human_duration

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
    """The approval message: who may decide, by when, the saved variables a Run loads first
    (if any), and the code (attached in full by `request_files` when it is longer than the
    message shows)."""
    who = approvers_text(event, f"<@{event.requester}>")
    whole = " The whole code is attached." if request_files(event) else ""
    choices = "Run, Edit or Cancel it" if event.code else "Run or Cancel it"
    return "\n".join(
        [
            f"🔐 **{restore_heading(event)}** "
            f"{who} can {choices} (it waits {human_duration(event.timeout_s)})." + whole,
            *_shown(event),
        ]
    )


def request_files(event: ApprovalRequested) -> list[tuple[str, bytes]]:
    """Code too long to show in full goes with the message, so that nobody approves code
    they could not read."""
    return [("code.py", event.code.encode())] if len(event.code) > _code_room(event) else []


def decided_text(asked: ApprovalRequested, event: ApprovalDecided) -> str:
    """The approval message once decided: what it asked about, and what became of it."""
    heading = restore_heading(asked).replace("wants", "wanted").replace("are to be", "were to be")
    return "\n".join(
        [
            f"🔐 **{heading}**",
            *_shown(asked),
            outcome(event, f"<@{event.by}>", restore_only=not asked.code),
        ]
    )


def _shown(event: ApprovalRequested) -> list[str]:
    """The saved variables a Run loads (named, in a block of their own), then the code."""
    lines = []
    if restoring_of(event):
        lines += [restore_text(event), code_block(shown_names(restoring_of(event)))]
    if event.code:
        lines.append(code_block(head(event.code, _code_room(event)), "py"))
    return lines


def _code_room(event: ApprovalRequested) -> int:
    """Characters of code the message shows: fewer when it names variables too, so that
    it stays within Discord's 2,000."""
    names = restoring_of(event)
    if not names:
        return CODE_SHOWN
    return CODE_SHOWN - len(restore_text(event)) - len(shown_names(names))


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
        client = front_of(interaction)
        person = await client.person_now(interaction)
        conversations = client.conversations
        try:
            if self.action == "edit":
                waiting = await conversations.approvable(client.door, person, self.key)
                if not waiting.code:
                    raise Refused(NOTHING_TO_EDIT)
                if len(waiting.code) > EDIT_LIMIT:
                    raise Refused(TOO_LONG_TO_EDIT)
                await interaction.response.send_modal(EditModal(self.key, waiting.code))
                return
            await conversations.decide(client.door, person, self.key, LOOKS[self.action][2])
        except Refused as exc:
            await tell(interaction, str(exc))
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
        client = front_of(interaction)
        person = await client.person_now(interaction)
        try:
            await client.conversations.decide(
                client.door, person, self.key, Verdict.EDITED, self.code.value
            )
        except Refused as exc:
            await tell(interaction, str(exc))
            return
        await interaction.response.defer()
