"""`cellmate doctor`'s MCP checks: whether the endpoint is on, where it listens (free, or a
running bot's endpoint answers there), and whether the token store can be read."""

from __future__ import annotations

import contextlib
import json
import socket

import aiohttp

from bot.conversations.mcp_tokens import TokenStore
from bot.database import Databases
from bot.mcp.bridge import endpoint_url
from bot.mcp.server import MISSING
from bot.ops.findings import Finding
from bot.settings import Settings

PROBE_S = 3.0
LOOPBACK = ("127.0.0.1", "localhost", "::1")


async def mcp_check(settings: Settings) -> list[Finding]:
    if not settings.mcp:
        return [
            Finding(
                "mcp",
                True,
                "off (CELLMATE_MCP): coding agents cannot reach conversations",
                required=False,
            )
        ]
    url = endpoint_url(settings.mcp_host, settings.mcp_port)
    found = [await _endpoint(settings, url), _tokens(settings)]
    if settings.mcp_host not in LOOPBACK:
        found.append(
            Finding(
                "mcp reach",
                False,
                f"listens on {settings.mcp_host}: tokens cross the network in plain HTTP",
                "keep CELLMATE_MCP_HOST=127.0.0.1, or put a TLS proxy in front of the port",
                required=False,
            )
        )
    return found


async def _endpoint(settings: Settings, url: str) -> Finding:
    answer = await _probe(url)
    if answer is None:
        if _free(settings.mcp_host, settings.mcp_port):
            return Finding("mcp", True, f"port {settings.mcp_port} is free; the bot serves {url}")
        return Finding(
            "mcp",
            False,
            f"cannot listen on {settings.mcp_host}:{settings.mcp_port}",
            "set CELLMATE_MCP_PORT to a free port (or CELLMATE_MCP_HOST to this machine's)",
        )
    if answer:
        return Finding("mcp", True, f"a running bot serves {url} and asks for tokens")
    return Finding(
        "mcp",
        False,
        f"something else answers at {settings.mcp_host}:{settings.mcp_port}",
        "set CELLMATE_MCP_PORT to a free port",
    )


async def _probe(url: str) -> bool | None:
    """Whether the bot's endpoint answers at `url` (refusing a request with no token, as it
    does); None when nothing listens there."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_S)) as http,
            http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}) as response,
        ):
            body = await response.text()
    except (aiohttp.ClientConnectionError, TimeoutError):
        return None
    with contextlib.suppress(ValueError, TypeError, KeyError):
        return response.status == 401 and json.loads(body)["error"]["message"] == MISSING
    return False


def _free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _tokens(settings: Settings) -> Finding:
    where = Databases(settings.database_url, settings.data_dir, timeout_s=PROBE_S)
    path = where.describe()
    try:
        store = TokenStore(where)
        try:
            live = store.live()
        finally:
            store.close()
    except Exception as exc:  # every failure is a finding, whatever its type
        return Finding(
            "mcp tokens",
            False,
            f"cannot read {path}: {exc}",
            "check that CELLMATE_DATA_DIR is writable by the bot"
            if where.engine == "sqlite"
            else "check CELLMATE_DATABASE_URL (`cellmate doctor` tries the database itself)",
        )
    return Finding("mcp tokens", True, f"{live} token(s) in use ({path})")
