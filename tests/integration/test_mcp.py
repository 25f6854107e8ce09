"""A coding agent on a real sandbox under runc and runsc, over each MCP surface: the SDK's own
client on the bot's streamable HTTP endpoint, and `cellmate mcp` over stdio. The agent and
the console's person share one kernel: a variable the agent sets is seen by the person's
`/run`, and one the person sets by the agent; the agent's files are in /mnt/data."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult, TextContent

from bot.agent import Agent, AgentLimits
from bot.agent.history import History
from bot.conversations import Conversations
from bot.conversations.mcp_tokens import McpDesk, TokenStore
from bot.database import Databases
from bot.mcp.bridge import connect
from bot.mcp.server import McpEndpoint
from bot.platforms.console import CONVERSATION, Console, run_piped
from executor import Executor
from storage.local import LocalStorage
from tests.support.links import SECRET

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]

WORKTREE = Path(__file__).resolve().parents[2]


def _text(result: CallToolResult) -> str:
    return "\n".join(part.text for part in result.content if isinstance(part, TextContent))


@asynccontextmanager
async def _bot(executor: Executor, tmp_path: Path) -> AsyncIterator[tuple[Console, io.StringIO]]:
    agent = Agent(
        executor,
        LocalStorage(tmp_path / "files", SECRET),
        History(Databases.sqlite(tmp_path)),
        client=None,
        model="none",
        limits=AgentLimits(),
    )
    conversations = Conversations(agent)
    tokens = TokenStore(Databases.sqlite(tmp_path))
    endpoint = McpEndpoint(conversations, tokens, "127.0.0.1", 0)
    out = io.StringIO()
    console = Console(conversations, out, tmp_path / "exports")
    await endpoint.start()
    conversations.mcp = McpDesk(tokens, endpoint.url)
    try:
        yield console, out
    finally:
        await endpoint.stop()
        tokens.close()
        await agent.reset(CONVERSATION.id)


async def _say(console: Console, out: io.StringIO, *messages: str) -> str:
    start = out.tell()
    await run_piped(console, io.StringIO("\n\n".join(messages) + "\n"))
    return out.getvalue()[start:]


async def _token(console: Console, out: io.StringIO) -> tuple[str, str]:
    shown = await _say(console, out, "/mcp token")
    token = re.search(r"^(cm_\S+)$", shown, re.MULTILINE)
    url = re.search(r"^Endpoint: (\S+)$", shown, re.MULTILINE)
    assert token is not None, shown
    assert url is not None, shown
    return token.group(1), url.group(1)


async def _shares_the_kernel(agent: ClientSession, console: Console, out: io.StringIO) -> None:
    ran = await agent.call_tool("run_code", {"code": "x = 6 * 7\nprint(x)"})
    assert _text(ran).splitlines() == ["42", "[status: ok]"]
    assert "🤖 Run by your agent:" in out.getvalue()
    seen = await _say(console, out, "/run y = x + 1; print(y)")
    assert "43\n" in seen
    back = await agent.call_tool("run_code", {"code": "print(y * 2)"})
    assert _text(back).splitlines() == ["86", "[status: ok]"]
    wrote = await agent.call_tool("write_file", {"path": "notes.txt", "content": "hello\n"})
    assert not wrote.is_error, _text(wrote)
    read = await agent.call_tool("run_code", {"code": "print(open('/mnt/data/notes.txt').read())"})
    assert _text(read).startswith("hello")
    assert "notes.txt" in _text(await agent.call_tool("list_files", {}))


async def test_an_agent_over_http_shares_the_conversations_kernel(
    executor: Executor, tmp_path: Path
) -> None:
    async with _bot(executor, tmp_path) as (console, out):
        token, url = await _token(console, out)
        async with connect(url, token) as agent:
            await _shares_the_kernel(agent, console, out)


async def test_an_agent_through_cellmate_mcp_over_stdio_shares_the_kernel(
    executor: Executor, tmp_path: Path
) -> None:
    async with _bot(executor, tmp_path) as (console, out):
        token, url = await _token(console, out)
        command = StdioServerParameters(
            command=sys.executable,
            args=["-m", "bot", "mcp", "--url", url],
            env={"CELLMATE_MCP_TOKEN": token, "PYTHONPATH": str(WORKTREE)},
            cwd=tmp_path,
        )
        with (tmp_path / "bridge.log").open("w") as errors:
            async with (
                stdio_client(command, errlog=errors) as (read, write),
                ClientSession(read, write) as agent,
            ):
                await agent.initialize()
                await _shares_the_kernel(agent, console, out)
