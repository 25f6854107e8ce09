"""Code approval on Slack, as people see it: /policy, then the model's code shown with Run,
Edit and Cancel in the thread (Edit opens a modal with views.open); the real slack_bolt app
against the Slack test server (Socket Mode and HTTP mode) and the scripted model, on the
fake sandbox."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bench.standins.openai_server import ScriptedModel, runs, says
from bench.standins.ports import free_port
from bench.standins.slack_server import (
    ADMIN,
    ALICE,
    APP_TOKEN,
    BOB,
    BOT_TOKEN,
    C_GENERAL,
    SIGNING_SECRET,
    Message,
    SlackServer,
)
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.approval import ALREADY_DECIDED, OFF_NOTICE, OFF_REFUSAL
from bot.conversations.moderation import NOT_APPROVER, POLICY_FOR_ADMINS
from bot.conversations.policy import Policies, PolicySettings
from bot.database import Databases
from bot.ops.http import start_server
from bot.platforms.on_slack import EVENTS_PATH, add_http_route, build_slack
from bot.platforms.on_slack.approval import CANCEL, EDIT, RUN, TOO_LONG_TO_EDIT
from bot.settings import SlackSettings
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.support.on_slack import Bot, button

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
    cleanups: list[Callable[[], Awaitable[Any]]] = []

    async def start(**policy: Any) -> Bot:
        from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

        server = SlackServer(mode=mode)  # type: ignore[arg-type]
        await server.start()
        cleanups.append(server.close)
        agent = make_agent(fake_executor, model, tmp_path, timeout=5)
        policies = Policies(Databases.sqlite(tmp_path), PolicySettings(**policy))
        conversations = Conversations(agent, policies=policies)
        settings = SlackSettings(
            bot_token=BOT_TOKEN,
            app_token=APP_TOKEN if mode == "socket" else "",
            signing_secret=SIGNING_SECRET if mode == "http" else "",
            api_url=server.api_url,
            cooldown_s=0,
        )
        slack = build_slack(conversations, settings)
        await slack.connect()
        cleanups.append(_closing(policies))
        if mode == "socket":
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


def _closing(policies: Policies) -> Callable[[], Awaitable[None]]:
    async def close() -> None:
        policies.close()

    return close


async def _policy(bot: Bot, text: str, user: str = ADMIN) -> str:
    """What /policy `text` answered the person."""
    before = len(bot.server.responses)
    await bot.server.slash("/policy", text, user=user)
    await bot.server.wait_for(lambda: len(bot.server.responses) > before)
    return str(bot.server.responses[before]["text"])


async def _ask(bot: Bot, text: str = "what is 6 times 7?") -> str:
    """Alice mentions the bot in #general; the root ts of the thread it answers in."""
    message, _ = await bot.server.post(C_GENERAL, text, mention_bot=True)
    return message.ts


def _approvals(bot: Bot, root: str) -> list[Message]:
    return [m for m in bot.thread(C_GENERAL, root) if m.text.startswith(":lock:")]


async def _approval(bot: Bot, root: str) -> Message:
    found = await bot.server.wait_for(
        lambda: next((m for m in _approvals(bot, root) if button(m, RUN)), None)
    )
    assert isinstance(found, Message)
    return found


async def _decided(bot: Bot, root: str, outcome: str) -> Message:
    """The approval message once it says `outcome`, without buttons."""
    found = await bot.server.wait_for(
        lambda: next((m for m in _approvals(bot, root) if outcome in m.text), None)
    )
    assert isinstance(found, Message)
    assert not any(button(found, action) for action in (RUN, EDIT, CANCEL))
    return found


async def _answer(bot: Bot, root: str, text: str) -> list[Message]:
    def done() -> list[Message] | None:
        messages = bot.thread(C_GENERAL, root)
        idle = not bot.slack.conversations.turns and not bot.slack.door.lines.busy
        return messages if idle and any(text in m.text for m in messages) else None

    found = await bot.server.wait_for(done)
    assert isinstance(found, list)
    return found


def interaction_reply(bot: Bot) -> list[str]:
    return [str(r.get("text")) for r in bot.server.responses]


def _tool_results(model: ScriptedModel) -> list[str]:
    return [str(m["content"]) for m in model.requests[-1]["messages"] if m["role"] == "tool"]


