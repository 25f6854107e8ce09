"""`cellmate serve`: every configured chat platform in one process, sharing one executor,
one storage and one HTTP server, until SIGTERM or Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bot.ops.health import Health
from bot.ops.services import Services, background, services
from bot.settings import Settings, SettingsError

log = logging.getLogger(__name__)


class NoPlatform(Exception):
    """No chat platform is configured."""


@dataclass(frozen=True, slots=True)
class FrontEnd:
    name: str
    run: Callable[[], Coroutine[Any, Any, None]]
    close: Callable[[], Awaitable[None]] | None = None
    route: Callable[[web.Application], None] | None = None
    """Adds the platform's webhook to the bot's HTTP server."""


def configured_platforms(settings: Settings) -> list[str]:
    configured = (("discord", settings.discord.configured), ("slack", settings.slack.configured))
    return [name for name, on in configured if on]


def front_ends(running: Services, settings: Settings) -> list[FrontEnd]:
    found = []
    if settings.discord.configured:
        from bot.platforms.on_discord import build_client, run_discord

        client = build_client(running.conversations, settings.discord, running.connected)
        found.append(FrontEnd("Discord", lambda: run_discord(client), client.close))
    if settings.slack.configured:
        from bot.platforms.on_slack import add_http_route, build_slack, run_slack

        slack = build_slack(running.conversations, settings.slack, running.connected)

        def route(app: web.Application) -> None:
            add_http_route(slack, app)

        http = settings.slack.connection == "http"
        found.append(FrontEnd("Slack", lambda: run_slack(slack), route=route if http else None))
    return found


async def serve(settings: Settings, ready: Callable[[Services], None] | None = None) -> None:
    if not configured_platforms(settings):
        raise NoPlatform(
            "no chat platform is configured: set DISCORD_TOKEN or SLACK_BOT_TOKEN in .env "
            "(see the README), or use `cellmate chat` for the console"
        )
    if settings.slack.configured and settings.slack.problem():
        raise SettingsError(str(settings.slack.problem()))
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stopping.set)
    try:
        async with services(settings) as running:
            fronts = front_ends(running, settings)
            health = Health(running, configured_platforms(settings))

            def extend(app: web.Application) -> None:
                for front in fronts:
                    if front.route is not None:
                        front.route(app)

            async with background(
                settings,
                running.storage,
                always_serve=True,
                extend=extend,
                checks=health.checks,
                metrics=running.metrics,
            ):
                if ready is not None:
                    ready(running)
                names = ", ".join(front.name for front in fronts)
                print(f"Cellmate is serving {names}. Stop with Ctrl-C.", flush=True)
                await _run_until_stopped(fronts, stopping, running)
    finally:
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(number)


async def _run_until_stopped(
    fronts: list[FrontEnd], stopping: asyncio.Event, running: Services
) -> None:
    """Run the front ends until a signal, or until one of them fails (then raise that).

    On a signal: take no new turns, let running ones finish within the grace period, stop
    the rest (their replies say so), then disconnect. The executor's exit removes every
    sandbox afterwards."""
    tasks = [asyncio.create_task(front.run(), name=front.name) for front in fronts]
    waiter = asyncio.create_task(stopping.wait())
    done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if stopping.is_set():
        grace = running.settings.shutdown_grace_s
        print(f"Stopping: finishing running turns (up to {grace:g} s) ...", flush=True)
        stopped = await running.conversations.turns.drain(grace)
        if stopped:
            print(f"Stopped {stopped} turn(s) that ran past the grace period.", flush=True)
    for front in fronts:
        if front.close is not None:
            with contextlib.suppress(Exception):
                await front.close()
    failure: BaseException | None = None
    for task in tasks:
        if task in done and not task.cancelled() and task.exception() is not None:
            failure = failure or task.exception()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    if failure is not None:
        raise failure
