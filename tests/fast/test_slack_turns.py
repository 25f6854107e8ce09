"""What a Slack user sees, turn by turn: the real slack_bolt app against the Slack test
server (Socket Mode, and HTTP mode where it is cheap) and the scripted model, on the fake
sandbox (no Docker)."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bench.standins.openai_server import ScriptedModel, fails, runs, says
from bench.standins.ports import free_port
from bench.standins.slack_server import (
    ADMIN,
    ALICE,
    APP_TOKEN,
    BOB,
    BOT_TOKEN,
    BOT_USER_ID,
    C_GENERAL,
    SIGNING_SECRET,
    Message,
    SlackServer,
)
from bot.agent import Agent
from bot.conversations import Conversations
from bot.errors import NOT_HERE, NOT_YOURS
from bot.ops.http import start_server
from bot.platforms.on_slack import EVENTS_PATH, add_http_route, build_slack
from bot.platforms.on_slack.commands import NO_CONVERSATION
from bot.settings import SlackSettings
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, image, stdout
from tests.support.on_slack import Bot, button, ephemeral_to, is_progress

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
SALES = b"month,sales\n1,10\n2,30\n3,20\n"
CHART = "df = pd.read_csv('/mnt/data/sales.csv')\ndf.plot()"
HANG = "wait_forever()"
QUEUED = "Queued: your previous request is still running."


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(
        {
            "print(6 * 7)": FakeRun(outputs=[stdout("42\n")]),
            CHART: FakeRun(outputs=[stdout("plotted\n"), image(PNG)]),
            HANG: FakeRun(outputs=[stdout("waiting\n")], hang=True),
            "keep()": FakeRun(outputs=[stdout("kept\n")], files={"notes.txt": b"hi"}),
            "crash()": FakeRun(outputs=[stdout("going down\n")], kernel_dies=-9),
        }
    )


@pytest.fixture
def mode() -> str:
    """Socket Mode unless a test asks for both connection modes."""
    return "socket"


@pytest.fixture
async def start_bot(
    mode: str,
    model: ScriptedModel,
    fake_executor: Executor,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Awaitable[Bot]]]:
    cleanups: list[Callable[[], Awaitable[Any]]] = []

    async def start(use_model: bool = True, **settings: Any) -> Bot:
        server = SlackServer(mode=mode)  # type: ignore[arg-type]
        await server.start()
        cleanups.append(server.close)
        agent = make_agent(fake_executor, model if use_model else None, tmp_path, timeout=5)
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
            cleanups.insert(0, handler.close_async)
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


def _answers(messages: list[Message]) -> list[Message]:
    """The turn's answers: neither its progress message nor its uploaded files."""
    return [m for m in messages if not is_progress(m) and not m.files]


async def _running(bot: Bot, channel: str, root: str) -> Message:
    """The progress message of the hanging run in a thread, with its Stop button."""
    found = await bot.server.wait_for(
        lambda: next(
            (m for m in bot.thread(channel, root) if button(m, "cm_stop") and "waiting" in m.text),
            None,
        )
    )
    assert isinstance(found, Message)
    return found


async def _result(bot: Bot, text: str, count: int = 1) -> Message:
    """The latest finished /run result that shows `text`, once `count` of them exist."""

    def finished() -> Message | None:
        shown = [
            m
            for m in bot.server.channel_messages(C_GENERAL, by_bot=True)
            if text in m.text and button(m, "cm_rerun")
        ]
        return shown[-1] if len(shown) >= count and not bot.slack.door.lines.busy else None

    found = await bot.server.wait_for(finished)
    assert isinstance(found, Message)
    return found


# ── turns ──────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_a_mention_with_a_csv_runs_the_models_code_and_answers_once_with_the_chart(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot()
    model.script(runs(CHART), says("Sales **peaked** in month 2."))
    asked, deliveries = await bot.server.post(
        C_GENERAL, "plot the sales", mention_bot=True, files=[("sales.csv", SALES)]
    )
    assert all(d.status == 200 for d in deliveries)
    messages = await bot.answered(C_GENERAL, asked.ts)
    progress = messages[0]
    assert "read_csv(" in progress.text
    assert "plotted" in progress.text
    assert not button(progress, "cm_stop")
    assert [m.text for m in _answers(messages)] == ["Sales *peaked* in month 2."]
    charts = [f for f in bot.server.files if f.name.endswith(".png")]
    assert [(c.content, c.thread_ts) for c in charts] == [(PNG, asked.ts)]
    assert all(m.thread_ts == asked.ts for m in bot.server.channel_messages(C_GENERAL, by_bot=True))
    (sandbox,) = fake_backend.live
    assert sandbox.files == {"sales.csv": SALES}
    assert "sales.csv" in str(model.requests[0]["messages"][-1]["content"])


