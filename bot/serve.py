"""`cellmate serve`: every configured chat platform in one process, sharing one executor,
one storage and one HTTP server, until SIGTERM or Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from bot.services import Services, background, services
from bot.settings import Settings

log = logging.getLogger(__name__)


class NoPlatform(Exception):
    """No chat platform is configured."""


def configured_platforms(settings: Settings) -> list[str]:
    return [name for name, on in (("discord", settings.discord.configured),) if on]


async def serve(settings: Settings, ready: Callable[[Services], None] | None = None) -> None:
    platforms = configured_platforms(settings)
    if not platforms:
        raise NoPlatform(
            "no chat platform is configured: set DISCORD_TOKEN in .env "
            "(see the README), or use `cellmate chat` for the console"
        )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stopping.set)
    try:
        async with (
            services(settings) as running,
            background(settings, running.storage, always_serve=True),
        ):
            runs: list[Coroutine[Any, Any, None]] = []
            closers: list[Callable[[], Awaitable[None]]] = []
            if settings.discord.configured:
                from bot.platforms.on_discord import build_client, run_discord

                client = build_client(running.agent, settings.discord)
                runs.append(run_discord(client))
                closers.append(client.close)
            tasks = [asyncio.create_task(run) for run in runs]
            if ready is not None:
                ready(running)
            print(f"Cellmate is serving {', '.join(platforms)}. Stop with Ctrl-C.", flush=True)
            waiter = asyncio.create_task(stopping.wait())
            done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for close in closers:
                with contextlib.suppress(Exception):
                    await close()
            waiter.cancel()
            for task in tasks:
                if task in done and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
    finally:
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(number)
