"""Cellmate on Discord: the real discord.py client, over a real WebSocket and HTTP, against
the Discord test server in `discord_server.py`, with the real sandbox and local storage."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import discord
import pytest
import yarl
from aiohttp import web

from bench.standins.discord_server import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL_GENERAL,
    CHANNEL_OTHER,
    GUILD_ID,
    OTHER_BOT,
    OWNER,
    ROLE_MEMBER,
    TOKEN,
    DiscordServer,
    Message,
)
from bench.standins.openai_server import ScriptedModel, runs, says
from bench.standins.ports import free_port
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.access import Participants
from bot.errors import NOT_YOURS
from bot.platforms.on_discord import CellmateDiscord, build_client, run_discord
from bot.settings import DiscordSettings
from executor import Executor
from tests.support.on_discord import Bot, button_id, has_button, interaction_reply, text_input_id
from tests.support.platforms import CHART_CODE, PNG, SALES

pytestmark = pytest.mark.docker


@pytest.fixture
async def start_bot(
    model: ScriptedModel,
    executor: Executor,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Awaitable[Bot]]]:
    started: list[tuple[DiscordServer, CellmateDiscord, asyncio.Task[None]]] = []
    base, gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY

    async def start(use_model: bool = True, **settings: Any) -> Bot:
        server = DiscordServer()
        await server.start()
        agent = make_agent(executor, model if use_model else None, tmp_path)
        chosen = DiscordSettings(token=TOKEN, api_url=server.api_url, cooldown_s=0)
        client = build_client(Conversations(agent), dataclasses.replace(chosen, **settings))
        task = asyncio.create_task(run_discord(client))
        started.append((server, client, task))
        await server.wait_ready()
        await asyncio.wait_for(client.connected.wait(), 30)
        return Bot(server, client, agent)

    yield start
    for server, client, task in started:
        await client.close()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 10)
        await server.close()
    discord.http.Route.BASE = base
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(str(gateway))


async def test_a_mention_with_a_csv_gets_a_thread_with_a_chart_and_follow_ups_reuse_the_data(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot()
    model.script(
        runs(CHART_CODE),
        says("Sales peaked in month 2."),
        runs("print('total', df.sales.sum())"),
        says("The total is 60."),
    )
    await bot.server.post_message(
        CHANNEL_GENERAL,
        "plot the sales by month",
        mention_bot=True,
        attachments=[("sales.csv", SALES)],
    )
    thread_id = await bot.server.wait_for(lambda: next(iter(bot.server.threads), None))
    assert isinstance(thread_id, int)
    assert bot.server.threads[thread_id]["name"] == "plot the sales by month"
    messages = await bot.answer_in(thread_id)
    progress, answer = messages[0], messages[-1]
    assert "read_csv('/mnt/data/sales.csv')" in progress.content
    assert "✅ ok" in progress.content
    assert progress.edits, "the progress message was never updated"
    assert "Sales peaked in month 2." in answer.content
    charts = [a for a in answer.attachments if a.name.endswith(".png")]
    assert charts
    assert charts[0].content.startswith(PNG)
    assert bot.bot_messages(CHANNEL_GENERAL) == []  # the conversation lives in the thread

    # Without the message-content intent Discord sends a plain reply without its text, so
    # the bot leaves it alone; a reply that mentions it continues, and reuses the data.
    await bot.server.post_message(thread_id, "thanks, nice chart")
    await bot.server.post_message(thread_id, "and the total?", mention_bot=True)
    messages = await bot.answer_in(thread_id, count=2)
    assert any("total 60" in m.content for m in messages)
    assert "The total is 60." in messages[-1].content
    for message in bot.server.messages.values():
        if message.author_id != ALICE:
            assert message.allowed_mentions is not None
            assert message.allowed_mentions.get("parse") == []


async def test_with_the_message_content_intent_plain_thread_replies_continue(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot(use_model=False, message_content=True)
    await bot.server.post_message(CHANNEL_GENERAL, "```py\nx = 41\n```", mention_bot=True)
    thread_id = await bot.server.wait_for(lambda: next(iter(bot.server.threads), None))
    assert isinstance(thread_id, int)
    await bot.answer_in(thread_id)
    await bot.server.post_message(thread_id, "```py\nprint(x + 1)\n```")
    messages = await bot.answer_in(thread_id, count=2)
    assert any("42" in m.content for m in messages)


async def test_run_with_code_with_the_modal_and_re_run(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    interaction = await bot.server.slash("run", {"code": "print(6 * 7)"})
    result = await bot.server.wait_for(
        lambda: next(
            (m for m in bot.server.interaction_messages(interaction) if has_button(m, "Re-run")),
            None,
        )
    )
    assert isinstance(result, Message)
    assert "print(6 * 7)" in result.content
    assert "42" in result.content
    assert len(bot.server.interaction_messages(interaction)) == 1  # the report is the answer

    opened = await bot.server.slash("run")
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
    submitted = await bot.server.submit_modal(
        modal["data"],
        {field: "for i in range(3):\n    print('row', i)"},
        channel_id=CHANNEL_GENERAL,
    )
    shown = await bot.server.wait_for(
        lambda: next(
            (m for m in bot.server.interaction_messages(submitted) if "row 2" in m.content), None
        )
    )
    assert isinstance(shown, Message)

    await bot.server.wait_for(lambda: not bot.client.door.lines.busy)
    rerun = await bot.server.click(bot.server.messages[result.id], button_id(result, "Re-run"))
    again = await bot.server.wait_for(
        lambda: next((m for m in bot.server.interaction_messages(rerun) if "42" in m.content), None)
    )
    assert isinstance(again, Message)


async def test_stop_interrupts_a_loop_and_the_session_lives_on(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(
        dm, "```py\nn = 5\nprint('loo' + 'ping', flush=True)\nwhile True:\n    n += 1\n```"
    )
    running = await bot.server.wait_for(
        lambda: next(
            (m for m in bot.bot_messages(dm) if has_button(m, "Stop") and "looping" in m.content),
            None,
        )
    )
    assert isinstance(running, Message)
    # Someone else cannot stop it.
    await bot.server.click(running, button_id(running, "Stop"), user=BOB)
    await asyncio.sleep(0.5)
    assert bot.client.conversations.turns
    await bot.server.click(running, button_id(running, "Stop"))
    messages = await bot.answer_in(dm)
    assert "⏹️ killed" in messages[0].content or "stopped" in messages[0].content.lower()
    await bot.server.post_message(dm, "```py\nprint('alive', n > 5)\n```")
    messages = await bot.answer_in(dm, count=2)
    assert any("alive True" in m.content for m in messages), [m.content for m in messages]


async def test_output_pings_nobody_and_cannot_leave_its_code_block(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    code = f"print('@everyone @here <@{BOB}> ```\\n**bold** outside')"
    await bot.server.post_message(CHANNEL_GENERAL, f"```py\n{code}\n```", mention_bot=True)
    thread_id = await bot.server.wait_for(lambda: next(iter(bot.server.threads), None))
    assert isinstance(thread_id, int)
    messages = await bot.answer_in(thread_id)
    shown = messages[0].content
    assert "@everyone" in shown
    # Every fence in the message is one the bot wrote: the output's was broken up.
    assert shown.count("```") == 4
    for message in bot.server.messages.values():
        if message.author_id != ALICE:
            assert message.allowed_mentions is not None
            assert message.allowed_mentions.get("parse") == []


async def test_disallowed_channels_other_bots_and_the_bot_itself_are_ignored(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False, channels=(str(CHANNEL_GENERAL),))
    await bot.server.post_message(CHANNEL_OTHER, "```py\nprint(1)\n```", mention_bot=True)
    await bot.server.post_message(
        CHANNEL_GENERAL, "```py\nprint(2)\n```", mention_bot=True, author=OTHER_BOT
    )
    await bot.server.post_message(CHANNEL_GENERAL, "```py\nprint(3)\n```", mention_bot=True)
    thread_id = await bot.server.wait_for(lambda: next(iter(bot.server.threads), None))
    assert isinstance(thread_id, int)
    messages = await bot.answer_in(thread_id)
    assert "print(3)" in messages[0].content
    assert len(bot.server.threads) == 1
    assert bot.bot_messages(CHANNEL_OTHER) == []
    denied = await bot.server.slash("run", {"code": "print(4)"}, channel_id=CHANNEL_OTHER)
    callback = await bot.server.wait_for(
        lambda: next((c for c in bot.server.callbacks if c["interaction_id"] == denied.id), None)
    )
    assert isinstance(callback, dict)
    assert "not enabled here" in callback["data"]["content"]


async def test_a_dm_runs_code_only_for_a_member_of_an_allowed_server_with_an_allowed_role(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False, guilds=(str(GUILD_ID),), roles=(str(ROLE_MEMBER),))
    proof = "import os; print('ran as', os.getuid())"
    # Carol is in the allowed server without the role: ignored in #general, and by DM too.
    carol_dm = await bot.server.dm_channel(CAROL)
    await bot.server.post_message(carol_dm, f"```py\n{proof}\n```", author=CAROL)
    denied = await bot.server.slash("run", {"code": proof}, channel_id=carol_dm, user=CAROL)
    assert await interaction_reply(bot, denied) == "Cellmate is not enabled here."
    alice_dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(alice_dm, f"```py\n{proof}\n```")
    (answer,) = await bot.answer_in(alice_dm)
    assert "ran as" in answer.content
    assert bot.bot_messages(carol_dm) == []
    assert not bot.client.conversations.turns


async def test_a_dropped_gateway_resumes_and_each_turn_completes_once(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, "```py\nimport time\ntime.sleep(3)\nprint('first done')\n```")
    await bot.server.wait_for(lambda: bot.bot_messages(dm))
    await bot.server.drop_gateway()
    # Sent while the bot is disconnected: delivered when it resumes.
    await bot.server.post_message(dm, "```py\nprint('second done')\n```", author=BOB)
    await bot.server.wait_for(lambda: bot.server.resume_count >= 1)
    await bot.answer_in(dm, count=2)
    await asyncio.sleep(1)
    contents = [m.content for m in bot.bot_messages(dm)]
    assert sum("first done" in c for c in contents) == 1
    assert sum("second done" in c for c in contents) == 1
    assert bot.server.identify_count == 1


async def test_an_expired_interaction_answers_in_the_channel_and_429s_are_waited_out(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    interaction = await bot.server.slash(
        "run", {"code": "import time\ntime.sleep(2)\nprint('late answer')"}
    )
    await bot.server.wait_for(lambda: bot.server.interaction_messages(interaction))
    bot.server.expire(interaction)
    bot.server.rate_limit_next("POST", f"/channels/{CHANNEL_GENERAL}/messages")
    late = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in bot.bot_messages(CHANNEL_GENERAL)
                if m.interaction_id is None and "late answer" in m.content
            ),
            None,
        )
    )
    assert isinstance(late, Message)
    assert bot.server.rate_limited == 1


async def test_reset_export_files_and_the_run_code_menu_in_a_dm(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(
        dm, "```py\nopen('/mnt/data/notes.txt', 'w').write('hi')\nsecret = 7\n```"
    )
    await bot.answer_in(dm)
    files = await bot.server.slash("files", channel_id=dm)
    listed = await bot.server.wait_for(
        lambda: next(
            (m for m in bot.server.interaction_messages(files) if "notes.txt" in m.content), None
        )
    )
    assert isinstance(listed, Message)
    export = await bot.server.slash("export", channel_id=dm)
    exported = await bot.server.wait_for(
        lambda: next(
            (
                a
                for m in bot.server.interaction_messages(export)
                for a in m.attachments
                if a.name == "session.ipynb"
            ),
            None,
        )
    )
    assert b"secret = 7" in exported.content  # type: ignore[union-attr]

    code = await bot.server.post_message(dm, "try this:\n```python\nprint(secret * 6)\n```")
    # Not only code, and no model: the bot says what it can do; the menu runs the code.
    await bot.server.wait_for(
        lambda: (
            any("No model is configured" in m.content for m in bot.bot_messages(dm))
            and not bot.client.door.lines.busy
        )
    )
    menu = await bot.server.context_menu("Run with Cellmate", code)
    await bot.server.wait_for(
        lambda: any("42" in m.content for m in bot.server.interaction_messages(menu))
    )
    reset = await bot.server.slash("reset", channel_id=dm)
    await bot.server.wait_for(lambda: bot.server.interaction_messages(reset))
    await bot.server.post_message(dm, "```py\nprint(secret)\n```")
    await bot.server.wait_for(
        lambda: any("NameError" in m.content for m in bot.bot_messages(dm)[-2:])
    )


async def test_editing_a_code_message_runs_it_again(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    dm = await bot.server.dm_channel(ALICE)
    message = await bot.server.post_message(dm, "```py\nprint('version', 1)\n```")
    await bot.answer_in(dm)
    await bot.server.edit_message(message.id, "```py\nprint('version', 2)\n```")
    messages = await bot.answer_in(dm, count=2)
    assert any("version 2" in m.content for m in messages)


# ── who may do what, files from elsewhere, many charts ────────────────────────────────────

MANY_CHARTS = (
    "import base64\n"
    "from IPython.display import Image, display\n"
    "dot = base64.b64decode('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==')\n"
    "for i in range(12):\n"
    "    display(Image(data=dot))\n"
)


async def _thread_with_notes(bot: Bot) -> int:
    """Alice's conversation in a thread, with a file in /mnt/data and a variable."""
    await bot.server.post_message(
        CHANNEL_GENERAL,
        "```py\nopen('/mnt/data/notes.txt', 'w').write('hi')\nsecret = 7\n```",
        mention_bot=True,
    )
    thread_id = await bot.server.wait_for(lambda: next(iter(bot.server.threads), None))
    assert isinstance(thread_id, int)
    await bot.answer_in(thread_id)
    return thread_id


