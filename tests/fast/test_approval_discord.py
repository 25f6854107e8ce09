"""Code approval on Discord, as people see it: /policy, then the model's code shown with Run,
Edit and Cancel in the thread; the real discord.py client against the Discord test server
and the scripted model, on the fake sandbox (no Docker)."""

from __future__ import annotations

import asyncio
import contextlib
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
from bench.standins.openai_server import ScriptedModel, runs, says
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.approval import ALREADY_DECIDED, OFF_NOTICE, OFF_REFUSAL
from bot.conversations.moderation import NOT_APPROVER, POLICY_FOR_ADMINS
from bot.conversations.policy import Policies, PolicySettings
from bot.database import Databases
from bot.errors import NOT_HERE
from bot.platforms.on_discord import build_client, run_discord
from bot.platforms.on_discord.approval import TOO_LONG_TO_EDIT
from bot.settings import DiscordSettings
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.support.on_discord import Bot, button_id, has_button, interaction_reply, text_input_id

ASKED = "print(6 * 7)"
EDITED = "print('once', 1)"


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(
        {
            ASKED: FakeRun(outputs=[stdout("42\n")]),
            EDITED: FakeRun(outputs=[stdout("once 1\n")]),
        }
    )


@pytest.fixture
async def start_bot(
    model: ScriptedModel,
    fake_executor: Executor,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Awaitable[Bot]]]:
    started: list[tuple[DiscordServer, Any, asyncio.Task[None], Policies]] = []
    base, gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY

    async def start(users: tuple[str, ...] = (), **policy: Any) -> Bot:
        server = DiscordServer()
        await server.start()
        agent = make_agent(fake_executor, model, tmp_path, timeout=5)
        policies = Policies(Databases.sqlite(tmp_path), PolicySettings(**policy))
        conversations = Conversations(agent, policies=policies)
        chosen = DiscordSettings(token=TOKEN, api_url=server.api_url, cooldown_s=0, users=users)
        client = build_client(conversations, chosen)
        client._connection.guild_ready_timeout = 0.05
        task = asyncio.create_task(run_discord(client))
        started.append((server, client, task, policies))
        await server.wait_ready()
        await asyncio.wait_for(client.connected.wait(), 10)
        return Bot(server, client, agent)

    yield start
    for server, client, task, policies in started:
        await client.close()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 10)
        policies.close()
        await server.close()
    discord.http.Route.BASE = base
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(str(gateway))


async def _set_policy(bot: Bot, mode: str, user: int = OWNER, **options: str) -> str:
    done = await bot.server.slash("policy", {"mode": mode, **options}, user=user)
    return await interaction_reply(bot, done)


async def _ask(bot: Bot, text: str = "what is 6 times 7?") -> int:
    """Alice mentions the bot in #general; the id of the thread it answers in."""
    await bot.server.post_message(CHANNEL_GENERAL, text, mention_bot=True)
    thread_id = await bot.server.wait_for(lambda: next(iter(bot.server.threads), None))
    assert isinstance(thread_id, int)
    return thread_id


def _approvals(bot: Bot, channel: int) -> list[Message]:
    return [m for m in bot.server.channel_messages(channel, by_bot=True) if "🔐" in m.content]


async def _approval(bot: Bot, channel: int) -> Message:
    """The approval message in `channel`, once it shows Run, Edit and Cancel."""
    found = await bot.server.wait_for(
        lambda: next((m for m in _approvals(bot, channel) if has_button(m, "Run")), None)
    )
    assert isinstance(found, Message)
    return found


async def _decided(bot: Bot, message: Message, outcome: str) -> Message:
    """The approval message once it says `outcome` (and has no buttons left)."""
    found = await bot.server.wait_for(
        lambda: (
            bot.server.messages[message.id]
            if outcome in bot.server.messages[message.id].content
            else None
        )
    )
    assert isinstance(found, Message)
    assert found.components == []
    return found


async def _answer(bot: Bot, channel: int, text: str) -> list[Message]:
    """The bot's messages in `channel` once the answer `text` is there and the bot is idle."""

    def done() -> list[Message] | None:
        messages = bot.server.channel_messages(channel, by_bot=True)
        idle = not bot.client.conversations.turns and not bot.client.door.lines.busy
        return messages if idle and any(text in m.content for m in messages) else None

    found = await bot.server.wait_for(done)
    assert isinstance(found, list)
    return found


def _tool_results(model: ScriptedModel) -> list[str]:
    """What the model was told of its code, in its last request."""
    return [str(m["content"]) for m in model.requests[-1]["messages"] if m["role"] == "tool"]


async def _click(bot: Bot, message: Message, label: str, user: int = ALICE) -> Interaction:
    return await bot.server.click(message, button_id(message, label), user=user)


