"""A Cellmate bot on the Slack stand-in, as the Slack tests drive it, and what they read off
its messages: buttons, progress, what only one user was shown."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator

from aiohttp import web

from bench.standins.ports import free_port
from bench.standins.slack_server import (
    APP_TOKEN,
    BOT_TOKEN,
    SIGNING_SECRET,
    Message,
    SlackServer,
)
from bot.conversations import Conversations
from bot.ops.http import start_server
from bot.platforms.on_slack import EVENTS_PATH, CellmateSlack, add_http_route, build_slack
from bot.settings import SlackSettings
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


@contextlib.asynccontextmanager
async def running_bot(mode: str, conversations: Conversations) -> AsyncIterator[Bot]:
    """The real slack_bolt app of `conversations` on a Slack stand-in of its own, over
    Socket Mode or HTTP (`mode`), until it and the stand-in are closed again."""
    from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

    async with contextlib.AsyncExitStack() as running:
        server = SlackServer(mode=mode)  # type: ignore[arg-type]
        await server.start()
        running.push_async_callback(server.close)
        settings = SlackSettings(
            bot_token=BOT_TOKEN,
            app_token=APP_TOKEN if mode == "socket" else "",
            signing_secret=SIGNING_SECRET if mode == "http" else "",
            api_url=server.api_url,
            cooldown_s=0,
        )
        slack = build_slack(conversations, settings)
        await slack.connect()
        if mode == "socket":
            handler = AsyncSocketModeHandler(slack.app, APP_TOKEN)
            await handler.connect_async()  # type: ignore[no-untyped-call]
            running.push_async_callback(handler.close_async)
            await server.wait_connected()
        else:
            app = web.Application()
            add_http_route(slack, app)
            port = free_port()
            runner = await start_server(app, "127.0.0.1", port)
            running.push_async_callback(runner.cleanup)
            server.bot_url = f"http://127.0.0.1:{port}{EVENTS_PATH}"
        yield Bot(server, slack)