async def _run_result(bot: Bot, code: str) -> Message:
    """Alice's /run, finished, with its Re-run button."""
    interaction = await bot.server.slash("run", {"code": code})
    first = await bot.server.wait_for(lambda: bot.server.interaction_messages(interaction))
    result = first[0]  # type: ignore[index]
    await bot.server.wait_for(
        lambda: (
            has_button(bot.server.messages[result.id], "Re-run") and not bot.client.door.lines.busy
        )
    )
    return bot.server.messages[result.id]


async def _running_loop(bot: Bot, thread_id: int) -> Message:
    await bot.server.post_message(
        thread_id,
        "```py\nimport time\nprint('wait' + 'ing', flush=True)\ntime.sleep(30)\n```",
        mention_bot=True,
    )
    running = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in bot.bot_messages(thread_id)
                if has_button(m, "Stop") and "waiting" in m.content
            ),
            None,
        )
    )
    assert isinstance(running, Message)
    return running


async def test_every_entry_point_refuses_a_user_the_allowlist_leaves_out(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False, users=(str(ALICE), str(BOB), str(OWNER)))
    thread_id = await _thread_with_notes(bot)
    result = await _run_result(bot, "print('alice', 1)")
    opened = await bot.server.slash("run")
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
    code_message = bot.server.channel_messages(CHANNEL_GENERAL, by_bot=False)[0]
    running = await _running_loop(bot, thread_id)

    # Carol is not on the list: every way in is closed to her, in the thread and outside it.
    await bot.server.post_message(
        thread_id, "```py\nprint('carol')\n```", mention_bot=True, author=CAROL
    )
    dm = await bot.server.dm_channel(CAROL)
    await bot.server.post_message(dm, "```py\nprint('carol')\n```", author=CAROL)
    refused = [
        await bot.server.slash("files", channel_id=thread_id, user=CAROL),
        await bot.server.slash("export", channel_id=thread_id, user=CAROL),
        await bot.server.slash("reset", channel_id=thread_id, user=CAROL),
        await bot.server.slash("run", {"code": "print('carol')"}, user=CAROL),
        await bot.server.slash("run", channel_id=thread_id, user=CAROL),
        await bot.server.context_menu("Run with Cellmate", code_message, user=CAROL),
        await bot.server.click(running, button_id(running, "Stop"), user=CAROL),
        await bot.server.click(result, button_id(result, "Re-run"), user=CAROL),
        await bot.server.submit_modal(
            modal["data"],
            {text_input_id(modal["data"]): "print('carol')"},
            channel_id=CHANNEL_GENERAL,
            user=CAROL,
        ),
    ]
    for interaction in refused:
        assert await interaction_reply(bot, interaction) == "Cellmate is not enabled here."
    await asyncio.sleep(0.5)
    assert bot.client.conversations.turns  # Alice's turn runs on
    everything = [m.content for m in bot.server.messages.values() if m.author_id != CAROL]
    assert not any("carol" in text for text in everything)
    assert not any(c["type"] == 9 for c in bot.server.callbacks if c["interaction_id"] != opened.id)

    # Alice, on the list and in the conversation, may.
    await bot.server.click(running, button_id(running, "Stop"))
    await bot.answer_in(thread_id, count=2)
    listed = await bot.server.slash("files", channel_id=thread_id)
    assert "notes.txt" in await interaction_reply(bot, listed)


