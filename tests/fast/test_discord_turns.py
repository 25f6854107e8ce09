"""What a Discord user sees, turn by turn: the real discord.py client against the Discord test
server and the scripted model, on the fake sandbox (no Docker)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import discord
import pytest
import yarl

from bench.standins.discord_server import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL_GENERAL,
    OWNER,
    TOKEN,
    DiscordServer,
    Interaction,
    Message,
)
from bench.standins.openai_server import Reply, ScriptedModel, fails, runs, says
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.quotas import Quotas, QuotaSettings
from bot.database import Databases
from bot.errors import NOT_HERE, NOT_YOURS
from bot.platforms.on_discord import build_client, run_discord
from bot.platforms.on_discord.render import FENCE_TAGS
from bot.settings import DiscordSettings
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, image, stdout
from tests.support.on_discord import Bot, button_id, has_button, interaction_reply

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
SALES = b"month,sales\n1,10\n2,30\n3,20\n"
CHART = "df = pd.read_csv('/mnt/data/sales.csv')\ndf.plot()"
HANG = "wait_forever()"
QUEUED = "⏳ Queued: your previous request is still running."


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(
        {
            "print(6 * 7)": FakeRun(outputs=[stdout("42\n")]),
            "print('once', 1)": FakeRun(outputs=[stdout("once 1\n")]),
            CHART: FakeRun(outputs=[stdout("plotted\n"), image(PNG)]),
            HANG: FakeRun(outputs=[stdout("waiting\n")], hang=True),
            "keep()": FakeRun(outputs=[stdout("kept\n")], files={"notes.txt": b"hi"}),
            "crash()": FakeRun(outputs=[stdout("going down\n")], kernel_dies=-9),
        }
    )


@pytest.fixture
async def start_bot(
    model: ScriptedModel,
    fake_executor: Executor,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Awaitable[Bot]]]:
    started: list[tuple[DiscordServer, Any, asyncio.Task[None]]] = []
    base, gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY

    async def start(use_model: bool = True, **settings: Any) -> Bot:
        server = DiscordServer()
        await server.start()
        agent = make_agent(fake_executor, model if use_model else None, tmp_path, timeout=5)
        chosen = DiscordSettings(token=TOKEN, api_url=server.api_url, cooldown_s=0)
        client = build_client(Conversations(agent), dataclasses.replace(chosen, **settings))
        # discord.py waits this long after the last GUILD_CREATE before READY; the test
        # server sends its one guild at once.
        client._connection.guild_ready_timeout = 0.05
        task = asyncio.create_task(run_discord(client))
        started.append((server, client, task))
        await server.wait_ready()
        await asyncio.wait_for(client.connected.wait(), 10)
        return Bot(server, client, agent)

    yield start
    for server, client, task in started:
        await client.close()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 10)
        await server.close()
    discord.http.Route.BASE = base
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(str(gateway))


def _answers(messages: list[Message]) -> list[Message]:
    """The turn's answers: the messages that are not its progress message."""
    return [m for m in messages if not m.content.startswith(("⏳", "**Code**"))]


async def _thread(bot: Bot, text: str, **extra: Any) -> int:
    """Alice mentions the bot in #general; the id of the thread it answers in."""
    await bot.server.post_message(CHANNEL_GENERAL, text, mention_bot=True, **extra)
    thread_id = await bot.server.wait_for(lambda: next(iter(bot.server.threads), None))
    assert isinstance(thread_id, int)
    return thread_id


async def _running(bot: Bot, channel: int) -> Message:
    """The progress message of the hanging run in `channel`, with its Stop button."""
    found = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in bot.bot_messages(channel)
                if has_button(m, "Stop") and "waiting" in m.content
            ),
            None,
        )
    )
    assert isinstance(found, Message)
    return found


async def _result(bot: Bot, interaction: Interaction, text: str) -> Message:
    """The finished /run result that shows `text`, with its Re-run button."""
    found = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in bot.server.interaction_messages(interaction)
                if text in m.content and has_button(m, "Re-run")
            ),
            None,
        )
    )
    assert isinstance(found, Message)
    await bot.server.wait_for(lambda: not bot.client.door.lines.busy)
    return found


# ── turns ──────────────────────────────────────────────────────────────────────────────────


