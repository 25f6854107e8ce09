"""Cellmate on Slack: the real slack_bolt app, in Socket Mode and in HTTP mode, against the
Slack test server in `slack_server.py`, with the real sandbox and local storage."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bench.standins.openai_server import Reply, ScriptedModel, runs, says
from bench.standins.ports import free_port
from bench.standins.slack_server import (
    ADMIN,
    ALICE,
    APP_TOKEN,
    BOB,
    BOT_TOKEN,
    C_GENERAL,
    C_OTHER,
    OTHER_BOT_USER,
    SIGNING_SECRET,
    Message,
    SlackServer,
)
from bot.agent import Agent
from bot.conversations import Conversations
from bot.errors import NOT_YOURS
from bot.ops.http import start_server
from bot.platforms.on_slack import (
    EVENTS_PATH,
    add_http_route,
    build_slack,
    run_slack,
)
from bot.platforms.on_slack.commands import NO_CONVERSATION
from bot.settings import SlackSettings
from executor import Executor
from tests.support.on_slack import Bot, button, ephemeral_to
from tests.support.platforms import CHART_CODE, PNG, SALES

pytestmark = pytest.mark.docker


@pytest.fixture(params=["socket", "http"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def start_bot(
    mode: str,
    model: ScriptedModel,
    executor: Executor,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Awaitable[Bot]]]:
    cleanups: list[Callable[[], Awaitable[None]]] = []

    async def start(use_model: bool = True, **settings: Any) -> Bot:
        server = SlackServer(mode=mode)  # type: ignore[arg-type]
        await server.start()
        cleanups.append(server.close)
        agent = make_agent(executor, model if use_model else None, tmp_path)
        chosen = SlackSettings(
            bot_token=BOT_TOKEN,
            app_token=APP_TOKEN if mode == "socket" else "",
            signing_secret=SIGNING_SECRET if mode == "http" else "",
            api_url=server.api_url,
            cooldown_s=0,
        )
        slack = build_slack(Conversations(agent), dataclasses.replace(chosen, **settings))
        await slack.connect()
        if mode == "socket":
            from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

            handler = AsyncSocketModeHandler(slack.app, APP_TOKEN)
            await handler.connect_async()  # type: ignore[no-untyped-call]
            cleanups.insert(0, handler.close_async)  # type: ignore[arg-type]
            await server.wait_connected()
        else:
            app = web.Application()
            add_http_route(slack, app)
            port = free_port()
            runner = await start_server(app, "127.0.0.1", port)
            cleanups.insert(0, runner.cleanup)
            server.bot_url = f"http://127.0.0.1:{port}{EVENTS_PATH}"
        return Bot(server, slack)

    yield start
    for cleanup in cleanups:
        with contextlib.suppress(Exception):
            await cleanup()


async def test_a_mention_with_a_csv_gets_a_threaded_chart_and_follow_ups_reuse_the_data(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot()
    model.script(
        runs(CHART_CODE),
        says("Sales **peaked** in month 2."),
        runs("print('total', df.sales.sum())"),
        says("The total is 60."),
    )
    asked, deliveries = await bot.server.post(
        C_GENERAL, "plot the sales by month", mention_bot=True, files=[("sales.csv", SALES)]
    )
    assert all(d.status == 200 for d in deliveries)
    messages = await bot.answered(C_GENERAL, asked.ts)
    progress, answer = messages[0], messages[-1]
    assert "read_csv(" in progress.text
    assert ":white_check_mark: ok" in progress.text or "✅ ok" in progress.text
    assert progress.edits
    assert answer.text == "Sales *peaked* in month 2."
    assert answer.unfurl_links is False
    charts = [f for f in bot.server.files if f.name.endswith(".png")]
    assert charts
    assert charts[0].content.startswith(PNG)
    assert charts[0].thread_ts == asked.ts
    # The "eyes" reaction acknowledged the message while the turn ran.
    assert any(
        name == "reactions.add" and args.get("name") == "eyes" for name, args in bot.server.calls
    )
    await bot.server.wait_for(lambda: not bot.server.messages[(C_GENERAL, asked.ts)].reactions)

    # A plain reply in the thread continues the conversation: the data is still there.
    await bot.server.post(C_GENERAL, "and the total?", thread_ts=asked.ts)
    messages = await bot.answered(C_GENERAL, asked.ts, count=2)
    assert any("total 60" in m.text for m in messages)
    assert messages[-1].text == "The total is 60."


async def test_run_with_text_with_the_modal_and_re_run(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    delivery = await bot.server.slash("/run", "print(6 * 7)")
    assert delivery.status == 200
    root = await bot.server.wait_for(
        lambda: next(
            (m for m in bot.server.channel_messages(C_GENERAL, by_bot=True) if "42" in m.text),
            None,
        )
    )
    assert isinstance(root, Message)
    await bot.server.wait_for(lambda: button(bot.server.messages[(C_GENERAL, root.ts)], "cm_rerun"))

    await bot.server.slash("/run", "")
    opened = await bot.server.wait_for(lambda: bot.server.views[-1] if bot.server.views else None)
    assert isinstance(opened, dict)
    await bot.server.submit_view(opened, {"code": "for i in range(3):\n    print('row', i)"})
    await bot.server.wait_for(
        lambda: any("row 2" in m.text for m in bot.server.channel_messages(C_GENERAL, by_bot=True))
    )

    await bot.server.wait_for(lambda: not bot.slack.door.lines.busy)
    result = bot.server.messages[(C_GENERAL, root.ts)]
    await bot.server.click(result, "cm_rerun")
    await bot.server.wait_for(
        lambda: (
            sum("42" in m.text for m in bot.server.channel_messages(C_GENERAL, by_bot=True)) >= 2
        )
    )


async def test_stop_interrupts_a_loop(start_bot: Callable[..., Awaitable[Bot]]) -> None:
    bot = await start_bot(use_model=False)
    asked, _ = await bot.server.post(
        C_GENERAL,
        "```\nn = 5\nprint('loo' + 'ping', flush=True)\nwhile True:\n    n += 1\n```",
        mention_bot=True,
    )
    running = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in bot.thread(C_GENERAL, asked.ts)
                if button(m, "cm_stop") and "looping" in m.text
            ),
            None,
        )
    )
    assert isinstance(running, Message)
    await bot.server.click(running, "cm_stop", user=BOB)  # not theirs to stop
    await asyncio.sleep(0.5)
    assert bot.slack.conversations.turns
    await bot.server.click(running, "cm_stop")
    messages = await bot.answered(C_GENERAL, asked.ts)
    assert "killed" in messages[0].text
    await bot.server.post(C_GENERAL, "```\nprint('alive', n > 5)\n```", thread_ts=asked.ts)
    messages = await bot.answered(C_GENERAL, asked.ts, count=2)
    assert any("alive True" in m.text for m in messages), [m.text for m in messages]


async def test_a_retried_event_runs_once(start_bot: Callable[..., Awaitable[Bot]]) -> None:
    bot = await start_bot(use_model=False)
    asked, deliveries = await bot.server.post(
        C_GENERAL, "```\nprint('ran once')\n```", mention_bot=True
    )
    for delivery in deliveries:
        await bot.server.redeliver(delivery, attempt=1, reason="http_timeout")
    await bot.answered(C_GENERAL, asked.ts)
    await asyncio.sleep(1.5)
    shown = [m for m in bot.thread(C_GENERAL, asked.ts) if "ran once" in m.text]
    assert len(shown) == 1


@pytest.mark.parametrize("mode", ["http"])  # Socket Mode has no requests to sign
async def test_requests_with_a_bad_signature_or_an_old_timestamp_are_refused(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    event = {
        "type": "event_callback",
        "team_id": "T0TEAM",
        "event_id": "Ev0FORGED",
        "event": {
            "type": "app_mention",
            "user": ALICE,
            "channel": C_GENERAL,
            "ts": "1700000000.000100",
            "text": "<@U0BOT> ```\nprint('forged')\n```",
        },
    }
    body = json.dumps(event).encode()
    forged = await bot.server.send_signed(body, "application/json", bad_signature=True)
    stale = await bot.server.send_signed(
        body, "application/json", timestamp=int(time.time()) - 6 * 60
    )
    assert forged.status == 401
    assert stale.status == 401
    await asyncio.sleep(1)
    assert bot.server.channel_messages(C_GENERAL, by_bot=True) == []
    assert not any(name == "chat.postMessage" for name, _ in bot.server.calls)


async def test_disallowed_channels_and_other_bots_are_ignored(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False, channels=(C_GENERAL,))
    await bot.server.post(C_OTHER, "```\nprint(1)\n```", mention_bot=True)
    await bot.server.post(C_GENERAL, "```\nprint(2)\n```", mention_bot=True, user=OTHER_BOT_USER)
    asked, _ = await bot.server.post(C_GENERAL, "```\nprint(3)\n```", mention_bot=True)
    messages = await bot.answered(C_GENERAL, asked.ts)
    assert "print(3)" in messages[0].text
    assert bot.server.channel_messages(C_OTHER, by_bot=True) == []
    bot_posts = [m for m in bot.server.channel_messages(C_GENERAL, by_bot=True)]
    assert all(m.thread_ts == asked.ts for m in bot_posts)


async def test_channel_pings_in_output_ping_nobody(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    code = "print('<!channel> <!here> <@U0BOB> ```\\n*bold* & done')"
    asked, _ = await bot.server.post(C_GENERAL, f"```\n{code}\n```", mention_bot=True)
    messages = await bot.answered(C_GENERAL, asked.ts)
    for message in bot.server.channel_messages(C_GENERAL, by_bot=True):
        shown = json.dumps([message.text, message.blocks])
        assert "<!channel>" not in shown
        assert "<!here>" not in shown
        assert "<@U0BOB>" not in shown
    assert "&lt;!channel&gt;" in messages[0].text


async def test_dms_reset_export_and_the_run_code_shortcut(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    dm = bot.server.dm_channel(ALICE)
    asked, _ = await bot.server.post(
        dm, "```\nopen('/mnt/data/notes.txt', 'w').write('hi')\nsecret = 7\n```"
    )
    await bot.answered(dm, asked.ts)
    await bot.server.slash("/export", channel=dm)
    notebook = await bot.server.wait_for(
        lambda: next((f for f in bot.server.files if f.name == "session.ipynb"), None)
    )
    assert b"secret = 7" in notebook.content  # type: ignore[attr-defined]

    await bot.server.shortcut("cm_run_code", asked)
    messages = await bot.answered(dm, asked.ts, count=2)
    assert sum("secret = 7" in m.text for m in messages) == 2
    await bot.server.slash("/reset", channel=dm)
    await bot.server.wait_for(lambda: "Forgot" in json.dumps(bot.server.responses))
    await bot.server.post(dm, "```\nprint(secret)\n```", thread_ts=asked.ts)
    await bot.server.wait_for(lambda: any("NameError" in m.text for m in bot.thread(dm, asked.ts)))


async def test_run_slack_keeps_the_socket_mode_connection_state_for_health(
    executor: Executor, make_agent: Callable[..., Agent], tmp_path: Path
) -> None:
    server = SlackServer(mode="socket")
    await server.start()
    slack = build_slack(
        Conversations(make_agent(executor, None, tmp_path)),
        SlackSettings(bot_token=BOT_TOKEN, app_token=APP_TOKEN, api_url=server.api_url),
    )
    running = asyncio.create_task(run_slack(slack))
    try:
        await server.wait_connected()
        await server.wait_for(lambda: slack.connected.get("slack") is True)
        await server.drop_socket()
        await server.wait_for(lambda: server.connections >= 2)  # the client came back
        await server.wait_for(lambda: slack.connected.get("slack") is True)
        asked, _ = await server.post(C_GENERAL, "```\nprint('still here')\n```", mention_bot=True)
        await server.wait_for(
            lambda: any(
                "still here" in m.text
                for m in server.channel_messages(C_GENERAL, thread_ts=asked.ts, by_bot=True)
            )
        )
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await server.close()


# ── who may do what, files from elsewhere, replays, many charts ───────────────────────────

MANY_CHARTS = (
    "import base64\n"
    "from IPython.display import Image, display\n"
    "dot = base64.b64decode('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==')\n"
    "for i in range(12):\n"
    "    display(Image(data=dot))\n"
)


@pytest.fixture
async def foreign_host() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A host that is not Slack's (127.0.0.2), recording the headers of every request."""
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