async def test_a_fenced_code_block_in_a_dm_runs_without_a_model(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False)
    dm = bot.server.dm_channel(ALICE)
    asked, _ = await bot.server.post(dm, "```\nprint(6 * 7)\n```")
    messages = await bot.answered(dm, asked.ts)
    assert "42" in messages[0].text
    assert len(messages) == 1  # the run report is the whole answer
    assert [code.strip() for code in fake_backend.runs] == ["print(6 * 7)"]
    await bot.server.click(messages[0], "cm_rerun")
    await bot.answered(dm, asked.ts, count=2)
    assert [code.strip() for code in fake_backend.runs] == ["print(6 * 7)"] * 2
    assert fake_backend.started == 1  # in the DM's own session


async def test_run_shows_the_output_and_re_run_runs_it_again(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False)
    await bot.server.slash("/run", "print(6 * 7)")
    result = await _result(bot, "42")
    assert "print(6 * 7)" in result.text
    await bot.server.click(result, "cm_rerun")
    await _result(bot, "42", count=2)
    assert [code.strip() for code in fake_backend.runs] == ["print(6 * 7)", "print(6 * 7)"]


@pytest.mark.parametrize(
    ("text", "language", "code"),
    [
        ("--lang r cat(6 * 7)", "r", "cat(6 * 7)"),
        ("```bash\necho $((6 * 7))\n```", "bash", "echo $((6 * 7))"),
        ("--lang=js console.log(6 * 7)", "javascript", "console.log(6 * 7)"),
    ],
)
async def test_run_takes_its_language_from_lang_or_the_fence(
    start_bot: Callable[..., Awaitable[Bot]],
    fake_backend: FakeBackend,
    text: str,
    language: str,
    code: str,
) -> None:
    fake_backend.script = {code: FakeRun(outputs=[stdout("42\n")])}
    bot = await start_bot(use_model=False)
    await bot.server.slash("/run", text)
    result = await _result(bot, "42")
    assert code in result.text
    await bot.server.click(result, "cm_rerun")
    await _result(bot, "42", count=2)
    # Re-run runs it in its language again.
    assert [(run.language, [c.strip() for c in run.cells]) for run in fake_backend.asked] == [
        (language, [code])
    ] * 2


async def test_run_refuses_a_language_the_sandbox_has_not(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False)
    await bot.server.slash("/run", "--lang cobol DISPLAY 42")
    found = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in bot.server.channel_messages(C_GENERAL, by_bot=True)
                if "does not run 'cobol' code" in m.text
            ),
            None,
        )
    )
    assert isinstance(found, Message)
    assert fake_backend.asked == []


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_stop_ends_a_hanging_run_and_the_turn_answers_once(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    asked, _ = await bot.server.post(C_GENERAL, f"```\n{HANG}\n```", mention_bot=True)
    running = await _running(bot, C_GENERAL, asked.ts)
    await bot.server.click(running, "cm_stop")
    messages = await bot.answered(C_GENERAL, asked.ts)
    assert "killed" in messages[0].text
    assert "stopped on request" in messages[0].text
    assert len(messages) == 1  # the run report is the whole answer


async def test_stop_ends_a_hanging_run_command_and_leaves_re_run(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False)
    await bot.server.slash("/run", HANG)
    running = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in bot.server.channel_messages(C_GENERAL, by_bot=True)
                if button(m, "cm_stop") and "waiting" in m.text
            ),
            None,
        )
    )
    assert isinstance(running, Message)
    await bot.server.click(running, "cm_stop")
    stopped = await _result(bot, "killed")
    assert stopped.ts == running.ts
    messages = await bot.answered(C_GENERAL, running.ts)
    assert len(messages) == 1  # the run report is the whole answer
    await bot.server.wait_for(lambda: not fake_backend.live)  # a one-off run's sandbox goes


async def test_export_and_reset_act_on_the_users_latest_conversation(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False)
    asked, _ = await bot.server.post(C_GENERAL, "```\nkeep()\n```", mention_bot=True)
    await bot.answered(C_GENERAL, asked.ts)
    await bot.server.slash("/export")
    notebook = await bot.server.wait_for(
        lambda: next((f for f in bot.server.files if f.name == "session.ipynb"), None)
    )
    assert b"keep()" in notebook.content  # type: ignore[attr-defined]
    assert notebook.thread_ts == asked.ts  # type: ignore[attr-defined]
    await bot.server.slash("/reset")
    await bot.server.wait_for(lambda: len(bot.server.responses) >= 2)
    assert [r["text"] for r in bot.server.responses] == [
        "The notebook is in the conversation's thread.",
        "Forgot our latest conversation here and restarted its Python session: "
        "its variables and its files in /mnt/data are gone.",
    ]
    assert not fake_backend.live


