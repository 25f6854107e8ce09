"""A streamed answer on Slack around code that waits for approval: the words before the code
end as their own message before the approval message, and the answer after the run streams.
slack_bolt against the Slack test server, the scripted model, the fake sandbox."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench.standins.openai_server import Reply, ScriptedModel
from bench.standins.slack_server import C_GENERAL
from bot.platforms.on_slack.approval import RUN
from executor.fake_backend import FakeBackend
from tests.fast.test_approval_slack import (
    ASKED,
    _answer,
    _approval,
    _ask,
    _decided,
    _policy,
    fake_backend,
    mode,
    sandbox_limits,
    start_bot,
)
from tests.support.on_slack import Bot

__all__ = ["fake_backend", "mode", "sandbox_limits", "start_bot"]


async def test_code_waiting_for_approval_ends_the_stream_and_the_answer_streams_after(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot()
    bot.server.streaming = True
    assert "is now approve" in await _policy(bot, "approve")
    model.script(
        Reply(content="I will compute it.", code=ASKED, pieces=3),
        Reply(content="It is **42**.", pieces=3),
    )
    root = await _ask(bot)
    asking = await _approval(bot, root)
    before = next(m for m in bot.thread(C_GENERAL, root) if m.text == "I will compute it.")
    assert bot.server.streams[(C_GENERAL, before.ts)] == "stopped"
    assert float(before.ts) < float(asking.ts)
    await bot.server.click(asking, RUN)
    await bot.server.wait_for(lambda: fake_backend.runs)
    messages = await _answer(bot, root, "It is **42**.")
    answer = next(m for m in messages if m.text == "It is **42**.")
    assert bot.server.streams[(C_GENERAL, answer.ts)] == "stopped"
    await _decided(bot, root, "Approved")
    assert [code.strip() for code in fake_backend.runs] == [ASKED]
