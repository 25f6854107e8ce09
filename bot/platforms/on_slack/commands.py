"""Slack's slash commands on a conversation (/files, /reset, /restore, /export) and on the
place (/usage, /policy): each one translated into a call on the conversation service.

A conversation command acts on the person's latest conversation in the channel where it is
typed (Slack's commands do not say which thread they were typed in)."""

from __future__ import annotations

import json
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.conversations import ConversationKey, Person, Refused
from bot.conversations.policy import parse_command
from bot.platforms.on_slack.front import SlackFront
from bot.platforms.on_slack.mrkdwn import unescape
from bot.platforms.on_slack.render import plain
from bot.platforms.on_slack.reply import SlackThread
from bot.text import files_text

NO_CONVERSATION = "You have no conversation with me in this channel yet: mention me to start one."
POLICY_USAGE = "Use `/policy` to see this channel's code policy, or `/policy auto|approve|off` "
POLICY_USAGE += "(add `workspace` to set it for the whole workspace) to set it."


def register_commands(app: AsyncApp, front: SlackFront) -> None:
    async def conversation(
        command: dict[str, Any], respond: Any
    ) -> tuple[Person, ConversationKey] | None:
        """The conversation a command acts on: the person's latest one in the channel, which
        they may act on; None, with the person told why, otherwise."""
        team = str(command.get("team_id") or front.team)
        channel, user = str(command["channel_id"]), str(command["user_id"])
        person = await front.person(user, team, channel)
        if not await front.admitted(person, channel, respond=respond):
            return None
        key = front.latest.get((team, channel, user))
        if key is None:
            await respond(NO_CONVERSATION, response_type="ephemeral")
            return None
        try:
            await front.conversations.check(front.door, person, key)
        except Refused as exc:
            await respond(str(exc), response_type="ephemeral")
            return None
        return person, key

    @app.command("/reset")
    async def reset(ack: Any, command: dict[str, Any], respond: Any) -> None:
        await ack()
        found = await conversation(command, respond)
        if found is None:
            return
        await front.conversations.reset(front.door, *found)
        await respond(
            "Forgot our latest conversation here and restarted its Python session: "
            "its variables and its files in /mnt/data are gone.",
            response_type="ephemeral",
        )

    @app.command("/restore")
    async def restore(ack: Any, command: dict[str, Any], respond: Any) -> None:
        await ack()
        found = await conversation(command, respond)
        if found is None:
            return
        note = await front.conversations.restore(front.door, *found)
        await respond(plain(note), response_type="ephemeral")

    @app.command("/export")
    async def export(ack: Any, command: dict[str, Any], respond: Any) -> None:
        await ack()
        found = await conversation(command, respond)
        if found is None:
            return
        notebook = await front.conversations.export(front.door, *found)
        if notebook is None:
            await respond(
                "Nothing to export yet: no code has run there.", response_type="ephemeral"
            )
            return
        key = found[1]
        data = json.dumps(notebook, indent=1).encode()
        await SlackThread(front.client, key.channel, key.thread).upload([("session.ipynb", data)])
        await respond("The notebook is in the conversation's thread.", response_type="ephemeral")

    @app.command("/files")
    async def files(ack: Any, command: dict[str, Any], respond: Any) -> None:
        await ack()
        found = await conversation(command, respond)
        if found is None:
            return
        listed = await front.conversations.files(front.door, *found)
        await respond(files_text(listed.files, listed.heading), response_type="ephemeral")

    @app.command("/usage")
    async def usage(ack: Any, command: dict[str, Any], respond: Any) -> None:
        await ack()
        team = str(command.get("team_id") or front.team)
        person = await front.person(str(command["user_id"]), team, str(command["channel_id"]))
        if not await front.admitted(person, str(command["channel_id"]), respond=respond):
            return
        try:
            answer = await front.conversations.usage_for(front.door, person, team)
        except Refused as exc:
            answer = str(exc)
        await respond(answer, response_type="ephemeral")

    @app.command("/policy")
    async def policy(ack: Any, command: dict[str, Any], respond: Any) -> None:
        """/policy shows the channel's code policy; /policy MODE [workspace] sets it."""
        await ack()
        team = str(command.get("team_id") or front.team)
        channel = str(command["channel_id"])
        person = await front.person(str(command["user_id"]), team, channel)
        if not await front.admitted(person, channel, respond=respond):
            return
        asked = parse_command(unescape(str(command.get("text") or "")), "workspace")
        if asked is None:
            await respond(POLICY_USAGE, response_type="ephemeral")
            return
        key = ConversationKey("slack", team, channel)
        answer = await front.conversations.policy_command(
            front.door, person, key, asked.mode, asked.whole
        )
        await respond(answer, response_type="ephemeral")
