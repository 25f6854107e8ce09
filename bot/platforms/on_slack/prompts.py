"""The code's `input()` and `getpass()` on Slack: the prompt message with Answer, the modal
(views.open) that takes the answer, and the message once answered. Where the modal was
opened from rides along in its `private_metadata`, since a submission does not say."""

from __future__ import annotations

import json
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.conversations import Refused
from bot.conversations.input_prompts import (
    ANSWERED,
    MAX_ANSWER_CHARS,
    answer_label,
    asking_heading,
    outcome_line,
)
from bot.events import InputAnswered, InputRequested
from bot.platforms.markup import head
from bot.platforms.on_slack.front import SlackFront
from bot.platforms.on_slack.mrkdwn import slack_code
from bot.platforms.on_slack.render import blocks
from bot.text import human_duration

ANSWER = "cm_input_answer"
INPUT_MODAL = "cm_input_modal"
PROMPT_SHOWN = 2400
LABEL_CHARS = 2000
ANSWER_CHARS = min(MAX_ANSWER_CHARS, 3000)
"""Slack's plain text inputs hold at most 3,000 characters."""


def prompt_message(event: InputRequested) -> tuple[str, list[dict[str, Any]]]:
    """The prompt message: whom the code asks, its prompt quoted as it is, and Answer."""
    lines = [asking_heading(event, f"<@{event.person}>", human_duration(event.timeout_s))]
    if event.prompt.strip():
        lines.append(slack_code(head(event.prompt, PROMPT_SHOWN)))
    text = "\n".join(lines)
    return text, blocks(text, [(ANSWER, "Answer", event.key)])


def answered_message(
    asked: InputRequested, event: InputAnswered
) -> tuple[str, list[dict[str, Any]]]:
    lines = [outcome_line(asked, event, f"<@{event.by}>")]
    if asked.prompt.strip():
        lines.insert(0, slack_code(head(asked.prompt, PROMPT_SHOWN)))
    if event.outcome == ANSWERED and not asked.password:
        lines.append(slack_code(head(event.shown, PROMPT_SHOWN)))
    text = "\n".join(lines)
    return text, blocks(text)


def input_modal(key: str, label: str, channel: str, team: str) -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": INPUT_MODAL,
        "title": {"type": "plain_text", "text": "Answer the code"},
        "submit": {"type": "plain_text", "text": "Answer"},
        "close": {"type": "plain_text", "text": "Back"},
        "private_metadata": json.dumps({"key": key, "channel": channel, "team": team}),
        "blocks": [
            {
                "type": "input",
                "block_id": "answer",
                "optional": True,
                "label": {"type": "plain_text", "text": label},
                "element": {
                    "type": "plain_text_input",
                    "action_id": "answer",
                    "max_length": ANSWER_CHARS,
                },
            }
        ],
    }


def register_prompts(app: AsyncApp, front: SlackFront) -> None:
    @app.action(ANSWER)
    async def answer(ack: Any, body: dict[str, Any], respond: Any, client: AsyncWebClient) -> None:
        """Answer opens a box for the answer, for the person whose turn it is."""
        await ack()
        key = str(body["actions"][0].get("value") or "")
        team = str((body.get("team") or {}).get("id") or body.get("team_id") or front.team)
        channel = str((body.get("channel") or {}).get("id") or "")
        person = await front.person(str(body["user"]["id"]), team, channel)
        try:
            waiting = front.conversations.answerable(front.door, person, key)
        except Refused as exc:
            await respond(str(exc), response_type="ephemeral", replace_original=False)
            return
        label = answer_label(waiting.password, waiting.prompt, LABEL_CHARS)
        await client.views_open(
            trigger_id=body["trigger_id"], view=input_modal(key, label, channel, team)
        )

    @app.view(INPUT_MODAL)
    async def answered(ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """The answer goes to the code; a refusal is shown in the modal, which stays open."""
        where = json.loads(view.get("private_metadata") or "{}")
        value = view["state"]["values"]["answer"]["answer"].get("value") or ""
        person = await front.person(
            str(body["user"]["id"]), where.get("team", front.team), where.get("channel", "")
        )
        try:
            await front.conversations.answer_input(
                front.door, person, str(where.get("key") or ""), str(value)
            )
        except Refused as exc:
            await ack(response_action="errors", errors={"answer": str(exc)})
            return
        await ack()
