"""`/mcp` on Slack: a token for the person's coding agent, bound to their latest conversation
with the bot in the channel it is typed in (Slack's commands do not say which thread), their
tokens, and revoking them; answered to them alone."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.conversations.mcp_tokens import mcp_command
from bot.errors import NotHere, NotYours
from bot.platforms.on_slack.mrkdwn import unescape
from bot.platforms.on_slack.schedules import SlackParts


def register_mcp(app: AsyncApp, front: SlackParts) -> None:
    @app.command("/mcp")
    async def mcp(ack: Any, command: dict[str, Any], respond: Any) -> None:
        """/mcp token | /mcp | /mcp revoke [N]."""
        await ack()
        team = str(command.get("team_id") or front.team)
        channel, user = str(command["channel_id"]), str(command["user_id"])
        person = await front.person(user, team, channel, dm=channel.startswith("D"))
        if not await front.admitted(person, channel, respond=respond):
            return
        text = unescape(str(command.get("text") or "")).strip()
        key = front.latest.get((team, channel, user))
        if key is not None and text.split()[:1] == ["token"]:
            try:
                await front.conversations.check(front.door, person, key)
            except (NotHere, NotYours) as exc:
                await respond(str(exc), response_type="ephemeral")
                return
        name = str(command.get("user_name") or user)
        desk = front.conversations.mcp
        answer = mcp_command(desk, person.user, name, key, team, text)
        await respond(answer, response_type="ephemeral")
