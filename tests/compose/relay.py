"""The stand-in servers, reachable from the containers of the test's compose network.

The servers listen on loopback, which a container on a bridge network cannot reach. A
relay listens on the gateway address of the compose network the test created (the host's
side of that network's bridge, reachable from its containers and from nothing outside the
machine) and pipes each connection to the server's loopback port; the servers' URLs then
name the relay.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from bench.standins import discord_server as dc
from bench.standins import slack_server as sl
from bench.standins.openai_server import ScriptedModel


class Relay:
    def __init__(self, host: str, target_port: int) -> None:
        self.host = host
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> Relay:
        self._server = await asyncio.start_server(self._connect, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(_pipe(source, sink))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            sink.close()


class ComposeDiscord(dc.DiscordServer):
    """Discord whose URLs (REST, gateway, attachments) name its relay."""

    public_url = ""

    @property
    def base_url(self) -> str:
        return self.public_url

    @property
    def gateway_url(self) -> str:
        return "ws" + self.public_url.removeprefix("http") + "/gateway"


class ComposeSlack(sl.SlackServer):
    """Slack whose URLs (Web API, uploads, files) name its relay."""

    public_url = ""

    @property
    def base_url(self) -> str:
        return self.public_url


class ComposeModel(ScriptedModel):
    """The scripted OpenAI-compatible model, at its relay's URL."""

    public_url = ""

    @property
    def base_url(self) -> str:
        return self.public_url + "/v1"


async def relay_each(
    gateway: str, *servers: ComposeDiscord | ComposeSlack | ComposeModel
) -> list[Relay]:
    """A relay on `gateway` for each (started) server, whose URLs then name it."""
    relays = []
    for server in servers:
        relay = await Relay(gateway, server.port).start()
        relays.append(relay)
        server.public_url = relay.url
    return relays


def stand_in_settings(
    model: ComposeModel, slack: ComposeSlack, discord: ComposeDiscord | None = None
) -> dict[str, str]:
    """The .env lines that point the bot at the stand-ins (through their relays)."""
    found = {
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_MODEL": "scripted-model",
        "SLACK_BOT_TOKEN": sl.BOT_TOKEN,
        "SLACK_SIGNING_SECRET": sl.SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
    }
    if discord is not None:
        found |= {"DISCORD_TOKEN": dc.TOKEN, "DISCORD_API_URL": discord.api_url}
    return found


def user_text(message: dict[str, Any]) -> str:
    """A chat message's text as the model was sent it (a string, or a list of parts)."""
    content = message.get("content") or ""
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content)
    return str(content)