@pytest.mark.parametrize("mode", ["socket"])  # downloads do not depend on the connection
async def test_a_file_on_another_host_never_gets_the_bot_token(
    start_bot: Callable[..., Awaitable[Bot]], foreign_host: tuple[str, list[dict[str, str]]]
) -> None:
    bot = await start_bot(use_model=False)
    other, seen = foreign_host
    slack_host = bot.server.base_url.removeprefix("http://")
    asked, _ = await bot.server.post(
        C_GENERAL,
        "```\nimport os\nprint('files', sorted(os.listdir('/mnt/data')))\n```",
        mention_bot=True,
        files=[("sales.csv", SALES)],
        linked=[
            ("elsewhere.csv", f"http://{other}/elsewhere.csv"),
            ("userinfo.csv", f"http://{slack_host}@{other}/userinfo.csv"),
            ("path.csv", f"http://{other}/{slack_host}/files-pri/path.csv"),
            ("redirected.csv", f"{bot.server.base_url}/redirect?to=http://{other}/moved.csv"),
        ],
    )
    messages = await bot.answered(C_GENERAL, asked.ts)
    shown = "\n".join(m.text for m in messages)
    assert "'redirected.csv', 'sales.csv'" in shown  # Slack's file, and the redirected one
    for name in ("elsewhere.csv", "userinfo.csv", "path.csv"):
        assert f"Not used: {name}: it is not stored on Slack's file servers (127.0.0.2)" in shown
    assert len(seen) == 1  # only the redirect from Slack's host was followed
    assert all("xoxb" not in value for headers in seen for value in headers.values())
    assert "Authorization" not in seen[0]


