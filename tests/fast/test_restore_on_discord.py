"""/restore on Discord, through the stand-in gateway and REST server and the real discord.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench.standins.discord_server import ALICE
from executor import Executor
from tests.fast.restore_fixtures import (
    RESTORED,
    end_sessions,
    fake_backend,
    workspace_settings,
    workspaces,
)
from tests.fast.test_discord_turns import sandbox_limits, start_bot
from tests.support.on_discord import Bot, interaction_reply

__all__ = ["fake_backend", "sandbox_limits", "start_bot", "workspace_settings", "workspaces"]


async def test_discord_restore_in_a_dm(
    start_bot: Callable[..., Awaitable[Bot]], fake_executor: Executor
) -> None:
    bot = await start_bot(use_model=False)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, "```py\nx = 41\n```")
    await bot.answer_in(dm)
    await end_sessions(fake_executor)
    saved = await bot.server.slash("files", channel_id=dm)
    assert await interaction_reply(bot, saved) == (
        "Saved workspace (it comes back with the next message here):\n`data.csv` (8 bytes)"
    )
    restored = await bot.server.slash("restore", channel_id=dm)
    assert await interaction_reply(bot, restored) == RESTORED
