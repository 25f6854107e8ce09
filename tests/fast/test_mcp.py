"""A coding agent over MCP, as it sees the bot (the SDK's own client on the bot's streamable
HTTP endpoint, on loopback) and as the console's person sees the agent's runs (the real
`cellmate chat` front end), on the fake sandbox (no Docker)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from bot.agent import Agent
from bot.conversations import AccessRules, Conversations
from bot.conversations.mcp_tokens import McpDesk, TokenStore
from bot.conversations.policy import Policies, PolicySettings
from bot.conversations.quotas import Quotas, QuotaSettings
from bot.database import Databases
from bot.mcp.server import MISSING, NOT_ALLOWED, REVOKED, UNKNOWN, McpEndpoint
from bot.mcp.service import mcp_service
from bot.ops.mcp_check import mcp_check
from bot.platforms.console import CONVERSATION, Console, run_piped
from bot.settings import Settings
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.support.screen import Screen

WORKTREE = Path(__file__).resolve().parents[2]
"""Where the bot's code is, for `cellmate mcp` started elsewhere."""


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(
        {
            "print(6*7)": FakeRun(outputs=[stdout("42\n")]),
            "x = 41": FakeRun(assigns={"x": "41"}),
            "y = 'from the chat'": FakeRun(assigns={"y": "from the chat"}),
            "print(x)": FakeRun(shows="x"),
            "print(y)": FakeRun(shows="y"),
        }
    )


class Bot:
    """The console chat with the MCP endpoint beside it, as `cellmate chat` runs them."""

    def __init__(self, conversations: Conversations, tokens: TokenStore, exports: Path) -> None:
        self.out = Screen()
        self.conversations = conversations
        self.console = Console(conversations, self.out, exports)
        self.tokens = tokens
        self.endpoint = McpEndpoint(conversations, tokens, "127.0.0.1", 0)

    async def pipe(self, *messages: str) -> str:
        start = self.out.tell()
        await run_piped(self.console, io.StringIO("\n\n".join(messages) + "\n"))
        return self.out.getvalue()[start:]

    async def token(self) -> str:
        """A token, as the person gets it by typing /mcp token in the chat."""
        out = await self.pipe("/mcp token")
        found = re.search(r"^(cm_\S+)$", out, re.MULTILINE)
        assert found is not None, out
        assert f"Endpoint: {self.endpoint.url}" in out
        return found.group(1)


@pytest.fixture
async def bot(
    fake_executor: Executor, make_agent: Callable[..., Agent], tmp_path: Path
) -> AsyncIterator[Callable[..., Bot]]:
    made: list[Bot] = []
    closing: list[Any] = []

    def make(**settings: Any) -> Bot:
        agent = make_agent(fake_executor, None, tmp_path, timeout=5)
        policies = Policies(
            Databases.sqlite(tmp_path / f"p{len(made)}"), PolicySettings(**settings)
        )
        quotas = Quotas(Databases.sqlite(tmp_path / f"u{len(made)}"), QuotaSettings())
        closing.extend([policies, quotas])
        tokens = TokenStore(Databases.sqlite(tmp_path / f"t{len(made)}"))
        closing.append(tokens)
        conversations = Conversations(agent, policies=policies, quotas=quotas)
        made.append(Bot(conversations, tokens, tmp_path / "exports"))
        return made[-1]

    yield make
    for each in made:
        await each.endpoint.stop()
    for store in closing:
        with contextlib.suppress(Exception):
            store.close()


async def started(bot: Bot) -> Bot:
    await bot.endpoint.start()
    bot.conversations.mcp = McpDesk(bot.tokens, bot.endpoint.url)
    return bot