@pytest.mark.parametrize("mode", ["http"])  # Socket Mode has no requests to sign
async def test_a_replayed_request_runs_once_and_bad_timestamps_get_401(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    body = bot.server.slash_body("/run", "print('ran', 6 * 7)", bot.server.response_url())
    headers = bot.server.signed_headers(body, "application/x-www-form-urlencoded", int(time.time()))
    first = await bot.server.send_raw(body, headers)
    assert first.status == 200
    await bot.server.wait_for(
        lambda: any("ran 42" in m.text for m in bot.server.channel_messages(C_GENERAL, by_bot=True))
    )
    await bot.server.wait_for(lambda: not bot.slack.conversations.turns)
    # Sent again once the first run is over (so that it is not merely refused as busy).
    again = await bot.server.send_raw(body, headers)
    assert again.status in (200, 401)
    await asyncio.sleep(2)
    await bot.server.wait_for(lambda: not bot.slack.conversations.turns)
    runs = [m for m in bot.server.channel_messages(C_GENERAL, by_bot=True) if "ran 42" in m.text]
    assert len(runs) == 1

    now = int(time.time())
    fresh = bot.server.slash_body("/run", "print('never')", bot.server.response_url())
    signed = bot.server.signed_headers(fresh, "application/x-www-form-urlencoded", now)
    for stamp in (
        "abc",
        "",
        "1e9",
        "-5",
        f"-{now}",
        "99999999999999999999999",
        "١٧٠٠٠٠٠٠٠٠",  # digits, but not ASCII ones
        str(now - 6 * 60),
        str(now + 6 * 60),
        None,
    ):
        sent = {k: v for k, v in signed.items() if k != "X-Slack-Request-Timestamp"}
        if stamp is not None:
            sent["X-Slack-Request-Timestamp"] = stamp
        answer = await bot.server.send_raw(fresh, sent)
        assert answer.status == 401, (stamp, answer.status, answer.body)
    unsigned = {k: v for k, v in signed.items() if k != "X-Slack-Signature"}
    assert (await bot.server.send_raw(fresh, unsigned)).status == 401
    await asyncio.sleep(1)
    assert not any("never" in m.text for m in bot.server.channel_messages(C_GENERAL))


async def test_every_entry_point_refuses_a_user_the_allowlist_leaves_out(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False, users=(ALICE,))
    await bot.server.slash("/run", "print('alice', 1)")
    result = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in bot.server.channel_messages(C_GENERAL, by_bot=True)
                if "alice 1" in m.text and button(m, "cm_rerun")
            ),
            None,
        )
    )
    assert isinstance(result, Message)
    asked, _ = await bot.server.post(
        C_GENERAL,
        "```\nimport time\nprint('wait' + 'ing', flush=True)\ntime.sleep(30)\n```",
        mention_bot=True,
    )
    running = await bot.server.wait_for(
        lambda: next((m for m in bot.thread(C_GENERAL, asked.ts) if button(m, "cm_stop")), None)
    )
    assert isinstance(running, Message)

    # Bob is not on the list: nothing he does runs, reads or stops anything.
    await bot.server.post(C_GENERAL, "```\nprint('bob was here')\n```", mention_bot=True, user=BOB)
    await bot.server.post(
        C_GENERAL, "```\nprint('bob was here')\n```", thread_ts=asked.ts, user=BOB
    )
    await bot.server.slash("/run", "print('bob was here')", user=BOB)
    await bot.server.slash("/run", "", user=BOB)
    await bot.server.slash("/export", user=BOB)
    await bot.server.slash("/reset", user=BOB)
    await bot.server.shortcut("cm_run_code", asked, user=BOB)
    await bot.server.click(running, "cm_stop", user=BOB)
    await bot.server.click(result, "cm_rerun", user=BOB)
    await bot.server.wait_for(lambda: len(ephemeral_to(bot, BOB)) >= 7)
    await asyncio.sleep(1)
    assert ephemeral_to(bot, BOB).count("Cellmate is not enabled here.") == 7
    assert bot.server.views == []  # no /run editor was opened for him
    assert bot.slack.conversations.turns  # Alice's turn runs on
    assert not any(
        "bob was here" in m.text for m in bot.server.messages.values() if m.user == "U0BOT"
    )

    # Alice, on the list, stops her turn.
    await bot.server.click(running, "cm_stop")
    await bot.answered(C_GENERAL, asked.ts)