async def test_a_mention_with_a_csv_runs_the_models_code_and_answers_once_with_the_chart(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot()
    model.script(runs(CHART), says("Sales peaked in month 2."))
    thread_id = await _thread(bot, "plot the sales", attachments=[("sales.csv", SALES)])
    messages = await bot.answer_in(thread_id)
    progress, answers = messages[0], _answers(messages)
    assert "read_csv('/mnt/data/sales.csv')" in progress.content
    assert "plotted" in progress.content
    assert "✅ ok" in progress.content
    assert not has_button(progress, "Stop")
    assert [a.content for a in answers] == ["Sales peaked in month 2."]
    assert [a.content for a in answers[0].attachments if a.name.endswith(".png")] == [PNG]
    assert bot.server.threads[thread_id]["name"] == "plot the sales"
    assert bot.bot_messages(CHANNEL_GENERAL) == []
    # The CSV reached the sandbox and the model was told about it.
    (sandbox,) = fake_backend.live
    assert sandbox.files == {"sales.csv": SALES}
    assert "sales.csv" in str(model.requests[0]["messages"][-1]["content"])


async def test_a_fenced_code_block_in_a_dm_runs_without_a_model(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, "```py\nprint(6 * 7)\n```")
    messages = await bot.answer_in(dm)
    assert "42" in messages[0].content
    assert "✅ ok" in messages[0].content
    assert len(messages) == 1  # the run report is the whole answer
    assert [code.strip() for code in fake_backend.runs] == ["print(6 * 7)"]
    rerun = await bot.server.click(messages[0], button_id(messages[0], "Re-run"))
    again = await _result(bot, rerun, "42")
    assert again.id != messages[0].id
    assert [code.strip() for code in fake_backend.runs] == ["print(6 * 7)"] * 2
    assert fake_backend.started == 1  # in the DM's own session


async def test_plain_text_without_a_model_says_how_to_run_code(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, "hello there")
    messages = await bot.answer_in(dm)
    assert len(messages) == 1
    assert messages[0].content.startswith("No model is configured")
    assert fake_backend.runs == []


async def test_run_shows_the_output_and_re_run_runs_it_again(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False)
    ran = await bot.server.slash("run", {"code": "print(6 * 7)"})
    result = await _result(bot, ran, "42")
    assert "print(6 * 7)" in result.content
    rerun = await bot.server.click(result, button_id(result, "Re-run"))
    again = await _result(bot, rerun, "42")
    assert again.id != result.id
    assert [code.strip() for code in fake_backend.runs] == ["print(6 * 7)", "print(6 * 7)"]


@pytest.mark.parametrize(
    ("options", "language", "code"),
    [
        ({"code": "cat(6 * 7)", "language": "r"}, "r", "cat(6 * 7)"),
        ({"code": "```ts\nconsole.log(6 * 7)\n```"}, "typescript", "console.log(6 * 7)"),
        ({"code": "echo $((6 * 7))", "language": "bash"}, "bash", "echo $((6 * 7))"),
    ],
)
async def test_run_takes_its_language_from_the_option_or_the_fence(
    start_bot: Callable[..., Awaitable[Bot]],
    fake_backend: FakeBackend,
    options: dict[str, str],
    language: str,
    code: str,
) -> None:
    fake_backend.script = {code: FakeRun(outputs=[stdout("42\n")])}
    bot = await start_bot(use_model=False)
    ran = await bot.server.slash("run", options)
    result = await _result(bot, ran, "42")
    assert f"```{FENCE_TAGS[language]}" in result.content
    rerun = await bot.server.click(result, button_id(result, "Re-run"))
    await _result(bot, rerun, "42")
    # Re-run runs it in its language again.
    assert [(run.language, [c.strip() for c in run.cells]) for run in fake_backend.asked] == [
        (language, [code])
    ] * 2


async def test_stop_ends_a_hanging_run_and_the_turn_answers_once(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, f"```py\n{HANG}\n```")
    running = await _running(bot, dm)
    await bot.server.click(running, button_id(running, "Stop"))
    messages = await bot.answer_in(dm)
    assert "⏹️ killed" in messages[0].content
    assert "stopped on request" in messages[0].content
    assert len(messages) == 1  # the run report is the whole answer
    await bot.server.post_message(dm, "```py\nprint(6 * 7)\n```")
    messages = await bot.answer_in(dm, count=2)
    assert "42" in messages[-1].content


async def test_stop_ends_a_hanging_run_command_and_leaves_re_run(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    ran = await bot.server.slash("run", {"code": HANG})
    running = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in bot.server.interaction_messages(ran)
                if has_button(m, "Stop") and "waiting" in m.content
            ),
            None,
        )
    )
    assert isinstance(running, Message)
    await bot.server.click(running, button_id(running, "Stop"))
    stopped = await _result(bot, ran, "⏹️ killed")
    assert not has_button(stopped, "Stop")
    assert len(bot.server.interaction_messages(ran)) == 1  # the run report is its answer