@contextlib.asynccontextmanager
async def agent(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    """A coding agent's MCP session with the bot, through the SDK's own client."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def text(result: CallToolResult) -> str:
    return "\n".join(part.text for part in result.content if isinstance(part, TextContent))


@contextlib.contextmanager
def refused(words: str) -> Iterator[None]:
    """The agent's client fails with an error that says `words`."""
    with pytest.raises(BaseException) as caught:  # noqa: PT011 (a group, from the SDK's tasks)
        yield
    assert words in _messages(caught.value), _messages(caught.value)


def _messages(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup):
        return " | ".join(_messages(inner) for inner in error.exceptions)
    return str(error)


# ── tools and the shared thread ──────────────────────────────────────────────────────────


async def test_the_agent_lists_the_tools_and_its_run_shows_in_the_chat(
    bot: Callable[..., Bot], fake_backend: FakeBackend
) -> None:
    chat = await started(bot())
    token = await chat.token()
    async with agent(chat.endpoint.url, token) as session:
        tools = {tool.name for tool in (await session.list_tools()).tools}
        assert tools == {"run_code", "list_files", "read_file", "write_file", "export_notebook"}
        result = await session.call_tool("run_code", {"code": "print(6*7)"})
    assert not result.is_error, text(result)
    assert text(result).splitlines() == ["42", "[status: ok]"]
    shown = chat.out.getvalue()
    assert "🤖 Run by your agent:" in shown
    assert "── running ─────────────────────────\nprint(6*7)\n" in shown
    assert shown.index("🤖 Run by your agent:") < shown.index("42\n")
    assert fake_backend.runs == ["print(6*7)"]


async def test_the_agent_and_the_chat_share_one_kernel(
    bot: Callable[..., Bot], fake_backend: FakeBackend
) -> None:
    chat = await started(bot())
    token = await chat.token()
    async with agent(chat.endpoint.url, token) as session:
        await session.call_tool("run_code", {"code": "x = 41"})
        out = await chat.pipe("/run print(x)", "/run y = 'from the chat'")
        seen = await session.call_tool("run_code", {"code": "print(y)"})
    assert "41\n" in out
    assert text(seen).splitlines() == ["from the chat", "[status: ok]"]
    assert fake_backend.started == 1


async def test_files_written_by_the_agent_are_listed_read_and_exported(
    bot: Callable[..., Bot],
) -> None:
    chat = await started(bot())
    token = await chat.token()
    async with agent(chat.endpoint.url, token) as session:
        await session.call_tool("run_code", {"code": "print(6*7)"})
        wrote = await session.call_tool(
            "write_file", {"path": "notes/plan.txt", "content": "step one\n"}
        )
        listed = await session.call_tool("list_files", {})
        read = await session.call_tool("read_file", {"path": "notes/plan.txt"})
        missing = await session.call_tool("read_file", {"path": "nope.txt"})
        exported = await session.call_tool("export_notebook", {})
        outside = await session.call_tool("write_file", {"path": "../etc/x", "content": "no"})
    assert text(wrote) == "Wrote /mnt/data/notes/plan.txt (9 B)."
    assert "notes/plan.txt\t9 B" in text(listed)
    assert text(read) == "step one\n"
    assert missing.is_error
    assert text(missing) == "Error executing tool read_file: No file 'nope.txt' in /mnt/data."
    assert outside.is_error
    assert text(outside).endswith("input file name '..' is empty or a directory reference")
    cells = json.loads(text(exported))["cells"]
    assert ["".join(cell["source"]) for cell in cells] == ["print(6*7)"]
    assert "/mcp" in await chat.pipe("/help")
    assert "notes/plan.txt" in await chat.pipe("/files")


# ── tokens ───────────────────────────────────────────────────────────────────────────────


async def test_a_missing_or_unknown_token_is_refused(bot: Callable[..., Bot]) -> None:
    chat = await started(bot())
    with refused(MISSING):
        async with agent(chat.endpoint.url, None):
            pass
    with refused(UNKNOWN):
        async with agent(chat.endpoint.url, "cm_made-up"):
            pass


async def test_a_revoked_token_is_refused_even_in_an_open_session(
    bot: Callable[..., Bot], fake_backend: FakeBackend
) -> None:
    chat = await started(bot())
    token = await chat.token()
    assert f"1. {CONVERSATION.id} (made " in await chat.pipe("/mcp")
    async with agent(chat.endpoint.url, token) as session:
        assert "Revoked 1 token." in await chat.pipe("/mcp revoke")
        with pytest.raises(MCPError) as caught:
            await session.call_tool("run_code", {"code": "print(6*7)"})
        assert str(caught.value) == REVOKED
    with refused(REVOKED):
        async with agent(chat.endpoint.url, token):
            pass
    assert fake_backend.runs == []
    assert "You have no MCP tokens." in await chat.pipe("/mcp")


async def test_a_token_of_someone_no_longer_allowed_there_is_refused(
    bot: Callable[..., Bot], fake_backend: FakeBackend
) -> None:
    chat = await started(bot())
    token = await chat.token()
    # The operator narrows the allowlist: the console's person is no longer on it.
    chat.console.door.rules = AccessRules(users=frozenset({"someone-else"}))
    async with agent(chat.endpoint.url, token) as session:
        result = await session.call_tool("run_code", {"code": "print(6*7)"})
    assert result.is_error
    assert text(result).endswith(f": {NOT_ALLOWED}")
    assert fake_backend.runs == []


async def test_a_token_is_for_another_persons_conversation_only_if_they_act_there(
    bot: Callable[..., Bot], fake_backend: FakeBackend
) -> None:
    """A token made for Bob in the console's conversation (not his DM): Bob may not act
    there, so nothing runs."""
    chat = await started(bot())
    token, _ = chat.tokens.issue("bob", "Bob", CONVERSATION.id)
    async with agent(chat.endpoint.url, token) as session:
        result = await session.call_tool("list_files", {})
    assert result.is_error
    assert text(result).endswith(f": {NOT_ALLOWED}")


# ── the place's rules ───────────────────────────────────────────────────────────────────


async def test_under_approve_the_agents_code_waits_for_a_yes_in_the_chat(
    bot: Callable[..., Bot], fake_backend: FakeBackend
) -> None:
    chat = await started(bot(default="approve"))
    token = await chat.token()
    answers = ["y", "n"]

    async def read(prompt: str) -> str | None:
        return answers.pop(0)

    chat.console.read = read
    async with agent(chat.endpoint.url, token) as session:
        ran = await session.call_tool("run_code", {"code": "print(6*7)"})
        declined = await session.call_tool("run_code", {"code": "print(6*7)"})
    assert text(ran).splitlines() == ["42", "[status: ok]"]
    assert declined.is_error
    assert text(declined) == (
        "Error executing tool run_code: The agent's code was not run (cancelled)."
    )
    shown = chat.out.getvalue()
    assert "✅ Approved by you; it runs." in shown
    assert fake_backend.runs == ["print(6*7)"]


async def test_a_quota_refusal_is_the_tools_error(
    bot: Callable[..., Bot], fake_backend: FakeBackend
) -> None:
    chat = bot()
    assert chat.conversations.quotas is not None
    chat.conversations.quotas.settings = QuotaSettings(user_runs_per_hour=1)
    await started(chat)
    token = await chat.token()
    async with agent(chat.endpoint.url, token) as session:
        first = await session.call_tool("run_code", {"code": "print(6*7)"})
        second = await session.call_tool("run_code", {"code": "print(6*7)"})
    assert not first.is_error
    assert second.is_error
    assert "limit of 1 runs" in text(second)
    assert fake_backend.runs == ["print(6*7)"]


# ── `cellmate mcp`: the stdio bridge ───────────────────────────────────────────────────


@contextlib.asynccontextmanager
async def launched(url: str, token: str, tmp_path: Path) -> AsyncIterator[ClientSession]:
    """`cellmate mcp` as a coding agent launches it, driven by the SDK's stdio client."""
    command = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot", "mcp", "--url", url],
        env={"CELLMATE_MCP_TOKEN": token, "PYTHONPATH": str(WORKTREE)},
        cwd=tmp_path,  # no .env there
    )
    with (tmp_path / "bridge.log").open("w") as errors:
        async with (
            stdio_client(command, errlog=errors) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def test_cellmate_mcp_over_stdio_reaches_the_same_kernel(
    bot: Callable[..., Bot], fake_backend: FakeBackend, tmp_path: Path
) -> None:
    chat = await started(bot())
    token = await chat.token()
    async with launched(chat.endpoint.url, token, tmp_path) as session:
        tools = {tool.name for tool in (await session.list_tools()).tools}
        result = await session.call_tool("run_code", {"code": "x = 41"})
        out = await chat.pipe("/run print(x)")
        assert "Revoked 1 token." in await chat.pipe("/mcp revoke")
        after = await session.call_tool("run_code", {"code": "print(6*7)"})
    assert "run_code" in tools
    assert text(result) == "[status: ok]"
    assert "🤖 Run by your agent:" in chat.out.getvalue()
    assert "41\n" in out
    assert after.is_error
    assert text(after) == REVOKED
    assert fake_backend.runs == ["x = 41", "print(x)"]


async def test_cellmate_mcp_without_a_token_says_how_to_get_one(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "mcp",
        "--url",
        "http://127.0.0.1:9/mcp",
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(WORKTREE)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert out == b""
    assert "set CELLMATE_MCP_TOKEN to a token from /mcp token" in err.decode()


# ── cellmate doctor ─────────────────────────────────────────────────────────────────────


async def test_doctor_says_whether_mcp_is_off_free_served_or_taken(
    bot: Callable[..., Bot], tmp_path: Path
) -> None:
    off = await mcp_check(Settings(data_dir=tmp_path))
    assert [(f.name, f.ok, f.required) for f in off] == [("mcp", True, False)]
    assert "off (CELLMATE_MCP)" in off[0].detail

    chat = await started(bot())
    await chat.token()
    port = chat.endpoint.port
    served = await mcp_check(Settings(data_dir=tmp_path, mcp=True, mcp_port=port))
    assert served[0].detail == (
        f"a running bot serves http://127.0.0.1:{port}/mcp and asks for tokens"
    )
    assert all(f.ok for f in served)
    await chat.endpoint.stop()

    free = await mcp_check(Settings(data_dir=tmp_path, mcp=True, mcp_port=port))
    assert free[0].ok
    assert free[0].detail == f"port {port} is free; the bot serves http://127.0.0.1:{port}/mcp"

    async def say_hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
        await writer.drain()
        writer.close()

    other = await asyncio.start_server(say_hello, "127.0.0.1", 0)
    taken = other.sockets[0].getsockname()[1]
    try:
        found = await mcp_check(Settings(data_dir=tmp_path, mcp=True, mcp_port=taken))
    finally:
        other.close()
        await other.wait_closed()
    assert not found[0].ok
    assert found[0].detail == f"something else answers at 127.0.0.1:{taken}"
    assert found[0].fix == "set CELLMATE_MCP_PORT to a free port"


async def test_doctor_cannot_read_the_token_store(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the data folder should be")
    found = await mcp_check(Settings(data_dir=blocked, mcp=True, mcp_port=0))
    tokens = next(f for f in found if f.name == "mcp tokens")
    assert not tokens.ok
    assert tokens.fix == "check that CELLMATE_DATA_DIR is writable by the bot"


async def test_the_bot_stops_promptly_while_an_agent_stays_connected(
    bot: Callable[..., Bot],
) -> None:
    """An agent's client keeps its session open between calls; the bot's shutdown does not
    wait for it."""
    chat = await started(bot())
    token = await chat.token()
    with refused(""):
        async with agent(chat.endpoint.url, token) as session:
            await session.call_tool("run_code", {"code": "print(6*7)"})
            began = time.monotonic()
            await chat.endpoint.stop()
            assert time.monotonic() - began < 5
            await session.call_tool("run_code", {"code": "print(6*7)"})


async def test_the_endpoint_serves_with_the_bots_services_only_when_turned_on(
    bot: Callable[..., Bot], tmp_path: Path
) -> None:
    chat = bot()
    assert await chat.pipe("/mcp token") == ("The MCP endpoint is off here (CELLMATE_MCP=off).\n")
    settings = Settings(data_dir=tmp_path / "data", mcp=True, mcp_port=0)
    async with mcp_service(chat.conversations, settings) as desk:
        assert desk is not None
        assert chat.conversations.mcp is desk
        token = re.search(r"^(cm_\S+)$", await chat.pipe("/mcp token"), re.MULTILINE)
        assert token is not None
        async with agent(desk.url, token.group(1)) as session:
            result = await session.call_tool("run_code", {"code": "print(6*7)"})
        assert text(result).splitlines() == ["42", "[status: ok]"]
    assert chat.conversations.mcp is None
    assert (tmp_path / "data" / "mcp_tokens.sqlite3").exists()
    async with mcp_service(chat.conversations, Settings(data_dir=tmp_path)) as off:
        assert off is None
