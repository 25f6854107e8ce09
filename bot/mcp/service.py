"""The MCP endpoint as one of the bot's services: its token store and its server, started
with the front ends and stopped after them (CELLMATE_MCP on)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from bot.conversations import Conversations
from bot.conversations.mcp_tokens import McpDesk, TokenStore
from bot.database import Databases
from bot.mcp.server import McpEndpoint
from bot.settings import Settings


@contextlib.asynccontextmanager
async def mcp_service(
    conversations: Conversations, settings: Settings
) -> AsyncIterator[McpDesk | None]:
    """The endpoint, serving while the block runs; None when MCP is off."""
    if not settings.mcp:
        yield None
        return
    # Its own opening of the database: the endpoint starts and stops apart from the rest.
    tokens = TokenStore(Databases(settings.database_url, settings.data_dir))
    endpoint = McpEndpoint(conversations, tokens, settings.mcp_host, settings.mcp_port)
    try:
        await endpoint.start()
        try:
            conversations.mcp = desk = McpDesk(tokens, endpoint.url)
            yield desk
        finally:
            conversations.mcp = None
            await endpoint.stop()
    finally:
        tokens.close()