async def test_stop_while_the_model_thinks_ends_the_turn_with_one_answer(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot()
    model.script(Reply(content="too late", delay_s=1.5))
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, "hi")
    await bot.server.wait_for(lambda: model.requests)
    (working,) = bot.bot_messages(dm)
    await bot.server.click(working, button_id(working, "Stop"))
    messages = await bot.answer_in(dm)
    assert [m.content for m in messages] == ["❌ Stopped."]


async def test_files_export_and_reset_in_a_dm(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, "```py\nkeep()\n```")
    await bot.answer_in(dm)
    listed = await bot.server.slash("files", channel_id=dm)
    assert await interaction_reply(bot, listed) == "`notes.txt` (2 bytes)"
    export = await bot.server.slash("export", channel_id=dm)
    exported = await bot.server.wait_for(
        lambda: next(
            (a for m in bot.server.interaction_messages(export) for a in m.attachments), None
        )
    )
    assert exported.name == "session.ipynb"  # type: ignore[attr-defined]
    assert b"keep()" in exported.content  # type: ignore[attr-defined]
    reset = await bot.server.slash("reset", channel_id=dm)
    assert "Forgot this conversation" in await interaction_reply(bot, reset)
    await bot.server.wait_for(lambda: not fake_backend.live)
    empty = await bot.server.slash("files", channel_id=dm)
    assert await interaction_reply(bot, empty) == "No files in /mnt/data yet."


# ── who may do what ────────────────────────────────────────────────────────────────────────


async def test_a_user_outside_the_allowlist_is_refused_at_every_entry_point(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False, users=(str(ALICE),))
    ran = await bot.server.slash("run", {"code": "print(6 * 7)"})
    result = await _result(bot, ran, "42")
    thread_id = await _thread(bot, f"```py\n{HANG}\n```")
    running = await _running(bot, thread_id)

    await bot.server.post_message(
        thread_id, "```py\nprint('carol')\n```", mention_bot=True, author=CAROL
    )
    carol_dm = await bot.server.dm_channel(CAROL)
    await bot.server.post_message(carol_dm, "```py\nprint('carol')\n```", author=CAROL)
    refused = [
        await bot.server.slash("run", {"code": "print('carol')"}, user=CAROL),
        await bot.server.slash("run", user=CAROL),
        await bot.server.slash("files", channel_id=thread_id, user=CAROL),
        await bot.server.slash("export", channel_id=thread_id, user=CAROL),
        await bot.server.slash("reset", channel_id=thread_id, user=CAROL),
        await bot.server.click(running, button_id(running, "Stop"), user=CAROL),
        await bot.server.click(result, button_id(result, "Re-run"), user=CAROL),
    ]
    for interaction in refused:
        assert await interaction_reply(bot, interaction) == NOT_HERE
    assert bot.client.conversations.turns  # Alice's run goes on
    assert bot.bot_messages(carol_dm) == []
    assert bot.bot_messages(thread_id) == [running]  # Carol's mention was ignored silently
    assert not any("carol" in code for code in fake_backend.runs)
    await bot.server.click(running, button_id(running, "Stop"))
    await bot.answer_in(thread_id)


