"""A coding agent in a Discord thread, as people see it: Alice types `/mcp token` in her thread
(only she sees the token), her agent's run is posted in the thread under "Run by Alice's
agent" with its output, and Bob, who never wrote there, gets no token for it. The real
discord.py client against the Discord stand-in, the SDK's own MCP client on the bot's
endpoint, on the fake sandbox (no Docker)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bench.standins.discord_server import ALICE, BOB, CHANNEL_GENERAL, EPHEMERAL
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.mcp_tokens import McpDesk, TokenStore
from bot.database import Databases
from bot.errors import NOT_YOURS
from bot.mcp.bridge import connect
from bot.mcp.server import McpEndpoint
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.support.on_discord import Bot, interaction_reply, running_bot


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(
        {"print(6*7)": FakeRun(outputs=[stdout("42\n")]), "x = 1": FakeRun(outputs=[])}
    )


@pytest.fixture
async def bot(
    fake_executor: Executor, make_agent: Callable[..., Agent], tmp_path: Path
) -> AsyncIterator[tuple[Bot, McpEndpoint]]:
    agent = make_agent(fake_executor, None, tmp_path, timeout=5)
    conversations = Conversations(agent)
    tokens = TokenStore(Databases.sqlite(tmp_path))
    endpoint = McpEndpoint(conversations, tokens, "127.0.0.1", 0)
    await endpoint.start()
    conversations.mcp = McpDesk(tokens, endpoint.url)
    try:
        async with running_bot(agent, conversations) as running:
            yield running, endpoint
    finally:
        await endpoint.stop()
        tokens.close()


async def _mcp(bot: Bot, what: str, channel: int, user: int = ALICE) -> str:
    done = await bot.server.slash("mcp", {"what": what}, channel_id=channel, user=user)
    shown = await interaction_reply(bot, done)
    (answer, *_) = [c for c in bot.server.callbacks if c["interaction_id"] == done.id]
    assert answer["data"]["flags"] & EPHEMERAL  # only the person who asked sees it
    return shown


async def test_alices_agent_runs_in_her_thread_and_bob_gets_no_token_there(
    bot: tuple[Bot, McpEndpoint], fake_backend: FakeBackend
) -> None:
    running, endpoint = bot
    await running.server.post_message(
        CHANNEL_GENERAL, "```python\nx = 1\n```", mention_bot=True, author=ALICE
    )
    thread_id = await running.server.wait_for(lambda: next(iter(running.server.threads), None))
    assert isinstance(thread_id, int)
    await running.answer_in(thread_id)

    shown = await _mcp(running, "token", thread_id)
    found = re.search(r"^(cm_\S+)$", shown, re.MULTILINE)
    assert found is not None, shown
    assert f"Endpoint: {endpoint.url}" in shown
    assert await _mcp(running, "token", thread_id, user=BOB) == NOT_YOURS

    async with connect(endpoint.url, found.group(1)) as agent:
        result = await agent.call_tool("run_code", {"code": "print(6*7)"})
    assert not result.is_error
    messages = await running.answer_in(thread_id, count=2)
    texts = [m.content for m in messages]
    heading = next(i for i, t in enumerate(texts) if t == "🤖 Run by Alice's agent:")
    assert any("42" in t for t in texts[heading + 1 :])
    assert all(m.mentions == [] for m in messages[heading:])  # nobody is pinged
    assert [code.strip() for code in fake_backend.runs] == ["x = 1", "print(6*7)"]
