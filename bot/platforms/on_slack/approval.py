"""Code waiting for approval on Slack: the message with Run, Edit and Cancel (its editor is
in `modals`); the presses themselves are translated in the app."""

from __future__ import annotations

from typing import Any

from bot.conversations.approval import (
    approvers_text,
    outcome,
    restore_heading,
    restore_text,
    restoring_of,
    shown_names,
)
from bot.events import ApprovalDecided, ApprovalRequested
from bot.platforms.markup import head
from bot.platforms.on_slack.mrkdwn import slack_code
from bot.platforms.on_slack.render import blocks
from bot.text import human_duration

CODE_SHOWN = 2400
EDIT_LIMIT = 3000
"""Slack's plain text inputs hold at most 3,000 characters."""
TOO_LONG_TO_EDIT = (
    "This code is too long to edit here (3,000 characters at most); Run or Cancel it."
)
RUN, EDIT, CANCEL = "cm_approval_run", "cm_approval_edit", "cm_approval_cancel"


def request_files(event: ApprovalRequested) -> list[tuple[str, bytes]]:
    """Code too long to show in full is uploaded before its approval message, so that nobody
    approves code they could not read."""
    return [("code.py", event.code.encode())] if len(event.code) > _code_room(event) else []


def request_message(event: ApprovalRequested) -> tuple[str, list[dict[str, Any]]]:
    """The approval message (text and blocks): who may decide, by when, the saved variables
    a Run loads first (if any), and the code."""
    who = approvers_text(event, f"<@{event.requester}>")
    whole = " The whole code is in `code.py` above." if request_files(event) else ""
    choices = "Run, Edit or Cancel it" if event.code else "Run or Cancel it"
    text = "\n".join(
        [
            f":lock: *{restore_heading(event)}* "
            f"{who} can {choices} (it waits {human_duration(event.timeout_s)})." + whole,
            *_shown(event),
        ]
    )
    buttons = [(RUN, "Run", event.key), (CANCEL, "Cancel", event.key)]
    if event.code:
        buttons.insert(1, (EDIT, "Edit", event.key))
    return text, blocks(text, buttons)


def decided_message(
    asked: ApprovalRequested, event: ApprovalDecided
) -> tuple[str, list[dict[str, Any]]]:
    """The approval message once decided: what it asked about, and what became of it (no
    buttons)."""
    heading = restore_heading(asked).replace("wants", "wanted").replace("are to be", "were to be")
    text = "\n".join(
        [
            f":lock: *{heading}*",
            *_shown(asked),
            outcome(event, f"<@{event.by}>", restore_only=not asked.code),
        ]
    )
    return text, blocks(text)


def _shown(event: ApprovalRequested) -> list[str]:
    """The saved variables a Run loads (named, in a block of their own), then the code."""
    lines = []
    if restoring_of(event):
        lines += [restore_text(event), slack_code(shown_names(restoring_of(event)))]
    if event.code:
        lines.append(slack_code(head(event.code, _code_room(event))))
    return lines


def _code_room(event: ApprovalRequested) -> int:
    """Characters of code the message shows: fewer when it names variables too, so that
    its section stays within Slack's 3,000."""
    names = restoring_of(event)
    if not names:
        return CODE_SHOWN
    return CODE_SHOWN - len(restore_text(event)) - len(shown_names(names))