async def test_conversation_commands_are_refused_to_others_and_allowed_to_a_moderator(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    thread_id = await _thread(bot, "```py\nkeep()\n```")
    await bot.answer_in(thread_id)
    ran = await bot.server.slash("run", {"code": "print(6 * 7)"})
    result = await _result(bot, ran, "42")
    await bot.server.post_message(thread_id, f"```py\n{HANG}\n```", mention_bot=True)
    running = await _running(bot, thread_id)

    for name in ("files", "export", "reset"):
        denied = await bot.server.slash(name, channel_id=thread_id, user=BOB)
        assert await interaction_reply(bot, denied) == NOT_YOURS, name
    stop = await bot.server.click(running, button_id(running, "Stop"), user=BOB)
    assert await interaction_reply(bot, stop) == NOT_YOURS
    rerun = await bot.server.click(result, button_id(result, "Re-run"), user=BOB)
    assert await interaction_reply(bot, rerun) == NOT_YOURS
    assert bot.client.conversations.turns

    await bot.server.click(running, button_id(running, "Stop"), user=OWNER)
    messages = await bot.answer_in(thread_id, count=2)
    assert "⏹️ killed" in messages[-1].content
    listed = await bot.server.slash("files", channel_id=thread_id, user=OWNER)
    assert await interaction_reply(bot, listed) == "`notes.txt` (2 bytes)"
    rerun = await bot.server.click(result, button_id(result, "Re-run"), user=OWNER)
    await _result(bot, rerun, "42")


async def test_a_second_message_while_the_first_turn_runs_waits_its_turn(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    """The person's second message queues, visibly, and runs once the first has ended."""
    bot = await start_bot(use_model=False)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, f"```py\n{HANG}\n```")
    running = await _running(bot, dm)
    await bot.server.post_message(dm, "```py\nprint(6 * 7)\n```")
    queued = await bot.server.wait_for(
        lambda: next((m for m in bot.bot_messages(dm) if m.content == QUEUED), None)
    )
    assert isinstance(queued, Message)
    assert has_button(queued, "Stop")
    await bot.server.click(running, button_id(running, "Stop"))
    messages = await bot.answer_in(dm, count=2)
    assert [code.strip() for code in fake_backend.runs] == [HANG, "print(6 * 7)"]
    assert any("42" in m.content for m in messages)
    assert not any(m.content == QUEUED for m in messages)  # the queued note became the run


async def test_quotas_refuse_with_when_to_try_again_and_usage_is_for_admins(
    start_bot: Callable[..., Awaitable[Bot]], tmp_path: Path
) -> None:
    bot = await start_bot(use_model=False)
    limits = QuotaSettings(user_runs_per_hour=1)
    bot.client.conversations.quotas = Quotas(Databases.sqlite(tmp_path), limits)
    first = await bot.server.slash("run", {"code": "print('once', 1)"})
    await bot.server.wait_for(
        lambda: (
            any("once 1" in m.content for m in bot.server.interaction_messages(first))
            and not bot.client.door.lines.busy
        )
    )
    second = await bot.server.slash("run", {"code": "print('twice')"})
    refusal = await bot.server.wait_for(
        lambda: next((c for c in bot.server.callbacks if c["interaction_id"] == second.id), None)
    )
    assert isinstance(refusal, dict)
    assert "limit of 1 runs per hour. Try again in 60 min" in refusal["data"]["content"]

    denied = await bot.server.slash("usage")
    answer = await bot.server.wait_for(
        lambda: next((c for c in bot.server.callbacks if c["interaction_id"] == denied.id), None)
    )
    assert "Only admins" in answer["data"]["content"]  # type: ignore[index]
    shown = await bot.server.slash("usage", user=OWNER)
    usage = await bot.server.wait_for(
        lambda: next((c for c in bot.server.callbacks if c["interaction_id"] == shown.id), None)
    )
    assert f"1. {ALICE}: 1 runs" in usage["data"]["content"]  # type: ignore[index]


# ── errors ─────────────────────────────────────────────────────────────────────────────────


async def test_a_model_that_is_down_gets_one_clear_answer(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot()
    model.endless = fails(500)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, "hi")
    messages = await bot.answer_in(dm)
    assert [m.content for m in messages] == [
        "❌ The model is not available right now (HTTP 500). Try again later."
    ]


async def test_a_sandbox_that_cannot_start_gets_one_clear_answer(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False)
    fake_backend.unavailable = "the engine is down"
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, "```py\nprint(6 * 7)\n```")
    messages = await bot.answer_in(dm)
    answers = _answers(messages)
    assert len(answers) == 1
    assert answers[0].content.startswith("❌ The sandbox could not run the code")
    assert "the engine is down" in answers[0].content


async def test_a_kernel_death_is_reported_in_the_one_answer(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, "```py\ncrash()\n```")
    messages = await bot.answer_in(dm)
    assert "going down" in messages[0].content
    assert "killed" in messages[0].content
    assert len(messages) == 1  # the run report is the whole answer
