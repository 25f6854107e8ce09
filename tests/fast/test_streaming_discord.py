"""A streamed answer on Discord: the progress message shows it as it is written, edited no
faster than the pacer allows, and becomes the one answer. The real discord.py client
against the Discord test server, the scripted model streaming slowly, the fake sandbox."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench.standins.openai_server import Reply, ScriptedModel, runs
from tests.fast.test_discord_turns import _answers, _thread, fake_backend, sandbox_limits, start_bot
from tests.support.on_discord import Bot

__all__ = ["fake_backend", "sandbox_limits", "start_bot"]

WORDS = [f"word{n}" for n in range(40)]
ANSWER = "Here is what I found: " + " ".join(WORDS) + "."
PIECES = 40


async def test_the_answer_is_shown_while_it_is_written_within_the_edit_rate(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot()
    # 40 fragments over about 2 s: the pacer (one edit a second) must not edit for each.
    model.script(Reply(content=ANSWER, pieces=PIECES, piece_delay_s=0.05))
    thread_id = await _thread(bot, "what did you find?")
    messages = await bot.answer_in(thread_id)
    assert [m.content for m in messages] == [ANSWER]  # the progress message became the answer
    partial = [
        text
        for text in messages[0].edits
        if "✍️ Writing…" in text and text.split("\n\n✍️")[0] != ANSWER
    ]
    assert partial, messages[0].edits
    assert all(ANSWER.startswith(text.split("\n\n✍️")[0]) for text in partial)
    assert len(messages[0].edits) < PIECES // 2


async def test_after_code_the_answer_is_written_below_the_run(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot()
    model.script(runs("print(6 * 7)"), Reply(content=ANSWER, pieces=PIECES, piece_delay_s=0.05))
    thread_id = await _thread(bot, "compute and explain")
    messages = await bot.answer_in(thread_id)
    progress, answers = messages[0], _answers(messages)
    assert [a.content for a in answers] == [ANSWER]
    assert "✍️ Writing…" not in progress.content  # the finished run log, without the draft
    drafts = [text for text in progress.edits if "✍️ Writing…" in text]
    assert drafts
    assert all("print(6 * 7)" in text and "42" in text for text in drafts)