# ── the same as on Discord ─────────────────────────────────────────────────────────────────


async def test_editing_a_code_message_runs_it_again_in_its_thread(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False)
    asked, _ = await bot.server.post(C_GENERAL, "```keep()```", mention_bot=True)
    await bot.answered(C_GENERAL, asked.ts)
    await bot.server.edit(asked, f"<@{BOT_USER_ID}> ```print(6 * 7)```")
    messages = await bot.answered(C_GENERAL, asked.ts, count=2)
    assert [code.strip() for code in fake_backend.runs] == ["keep()", "print(6 * 7)"]
    assert any("42" in m.text for m in messages)
    assert fake_backend.started == 1  # the same session: the edit continues the conversation
    plain, _ = await bot.server.post(C_GENERAL, "just words", thread_ts=asked.ts)
    await bot.server.edit(plain, "still words")  # not code that ran: nothing runs again
    await bot.answered(C_GENERAL, asked.ts, count=3)
    assert len(fake_backend.runs) == 2


async def test_files_lists_the_latest_conversations_files(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    await bot.server.slash("/files")
    asked, _ = await bot.server.post(C_GENERAL, "```\nkeep()\n```", mention_bot=True)
    await bot.answered(C_GENERAL, asked.ts)
    await bot.server.slash("/files")
    await bot.server.slash("/files", user=BOB)
    await bot.server.wait_for(lambda: len(bot.server.responses) >= 3)
    assert [r["text"] for r in bot.server.responses] == [
        NO_CONVERSATION,
        "`notes.txt` (2 bytes)",
        NO_CONVERSATION,
    ]


async def test_run_in_a_dm_and_the_shortcut_in_a_thread_use_that_conversations_session(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False)
    dm = bot.server.dm_channel(ALICE)
    asked, _ = await bot.server.post(dm, "```keep()```")
    await bot.answered(dm, asked.ts)
    await bot.server.slash("/run", "print(6 * 7)", channel=dm)
    messages = await bot.answered(dm, asked.ts, count=2)
    assert any("42" in m.text for m in messages)
    assert fake_backend.started == 1
    thread, _ = await bot.server.post(C_GENERAL, "```keep()```", mention_bot=True)
    await bot.answered(C_GENERAL, thread.ts)
    code, _ = await bot.server.post(C_GENERAL, "```print(6 * 7)```", thread_ts=thread.ts)
    await bot.answered(C_GENERAL, thread.ts, count=2)
    await bot.server.shortcut("cm_run_code", code)
    messages = await bot.answered(C_GENERAL, thread.ts, count=3)
    assert sum("42" in m.text for m in messages) == 2
    assert fake_backend.started == 2  # one session for the DM, one for the thread


# ── who may do what ────────────────────────────────────────────────────────────────────────


async def test_a_user_outside_the_allowlist_is_refused_at_every_entry_point(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False, users=(ALICE,))
    await bot.server.slash("/run", "print(6 * 7)")
    result = await _result(bot, "42")
    asked, _ = await bot.server.post(C_GENERAL, f"```\n{HANG}\n```", mention_bot=True)
    running = await _running(bot, C_GENERAL, asked.ts)

    await bot.server.post(C_GENERAL, "```\nprint('bob')\n```", mention_bot=True, user=BOB)
    await bot.server.post(C_GENERAL, "```\nprint('bob')\n```", thread_ts=asked.ts, user=BOB)
    await bot.server.post(bot.server.dm_channel(BOB), "```\nprint('bob')\n```", user=BOB)
    await bot.server.slash("/run", "print('bob')", user=BOB)
    await bot.server.slash("/run", "", user=BOB)
    await bot.server.slash("/export", user=BOB)
    await bot.server.slash("/reset", user=BOB)
    await bot.server.shortcut("cm_run_code", asked, user=BOB)
    await bot.server.click(running, "cm_stop", user=BOB)
    await bot.server.click(result, "cm_rerun", user=BOB)
    told = await bot.server.wait_for(
        lambda: (lambda t: t if len(t) >= 7 else None)(ephemeral_to(bot, BOB))
    )
    assert told == [NOT_HERE] * 7
    assert bot.server.views == []
    assert bot.slack.conversations.turns  # Alice's run goes on
    assert not any("bob" in code for code in fake_backend.runs)
    await bot.server.click(running, "cm_stop")
    await bot.answered(C_GENERAL, asked.ts)
    assert ephemeral_to(bot, BOB) == [NOT_HERE] * 7  # the messages were ignored silently


async def test_conversation_commands_are_refused_to_others_and_allowed_to_an_admin(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    await bot.server.slash("/run", "print(6 * 7)")
    result = await _result(bot, "42")
    asked, _ = await bot.server.post(C_GENERAL, f"```\n{HANG}\n```", mention_bot=True)
    running = await _running(bot, C_GENERAL, asked.ts)

    await bot.server.click(running, "cm_stop", user=BOB)
    await bot.server.click(result, "cm_rerun", user=BOB)
    await bot.server.slash("/export", user=BOB)
    await bot.server.slash("/reset", user=BOB)
    await bot.server.wait_for(lambda: len(bot.server.responses) >= 4)
    assert sorted(r["text"] for r in bot.server.responses) == sorted(
        [NOT_YOURS, NOT_YOURS, NO_CONVERSATION, NO_CONVERSATION]
    )
    assert bot.slack.conversations.turns

    await bot.server.click(running, "cm_stop", user=ADMIN)
    messages = await bot.answered(C_GENERAL, asked.ts)
    assert "killed" in messages[0].text
    await bot.server.click(result, "cm_rerun", user=ADMIN)
    await _result(bot, "42", count=2)


async def test_a_second_message_while_the_first_turn_runs_waits_its_turn(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    """The person's second message queues, visibly, and runs once the first has ended."""
    bot = await start_bot(use_model=False)
    asked, _ = await bot.server.post(C_GENERAL, f"```\n{HANG}\n```", mention_bot=True)
    running = await _running(bot, C_GENERAL, asked.ts)
    await bot.server.post(C_GENERAL, "```print(6 * 7)```", thread_ts=asked.ts)
    await bot.server.wait_for(
        lambda: any(
            QUEUED in m.text
            for m in bot.server.channel_messages(C_GENERAL, thread_ts=asked.ts, by_bot=True)
        )
    )
    assert bot.server.ephemeral == []
    await bot.server.click(running, "cm_stop")
    messages = await bot.answered(C_GENERAL, asked.ts, count=2)
    assert [code.strip() for code in fake_backend.runs] == [HANG, "print(6 * 7)"]
    assert any("42" in m.text for m in messages)


async def test_export_after_a_queued_mention_finds_the_users_latest_conversation(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    first, _ = await bot.server.post(C_GENERAL, "```\nkeep()\n```", mention_bot=True)
    await bot.answered(C_GENERAL, first.ts)
    await bot.server.post(C_GENERAL, f"```\n{HANG}\n```", thread_ts=first.ts)
    running = await _running(bot, C_GENERAL, first.ts)
    second, _ = await bot.server.post(C_GENERAL, "```\nprint(6 * 7)\n```", mention_bot=True)
    await bot.server.click(running, "cm_stop")
    await bot.answered(C_GENERAL, first.ts, count=2)
    await bot.answered(C_GENERAL, second.ts)
    await bot.server.slash("/export")
    await bot.server.wait_for(lambda: bot.server.responses)
    assert [r["text"] for r in bot.server.responses] == [
        "The notebook is in the conversation's thread."
    ]


# ── errors ─────────────────────────────────────────────────────────────────────────────────


async def test_a_model_that_is_down_gets_one_clear_answer(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot()
    model.endless = fails(500)
    asked, _ = await bot.server.post(C_GENERAL, "hi", mention_bot=True)
    messages = await bot.answered(C_GENERAL, asked.ts)
    assert [m.text for m in messages] == [
        ":x: The model is not available right now (HTTP 500). Try again later."
    ]


async def test_a_sandbox_that_cannot_start_gets_one_clear_answer(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False)
    fake_backend.unavailable = "the engine is down"
    asked, _ = await bot.server.post(C_GENERAL, "```\nprint(6 * 7)\n```", mention_bot=True)
    messages = await bot.answered(C_GENERAL, asked.ts)
    answers = _answers(messages)
    assert len(answers) == 1
    assert answers[0].text.startswith(":x: The sandbox could not run the code")
    assert "the engine is down" in answers[0].text


async def test_a_kernel_death_is_reported_in_the_one_answer(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False)
    asked, _ = await bot.server.post(C_GENERAL, "```\ncrash()\n```", mention_bot=True)
    messages = await bot.answered(C_GENERAL, asked.ts)
    assert "going down" in messages[0].text
    assert "killed" in messages[0].text
    assert len(messages) == 1  # the run report is the whole answer
