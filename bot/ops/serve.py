"""`cellmate serve`: every configured chat platform in one process, sharing one executor,
one storage and one HTTP server, until SIGTERM or Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable

from aiohttp import web

from bot.mcp.service import mcp_service
from bot.ops.front_ends import FrontEnd, configured, configured_platforms
from bot.ops.health import Health
from bot.ops.services import Services, background, services
from bot.settings import Settings, SettingsError

log = logging.getLogger(__name__)


class NoPlatform(Exception):
    """No chat platform is configured."""


async def serve(settings: Settings, ready: Callable[[Services], None] | None = None) -> None:
    if not configured_platforms(settings):
        raise NoPlatform(
            "no chat platform is configured: set DISCORD_TOKEN or SLACK_BOT_TOKEN in .env "
            "(see the README), or use `cellmate chat` for the console"
        )
    for platform in configured(settings):
        if problem := platform.problem(settings):
            raise SettingsError(problem)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stopping.set)
    try:
        async with services(settings) as running:
            fronts = [platform.start(running, settings) for platform in configured(settings)]
            health = Health(running, configured_platforms(settings))

            def extend(app: web.Application) -> None:
                for front in fronts:
                    if front.route is not None:
                        front.route(app)

            async with (
                background(
                    settings,
                    running.storage,
                    always_serve=True,
                    extend=extend,
                    checks=health.checks,
                    metrics=running.metrics,
                ),
                mcp_service(running.conversations, settings) as desk,
            ):
                if ready is not None:
                    ready(running)
                names = ", ".join(front.name for front in fronts)
                print(f"Cellmate is serving {names}. Stop with Ctrl-C.", flush=True)
                if desk is not None:
                    print(f"MCP endpoint for coding agents: {desk.url}", flush=True)
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
        # While the platforms can still post: background runs' threads learn what becomes of
        # them (stopped, or going on through the restart).
        await running.conversations.background.close()
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