# ── approve, edit, cancel, time out ──────────────────────────────────────────────────────────


async def test_approved_code_runs_after_run_and_others_are_refused(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(users=(str(ALICE), str(BOB), str(OWNER)))
    assert await _set_policy(bot, "approve", user=ALICE) == POLICY_FOR_ADMINS
    assert "is now approve" in await _set_policy(bot, "approve")
    model.script(runs(ASKED), says("It is 42."))
    thread_id = await _ask(bot)
    asking = await _approval(bot, thread_id)
    assert ASKED in asking.content
    assert f"<@{ALICE}> or a moderator" in asking.content
    assert fake_backend.runs == []  # nothing runs before a person says so
    await bot.server.wait_for(
        lambda: any(
            "🔐 Waiting for someone to Run, Edit or Cancel" in m.content and has_button(m, "Stop")
            for m in bot.server.channel_messages(thread_id, by_bot=True)
        )
    )

    denied = await _click(bot, asking, "Run", user=BOB)
    assert await interaction_reply(bot, denied) == NOT_APPROVER["requester"]
    outsider = await _click(bot, asking, "Run", user=CAROL)  # off the allowlist
    assert await interaction_reply(bot, outsider) == NOT_HERE
    assert fake_backend.runs == []
    await _click(bot, asking, "Run")
    await _decided(bot, asking, f"Approved by <@{ALICE}>")
    messages = await _answer(bot, thread_id, "It is 42.")
    assert [code.strip() for code in fake_backend.runs] == [ASKED]
    assert any("42" in m.content and "✅ ok" in m.content for m in messages)
    assert "42" in _tool_results(model)[0]


async def test_edited_code_runs_instead_and_the_model_is_told(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(default="approve")
    model.script(runs(ASKED), says("It printed once 1."))
    thread_id = await _ask(bot)
    asking = await _approval(bot, thread_id)
    opened = await _click(bot, asking, "Edit")
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
    assert ASKED in str(modal["data"])  # the editor starts from the model's code
    await bot.server.submit_modal(modal["data"], {field: EDITED}, channel_id=thread_id)
    await _decided(bot, asking, f"Edited by <@{ALICE}>")
    await _answer(bot, thread_id, "It printed once 1.")
    assert [code.strip() for code in fake_backend.runs] == [EDITED]
    (told,) = _tool_results(model)
    assert "edited your code" in told
    assert EDITED in told
    assert "once 1" in told


async def test_an_edit_submitted_after_someone_else_decided_is_refused(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(default="approve")
    model.script(runs(ASKED), says("Cancelled, so nothing ran."))
    thread_id = await _ask(bot)
    asking = await _approval(bot, thread_id)
    opened = await _click(bot, asking, "Edit")
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
    await _click(bot, asking, "Cancel", user=OWNER)
    await _decided(bot, asking, f"Cancelled by <@{OWNER}>")
    field = text_input_id(modal["data"])
    late = await bot.server.submit_modal(modal["data"], {field: EDITED}, channel_id=thread_id)
    assert await interaction_reply(bot, late) == ALREADY_DECIDED
    await _answer(bot, thread_id, "Cancelled, so nothing ran.")
    assert fake_backend.runs == []


async def test_cancel_ends_the_turn_with_one_answer_and_asks_nobody_again(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(default="approve")
    # The model tries twice; the second time nobody is asked again.
    model.script(runs(ASKED), runs(ASKED), says("Fine, I did not run it."))
    thread_id = await _ask(bot)
    asking = await _approval(bot, thread_id)
    await _click(bot, asking, "Cancel")
    await _decided(bot, asking, f"Cancelled by <@{ALICE}>")
    messages = await _answer(bot, thread_id, "Fine, I did not run it.")
    assert fake_backend.runs == []
    assert len(_approvals(bot, thread_id)) == 1
    assert sum("Fine, I did not run it." in m.content for m in messages) == 1
    told = _tool_results(model)
    assert len(told) == 2
    assert all("declined to run it" in text for text in told)


async def test_code_nobody_approves_times_out_and_the_turn_ends_politely(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(default="approve", timeout_s=0.5)
    model.script(runs(ASKED), says("Nobody approved, so I could not run it."))
    thread_id = await _ask(bot)
    asking = await _approval(bot, thread_id)
    await _decided(bot, asking, "Nobody approved it in time")
    await _answer(bot, thread_id, "Nobody approved, so I could not run it.")
    assert fake_backend.runs == []
    assert "Nobody approved your code in time" in _tool_results(model)[0]


async def test_with_moderator_approval_only_a_moderator_may_run_the_code(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(default="approve", approvers="moderators")
    model.script(runs(ASKED), says("It is 42."))
    thread_id = await _ask(bot)
    asking = await _approval(bot, thread_id)
    assert "A moderator can Run, Edit or Cancel" in asking.content
    denied = await _click(bot, asking, "Run")  # Alice asked, but may not approve
    assert await interaction_reply(bot, denied) == NOT_APPROVER["moderators"]
    edit = await _click(bot, asking, "Edit")
    assert await interaction_reply(bot, edit) == NOT_APPROVER["moderators"]
    assert fake_backend.runs == []
    await _click(bot, asking, "Run", user=OWNER)
    await _decided(bot, asking, f"Approved by <@{OWNER}>")
    await _answer(bot, thread_id, "It is 42.")
    assert [code.strip() for code in fake_backend.runs] == [ASKED]


# ── policies ─────────────────────────────────────────────────────────────────────────────────


async def test_policy_off_answers_without_code_and_refuses_direct_runs(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot()
    assert "is now off" in await _set_policy(bot, "off", scope="server")
    shown = await bot.server.slash("policy")
    assert await interaction_reply(bot, shown) == (
        "The code policy here is off (from this workspace): no code runs; the model "
        "answers without it, and /run is refused."
    )
    model.script(runs(ASKED), says("I cannot run code here."))
    thread_id = await _ask(bot)
    messages = await _answer(bot, thread_id, "I cannot run code here.")
    assert any(OFF_NOTICE in m.content for m in messages)
    assert _approvals(bot, thread_id) == []
    assert "turned off in this channel" in _tool_results(model)[0]

    await bot.server.post_message(thread_id, f"```py\n{ASKED}\n```", mention_bot=True)
    await bot.server.wait_for(
        lambda: any(
            OFF_REFUSAL in m.content for m in bot.server.channel_messages(thread_id, by_bot=True)
        )
    )
    ran = await bot.server.slash("run", {"code": ASKED})
    assert await interaction_reply(bot, ran) == OFF_REFUSAL
    assert fake_backend.runs == []

    # A channel's own policy overrides its server's.
    assert "is now auto" in await _set_policy(bot, "auto")
    ran = await bot.server.slash("run", {"code": ASKED})
    await bot.server.wait_for(
        lambda: any("42" in m.content for m in bot.server.interaction_messages(ran))
    )
    assert [code.strip() for code in fake_backend.runs] == [ASKED]


async def test_direct_runs_never_wait_for_approval(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(default="approve")
    ran = await bot.server.slash("run", {"code": ASKED})
    await bot.server.wait_for(
        lambda: any("42" in m.content for m in bot.server.interaction_messages(ran))
    )
    assert [code.strip() for code in fake_backend.runs] == [ASKED]


async def test_a_policy_outlives_a_restart(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    first = await start_bot()
    assert "is now approve" in await _set_policy(first, "approve")
    await first.client.close()
    # A new process: a new client and service over the same data directory.
    second = await start_bot()
    shown = await second.server.slash("policy", user=BOB)
    assert "is approve (from this channel)" in await interaction_reply(second, shown)
    model.script(runs(ASKED), says("It is 42."))
    thread_id = await _ask(second)
    asking = await _approval(second, thread_id)
    await _click(second, asking, "Run")
    await _answer(second, thread_id, "It is 42.")
    assert [code.strip() for code in fake_backend.runs] == [ASKED]


async def test_stop_while_code_waits_for_approval_ends_the_turn(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(default="approve")
    model.script(runs(ASKED), says("never sent"))
    thread_id = await _ask(bot)
    asking = await _approval(bot, thread_id)
    progress = next(
        m for m in bot.server.channel_messages(thread_id, by_bot=True) if has_button(m, "Stop")
    )
    await _click(bot, progress, "Stop")
    await _decided(bot, asking, "The turn was stopped")
    messages = await _answer(bot, thread_id, "❌ Stopped.")
    assert fake_backend.runs == []
    assert not any("never sent" in m.content for m in messages)
    assert len(model.requests) == 1  # the model was not asked again


async def test_code_too_long_to_show_is_attached_whole_to_its_approval(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(default="approve")
    long = "".join(f"row_{i} = {i}\n" for i in range(400)) + "print('the end')"
    model.script(runs(long), says("Not run."))
    thread_id = await _ask(bot)
    asking = await _approval(bot, thread_id)
    assert "The whole code is attached." in asking.content
    assert "print('the end')" not in asking.content
    assert [(a.name, a.content) for a in asking.attachments] == [("code.py", long.encode())]
    edit = await _click(bot, asking, "Edit")  # past Discord's 4,000 characters for a modal
    assert await interaction_reply(bot, edit) == TOO_LONG_TO_EDIT
    await _click(bot, asking, "Cancel")
    await _answer(bot, thread_id, "Not run.")
    assert fake_backend.runs == []
