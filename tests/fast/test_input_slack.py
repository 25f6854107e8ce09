"""The code's input() and getpass() on Slack, as people see them: the prompt in the thread
with Answer for the person whose turn it is (a modal opened with views.open), and what became
of it; the real slack_bolt app against the Slack test server (Socket Mode and HTTP mode) and
the scripted model, on the fake sandbox."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from bench.standins.openai_server import ScriptedModel, runs, says
from bench.standins.slack_server import (
    ALICE,
    BOB,
    C_GENERAL,
    Message,
)
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.input_prompts import NOT_WAITING, NOT_YOURS
from bot.platforms.on_slack.prompts import ANSWER
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend
from tests.support.on_slack import Bot, button, running_bot
from tests.support.prompts import ASK_HIDDEN, ASK_NAME, ASKING, HIDDEN_ANSWER, assert_kept_nowhere


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(ASKING)


@pytest.fixture(params=["socket", "http"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def start_bot(
    mode: str,
    model: ScriptedModel,
    fake_executor: Executor,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Awaitable[Bot]]]:
    async with contextlib.AsyncExitStack() as running:

        async def start(input_timeout_s: float = 60) -> Bot:
            agent = make_agent(fake_executor, model, tmp_path, timeout=5)
            conversations = Conversations(agent, input_timeout_s=input_timeout_s)
            return await running.enter_async_context(running_bot(mode, conversations))

        yield start


async def _ask(bot: Bot, text: str) -> str:
    message, _ = await bot.server.post(C_GENERAL, text, mention_bot=True)
    return message.ts


async def _prompt(bot: Bot, root: str) -> Message:
    found = await bot.server.wait_for(
        lambda: next((m for m in bot.thread(C_GENERAL, root) if button(m, ANSWER)), None)
    )
    assert isinstance(found, Message)
    return found


async def _outcome(bot: Bot, root: str, text: str) -> Message:
    found = await bot.server.wait_for(
        lambda: next(
            (m for m in bot.thread(C_GENERAL, root) if text in m.text and not button(m, ANSWER)),
            None,
        )
    )
    assert isinstance(found, Message)
    assert not button(found, ANSWER)
    return found


def _told(bot: Bot) -> list[str]:
    return [str(r.get("text")) for r in bot.server.responses]


async def test_input_is_asked_of_the_person_whose_turn_it_is_and_reaches_the_code(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot()
    model.script(runs(ASK_NAME), says("Hello, Ada."))
    root = await _ask(bot, "ask me my name")
    prompt = await _prompt(bot, root)
    assert f"The code asks <@{ALICE}> for input" in prompt.text
    assert "Name:" in prompt.text
    await bot.server.click(prompt, ANSWER, user=BOB)
    await bot.server.wait_for(lambda: NOT_YOURS in _told(bot))
    assert bot.server.views == []
    await bot.server.click(prompt, ANSWER)
    opened = await bot.server.wait_for(lambda: bot.server.views[-1] if bot.server.views else None)
    assert isinstance(opened, dict)
    assert opened["view"]["blocks"][0]["label"]["text"] == "Name"
    submitted = await bot.server.submit_view(opened, {"answer": "Ada"})
    assert submitted.ack is None or "errors" not in submitted.ack
    answered = await _outcome(bot, root, f"<@{ALICE}> answered:")
    assert "Ada" in answered.text
    messages = await bot.answered(C_GENERAL, root)
    assert any("Ada" in m.text and "Code" in m.text for m in messages)
    assert messages[-1].text.endswith("Hello, Ada.")
    assert "the user answered 'Ada'" in json.dumps(model.requests[-1]["messages"])
    late = await bot.server.submit_view(opened, {"answer": "Bea"})  # the modal, once more
    assert late.ack == {"response_action": "errors", "errors": {"answer": NOT_WAITING}}


async def test_a_getpass_answer_is_shown_nowhere(
    start_bot: Callable[..., Awaitable[Bot]],
    model: ScriptedModel,
    fake_backend: FakeBackend,
    debug_logs: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    bot = await start_bot()
    model.script(runs(ASK_HIDDEN), says("Logged in."))
    root = await _ask(bot, "log me in")
    prompt = await _prompt(bot, root)
    assert "for a password (getpass)" in prompt.text
    await bot.server.click(prompt, ANSWER)
    opened = await bot.server.wait_for(lambda: bot.server.views[-1] if bot.server.views else None)
    assert isinstance(opened, dict)
    await bot.server.submit_view(opened, {"answer": HIDDEN_ANSWER})
    await _outcome(bot, root, f"<@{ALICE}> answered: ••••")
    await bot.answered(C_GENERAL, root)
    (sandbox,) = fake_backend.live
    assert sandbox.secrets == {HIDDEN_ANSWER}
    await assert_kept_nowhere(
        HIDDEN_ANSWER,
        shown=[json.dumps(call) for call in bot.server.calls],  # everything the bot sent
        model_requests=model.requests,
        logs=debug_logs.text,
        root=tmp_path,
    )


async def test_no_answer_in_time_gives_the_code_eof_and_one_answer(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot(input_timeout_s=0.3)
    model.script(runs(ASK_NAME), says("No name, then."))
    root = await _ask(bot, "ask me my name")
    await _outcome(bot, root, "Nobody answered in time")
    messages = await bot.answered(C_GENERAL, root)
    assert any("EOFError" in m.text for m in messages)
    assert sum("No name, then." in m.text for m in messages) == 1
