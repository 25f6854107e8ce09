"""An idle session paused to a memory snapshot and resumed by the next message, on Discord
and Slack (through the stand-in servers and the real discord.py and slack_bolt): the answer
says the session was resumed, and what could not be pickled is still there."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from bench.standins.discord_server import ALICE
from bench.standins.slack_server import C_GENERAL
from executor import Executor
from executor.fake_backend import FakeBackend, FakeRun
from executor.workspace import WorkspaceSettings
from tests.fast.restore_fixtures import workspaces
from tests.fast.test_discord_turns import sandbox_limits
from tests.fast.test_discord_turns import start_bot as start_discord
from tests.fast.test_slack_turns import mode
from tests.fast.test_slack_turns import start_bot as start_slack
from tests.support.on_discord import Bot as DiscordBot
from tests.support.on_slack import Bot as SlackBot

__all__ = ["mode", "sandbox_limits", "start_discord", "start_slack", "workspaces"]

RESUMED = "Resumed your session from a moment ago: every variable is as you left it."


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(
        {"conn = connect()": FakeRun(unsaveable=["conn"]), "print(conn)": FakeRun(shows="conn")},
        pausable=True,
    )


@pytest.fixture
def workspace_settings() -> WorkspaceSettings:
    return WorkspaceSettings()


async def pause_idle(executor: Executor, backend: FakeBackend) -> None:
    """As an idle session's pause does: every session is paused to its snapshot."""
    for key in list(executor.sessions.active):
        assert await executor.session(key).pause() is None
    assert backend.paused


async def test_discord_says_a_paused_session_was_resumed(
    start_discord: Callable[..., Awaitable[DiscordBot]],
    fake_executor: Executor,
    fake_backend: FakeBackend,
) -> None:
    bot = await start_discord(use_model=False)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, "```py\nconn = connect()\n```")
    await bot.answer_in(dm)
    await pause_idle(fake_executor, fake_backend)
    await bot.server.post_message(dm, "```py\nprint(conn)\n```")
    said = "\n".join(m.content for m in await bot.answer_in(dm, count=2))
    assert RESUMED in said
    assert "<connection>" in said
    assert not fake_backend.paused


async def test_slack_says_a_paused_session_was_resumed(
    start_slack: Callable[..., Awaitable[SlackBot]],
    fake_executor: Executor,
    fake_backend: FakeBackend,
) -> None:
    bot = await start_slack(use_model=False)
    asked, _ = await bot.server.post(C_GENERAL, "```\nconn = connect()\n```", mention_bot=True)
    await bot.answered(C_GENERAL, asked.ts)
    await pause_idle(fake_executor, fake_backend)
    await bot.server.post(C_GENERAL, "```\nprint(conn)\n```", thread_ts=asked.ts)
    said = "\n".join(m.text for m in await bot.answered(C_GENERAL, asked.ts, count=2))
    assert RESUMED in said
    assert "&lt;connection&gt;" in said  # as Slack escapes it
    assert not fake_backend.paused
