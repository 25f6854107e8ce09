"""The bot as the proxy's peer over TCP, for a proxy the bot cannot start as its child:
`--control HOST:PORT` (Kubernetes: the bot connects to the proxy's Deployment) or
`--dial-bot HOST:PORT` (Docker Compose: the proxy, beside the engine, connects to the bot).

The talk is the parent protocol (egressproxy.parent), on a TCP connection instead of the
child's pipes, after each side proved that it holds the token of --control-token-file
without sending it (egressproxy.handshake). A connection that does not prove it, in a few
seconds, is closed unheard, and whoever took the other side's port learns nothing. One bot
at a time: a newer connection that proves the token replaces the one before (a bot that
restarted). While no bot is connected, every request is refused at once (nobody can say
whose sandbox asks), and the audit's lines stay in the proxy's log. The control port is
for the bot's Pod alone (deploy/kubernetes/egress-proxy.yaml: the NetworkPolicy admits
nothing else), and the token holds even where no plugin enforces it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from egressproxy import handshake
from egressproxy.grants import Grants
from egressproxy.parent import LINE_LIMIT, ParentOwners

log = logging.getLogger(__name__)

DIAL_S = 0.5
DIAL_MAX_S = 10.0
MIN_TOKEN_CHARS = 32


def read_token(path: Path) -> bytes:
    """The control token in `path` (whitespace around it ignored); ValueError when too short
    to be a secret."""
    token = path.read_text(encoding="utf-8").strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(
            f"the control token in {path} is shorter than {MIN_TOKEN_CHARS} characters"
        )
    return token.encode()


class ControlOwners(ParentOwners):
    """`Owners` that asks the bot connected to the control port (refusing while none is)."""

    def __init__(self, token: bytes) -> None:
        super().__init__(out=None)  # type: ignore[arg-type]  # lines go to the bot's socket
        self._token = token
        self._bot: asyncio.StreamWriter | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def connected(self) -> bool:
        return self._bot is not None

    def tell(self, message: dict[str, Any]) -> None:
        bot, loop = self._bot, self._loop
        if bot is None or loop is None:
            return  # nobody to tell: the audit line is in the proxy's own log
        line = (json.dumps(message, sort_keys=True) + "\n").encode()
        # Audit lines may come from another thread than the loop's.
        loop.call_soon_threadsafe(_write, bot, line)

    async def grants_for(self, address: str) -> Grants | None:
        if self._bot is None:
            return None
        return await super().grants_for(address)

    async def serve(self, host: str, port: int) -> asyncio.Server:
        self._loop = asyncio.get_running_loop()
        return await asyncio.start_server(self._connected, host, port, limit=LINE_LIMIT)

    async def dial(self, host: str, port: int) -> None:
        """The other way round (Docker Compose, where the bot's port is what the proxy can
        reach): connect to the bot's control port and show the token; again whenever the
        connection ends or fails, until cancelled."""
        self._loop = asyncio.get_running_loop()
        backoff = DIAL_S
        while True:
            try:
                reader, writer = await asyncio.open_connection(host, port, limit=LINE_LIMIT)
            except OSError as exc:
                log.warning("the bot's control port %s:%s does not answer: %s", host, port, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, DIAL_MAX_S)
                continue
            try:
                await handshake.initiate(reader, writer, self._token)
            except (handshake.NotTheirs, ConnectionError) as exc:
                log.warning("the control port %s:%s is not the bot's: %s", host, port, exc)
                await _close(writer)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, DIAL_MAX_S)
                continue
            backoff = DIAL_S
            self._bot = writer
            log.info("connected to the bot at %s:%s", host, port)
            try:
                await self.read(reader)
            except (ConnectionError, ValueError):
                pass
            finally:
                self._bot = None
                await _close(writer)
            log.warning("the bot hung up: requests are refused until it is back")
            await asyncio.sleep(backoff)

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            await handshake.accept(reader, writer, self._token)
        except (handshake.NotTheirs, ConnectionError) as exc:
            log.warning("closed a control connection from %s: %s", peer, exc)
            await _close(writer)
            return
        previous, self._bot = self._bot, writer
        if previous is not None:
            await _close(previous)
        log.info("the bot is connected from %s", peer)
        try:
            await self.read(reader)
        except (ConnectionError, ValueError):
            pass
        finally:
            if self._bot is writer:
                self._bot = None
                log.warning("the bot disconnected: requests are refused until it is back")
            await _close(writer)


def _write(writer: asyncio.StreamWriter, line: bytes) -> None:
    if not writer.is_closing():
        writer.write(line)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, OSError):
        await writer.wait_closed()