async def test_a_dm_runs_code_only_for_a_member_of_an_allowed_channel(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False, channels=(C_GENERAL,))
    proof = "import os; print('ran as', os.getuid())"
    # Bob is in #other only: ignored by DM, and told so for /run from the DM.
    bob_dm = bot.server.dm_channel(BOB)
    await bot.server.post(bob_dm, f"```\n{proof}\n```", user=BOB)
    await bot.server.slash("/run", proof, channel=bob_dm, user=BOB)
    await bot.server.wait_for(lambda: ephemeral_to(bot, BOB))
    assert ephemeral_to(bot, BOB) == ["Cellmate is not enabled here."]
    alice_dm = bot.server.dm_channel(ALICE)
    asked, _ = await bot.server.post(alice_dm, f"```\n{proof}\n```")
    (answer,) = await bot.answered(alice_dm, asked.ts)
    assert "ran as" in answer.text
    assert bot.server.channel_messages(bob_dm, by_bot=True) == []


async def test_conversation_commands_are_for_participants_and_admins(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    await bot.server.slash("/run", "print('alice', 2)")
    result = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in bot.server.channel_messages(C_GENERAL, by_bot=True)
                if "alice 2" in m.text and button(m, "cm_rerun")
            ),
            None,
        )
    )
    assert isinstance(result, Message)
    asked, _ = await bot.server.post(
        C_GENERAL,
        "```\nimport time\nsecret = 7\nprint('wait' + 'ing', flush=True)\ntime.sleep(30)\n```",
        mention_bot=True,
    )
    running = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in bot.thread(C_GENERAL, asked.ts)
                if button(m, "cm_stop") and "waiting" in m.text
            ),
            None,
        )
    )
    assert isinstance(running, Message)

    # Bob may use the bot, but this is not his conversation or his run.
    await bot.server.click(running, "cm_stop", user=BOB)
    await bot.server.click(result, "cm_rerun", user=BOB)
    await bot.server.slash("/export", user=BOB)
    await bot.server.slash("/reset", user=BOB)
    await bot.server.wait_for(lambda: len(bot.server.responses) >= 4)
    answers = [str(r.get("text")) for r in bot.server.responses]
    assert answers.count(NOT_YOURS) == 2
    assert answers.count(NO_CONVERSATION) == 2
    await asyncio.sleep(0.5)
    assert bot.slack.conversations.turns
    assert (
        sum("alice 2" in m.text for m in bot.server.channel_messages(C_GENERAL, by_bot=True)) == 1
    )
    # Alice's conversation is in #general, not in another channel.
    await bot.server.slash("/export", channel=C_OTHER)
    await bot.server.wait_for(lambda: len(bot.server.responses) >= 5)
    assert bot.server.responses[-1]["text"] == NO_CONVERSATION

    # A workspace admin may stop it.
    await bot.server.click(running, "cm_stop", user=ADMIN)
    messages = await bot.answered(C_GENERAL, asked.ts)
    assert "killed" in messages[0].text

    # Alice re-runs her own /run.
    await bot.server.click(bot.server.messages[(C_GENERAL, result.ts)], "cm_rerun")
    await bot.server.wait_for(
        lambda: (
            sum("alice 2" in m.text for m in bot.server.channel_messages(C_GENERAL, by_bot=True))
            >= 2
        )
    )