async def test_conversation_commands_are_for_participants_and_moderators(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    thread_id = await _thread_with_notes(bot)
    result = await _run_result(bot, "print('alice', 2)")

    # Bob may use the bot, but this conversation and this run are not his.
    for name in ("files", "export", "reset"):
        denied = await bot.server.slash(name, channel_id=thread_id, user=BOB)
        assert await interaction_reply(bot, denied) == NOT_YOURS, name
    rerun = await bot.server.click(result, button_id(result, "Re-run"), user=BOB)
    assert await interaction_reply(bot, rerun) == NOT_YOURS
    # Outside a conversation there is nothing to act on.
    outside = await bot.server.slash("files", channel_id=CHANNEL_GENERAL, user=BOB)
    assert "There is no Cellmate conversation here" in await interaction_reply(bot, outside)

    running = await _running_loop(bot, thread_id)
    stop = await bot.server.click(running, button_id(running, "Stop"), user=BOB)
    assert await interaction_reply(bot, stop) == NOT_YOURS
    await asyncio.sleep(0.5)
    assert bot.client.conversations.turns

    # A moderator (Manage Messages) may stop it and look.
    await bot.server.click(running, button_id(running, "Stop"), user=OWNER)
    messages = await bot.answer_in(thread_id, count=2)
    assert any("⏹️ killed" in m.content for m in messages)
    listed = await bot.server.slash("files", channel_id=thread_id, user=OWNER)
    assert "notes.txt" in await interaction_reply(bot, listed)

    # Once Bob takes part he may; his /reset above did nothing: the session kept `secret`.
    await bot.server.post_message(
        thread_id, "```py\nprint('secret is', secret)\n```", mention_bot=True, author=BOB
    )
    shown = await bot.server.wait_for(
        lambda: next(
            (
                m.content
                for m in bot.bot_messages(thread_id)
                if "secret is 7" in m.content or "Error" in m.content
            ),
            None,
        )
    )
    assert "secret is 7" in shown, shown  # type: ignore[operator]
    await bot.answer_in(thread_id, count=3)
    mine = await bot.server.slash("files", channel_id=thread_id, user=BOB)
    assert "notes.txt" in await interaction_reply(bot, mine)
    assert sum("alice 2" in m.content for m in bot.bot_messages(CHANNEL_GENERAL)) == 1

    # After a restart (participants forgotten) the thread's first message still says whose
    # it is; Bob has to take part again.
    bot.client.conversations.participants = Participants()
    again = await bot.server.slash("files", channel_id=thread_id)
    assert "notes.txt" in await interaction_reply(bot, again)
    forgotten = await bot.server.slash("export", channel_id=thread_id, user=BOB)
    assert await interaction_reply(bot, forgotten) == NOT_YOURS


@pytest.fixture
async def foreign_host() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A host that is not Discord's CDN (127.0.0.2), recording every request it gets."""
    seen: list[dict[str, str]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(body=b"month,sales\n9,90\n")

    app = web.Application()
    app.router.add_get("/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.2", port).start()
    yield f"127.0.0.2:{port}", seen
    await runner.cleanup()


async def test_attachments_are_downloaded_from_discord_only(
    start_bot: Callable[..., Awaitable[Bot]], foreign_host: tuple[str, list[dict[str, str]]]
) -> None:
    bot = await start_bot(use_model=False)
    other, seen = foreign_host
    cdn = bot.server.base_url.removeprefix("http://")
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(
        dm,
        "```py\nimport os\nprint('files', sorted(os.listdir('/mnt/data')))\n```",
        attachments=[("sales.csv", SALES)],
        linked=[
            ("elsewhere.csv", f"http://{other}/elsewhere.csv"),
            ("userinfo.csv", f"http://{cdn}@{other}/userinfo.csv"),
            ("path.csv", f"http://{other}/{cdn}/attachments/path.csv"),
        ],
    )
    messages = await bot.answer_in(dm)
    shown = "\n".join(m.content for m in messages)
    assert "files ['sales.csv']" in shown
    for name in ("elsewhere.csv", "userinfo.csv", "path.csv"):
        assert f"Not used: {name}: it is not stored on Discord's file servers (127.0.0.2)" in shown
    assert seen == []


async def test_many_charts_give_a_bounded_answer_and_one_note(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False, files_per_answer=3)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, f"```py\n{MANY_CHARTS}```")
    messages = await bot.answer_in(dm)
    charts = [a for m in messages for a in m.attachments if a.name.endswith(".png")]
    assert len(charts) == 3
    notes = [m.content for m in messages if "not shown" in m.content]
    assert len(notes) == 1
    assert "9 more charts and files were not shown (at most 3 per answer)" in notes[0]
    assert len(messages) <= 3
