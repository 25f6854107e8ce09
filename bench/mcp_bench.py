"""The MCP figure of `python -m bench turns`: a coding agent's `run_code` round trip over
stdio, on a warm session. `cellmate mcp` runs as the agent launches it (a subprocess driven
by the MCP SDK's stdio client) and forwards each call to the bot's MCP endpoint on loopback;
the conversation is the console's (its output printed nowhere). A sample is the time from
the agent's `tools/call` to its result, whose text must carry the token the code printed."""

from __future__ import annotations

import contextlib
import io
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import TextContent

from bench.turn_samples import WARM_UP
from bot.conversations import Conversations
from bot.conversations.mcp_tokens import TokenStore
from bot.database import Databases
from bot.mcp.server import McpEndpoint
from bot.platforms.console import CONVERSATION, ME, Console

ROOT = Path(__file__).resolve().parents[1]


@contextlib.asynccontextmanager
async def agent_over_stdio(conversations: Conversations) -> AsyncIterator[ClientSession]:
    """An agent's MCP session through `cellmate mcp`, bound to the console's conversation."""
    with tempfile.TemporaryDirectory() as data:
        Console(conversations, io.StringIO(), Path(data) / "exports")  # posts the agent's runs
        tokens = TokenStore(Databases.sqlite(Path(data)))
        endpoint = McpEndpoint(conversations, tokens, "127.0.0.1", 0)
        try:
            await endpoint.start()
            token, _ = tokens.issue(ME.user, "you", CONVERSATION.id)
            command = StdioServerParameters(
                command=sys.executable,
                args=["-m", "bot", "mcp", "--url", endpoint.url],
                env={"CELLMATE_MCP_TOKEN": token, "PYTHONPATH": str(ROOT)},
                cwd=data,
            )
            with (Path(data) / "bridge.log").open("w") as errors:
                async with (
                    stdio_client(command, errlog=errors) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    yield session
        finally:
            await endpoint.stop()
            tokens.close()


async def measure_mcp(conversations: Conversations, samples: int) -> list[float]:
    """Milliseconds per `run_code` round trip over stdio, the session warm (the first
    call, which starts it, and the warm-up left out)."""
    found: list[float] = []
    async with agent_over_stdio(conversations) as session:
        await session.call_tool("run_code", {"code": "print('warm', 'up')"})
        for index in range(WARM_UP + samples):
            mark = secrets.token_hex(4)
            started = time.perf_counter()
            result = await session.call_tool("run_code", {"code": f"print('mcp', '{mark}')"})
            elapsed = (time.perf_counter() - started) * 1000
            shown = "".join(p.text for p in result.content if isinstance(p, TextContent))
            if result.is_error or mark not in shown:
                raise RuntimeError(f"the agent's run did not show its output: {shown!r}")
            if index >= WARM_UP:
                found.append(elapsed)
    await conversations.agent.reset(CONVERSATION.id)
    return found
