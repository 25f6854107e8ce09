"""With automatic restore off, the next run says a workspace is saved, and /restore brings it
back, on Slack (through the stand-in server and the real slack_bolt) and the console."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.standins.slack_server import C_GENERAL
from bot.agent import Agent
from executor import Executor
from tests.fast.restore_fixtures import (
    RESTORED,
    SAVED,
    end_sessions,
    fake_backend,
    workspace_settings,
    workspaces,
)
from tests.fast.test_console_turns import Chat
from tests.fast.test_slack_turns import mode, sandbox_limits, start_bot
from tests.support.on_slack import Bot

__all__ = [
    "fake_backend",
    "mode",
    "sandbox_limits",
    "start_bot",
    "workspace_settings",
    "workspaces",
]


async def test_slack_restore_brings_the_workspace_back(
    start_bot: Callable[..., Awaitable[Bot]], fake_executor: Executor
) -> None:
    bot = await start_bot(use_model=False)
    asked, _ = await bot.server.post(C_GENERAL, "```\nx = 41\n```", mention_bot=True)
    await bot.answered(C_GENERAL, asked.ts)
    await end_sessions(fake_executor)
    await bot.server.post(C_GENERAL, "```\nprint(x)\n```", thread_ts=asked.ts)
    await bot.answered(C_GENERAL, asked.ts, count=2)
    said = "\n".join(m.text for m in bot.thread(C_GENERAL, asked.ts))
    assert SAVED in said
    assert "NameError" in said
    assert "without the earlier variables" not in said
    await bot.server.slash("/restore")
    await bot.server.wait_for(lambda: bool(bot.server.responses))
    assert bot.server.responses[-1]["text"] == RESTORED
    await bot.server.post(C_GENERAL, "```\nprint(x)\n```", thread_ts=asked.ts)
    await bot.server.wait_for(
        lambda: any("41" in m.text for m in bot.thread(C_GENERAL, asked.ts)[-3:])
    )


async def test_console_restore(
    fake_executor: Executor, make_agent: Callable[..., Agent], tmp_path: Path
) -> None:
    console = Chat(make_agent(fake_executor, None, tmp_path), tmp_path)
    assert "There is no saved workspace" in await console.pipe("/restore")
    await console.pipe("/run x = 41")
    await end_sessions(fake_executor)
    out = await console.pipe("/run print(x)")
    assert SAVED in out
    assert (await console.pipe("/restore")) == RESTORED + "\n"
    assert "41" in (await console.pipe("/run print(x)")).splitlines()
