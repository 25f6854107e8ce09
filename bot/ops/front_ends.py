"""The chat platforms the bot serves, behind one seam: a `Platform` says whether the
settings configure it, what is missing for it to start, how it runs beside the others in
`cellmate serve`, how `cellmate doctor` checks it, and what to tell the operator when the
platform refuses the bot. Adding a platform is adding one class to `PLATFORMS`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import discord
from aiohttp import web
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.ops.findings import Finding
from bot.ops.services import Services
from bot.settings import Settings

DISCORD_API = "https://discord.com/api/v10"


@dataclass(frozen=True, slots=True)
class FrontEnd:
    """One platform, started: what `cellmate serve` runs, closes and routes."""

    name: str
    run: Callable[[], Coroutine[Any, Any, None]]
    close: Callable[[], Awaitable[None]] | None = None
    route: Callable[[web.Application], None] | None = None
    """Adds the platform's webhook to the bot's HTTP server."""


class Platform(Protocol):
    key: str
    """As settings and /healthz name it: `discord`."""

    def configured(self, settings: Settings) -> bool: ...

    def problem(self, settings: Settings) -> str | None:
        """What is missing for it to start, if anything."""

    def start(self, running: Services, settings: Settings) -> FrontEnd: ...

    async def check(self, settings: Settings) -> list[Finding]:
        """`cellmate doctor`'s findings: whether the platform takes the bot's credentials."""

    def refusal(self, exc: BaseException) -> str | None:
        """What to tell the operator when `exc` is the platform refusing the bot; else None."""


class Discord:
    key = "discord"

    def configured(self, settings: Settings) -> bool:
        return settings.discord.configured

    def problem(self, settings: Settings) -> str | None:
        return None

    def start(self, running: Services, settings: Settings) -> FrontEnd:
        from bot.platforms.on_discord import build_client, run_discord

        client = build_client(running.conversations, settings.discord, running.connected)
        return FrontEnd("Discord", lambda: run_discord(client), client.close)

    async def check(self, settings: Settings) -> list[Finding]:
        return await check_discord(settings)

    def refusal(self, exc: BaseException) -> str | None:
        if isinstance(exc, discord.LoginFailure):
            return "Discord refused DISCORD_TOKEN; check it in .env"
        return None


class Slack:
    key = "slack"

    def configured(self, settings: Settings) -> bool:
        return settings.slack.configured

    def problem(self, settings: Settings) -> str | None:
        return settings.slack.problem()

    def start(self, running: Services, settings: Settings) -> FrontEnd:
        from bot.platforms.on_slack import add_http_route, build_slack, run_slack

        slack = build_slack(running.conversations, settings.slack, running.connected)

        def route(app: web.Application) -> None:
            add_http_route(slack, app)

        http = settings.slack.connection == "http"
        return FrontEnd("Slack", lambda: run_slack(slack), route=route if http else None)

    async def check(self, settings: Settings) -> list[Finding]:
        return await _check_slack(settings)

    def refusal(self, exc: BaseException) -> str | None:
        if isinstance(exc, SlackApiError):
            error = exc.response.get("error")
            return f"Slack refused the bot's request ({error}); check the SLACK_* settings"
        return None


PLATFORMS: tuple[Platform, ...] = (Discord(), Slack())


def configured(settings: Settings) -> list[Platform]:
    return [platform for platform in PLATFORMS if platform.configured(settings)]


def configured_platforms(settings: Settings) -> list[str]:
    return [platform.key for platform in configured(settings)]


async def check_discord(settings: Settings) -> list[Finding]:
    chosen = settings.discord
    if not chosen.configured:
        return [Finding("discord", True, "not configured (DISCORD_TOKEN)", required=False)]
    url = (chosen.api_url or DISCORD_API).rstrip("/") + "/users/@me"
    headers = {"Authorization": f"Bot {chosen.token}"}
    try:
        async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as got:
            body = await got.json(content_type=None) if got.status == 200 else {}
            status = got.status
    except (aiohttp.ClientError, ValueError) as exc:
        return [Finding("discord", False, f"Discord cannot be reached ({exc})")]
    if status == 401:
        return [
            Finding(
                "discord",
                False,
                "Discord refused DISCORD_TOKEN",
                "copy the token again from the Developer Portal (Bot > Reset Token)",
            )
        ]
    if status != 200:
        return [Finding("discord", False, f"Discord answered HTTP {status}")]
    found = [Finding("discord", True, f"the token works: bot {body.get('username', '?')}")]
    if chosen.shard_count:
        found.append(_shard_finding(settings))
    return found


def _shard_finding(settings: Settings) -> Finding:
    """Which shard of the gateway this replica takes, and its sandboxes' label."""
    try:
        label = settings.sandbox_instance
        shard = settings.discord.shard()
    except ValueError as exc:
        return Finding(
            "shards",
            False,
            str(exc),
            "run the replicas as a StatefulSet, or set CELLMATE_DISCORD_SHARD_ID",
        )
    return Finding(
        "shards",
        True,
        f"this replica is shard {shard} of {settings.discord.shard_count} (DMs are shard "
        f"0's); its sandboxes are labelled {label}",
    )


async def _check_slack(settings: Settings) -> list[Finding]:
    chosen = settings.slack
    if not chosen.configured:
        return [Finding("slack", True, "not configured (SLACK_BOT_TOKEN)", required=False)]
    base = chosen.api_url or AsyncWebClient.BASE_URL
    found: list[Finding] = []
    try:
        identity = await AsyncWebClient(token=chosen.bot_token, base_url=base).auth_test()
        found.append(
            Finding(
                "slack",
                True,
                f"the bot token works: {identity.get('user')} in {identity.get('team')}",
            )
        )
    except SlackApiError as exc:
        found.append(
            Finding(
                "slack",
                False,
                f"Slack refused SLACK_BOT_TOKEN ({exc.response.get('error')})",
                "copy the Bot User OAuth Token (xoxb-...) from the app's OAuth & Permissions page",
            )
        )
    except aiohttp.ClientError as exc:
        found.append(Finding("slack", False, f"Slack cannot be reached ({exc})"))
    problem = chosen.problem()
    if problem:
        found.append(Finding("slack mode", False, problem, "see the README's Slack section"))
    elif chosen.connection == "socket":
        try:
            await AsyncWebClient(base_url=base).apps_connections_open(app_token=chosen.app_token)
            found.append(Finding("slack mode", True, "Socket Mode: the app-level token works"))
        except SlackApiError as exc:
            found.append(
                Finding(
                    "slack mode",
                    False,
                    f"Slack refused SLACK_APP_TOKEN ({exc.response.get('error')})",
                    "create an app-level token with connections:write (Basic Information)",
                )
            )
    else:
        where = f"http://{settings.http_host}:{settings.http_port}/slack/events"
        found.append(Finding("slack mode", True, f"HTTP mode: requests are served at {where}"))
    return found
