"""A streamed answer on Slack: the progress message shows it as it is written, updated no
faster than the pacer allows, and becomes the one answer. slack_bolt against the Slack
test server (Socket Mode), the scripted model streaming slowly, the fake sandbox."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench.standins.openai_server import Reply, ScriptedModel
from bench.standins.slack_server import C_GENERAL
from tests.fast.test_slack_turns import fake_backend, mode, sandbox_limits, start_bot
from tests.support.on_slack import Bot

__all__ = ["fake_backend", "mode", "sandbox_limits", "start_bot"]

WORDS = [f"word{n}" for n in range(40)]
ANSWER = "Here is what I found: " + " ".join(WORDS) + "."
PIECES = 40


async def test_the_answer_is_shown_while_it_is_written_within_the_edit_rate(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot()
    # 40 fragments over about 3 s: the pacer (one update in 1.5 s) must not update for each.
    model.script(Reply(content=ANSWER, pieces=PIECES, piece_delay_s=0.075))
    asked, _ = await bot.server.post(C_GENERAL, "what did you find?", mention_bot=True)
    messages = await bot.answered(C_GENERAL, asked.ts)
    assert [m.text for m in messages] == [ANSWER]  # the progress message became the answer
    marker = "\n\n:writing_hand: Writing…"
    partial = [
        text for text in messages[0].edits if marker in text and text.split(marker)[0] != ANSWER
    ]
    assert partial, messages[0].edits
    assert all(ANSWER.startswith(text.split(marker)[0]) for text in partial)
    assert len(messages[0].edits) < PIECES // 2