async def test_approved_code_runs_after_run_and_others_are_refused(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot()
    assert await _policy(bot, "approve", user=ALICE) == POLICY_FOR_ADMINS
    assert "is now approve" in await _policy(bot, "approve")
    model.script(runs(ASKED), says("It is 42."))
    root = await _ask(bot)
    asking = await _approval(bot, root)
    assert ASKED in asking.text
    assert f"<@{ALICE}> or a moderator" in asking.text
    await bot.server.wait_for(
        lambda: any(
            ":lock: Waiting for someone to Run, Edit or Cancel" in m.text and button(m, "cm_stop")
            for m in bot.thread(C_GENERAL, root)
        )
    )
    await bot.server.click(asking, RUN, user=BOB)
    await bot.server.wait_for(lambda: NOT_APPROVER["requester"] in interaction_reply(bot))
    assert fake_backend.runs == []
    await bot.server.click(asking, RUN)
    await _decided(bot, root, f"Approved by <@{ALICE}>")
    await _answer(bot, root, "It is 42.")
    assert [code.strip() for code in fake_backend.runs] == [ASKED]
    assert "42" in _tool_results(model)[0]


async def test_edit_opens_the_code_in_a_modal_and_the_edited_code_runs(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(default="approve")
    model.script(runs(ASKED), says("It printed once 1."))
    root = await _ask(bot)
    asking = await _approval(bot, root)
    await bot.server.click(asking, EDIT, user=BOB)  # not Bob's to edit: no modal for him
    await bot.server.wait_for(lambda: NOT_APPROVER["requester"] in interaction_reply(bot))
    assert bot.server.views == []
    await bot.server.click(asking, EDIT)
    opened = await bot.server.wait_for(lambda: bot.server.views[-1] if bot.server.views else None)
    assert isinstance(opened, dict)
    element = opened["view"]["blocks"][0]["element"]
    assert element["initial_value"] == ASKED
    await bot.server.submit_view(opened, {"code": EDITED})
    await _decided(bot, root, f"Edited by <@{ALICE}>")
    await _answer(bot, root, "It printed once 1.")
    assert [code.strip() for code in fake_backend.runs] == [EDITED]
    (told,) = _tool_results(model)
    assert "edited your code" in told
    assert EDITED in told


async def test_an_edit_submitted_after_someone_else_decided_stays_in_its_modal(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(default="approve")
    model.script(runs(ASKED), says("Cancelled, so nothing ran."))
    root = await _ask(bot)
    asking = await _approval(bot, root)
    await bot.server.click(asking, EDIT)
    opened = await bot.server.wait_for(lambda: bot.server.views[-1] if bot.server.views else None)
    assert isinstance(opened, dict)
    await bot.server.click(asking, CANCEL, user=ADMIN)
    await _decided(bot, root, f"Cancelled by <@{ADMIN}>")
    late = await bot.server.submit_view(opened, {"code": EDITED})
    assert late.ack == {"response_action": "errors", "errors": {"code": ALREADY_DECIDED}}
    await _answer(bot, root, "Cancelled, so nothing ran.")
    assert fake_backend.runs == []


async def test_cancel_and_time_out_end_the_turn_with_one_answer(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(default="approve", timeout_s=1)
    model.script(runs(ASKED), runs(ASKED), says("Fine, not run."))
    root = await _ask(bot)
    await bot.server.click(await _approval(bot, root), CANCEL)
    await _decided(bot, root, f"Cancelled by <@{ALICE}>")
    messages = await _answer(bot, root, "Fine, not run.")
    assert sum("Fine, not run." in m.text for m in messages) == 1
    assert len(_approvals(bot, root)) == 1  # the model's second try asked nobody
    assert all("declined to run it" in text for text in _tool_results(model))

    model.script(runs(ASKED), says("Nobody approved it."))
    await bot.server.post(C_GENERAL, "again?", thread_ts=root)
    await bot.server.wait_for(lambda: len(_approvals(bot, root)) == 2)
    await _decided(bot, root, "Nobody approved it in time")
    await bot.server.wait_for(
        lambda: sum("Nobody approved it." in m.text for m in bot.thread(C_GENERAL, root)) == 1
    )
    assert fake_backend.runs == []
    assert "Nobody approved your code in time" in _tool_results(model)[-1]


async def test_only_moderators_approve_when_so_configured(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(default="approve", approvers="moderators")
    model.script(runs(ASKED), says("It is 42."))
    root = await _ask(bot)
    asking = await _approval(bot, root)
    assert "A moderator can Run, Edit or Cancel" in asking.text
    await bot.server.click(asking, RUN)
    await bot.server.wait_for(lambda: NOT_APPROVER["moderators"] in interaction_reply(bot))
    assert fake_backend.runs == []
    await bot.server.click(asking, RUN, user=ADMIN)
    await _decided(bot, root, f"Approved by <@{ADMIN}>")
    await _answer(bot, root, "It is 42.")
    assert [code.strip() for code in fake_backend.runs] == [ASKED]


async def test_policy_off_answers_without_code_refuses_run_and_outlives_a_restart(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    first = await start_bot()
    assert "is now off" in await _policy(first, "off workspace")
    assert "Use `/policy`" in await _policy(first, "sometimes")
    # A new process over the same data directory keeps the policy.
    bot = await start_bot()
    assert await _policy(bot, "", user=BOB) == (
        "The code policy here is off (from this workspace): no code runs; the model "
        "answers without it, and /run is refused."
    )
    model.script(runs(ASKED), says("I cannot run code here."))
    root = await _ask(bot)
    messages = await _answer(bot, root, "I cannot run code here.")
    assert any(OFF_NOTICE in m.text for m in messages)
    assert _approvals(bot, root) == []
    await bot.server.post(C_GENERAL, f"```{ASKED}```", thread_ts=root)
    await bot.server.wait_for(
        lambda: any(OFF_REFUSAL in str(e.get("text")) for e in bot.server.ephemeral)
    )
    await bot.server.slash("/run", ASKED)
    await bot.server.wait_for(
        lambda: sum(OFF_REFUSAL in str(e.get("text")) for e in bot.server.ephemeral) == 2
    )
    assert fake_backend.runs == []


async def test_code_too_long_to_show_is_uploaded_whole_before_it_is_approved(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(default="approve")
    long = "".join(f"row_{i} = {i}\n" for i in range(400)) + "print('the end')"
    model.script(runs(long), says("Not run."))
    root = await _ask(bot)
    asking = await _approval(bot, root)
    assert "The whole code is in `code.py` above." in asking.text
    assert "print('the end')" not in asking.text
    (whole,) = [f for f in bot.server.files if f.name == "code.py"]
    assert (whole.content, whole.thread_ts) == (long.encode(), root)
    await bot.server.click(asking, EDIT)  # past Slack's 3,000 characters for an input
    await bot.server.wait_for(lambda: TOO_LONG_TO_EDIT in interaction_reply(bot))
    assert bot.server.views == []
    await bot.server.click(asking, CANCEL)
    await _answer(bot, root, "Not run.")
    assert fake_backend.runs == []
