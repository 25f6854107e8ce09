"""`cellmate mcp`: a stdio MCP server for coding agents that launch a command. It forwards
every tool call to the running bot's MCP endpoint (`--url`) with the token in
CELLMATE_MCP_TOKEN, so the agent reaches the same conversation, and the same kernel, as
over HTTP."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
)

CALL_WAIT_S = 3600.0
"""How long one call may wait for its answer: a run may wait for a person's approval, then
run up to its time limit."""
UNSET = (
    "cellmate mcp: set CELLMATE_MCP_TOKEN to a token from /mcp token (typed in the "
    "conversation the agent should work in)."
)


def endpoint_url(host: str, port: int) -> str:
    """The bot's MCP endpoint at HOST:PORT (CELLMATE_MCP_HOST, CELLMATE_MCP_PORT)."""
    if host in ("0.0.0.0", "::", ""):  # noqa: S104 (listening everywhere: reached here)
        host = "127.0.0.1"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/mcp"


@contextlib.asynccontextmanager
async def connect(url: str, token: str) -> AsyncIterator[ClientSession]:
    """An MCP session with the bot's endpoint at `url`, as the token's person."""
    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx2.Timeout(30, read=CALL_WAIT_S)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def forwarding(upstream: ClientSession) -> Server[Any]:
    """A server whose tools are the bot's, each call answered by the bot."""

    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        return await upstream.list_tools()

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        try:
            return await upstream.call_tool(params.name, params.arguments or {})
        except MCPError as exc:
            # The bot refused the request itself (a revoked token): the agent is told why.
            return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)

    return Server("cellmate", on_list_tools=list_tools, on_call_tool=call_tool)


async def bridge(url: str, token: str) -> int:
    """Serve MCP on stdin and stdout until the agent closes them."""
    if not token:
        print(UNSET, file=sys.stderr)
        return 2
    try:
        async with connect(url, token) as upstream:
            server = forwarding(upstream)
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
    except Exception as exc:
        print(f"cellmate mcp: {_why(exc, url)}", file=sys.stderr)
        return 1
    return 0


def _why(error: BaseException, url: str) -> str:
    """What stopped the bridge, in words: the bot's refusal, or why it cannot be reached."""
    if isinstance(error, BaseExceptionGroup):
        return _why(error.exceptions[0], url)
    if isinstance(error, httpx2.HTTPError):
        return f"cannot reach the bot at {url} ({error})"
    return str(error) or type(error).__name__
