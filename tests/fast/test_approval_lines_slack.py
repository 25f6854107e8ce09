"""What an approver sees on Slack is what runs (see test_approval_lines for the class): the
card's code block, unescaped, is the code the sandbox gets."""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable

import pytest

from bench.standins.openai_server import ScriptedModel, runs, says
from bot.platforms.on_slack.approval import RUN
from executor.fake_backend import FakeBackend
from tests.fast import test_approval_slack as on_slack
from tests.fast.test_approval_lines import ON_CARDS, _attack, _code_in
from tests.fast.test_approval_slack import mode, sandbox_limits, start_bot
from tests.support.on_slack import Bot

__all__ = ["mode", "sandbox_limits", "start_bot"]


@pytest.mark.parametrize("separator", ON_CARDS.values(), ids=ON_CARDS.keys())
async def test_the_slack_card_shows_what_runs(
    start_bot: Callable[..., Awaitable[Bot]],
    model: ScriptedModel,
    fake_backend: FakeBackend,
    separator: str,
) -> None:
    bot = await start_bot()
    assert "is now approve" in await on_slack._policy(bot, "approve")
    model.script(runs(_attack(separator)), says("Done."))
    root = await on_slack._ask(bot)
    asking = await on_slack._approval(bot, root)
    shown = html.unescape(_code_in(asking.text))
    assert fake_backend.runs == []
    await bot.server.click(asking, RUN)
    await on_slack._answer(bot, root, "Done.")
    assert fake_backend.runs == [shown]
    assert shown.splitlines() == shown.split("\n")
