"""A Cellmate bot on the Slack stand-in, as the Slack tests drive it, and what they read off
its messages: buttons, progress, what only one user was shown."""

from __future__ import annotations

import dataclasses

from bench.standins.slack_server import Message, SlackServer
from bot.platforms.on_slack import CellmateSlack
from tests.support.platforms import turns_ended


@dataclasses.dataclass
class Bot:
    server: SlackServer
    slack: CellmateSlack

    def thread(self, channel: str, root: str) -> list[Message]:
        return self.server.channel_messages(channel, thread_ts=root, by_bot=True)

    async def answered(self, channel: str, root: str, count: int = 1) -> list[Message]:
        """The bot's messages in a thread once `count` turns there have finished."""

        def finished() -> list[Message] | None:
            messages = self.thread(channel, root)
            if self.slack.door.lines.busy or any(button(m, "cm_stop") for m in messages):
                return None
            idle = not self.slack.conversations.turns
            shown = [(m.text, button(m, "cm_rerun")) for m in messages if not m.files]
            ended = turns_ended(shown, "*Code*")
            return messages if ended >= count and idle else None

        return await self.server.wait_for(finished, 60)  # type: ignore[return-value]


def button(message: Message, action_id: str) -> bool:
    return any(
        element.get("action_id") == action_id
        for block in message.blocks
        if block.get("type") == "actions"
        for element in block["elements"]
    )


def is_progress(message: Message) -> bool:
    return message.text.startswith(":hourglass") or message.text.startswith("*Code*")


def ephemeral_to(bot: Bot, user: str) -> list[str]:
    """What only `user` was shown: ephemeral messages and response_url answers."""
    texts = [str(e.get("text")) for e in bot.server.ephemeral if e.get("user") == user]
    return texts + [str(r.get("text")) for r in bot.server.responses]
