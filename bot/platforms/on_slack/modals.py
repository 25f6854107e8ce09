"""The code editors Slack opens (views.open): /run's, and the one that edits code waiting
for approval. Both are one multi-line input; where it was opened from rides along in
`private_metadata`, since a submission does not say."""

from __future__ import annotations

import json
from typing import Any

from bot.platforms.on_slack.approval import EDIT_LIMIT

RUN_MODAL = "cm_run_modal"
EDIT_MODAL = "cm_approval_edit"


def run_modal(channel: str, team: str) -> dict[str, Any]:
    """/run without code: an empty editor that runs what is submitted."""
    placeholder = {"type": "plain_text", "text": "import pandas as pd"}
    return _code_modal(
        RUN_MODAL,
        "Run Python",
        "Cancel",
        {"channel": channel, "team": team},
        placeholder=placeholder,
    )


def edit_modal(key: str, code: str, channel: str, team: str) -> dict[str, Any]:
    """Edit on code waiting for approval: the code, to be run edited instead."""
    where = {"key": key, "channel": channel, "team": team}
    return _code_modal(
        EDIT_MODAL, "Edit, then run", "Back", where, initial_value=code, max_length=EDIT_LIMIT
    )


def submitted(view: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The code of a submitted editor, and where it was opened from."""
    where = json.loads(view.get("private_metadata") or "{}")
    return view["state"]["values"]["code"]["code"]["value"] or "", where


def _code_modal(
    callback_id: str, title: str, close: str, where: dict[str, str], **element: Any
) -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": callback_id,
        "title": {"type": "plain_text", "text": title},
        "submit": {"type": "plain_text", "text": "Run"},
        "close": {"type": "plain_text", "text": close},
        "private_metadata": json.dumps(where),
        "blocks": [
            {
                "type": "input",
                "block_id": "code",
                "label": {"type": "plain_text", "text": "Code"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": "code",
                    "multiline": True,
                    **element,
                },
            }
        ],
    }
