"""The code's input() and getpass() on Discord, as people see them: the prompt in the
thread with Answer for the person whose turn it is, a modal for the answer, and what became
of it; the real discord.py client against the Discord test server and the scripted model,
on the fake sandbox (no Docker)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from bench.standins.discord_server import (
    ALICE,
    BOB,
    CHANNEL_GENERAL,
    Message,
)
from bench.standins.openai_server import ScriptedModel, runs, says
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.input_prompts import NOT_YOURS
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend
from tests.support.on_discord import (
    Bot,
    button_id,
    has_button,
    interaction_reply,
    running_bot,
    text_input_id,
)
from tests.support.prompts import ASK_HIDDEN, ASK_NAME, ASKING, HIDDEN_ANSWER, assert_kept_nowhere


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(ASKING)


@pytest.fixture
async def start_bot(
    model: ScriptedModel,
    fake_executor: Executor,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Awaitable[Bot]]]:
    async with contextlib.AsyncExitStack() as running:

        async def start(input_timeout_s: float = 60) -> Bot:
            agent = make_agent(fake_executor, model, tmp_path, timeout=5)
            conversations = Conversations(agent, input_timeout_s=input_timeout_s)
            return await running.enter_async_context(running_bot(agent, conversations))

        yield start


async def _ask(bot: Bot, text: str) -> int:
    await bot.server.post_message(CHANNEL_GENERAL, text, mention_bot=True)
    thread_id = await bot.server.wait_for(lambda: next(iter(bot.server.threads), None))
    assert isinstance(thread_id, int)
    return thread_id


async def _prompt(bot: Bot, thread_id: int) -> Message:
    found = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in bot.bot_messages(thread_id)
                if "⌨️" in m.content and has_button(m, "Answer")
            ),
            None,
        )
    )
    assert isinstance(found, Message)
    return found


async def _answer_with(bot: Bot, prompt: Message, thread_id: int, text: str) -> str:
    """Alice presses Answer and submits `text`; the modal's label."""
    opened = await bot.server.click(prompt, button_id(prompt, "Answer"), user=ALICE)
    modal = await bot.server.wait_for(
        lambda: next(
            (
                c
                for c in bot.server.callbacks
                if c["interaction_id"] == opened.id and c["type"] == 9
            ),
            None,
        )
    )
    assert isinstance(modal, dict)
    field = text_input_id(modal["data"])
    await bot.server.submit_modal(modal["data"], {field: text}, channel_id=thread_id)
    return json.dumps(modal["data"])


async def _edited(bot: Bot, message: Message, text: str) -> Message:
    found = await bot.server.wait_for(
        lambda: m if text in (m := bot.server.messages[message.id]).content else None
    )
    assert isinstance(found, Message)
    assert found.components == []
    return found


async def test_input_is_asked_of_the_person_whose_turn_it_is_and_reaches_the_code(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot()
    model.script(runs(ASK_NAME), says("Hello, Ada."))
    thread_id = await _ask(bot, "ask me my name")
    prompt = await _prompt(bot, thread_id)
    assert f"The code asks <@{ALICE}> for input" in prompt.content
    assert "Name:" in prompt.content
    answer_id = button_id(prompt, "Answer")
    refused = await bot.server.click(prompt, answer_id, user=BOB)
    assert await interaction_reply(bot, refused) == NOT_YOURS
    label = await _answer_with(bot, prompt, thread_id, "Ada")
    assert '"label": "Name"' in label
    answered = await _edited(bot, prompt, f"<@{ALICE}> answered:")
    assert "Ada" in answered.content
    messages = await bot.answer_in(thread_id)
    assert any(
        "Ada" in m.content and "Code" in m.content for m in messages
    )  # the code printed the answer
    assert messages[-1].content.endswith("Hello, Ada.")
    told = json.dumps(model.requests[-1]["messages"])
    assert "the user answered 'Ada'" in told


async def test_a_getpass_answer_is_shown_nowhere(
    start_bot: Callable[..., Awaitable[Bot]],
    model: ScriptedModel,
    fake_backend: FakeBackend,
    debug_logs: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    bot = await start_bot()
    model.script(runs(ASK_HIDDEN), says("Logged in."))
    thread_id = await _ask(bot, "log me in")
    prompt = await _prompt(bot, thread_id)
    assert "for a password (getpass)" in prompt.content
    assert "The answer is hidden" in prompt.content
    await _answer_with(bot, prompt, thread_id, HIDDEN_ANSWER)
    await _edited(bot, prompt, f"<@{ALICE}> answered: ••••")
    await bot.answer_in(thread_id)
    (sandbox,) = fake_backend.live
    assert sandbox.secrets == {HIDDEN_ANSWER}
    await assert_kept_nowhere(
        HIDDEN_ANSWER,
        shown=[m.content for m in bot.server.messages.values()],
        model_requests=model.requests,
        logs=debug_logs.text,
        root=tmp_path,
    )


async def test_no_answer_in_time_gives_the_code_eof_and_one_answer(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot(input_timeout_s=0.3)
    model.script(runs(ASK_NAME), says("No name, then."))
    thread_id = await _ask(bot, "ask me my name")
    prompt = await _prompt(bot, thread_id)
    await _edited(bot, prompt, "Nobody answered in time")
    messages = await bot.answer_in(thread_id)
    assert any("EOFError" in m.content for m in messages)
    assert sum("No name, then." in m.content for m in messages) == 1
    told = json.dumps(model.requests[-1]["messages"])
    assert "nobody answered in time" in told