async def test_many_charts_give_a_bounded_answer_and_one_note(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False, files_per_answer=3)
    asked, _ = await bot.server.post(C_GENERAL, f"```\n{MANY_CHARTS}```", mention_bot=True)
    messages = await bot.answered(C_GENERAL, asked.ts)
    charts = [f for f in bot.server.files if f.name.endswith(".png")]
    assert len(charts) == 3
    notes = [m.text for m in messages if "not shown" in m.text]
    assert len(notes) == 1
    assert "9 more charts and files were not shown (at most 3 per answer)" in notes[0]
    assert len(messages) <= 3


async def test_an_assistant_thread_streams_a_chart_answer_and_keeps_its_session(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot(assistant_greeting="off", assistant_prompts="off")
    bot.server.streaming = True
    dm, root, delivery = await bot.server.open_assistant_thread(viewing=C_GENERAL)
    assert delivery.status == 200
    model.script(
        runs(CHART_CODE),
        Reply(content="Sales **peaked** in month 2.", pieces=3),
        runs("print('total', df.sales.sum())"),
        says("The total is 60."),
    )
    await bot.server.post(
        dm, "plot the sales by month", thread_ts=root, files=[("sales.csv", SALES)]
    )
    messages = await bot.answered(dm, root)
    assert bot.server.titles[(dm, root)] == "plot the sales by month"
    shown = [status for channel, ts, status in bot.server.statuses if (channel, ts) == (dm, root)]
    assert "is running code…" in shown
    assert (dm, root) not in bot.server.status
    charts = [f for f in bot.server.files if f.name.endswith(".png")]
    assert charts
    assert charts[0].content.startswith(PNG)
    assert charts[0].thread_ts == root
    answer = [m for m in messages if not m.files][-1]
    assert answer.text == "Sales **peaked** in month 2."
    assert bot.server.streams.get((answer.channel, answer.ts)) is not None

    # The thread is one conversation: the data frame is still in its kernel.
    await bot.server.post(dm, "and the total?", thread_ts=root)
    messages = await bot.answered(dm, root, count=2)
    assert any("total 60" in m.text for m in messages)
