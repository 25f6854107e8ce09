"""Cellmate on Slack (slack_bolt, async): Socket Mode or HTTP mode."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import WSMessage, web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

from bot.conversations import Conversations
from bot.platforms.on_slack.app import CellmateSlack
from bot.platforms.on_slack.replay import RequestCheck, Verdict
from bot.settings import SlackSettings

__all__ = ["EVENTS_PATH", "CellmateSlack", "add_http_route", "build_slack", "run_slack"]

EVENTS_PATH = "/slack/events"
log = logging.getLogger(__name__)


def build_slack(
    conversations: Conversations,
    settings: SlackSettings,
    connected: dict[str, bool] | None = None,
) -> CellmateSlack:
    return CellmateSlack(conversations, settings, connected)


def add_http_route(slack: CellmateSlack, app: web.Application) -> None:
    """Events, commands and interactivity at /slack/events (HTTP mode). Each request's
    signature and age are checked before anything runs (by `RequestCheck`, then again by
    Bolt), and a replayed request is acknowledged without running again."""
    check = RequestCheck(slack.settings.signing_secret, shared=slack.conversations.shared_events)

    async def events(request: web.Request) -> web.Response:
        verdict = check.check(request.headers, await request.read())
        if verdict is Verdict.BAD:
            return web.Response(status=401, text="invalid request")
        if verdict is Verdict.REPLAY:
            log.warning("a Slack request was sent again; it was not handled twice")
            return web.Response(status=200)
        if verdict is Verdict.FULL:
            return web.Response(status=503, text="busy")
        if not slack.conversations.turns.accepting and _is_event(request):
            # Shutting down: Slack delivers the event again at once, and behind a Service
            # another replica takes it (a command or a button is answered here, saying why).
            check.forget(request.headers)
            return web.Response(status=503, text="restarting")
        try:
            response = await slack.app.async_dispatch(await to_bolt_request(request))
        except BaseException:
            check.forget(request.headers)
            raise
        if response.status >= 500:
            check.forget(request.headers)
        return await to_aiohttp_response(response)

    app.router.add_post(EVENTS_PATH, events)


def _is_event(request: web.Request) -> bool:
    """An Events API delivery (JSON), which Slack retries; commands and interactivity are
    form posts."""
    return request.content_type == "application/json"


async def run_slack(slack: CellmateSlack) -> None:
    """Identify the bot, then serve: over Socket Mode, or wait while HTTP mode's route works."""
    await slack.connect()
    if slack.settings.connection == "http":
        await asyncio.Event().wait()
        return
    handler = AsyncSocketModeHandler(slack.app, slack.settings.app_token)
    connected = slack.connected

    # /healthz reports the Socket Mode connection: down when it closes, up on any message
    # (Slack greets every new connection with `hello`).
    async def up(message: WSMessage) -> None:
        connected["slack"] = True

    async def down(message: WSMessage) -> None:
        connected["slack"] = False

    handler.client.on_message_listeners.append(up)
    handler.client.on_close_listeners.append(down)
    try:
        await handler.connect_async()  # type: ignore[no-untyped-call]
        await asyncio.Event().wait()
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]
