"""Cellmate installed to a person's Discord account, on a real sandbox: `/run` in a server
the bot is not in draws a chart, and the answer (code, output, chart) comes through the
interaction only, never as a channel message. The real discord.py client against the
Discord stand-in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bench.standins.discord_server import ALICE, EPHEMERAL, FOREIGN_CHANNEL, Message
from bot.agent import Agent
from bot.conversations import Conversations
from executor import Executor
from tests.support.on_discord import has_button, running_bot

pytestmark = pytest.mark.docker

CHART = (
    "import matplotlib.pyplot as plt\n"
    "plt.plot([1, 3, 2])\n"
    "plt.title('from a user install')\n"
    "plt.show()\n"
    "print('drawn')\n"
)


async def test_run_in_a_server_the_bot_is_not_in_answers_with_its_chart(
    executor: Executor, make_agent: Callable[..., Agent], tmp_path: Path
) -> None:
    agent = make_agent(executor, None, tmp_path)
    async with running_bot(agent, Conversations(agent), user_install=True) as bot:
        bot.server.install_app(ALICE)
        interaction = await bot.server.slash("run", {"code": CHART}, channel_id=FOREIGN_CHANNEL)

        def answered() -> list[Message] | None:
            shown = bot.server.interaction_messages(interaction)
            done = any(has_button(m, "Re-run") for m in shown) and not bot.client.door.lines.busy
            return shown if done else None

        messages = await bot.server.wait_for(answered, 120)
        assert isinstance(messages, list)
        report = messages[0]
        assert "drawn" in report.content
        assert "plt.plot" in report.content
        assert not report.flags & EPHEMERAL
        charts = [a for m in messages for a in m.attachments if a.name.endswith(".png")]
        assert len(charts) == 1
        assert charts[0].content.startswith(b"\x89PNG")
        shown = [m.id for m in bot.server.channel_messages(FOREIGN_CHANNEL, by_bot=True)]
        assert shown == [m.id for m in messages]  # the interaction's messages, and no other
        assert not [
            p for _, p in bot.server.requests if p.startswith(f"/channels/{FOREIGN_CHANNEL}")
        ]
