"""A coding agent in a Slack thread, as people see it: Alice types `/mcp token` in the channel
where she talks with the bot (only she sees the answer), and her agent's run is posted in
her latest conversation's thread under "Run by <her name>'s agent" with its output; without
a conversation there she is told to start one. The real slack_bolt app against the Slack
stand-in, the SDK's own MCP client on the bot's endpoint, on the fake sandbox (no Docker)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bench.standins.slack_server import ALICE, C_GENERAL
from bench.standins.slack_server.people import member_of
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.mcp_tokens import NO_CONVERSATION, McpDesk, TokenStore
from bot.database import Databases
from bot.mcp.bridge import connect
from bot.mcp.server import McpEndpoint
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.support.on_slack import Bot, running_bot


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
        async with running_bot("socket", conversations) as running:
            yield running, endpoint
    finally:
        await endpoint.stop()
        tokens.close()


async def _mcp(bot: Bot, text: str) -> str:
    """`/mcp text` by Alice in #general, and what the bot answered her (by response_url)."""
    server = bot.server
    before = len(server.responses)
    await server.slash("/mcp", text, user=ALICE, channel=C_GENERAL)
    await server.wait_for(lambda: len(server.responses) > before)
    answer = server.responses[before]
    assert answer.get("response_type") == "ephemeral", answer
    return str(answer["text"])


async def test_alices_agent_runs_in_her_latest_thread_in_the_channel(
    bot: tuple[Bot, McpEndpoint], fake_backend: FakeBackend
) -> None:
    running, endpoint = bot
    assert await _mcp(running, "token") == NO_CONVERSATION
    asked, _ = await running.server.post(
        C_GENERAL, "```python\nx = 1\n```", user=ALICE, mention_bot=True
    )
    await running.answered(C_GENERAL, asked.ts)

    shown = await _mcp(running, "token")
    found = re.search(r"^(cm_\S+)$", shown, re.MULTILINE)
    assert found is not None, shown
    async with connect(endpoint.url, found.group(1)) as agent:
        result = await agent.call_tool("run_code", {"code": "print(6*7)"})
    assert not result.is_error
    messages = await running.answered(C_GENERAL, asked.ts, count=2)
    texts = [m.text for m in messages]
    heading = texts.index(f"🤖 Run by {member_of(ALICE).name}'s agent:")
    assert any("42" in t for t in texts[heading + 1 :])
    assert [code.strip() for code in fake_backend.runs] == ["x = 1", "print(6*7)"]
    assert "1. slack:" in await _mcp(running, "")
    assert await _mcp(running, "revoke") == "Revoked 1 token."
