"""Schedules on Slack: `/schedule` (on the person's latest conversation in the channel, as
Slack's commands do not say which thread they were typed in), and how a schedule's run is
posted in its thread, the heading mentioning its owner."""

from __future__ import annotations

from typing import Any, Protocol

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.conversations import Admission, ConversationKey, Conversations, Person
from bot.conversations.reply import Reply
from bot.platforms.on_slack.mrkdwn import unescape
from bot.platforms.on_slack.reply import SlackThread


class SlackParts(Protocol):
    """What schedules need of the Slack app."""

    conversations: Conversations
    door: Admission
    client: AsyncWebClient
    team: str
    latest: dict[tuple[str, str, str], ConversationKey]

    async def person(self, user: str, team: str, channel: str, dm: bool = False) -> Person: ...

    async def admitted(
        self, person: Person, channel: str, thread_ts: str | None = None, respond: Any = None
    ) -> bool: ...

    def reply_in(self, thread: SlackThread, owner: str) -> Reply: ...

    def thread_of(self, key: ConversationKey) -> str | None: ...


ACTING = ("cancel", "run-now", "update", "approve")
NO_CONVERSATION = (
    "You have no conversation with me in this channel yet: mention me, run the analysis "
    "in its thread, then use /schedule here."
)


def register_schedules(app: AsyncApp, front: SlackParts) -> None:
    front.conversations.post_with("slack", SlackPoster(front))

    @app.command("/schedule")
    async def schedule(ack: Any, command: dict[str, Any], respond: Any) -> None:
        """/schedule WHEN [cells LIST] | list | cancel N | run-now N | update N | approve N."""
        await ack()
        team = str(command.get("team_id") or front.team)
        channel, user = str(command["channel_id"]), str(command["user_id"])
        person = await front.person(user, team, channel, dm=channel.startswith("D"))
        if not await front.admitted(person, channel, respond=respond):
            return
        text = unescape(str(command.get("text") or ""))
        # A schedule named by number is acted on in its own conversation when that is in
        # this channel (a moderator need not have written there); else the person's latest.
        key = _named_here(front, text, team, channel) or front.latest.get((team, channel, user))
        if key is None:
            await respond(NO_CONVERSATION, response_type="ephemeral")
            return
        answer = await front.conversations.schedule_command(front.door, person, key, text)
        await respond(answer, response_type="ephemeral")


def _named_here(front: SlackParts, text: str, team: str, channel: str) -> ConversationKey | None:
    words = text.split()
    schedules = front.conversations.schedules
    if schedules is None or len(words) < 2 or words[0].lower() not in ACTING:
        return None
    if not words[1].lstrip("#").isdigit():
        return None
    found = schedules.store.get(int(words[1].lstrip("#")))
    if found is None:
        return None
    key = ConversationKey.parse(found.conversation)
    if (key.platform, key.workspace, key.channel) != ("slack", team, channel):
        return None
    return key


class SlackPoster:
    """A schedule's run, or a run in the background, posted in its conversation's thread
    (a one-off run's: the thread of its answer)."""

    def __init__(self, front: SlackParts) -> None:
        self.front = front
        self.door = front.door

    async def person(self, user: str, key: ConversationKey) -> Person:
        return await self.front.person(
            user, key.workspace, key.channel, key.channel.startswith("D")
        )

    def mention(self, user: str) -> str:
        return f"<@{user}>"

    async def reply_in(self, key: ConversationKey, owner: str) -> Reply:
        return self.front.reply_in(self._thread(key), owner)

    async def say(self, key: ConversationKey, text: str, notify: str = "") -> None:
        await self._thread(key).post(text)

    def _thread(self, key: ConversationKey) -> SlackThread:
        return SlackThread(self.front.client, key.channel, self.front.thread_of(key))
